"""vLLM's CUDA build behind VLLMEngine: bf16 sampling whose logprobs transformers reproduces, and weights broadcast
into it over gloo from a model on the same GPU (a colocated learner's path).

Skipped without a CUDA GPU and vLLM's CUDA build (`pip install -e '.[gpu]'`). On a GPU machine: `make gpu-test`.
"""

import socket

import pytest
import ray
import torch
from transformers import AutoModelForCausalLM

from memrl.engines.base import SamplingConfig

pytestmark = [pytest.mark.gpu, pytest.mark.slow,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

BF16_LOGPROB_TOL = 0.1
"""Largest per-token gap between two bf16 computations of the same tokens (as in test_learner.py)."""
PROMPTS = [[5, 6, 7], list(range(10, 40)), list(range(100, 400))]


@pytest.fixture(scope="module")
def engine(cuda_vllm, ray_session, tiny_checkpoint):
    from memrl.engines.vllm_engine import VLLMEngine

    actor = ray.remote(num_cpus=1, num_gpus=0.5)(VLLMEngine).remote(
        str(tiny_checkpoint), seed=0, dtype="bfloat16", kv_cache_bytes=512 * 1024**2)
    yield actor
    ray.kill(actor)


@pytest.fixture(scope="module")
def hf_model(tiny_checkpoint):
    return AutoModelForCausalLM.from_pretrained(tiny_checkpoint, dtype=torch.bfloat16).cuda().eval()


def _hf_logprobs(model, prompt: list[int], continuation: list[int]) -> list[float]:
    ids = torch.tensor([prompt + continuation], device="cuda")
    with torch.no_grad():
        logprobs = model(ids).logits[0].float().log_softmax(-1)
    return [logprobs[len(prompt) - 1 + i, tok].item() for i, tok in enumerate(continuation)]


def test_sampled_logprobs_are_the_bf16_model_logprobs(engine, hf_model):
    outputs = ray.get(engine.generate.remote(PROMPTS, SamplingConfig(max_tokens=16, temperature=1.0)), timeout=600)
    for prompt, out in zip(PROMPTS, outputs):
        assert len(out.token_ids) == 16
        gap = max(abs(a - b) for a, b in zip(out.logprobs, _hf_logprobs(hf_model, prompt, out.token_ids)))
        assert gap < BF16_LOGPROB_TOL


def test_weights_broadcast_from_the_same_gpu_over_gloo(engine, hf_model):
    from memrl.weight_sync import broadcast_send, init_group, metas_of

    with torch.no_grad():
        target = {name: t + 0.05 * torch.randn_like(t) for name, t in hf_model.state_dict().items()}
    metas = metas_of(target.items())
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    joined = engine.init_weight_sync.remote("127.0.0.1", port, 1, 2, "gloo")
    group = init_group("127.0.0.1", port, 0, 2, "gloo", timeout_s=120)
    ray.get(joined, timeout=120)
    received = engine.receive_weights.remote(metas, 5, 1 << 20)
    broadcast_send(group, target, metas, 1 << 20)
    ray.get(received, timeout=300)
    reference = AutoModelForCausalLM.from_pretrained(hf_model.name_or_path, dtype=torch.bfloat16).cuda().eval()
    reference.load_state_dict(target)
    prompt, continuation = PROMPTS[1], list(range(500, 540))
    scores = ray.get(engine.score.remote(prompt, continuation), timeout=300)
    assert max(abs(a - b) for a, b in zip(scores, _hf_logprobs(reference, prompt, continuation))) < BF16_LOGPROB_TOL
    (out,) = ray.get(engine.generate.remote([prompt], SamplingConfig(max_tokens=4)), timeout=300)
    assert out.weight_version == 5
