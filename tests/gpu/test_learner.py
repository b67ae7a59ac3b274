"""The learner and the torch engine on CUDA: a bf16 ZeRO-3 learner that scores, trains and saves like the CPU one,
an engine whose sampled logprobs the learner reproduces, and weights broadcast to an engine (over gloo to one sharing
the learner's GPU, over NCCL to one on a second GPU) that then samples what the learner scores.

Skipped where torch sees no CUDA device (CI), the NCCL case where it sees fewer than two (NCCL refuses two ranks on
one GPU). On a GPU machine: `make gpu-test`.
"""

from __future__ import annotations

import multiprocessing as mp
import socket

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM

from memrl.engines.base import SamplingConfig
from memrl.engines.torch_engine import TorchEngine
from memrl.learner.learner import Learner
from memrl.learner.learner_config import LearnerConfig, LearnersConfig, OptimizerConfig
from memrl.learner.losses import LossConfig

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

LOOPBACK = "127.0.0.1"
BF16_LOGPROB_TOL = 0.1
"""Largest per-token logprob gap allowed between two bf16 computations of the same tokens (different kernels and
batch shapes round differently; a wrong position or weight is off by whole nats)."""
PROMPTS = [[5, 17, 40, 2], [9, 9, 31], [100, 200, 300, 400, 500]]


def _start_learner(model_path, **overrides) -> Learner:
    """Rank 0 of a one-rank group on GPU 0, in this process."""
    config = LearnerConfig(LearnersConfig(model_path=str(model_path), dtype="bfloat16", token_budget=4096,
                                          param_persistence_threshold=0), OptimizerConfig(lr=1e-3), seed=0, **overrides)
    learner = Learner(config, rank=0, world_size=1)
    learner.start(LOOPBACK, learner.listen(LOOPBACK))
    return learner


