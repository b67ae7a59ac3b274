import socket
import subprocess
import sys

import pytest
import torch
from transformers import AutoModelForCausalLM

from memrl.engines.base import SamplingConfig
from memrl.engines.torch_engine import TorchEngine
from memrl.weight_sync import broadcast_send, init_group, metas_of

# Different lengths so that left padding is exercised in every batch.
PROMPTS = [[5, 6, 7, 8, 9, 10, 11], [20, 21], [30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41], [700]]
GREEDY = SamplingConfig(max_tokens=12, temperature=0)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def reference_model(path, perturb_seed: int | None = None):
    """A plain transformers model (eager attention, independent of the engine's sdpa path)."""
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="eager").eval()
    if perturb_seed is not None:
        g = torch.Generator().manual_seed(perturb_seed)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn(p.shape, generator=g) * 0.05)
    return model


@torch.no_grad()
def reference_logits(model, prompt: list[int], continuation: list[int]) -> torch.Tensor:
    """Logits [len(continuation), V] predicting each continuation token, from one unpadded forward."""
    ids = torch.tensor([prompt + continuation])
    return model(ids).logits[0, len(prompt) - 1 : -1]


def reference_logprobs(model, prompt: list[int], continuation: list[int]) -> torch.Tensor:
    logits = reference_logits(model, prompt, continuation)
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(continuation)[:, None])[:, 0]


@pytest.fixture(scope="module")
def engine(tiny_checkpoint):
    return TorchEngine(tiny_checkpoint, seed=0)


@pytest.fixture(scope="module")
def reference(tiny_checkpoint):
    return reference_model(tiny_checkpoint)


def test_loading_shows_no_progress_bar_unless_verbose(tiny_checkpoint, monkeypatch):
    # transformers' "Loading weights" bar draws when its progress bars are on at load time; record that state there.
    from transformers.utils import logging as hf_logging

    from memrl.engines import hf_model

    bars_during_load = []
    real = hf_model.AutoModelForCausalLM.from_pretrained

    def recording(*args, **kwargs):
        bars_during_load.append(hf_logging.is_progress_bar_enabled())
        return real(*args, **kwargs)

    monkeypatch.setattr(hf_model.AutoModelForCausalLM, "from_pretrained", recording)
    hf_logging.enable_progress_bar()
    monkeypatch.delenv("MEMRL_VERBOSE", raising=False)
    TorchEngine(str(tiny_checkpoint))
    monkeypatch.setenv("MEMRL_VERBOSE", "1")
    TorchEngine(str(tiny_checkpoint))
    assert bars_during_load == [False, True]
    assert hf_logging.is_progress_bar_enabled()  # restored for the caller's own loads


def test_generate_logprobs_are_raw_model_logprobs(engine, reference):
    # temperature and top_p change what is sampled, never the reported (temperature-1) logprobs
    outs = engine.generate(PROMPTS, SamplingConfig(max_tokens=16, temperature=0.7, top_p=0.9))
    assert len(outs) == len(PROMPTS)
    for prompt, out in zip(PROMPTS, outs):
        assert len(out.token_ids) == len(out.logprobs) == 16
        assert out.finish_reason == "length"
        assert out.weight_version == 0
        expected = reference_logprobs(reference, prompt, out.token_ids)
        torch.testing.assert_close(torch.tensor(out.logprobs), expected, rtol=0, atol=1e-5)


def test_tempered_logprobs_are_those_of_the_sampling_distribution(tiny_checkpoint, reference):
    tempered = TorchEngine(tiny_checkpoint, seed=0, tempered_logprobs=True)
    for out, prompt in zip(tempered.generate(PROMPTS, SamplingConfig(max_tokens=16, temperature=0.7)), PROMPTS):
        logits = reference_logits(reference, prompt, out.token_ids) / 0.7
        expected = torch.log_softmax(logits, -1).gather(-1, torch.tensor(out.token_ids)[:, None])[:, 0]
        torch.testing.assert_close(torch.tensor(out.logprobs), expected, rtol=0, atol=1e-5)
        assert (expected - reference_logprobs(reference, prompt, out.token_ids)).abs().max() > 1e-2
    # Greedy calls have no temperature to apply: the model's own logprobs.
    out, prompt = tempered.generate(PROMPTS[:1], SamplingConfig(max_tokens=8, temperature=0.0))[0], PROMPTS[0]
    torch.testing.assert_close(torch.tensor(out.logprobs), reference_logprobs(reference, prompt, out.token_ids),
                               rtol=0, atol=1e-5)


def test_score_matches_reference(engine, reference):
    prompt, continuation = PROMPTS[0], [100, 200, 300, 5]
    expected = reference_logprobs(reference, prompt, continuation)
    torch.testing.assert_close(torch.tensor(engine.score(prompt, continuation)), expected, rtol=0, atol=1e-5)
    assert engine.score(prompt, []) == []


def test_greedy_output_is_the_same_alone_or_in_a_padded_batch(engine):
    batched = engine.generate(PROMPTS, GREEDY)
    for prompt, out in zip(PROMPTS, batched):
        alone = engine.generate([prompt], GREEDY)[0]
        assert alone.token_ids == out.token_ids
        torch.testing.assert_close(torch.tensor(alone.logprobs), torch.tensor(out.logprobs), rtol=0, atol=1e-5)


def test_batches_larger_than_max_batch_size_are_split(tiny_checkpoint, engine):
    small = TorchEngine(tiny_checkpoint, max_batch_size=3)
    prompts = PROMPTS + PROMPTS[:3]  # 7 prompts: batches of 3, 3, 1
    split = small.generate(prompts, GREEDY)
    whole = engine.generate(prompts, GREEDY)
    assert [o.token_ids for o in split] == [o.token_ids for o in whole]


def test_temperature_zero_is_argmax_of_the_model(engine, reference):
    for prompt, out in zip(PROMPTS, engine.generate(PROMPTS, GREEDY)):
        logits = reference_logits(reference, prompt, out.token_ids)
        assert out.token_ids == logits.argmax(-1).tolist()


def test_tiny_top_p_equals_greedy(engine):
    nucleus = engine.generate(PROMPTS, SamplingConfig(max_tokens=12, temperature=1.0, top_p=1e-6))
    greedy = engine.generate(PROMPTS, GREEDY)
    assert [o.token_ids for o in nucleus] == [o.token_ids for o in greedy]


def test_top_p_samples_only_inside_the_nucleus(engine, reference):
    top_p, temperature = 0.05, 0.8
    outs = engine.generate(PROMPTS, SamplingConfig(max_tokens=16, temperature=temperature, top_p=top_p))
    for prompt, out in zip(PROMPTS, outs):
        probs = torch.softmax(reference_logits(reference, prompt, out.token_ids) / temperature, -1)
        for row, tok in enumerate(out.token_ids):
            # the probability mass of tokens strictly more likely than the sampled one is below top_p
            mass_before = probs[row][probs[row] > probs[row, tok]].sum().item()
            assert mass_before < top_p + 1e-5


def test_samples_follow_the_tempered_model_distribution(engine, reference):
    """Many draws of one prompt's first token: the frequency of each of the 20 likeliest tokens is its probability
    under softmax(logits / T) within 4 standard errors, and a token of probability 0 is never drawn."""
    prompt, temperature, draws = PROMPTS[0], 0.1, 4000
    outs = engine.generate([prompt] * draws, SamplingConfig(max_tokens=1, temperature=temperature))
    probs = torch.softmax(reference_logits(reference, prompt, [0])[0] / temperature, -1).double()
    freqs = torch.bincount(torch.tensor([o.token_ids[0] for o in outs]), minlength=probs.numel()).double() / draws
    top = probs.topk(20).indices
    assert ((freqs[top] - probs[top]).abs() <= 4 * (probs[top] * (1 - probs[top]) / draws).sqrt()).all()

    weights = torch.tensor([[0.1, 0.0, 0.2, 0.7]]).expand(20000, 4).contiguous()
    drawn = torch.bincount(engine._draw(weights), minlength=4).double() / 20000
    assert drawn[1] == 0 and torch.allclose(drawn, torch.tensor([0.1, 0.0, 0.2, 0.7], dtype=torch.float64), atol=0.015)


def test_same_seed_same_samples_different_seed_different(tiny_checkpoint):
    sampling = SamplingConfig(max_tokens=12, temperature=1.0)
    first = TorchEngine(tiny_checkpoint, seed=1).generate(PROMPTS, sampling)
    again = TorchEngine(tiny_checkpoint, seed=1).generate(PROMPTS, sampling)
    other = TorchEngine(tiny_checkpoint, seed=2).generate(PROMPTS, sampling)
    assert [o.token_ids for o in first] == [o.token_ids for o in again]
    assert [o.logprobs for o in first] == [o.logprobs for o in again]
    assert [o.token_ids for o in first] != [o.token_ids for o in other]