def _rows(seed: int, n: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(n):
        prompt, response = rng.integers(3, 1000, 12), rng.integers(3, 1000, 8)
        rows.append({"prompt_ids": prompt.astype(np.int32), "response_ids": response.astype(np.int32),
                     "loss_mask": np.ones(8, np.int8), "old_logprobs": np.zeros(8, np.float32),
                     "advantages": np.zeros(8, np.float32)})
    return rows


def _hf_logprobs(model, row) -> np.ndarray:
    ids = torch.tensor(np.concatenate([row["prompt_ids"], row["response_ids"]]), dtype=torch.long, device="cuda")
    with torch.no_grad():
        logits = model(input_ids=ids[None]).logits[0, len(row["prompt_ids"]) - 1: -1].float()
    logp = torch.log_softmax(logits, -1).gather(-1, ids[len(row["prompt_ids"]):, None]).squeeze(-1)
    return logp.cpu().numpy()


@pytest.fixture(scope="module")
def learner(tiny_checkpoint):
    yield _start_learner(tiny_checkpoint)
    torch.distributed.destroy_process_group()


def test_bf16_zero3_learner_scores_trains_and_saves_on_gpu(learner, tiny_checkpoint, tmp_path):
    assert learner.device.type == "cuda"
    assert {dtype for _, _, dtype in learner.weight_metas()} == {"bfloat16"}
    rows = _rows(0, 6)
    model = AutoModelForCausalLM.from_pretrained(tiny_checkpoint, dtype=torch.bfloat16).cuda().eval()
    logprobs, _ = learner.compute_logprobs(rows)
    for row, lp in zip(rows, logprobs):
        assert np.abs(lp - _hf_logprobs(model, row)).max() < BF16_LOGPROB_TOL

    sft = LossConfig(kind="sft")
    tokens = float(sum(len(r["response_ids"]) for r in rows))
    losses = [learner.train_step(rows, sft, tokens, len(rows))["loss"] for _ in range(30)]
    assert all(np.isfinite(losses))
    assert losses[-1] < 0.5 * losses[0], losses

    learner.save_hf(str(tmp_path / "saved"))
    saved = AutoModelForCausalLM.from_pretrained(tmp_path / "saved", dtype=torch.bfloat16).cuda().eval()
    logprobs, _ = learner.compute_logprobs(rows)
    for row, lp in zip(rows, logprobs):
        assert np.abs(lp - _hf_logprobs(saved, row)).max() < BF16_LOGPROB_TOL


def test_bf16_engine_samples_what_the_learner_scores(learner, tiny_checkpoint):
    engine = TorchEngine(tiny_checkpoint, seed=3, dtype="bfloat16", device="cuda")
    state = learner.gather_state_dict_for_sync()
    engine.load_weights(state.items(), version=1)  # the learner's weights, trained or not
    sampling = SamplingConfig(max_tokens=12, temperature=1.0)
    outputs = engine.generate(PROMPTS, sampling)
    assert [o.weight_version for o in outputs] == [1, 1, 1]
    engine.reseed(3)
    assert [o.token_ids for o in engine.generate(PROMPTS, sampling)] == [o.token_ids for o in outputs]
    rows = [{"prompt_ids": np.array(p, np.int32), "response_ids": np.array(o.token_ids, np.int32)}
            for p, o in zip(PROMPTS, outputs)]
    learner_logprobs, _ = learner.compute_logprobs(rows)
    for out, lp in zip(outputs, learner_logprobs):
        assert np.abs(np.array(out.logprobs) - lp).max() < BF16_LOGPROB_TOL


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


def _engine_receives(model_path, port, metas, queue, backend: str, gpu: int) -> None:
    """Rank 1 of the weight-sync group, on the given GPU in its own process: receive, then report the weights' sums
    and what the engine samples under them (tokens and logprobs)."""
    torch.cuda.set_device(gpu)
    engine = TorchEngine(model_path, dtype="bfloat16", device=f"cuda:{gpu}")
    engine.init_weight_sync(LOOPBACK, port, 1, 2, backend)
    engine.receive_weights(metas, version=7, bucket_bytes=1 << 16)
    params = dict(engine.model.named_parameters())
    outputs = engine.generate(PROMPTS, SamplingConfig(max_tokens=12, temperature=1.0))
    queue.put((engine.weight_version, {name: params[name].float().sum().item() for name, _, _ in metas},
               [(o.token_ids, o.logprobs) for o in outputs]))


@pytest.mark.parametrize("backend", [
    # Ranks sharing one GPU: gloo, through host memory.
    "gloo",
    pytest.param("nccl", marks=pytest.mark.skipif(torch.cuda.device_count() < 2,
                                                  reason="NCCL needs a GPU per rank: the learner's and the engine's")),
])
def test_weights_reach_an_engine_and_it_samples_what_the_learner_scores(learner, tiny_checkpoint, backend):
    metas = learner.weight_metas()
    port = _free_port()
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_engine_receives, args=(str(tiny_checkpoint), port, metas, queue, backend,
                                                          0 if backend == "gloo" else 1))
    proc.start()
    try:
        learner.init_weight_sync(LOOPBACK, port, 2, backend)
        sent = learner.broadcast_weights(version=7, bucket_bytes=1 << 16)
        version, sums, samples = queue.get(timeout=300)
    finally:
        proc.join(timeout=60)
        if proc.is_alive():
            proc.kill()
    state = learner.gather_state_dict_for_sync()
    assert version == 7 and sent["bytes"] == sum(t.numel() * t.element_size() for t in state.values())
    for name, total in sums.items():
        assert total == pytest.approx(state[name].float().sum().item(), rel=1e-3, abs=1e-3)
    rows = [{"prompt_ids": np.array(p, np.int32), "response_ids": np.array(ids, np.int32)}
            for p, (ids, _) in zip(PROMPTS, samples)]
    for (_, engine_logprobs), lp in zip(samples, learner.compute_logprobs(rows)[0]):
        assert np.abs(np.array(engine_logprobs) - lp).max() < BF16_LOGPROB_TOL