def test_stop_tokens_end_rows_independently(engine):
    free = engine.generate(PROMPTS, GREEDY)
    # a stop token that row 0 emits at step 3 or earlier and row 1 never emits
    stop = next(t for t in free[0].token_ids[:4] if t not in free[1].token_ids)
    outs = engine.generate(PROMPTS, SamplingConfig(max_tokens=12, temperature=0, stop_token_ids=[stop]))
    for base, out in zip(free, outs):
        if stop in base.token_ids:
            cut = base.token_ids.index(stop) + 1
            assert out.token_ids == base.token_ids[:cut]  # stop token kept, nothing after it
            assert out.finish_reason == "stop"
            assert len(out.logprobs) == cut
        else:
            assert out.token_ids == base.token_ids
            assert out.finish_reason == "length"
    assert outs[0].finish_reason == "stop" and len(outs[0].token_ids) <= 4
    assert outs[1].finish_reason == "length" and len(outs[1].token_ids) == 12


def test_max_tokens_and_stop_on_the_last_token(engine):
    first = [o.token_ids[0] for o in engine.generate(PROMPTS[:2], SamplingConfig(max_tokens=1, temperature=0))]
    assert all(isinstance(t, int) for t in first)
    outs = engine.generate(PROMPTS[:2], SamplingConfig(max_tokens=1, temperature=0, stop_token_ids=[first[0]]))
    assert outs[0].token_ids == [first[0]] and outs[0].finish_reason == "stop"
    if first[1] != first[0]:
        assert outs[1].token_ids == [first[1]] and outs[1].finish_reason == "length"


def test_responses_stop_where_the_model_context_ends(engine):
    window = engine.max_model_len()
    assert window == AutoModelForCausalLM.from_pretrained(engine.model.name_or_path).config.max_position_embeddings
    long, short = [7] * (window - 5), PROMPTS[0]
    outs = engine.generate([long, short], GREEDY)
    assert len(outs[0].token_ids) == 5 and outs[0].finish_reason == "length"
    assert len(outs[1].token_ids) == 12  # the other row of the batch is not cut short
    with pytest.raises(ValueError, match=f"prompt 0 has {window} tokens.*at most {window - 1}"):
        engine.generate([[7] * window], GREEDY)


def test_max_model_len_caps_the_window_below_the_model(tiny_checkpoint):
    short = TorchEngine(tiny_checkpoint, max_model_len=16)
    assert short.max_model_len() == 16
    outs = short.generate([[7] * 10], GREEDY)
    assert len(outs[0].token_ids) == 6 and outs[0].finish_reason == "length"
    with pytest.raises(ValueError, match=r"prompt 0 has 16 tokens.*at most 15"):
        short.generate([[7] * 16], GREEDY)


def test_bad_token_ids_are_named(engine):
    with pytest.raises(ValueError, match="prompt 1 is empty"):
        engine.generate([[1, 2], []], GREEDY)
    with pytest.raises(ValueError, match=r"outside the vocabulary"):
        engine.generate([[1, 10**6]], GREEDY)
    with pytest.raises(ValueError, match="prompt_ids is empty"):
        engine.score([], [1])


def test_bad_constructor_arguments_are_named(tiny_checkpoint):
    with pytest.raises(ValueError, match="dtype 'float8'.*allowed"):
        TorchEngine(tiny_checkpoint, dtype="float8")
    with pytest.raises(ValueError, match="max_batch_size"):
        TorchEngine(tiny_checkpoint, max_batch_size=0)
    with pytest.raises(ValueError, match=r"max_model_len must be in 1\.\.\d+ \(the model's positions\), got 1000000"):
        TorchEngine(tiny_checkpoint, max_model_len=10**6)


def test_load_weights_replaces_the_model(tiny_checkpoint):
    engine = TorchEngine(tiny_checkpoint)
    perturbed = reference_model(tiny_checkpoint, perturb_seed=7)
    prompt, continuation = PROMPTS[2], [11, 22, 33, 44, 55]
    before = torch.tensor(engine.score(prompt, continuation))
    expected = reference_logprobs(perturbed, prompt, continuation)
    assert (before - expected).abs().max() > 1e-2  # the perturbation is visible

    engine.load_weights(perturbed.named_parameters(), version=3)
    assert engine.weight_version == 3
    torch.testing.assert_close(torch.tensor(engine.score(prompt, continuation)), expected, rtol=0, atol=1e-5)
    out = engine.generate([prompt], SamplingConfig(max_tokens=4))[0]
    assert out.weight_version == 3
    torch.testing.assert_close(
        torch.tensor(out.logprobs), reference_logprobs(perturbed, prompt, out.token_ids), rtol=0, atol=1e-5
    )


def test_load_weights_rejects_unknown_names_and_shapes(engine):
    with pytest.raises(KeyError, match="unknown parameter name 'model.nope.weight'"):
        engine.load_weights([("model.nope.weight", torch.zeros(3))], version=1)
    with pytest.raises(ValueError, match=r"'lm_head.weight' has shape .* got a tensor of shape \(2, 2\)"):
        engine.load_weights([("lm_head.weight", torch.zeros(2, 2))], version=1)
    assert engine.weight_version == 0


def test_receive_weights_needs_a_group(engine):
    with pytest.raises(RuntimeError, match="init_weight_sync"):
        engine.receive_weights([], version=1, bucket_bytes=1024)


@pytest.mark.timeout(300)
def test_broadcast_weight_sync_into_a_ray_actor(ray_session, tiny_checkpoint):
    ray = ray_session
    actor = ray.remote(TorchEngine).remote(str(tiny_checkpoint), seed=0)
    perturbed = reference_model(tiny_checkpoint, perturb_seed=11)
    tensors = {name: p.detach() for name, p in perturbed.named_parameters()}
    metas = metas_of(tensors.items())
    bucket_bytes = 256 * 1024  # several buckets for the ~1 MB of float32 weights

    port = free_port()
    joined = actor.init_weight_sync.remote("127.0.0.1", port, 1, 2, "gloo")
    pg = init_group("127.0.0.1", port, 0, 2, "gloo", timeout_s=120)
    ray.get(joined, timeout=120)

    received = actor.receive_weights.remote(metas, 5, bucket_bytes)
    sent = broadcast_send(pg, tensors, metas, bucket_bytes)
    ray.get(received, timeout=120)
    assert sent == sum(t.numel() * t.element_size() for t in tensors.values())

    prompt, continuation = PROMPTS[0], [3, 1, 4, 1, 5, 9]
    scored = torch.tensor(ray.get(actor.score.remote(prompt, continuation)))
    torch.testing.assert_close(scored, reference_logprobs(perturbed, prompt, continuation), rtol=0, atol=1e-5)
    out = ray.get(actor.generate.remote([prompt], SamplingConfig(max_tokens=3)))[0]
    assert out.weight_version == 5

    # The first receive made the parameters views of the buckets; the next ones land in them in place.
    for version, seed in ((6, 12), (7, 13)):
        perturbed = reference_model(tiny_checkpoint, perturb_seed=seed)
        tensors = {name: p.detach() for name, p in perturbed.named_parameters()}
        received = actor.receive_weights.remote(metas, version, bucket_bytes)
        broadcast_send(pg, tensors, metas, bucket_bytes)
        ray.get(received, timeout=120)
        scored = torch.tensor(ray.get(actor.score.remote(prompt, continuation)))
        torch.testing.assert_close(scored, reference_logprobs(perturbed, prompt, continuation), rtol=0, atol=1e-5)
    ray.kill(actor)


def test_weight_sync_into_a_model_of_another_dtype_copies_each_tensor(ray_session, tiny_checkpoint):
    """A bfloat16 engine beside a float32 sender: the buckets arrive in float32 and each tensor is cast in."""
    ray = ray_session
    actor = ray.remote(TorchEngine).remote(str(tiny_checkpoint), seed=0, dtype="bfloat16")
    perturbed = reference_model(tiny_checkpoint, perturb_seed=11)
    tensors = {name: p.detach() for name, p in perturbed.named_parameters()}
    metas = metas_of(tensors.items())
    port = free_port()
    joined = actor.init_weight_sync.remote("127.0.0.1", port, 1, 2, "gloo")
    pg = init_group("127.0.0.1", port, 0, 2, "gloo", timeout_s=120)
    ray.get(joined, timeout=120)
    for version in (1, 2):
        received = actor.receive_weights.remote(metas, version, 256 * 1024)
        broadcast_send(pg, tensors, metas, 256 * 1024)
        ray.get(received, timeout=120)
    got = ray.get(actor.__ray_call__.remote(lambda self: {n: p.float() for n, p in self.model.named_parameters()}))
    for name, t in tensors.items():
        torch.testing.assert_close(got[name], t.to(torch.bfloat16).float(), rtol=0, atol=0)
    ray.kill(actor)


def test_engine_runs_and_learner_imports_without_ray(tiny_checkpoint):
    # A machine without Ray (a GPU box checking the engine and the learner alone) samples and loads the learner: in a
    # fresh process, none of it imports Ray.
    code = (
        "import sys\n"
        "from memrl.engines.base import SamplingConfig\n"
        "from memrl.engines.torch_engine import TorchEngine\n"
        "import memrl.learner.learner\n"
        f"out = TorchEngine({str(tiny_checkpoint)!r}, seed=0).generate([[5, 6, 7]], SamplingConfig(max_tokens=3))\n"
        "print(len(out[0].token_ids), sorted(m for m in sys.modules if m == 'ray' or m.startswith('ray.')))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    tokens, ray_modules = result.stdout.strip().splitlines()[-1].split(" ", 1)
    assert 1 <= int(tokens) <= 3
    assert ray_modules == "[]"
