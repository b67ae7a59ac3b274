"""The GPU memory plan: parameter counts of real models, the activation model against saved-tensor bytes measured on
narrow Qwen2 models, and plans of 7B configs that do and do not fit."""

import json
import time

import numpy as np
import pytest
import torch
from transformers import AutoModelForTokenClassification, LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

from memrl.algorithms import DAPOConfig, PPOConfig
from memrl.learner.batching import pack_rows, pad_rows
from memrl.memory_plan import (GB, ModelShape, activation_bytes, fit_engines, layer_activation_bytes,
                               saved_tensor_bytes)

QWEN25_7B = {"model_type": "qwen2", "hidden_size": 3584, "num_hidden_layers": 28, "num_attention_heads": 28,
             "num_key_value_heads": 4, "intermediate_size": 18944, "vocab_size": 152064,
             "tie_word_embeddings": False, "max_position_embeddings": 32768}
"""Qwen2.5-7B-Instruct's config.json (its sizes)."""


def _qwen2(h: int, layers: int = 2, heads: int = 4, kv_heads: int = 2, mlp: int | None = None, vocab: int = 512,
           tied: bool = False) -> Qwen2Config:
    return Qwen2Config(hidden_size=h, num_hidden_layers=layers, num_attention_heads=heads,
                       num_key_value_heads=kv_heads, intermediate_size=mlp or 4 * h, vocab_size=vocab,
                       tie_word_embeddings=tied, max_position_embeddings=2048)


@pytest.mark.parametrize("config", [_qwen2(64), _qwen2(96, heads=6, kv_heads=6, tied=True),
                                    LlamaConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                                num_key_value_heads=1, intermediate_size=172, vocab_size=300)])
def test_parameter_counts_are_the_models(config):
    shape = ModelShape.from_config(config.to_dict())
    model_class = Qwen2ForCausalLM if config.model_type == "qwen2" else LlamaForCausalLM
    assert shape.num_params() == sum(p.numel() for p in model_class(config).parameters())
    critic = AutoModelForTokenClassification.from_config(config.__class__(**{**config.to_dict(), "num_labels": 1}))
    assert shape.num_params("value") == sum(p.numel() for p in critic.parameters())


def test_a_7b_model_is_counted_as_published():
    shape = ModelShape.from_config(QWEN25_7B)
    assert shape.num_params() == pytest.approx(7.62e9, rel=0.005)  # Qwen2.5-7B: 7.61 B parameters
    # Without checkpointing a layer stack of this width keeps about 6 MB of activations per token; with it, about 0.2.
    assert 5.5e6 < shape.num_layers * layer_activation_bytes(shape, 2) < 7e6
    per_token = activation_bytes(shape, 2, 1000, 0, checkpointing=True)["saved"] / 1000
    assert 0.15e6 < per_token < 0.25e6


def _measured(h: int, heads: int, kv_heads: int, dtype: torch.dtype, checkpointing: bool,
              entropy_grad: bool, packed: bool = False) -> tuple[int, ModelShape, int, int]:
    """Saved-tensor bytes of one learner forward (memrl's micro-batch, padded or packed, response logits, logprobs
    and entropy) on a narrow Qwen2 with the 7B's MLP ratio; with the model's shape and the micro-batch's tokens."""
    torch.manual_seed(0)
    config = _qwen2(h, layers=3, heads=heads, kv_heads=kv_heads, mlp=int(h * 18944 / 3584))
    model = Qwen2ForCausalLM._from_config(config, attn_implementation="sdpa", dtype=dtype).train()
    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    rows = [{"prompt_ids": np.arange(1, 150) % 500, "response_ids": np.arange(7, 57) % 500},
            {"prompt_ids": np.arange(3, 100) % 500, "response_ids": np.arange(9, 99) % 500}]
    mb = (pack_rows if packed else pad_rows)(rows)

    def forward():
        with mb.head_sees_responses(model):
            logits = model(input_ids=mb.input_ids, attention_mask=mb.attention_mask, position_ids=mb.position_ids,
                           use_cache=False).logits
        return mb.logprobs_and_entropy(logits, entropy_grad=entropy_grad)

    return (saved_tensor_bytes(model, forward), ModelShape.from_config(config.to_dict()), mb.input_ids.numel(),
            mb.response_ids.numel())


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("checkpointing", [False, True])
@pytest.mark.parametrize("packed", [False, True])
def test_activation_estimate_is_within_15_percent_of_the_measured_bytes_at_three_widths(dtype, checkpointing, packed):
    e = torch.tensor([], dtype=dtype).element_size()
    for h, heads, kv_heads, entropy_grad in [(64, 4, 2, True), (128, 4, 1, False), (256, 2, 1, True)]:
        measured, shape, tokens, responses = _measured(h, heads, kv_heads, dtype, checkpointing, entropy_grad, packed)
        # Padded: two rows of half the tokens each; packed: one row of them all, masked block-causally under sdpa.
        planned = activation_bytes(shape, e, tokens, responses, checkpointing=checkpointing,
                                   entropy_grad=entropy_grad, row_tokens=tokens if packed else tokens // 2)["saved"]
        assert planned == pytest.approx(measured, rel=0.15), (h, measured, planned)


def _checkpoint(tmp_path, config: dict) -> str:
    (tmp_path / "config.json").write_text(json.dumps(config))
    return str(tmp_path)


def _dapo_7b(model: str, num_learners: int, checkpointing: bool, token_budget: int = 32768) -> DAPOConfig:
    return (DAPOConfig().learners(model_path=model, num_learners=num_learners, num_gpus_per_learner=1,
                                  dtype="bfloat16", token_budget=token_budget, gradient_checkpointing=checkpointing)
            .env_runners(engine="vllm", num_engines=2, num_gpus_per_engine=1, max_tokens=1024,
                         engine_config={"kv_cache_bytes": 8 * 1024**3, "dtype": "bfloat16", "max_model_len": 8192})
            .training(kl_coef=1e-3))


def test_a_7b_run_without_checkpointing_does_not_fit_and_the_message_names_the_settings(tmp_path):
    model = _checkpoint(tmp_path, QWEN25_7B)
    plan = _dapo_7b(model, num_learners=2, checkpointing=False).plan(gpu_memory_gb=80)
    (problem,) = plan.problems()
    assert problem.startswith("each learner needs ") and "of a 80 GB GPU" in problem
    assert "activations" in problem and "learners.gradient_checkpointing" in problem
    assert "learners.token_budget" in problem
    learner = plan.needs[0]
    # ZeRO-3 over two learners: 16 bytes per parameter in all, halved; the reference model's bf16 copy, halved.
    assert learner.parts["parameters"] + learner.parts["gradients"] + learner.parts["optimizer"] == pytest.approx(
        16 * ModelShape.from_config(QWEN25_7B).num_params() / 2)
    assert learner.parts["reference model"] == pytest.approx(learner.parts["parameters"])
    assert "DOES NOT FIT" in plan.table() and "fits" in plan.table()  # the engines fit
    # A GPU engine captures CUDA graphs unless told not to; their pool counts.
    engine = plan.needs[-1]
    assert engine.name == "engine" and engine.parts["CUDA graphs"] == 1 * GB
    eager = _dapo_7b(model, num_learners=2, checkpointing=False).env_runners(
        engine_config={"kv_cache_bytes": 8 * 1024**3, "enforce_eager": True})
    assert "CUDA graphs" not in eager.plan(gpu_memory_gb=80).needs[-1].parts


def test_a_7b_run_with_checkpointing_on_eight_gpus_fits_an_80_gb_gpu_but_not_a_40_gb_one(tmp_path):
    model = _checkpoint(tmp_path, QWEN25_7B)
    config = _dapo_7b(model, num_learners=4, checkpointing=True, token_budget=16384)
    assert config.plan(gpu_memory_gb=80).fits
    assert not config.plan(gpu_memory_gb=40).fits
    assert config.plan().problems() == []  # without a GPU size: figures only
    # A PPO run adds critic learners of the same size, less the vocabulary-sized head and its logits.
    ppo = PPOConfig.from_dict(config.to_dict()).plan(gpu_memory_gb=80)
    names = [need.name for need in ppo.needs]
    assert names == ["learner", "critic learner", "engine"]
    assert ppo.needs[1].parts["activations"] < ppo.needs[0].parts["activations"]


def test_rows_packed_without_padding_count_the_mask_their_attention_builds(tmp_path):
    model = _checkpoint(tmp_path, QWEN25_7B)

    def activations(**learners) -> float:
        config = _dapo_7b(model, num_learners=4, checkpointing=True, token_budget=16384).learners(**learners)
        return config.plan().needs[0].parts["activations"]

    padded = activations()  # rows of up to the 8192-token context: a [2, 1, 8192, 8192] mask in bf16
    packed = activations(padding_free=True)  # one row of 16384 tokens: a [1, 1, 16384, 16384] mask
    varlen = activations(padding_free=True, attn_implementation="flash_attention_2")  # no mask at all
    assert packed - padded == padded - varlen == 16384 * 2 * 8192


def test_an_engine_without_a_kv_cache_size_gets_what_its_gpu_leaves(tmp_path):
    model = _checkpoint(tmp_path, QWEN25_7B)
    config = _dapo_7b(model, num_learners=4, checkpointing=True, token_budget=16384).env_runners(
        engine_config={"dtype": "bfloat16", "max_model_len": 8192})
    shape = ModelShape.from_config(QWEN25_7B)
    one_sequence = 2 * shape.num_layers * shape.kv_dim * 2 * 8192  # K and V, bf16, max_model_len tokens
    for gb in (80, 141):
        engine = config.plan(gpu_memory_gb=gb).needs[-1]
        assert engine.total == pytest.approx(gb * GB)  # the KV cache takes the rest of the GPU
        assert engine.parts["KV cache"] > 20 * one_sequence
    assert config.plan(gpu_memory_gb=141).needs[-1].parts["KV cache"] > config.plan(gpu_memory_gb=80).needs[-1].parts[
        "KV cache"] + 50 * GB
    assert config.plan().needs[-1].parts["KV cache"] == 0  # sized on the GPU at start-up: unknown without its size
    # Weights that leave no room for one sequence's KV: the engine does not fit, and the plan says so.
    small = config.plan(gpu_memory_gb=20)
    assert small.needs[-1].parts["KV cache"] == pytest.approx(one_sequence)
    (problem,) = [p for p in small.problems() if p.startswith("each engine")]
    assert "weights" in problem and "env_runners.num_gpus_per_engine (tensor parallel)" in problem
    # Split over two GPUs (tensor parallel), the same engine fits: half the weights each, the rest for KV.
    assert fit_engines(config, 20).plan(gpu_memory_gb=20).needs[-1].parts["KV cache"] > one_sequence


def test_a_checkpoint_without_sizes_is_named(tmp_path):
    with pytest.raises(ValueError, match="has no config.json"):
        ModelShape.from_checkpoint(tmp_path)
    with pytest.raises(ValueError, match="the model config has no 'intermediate_size'"):
        ModelShape.from_config({k: v for k, v in QWEN25_7B.items() if k != "intermediate_size"})
    assert GB == 1e9


def test_build_on_gpus_too_small_fails_within_seconds_naming_the_figures(tmp_path):
    config = (_dapo_7b(_checkpoint(tmp_path, QWEN25_7B), num_learners=2, checkpointing=False)
              .environment("memrl/Echo-v0").debugging(gpu_memory_gb=80))
    start = time.monotonic()
    with pytest.raises(ValueError, match=r"DAPOConfig does not fit GPUs of 80 GB .*: each learner needs [\d.]+ GB .*"
                                         r"activations [\d.]+ GB.*config.plan\(gpu_memory_gb\).table\(\)"):
        config.build()
    assert time.monotonic() - start < 10  # before Ray or any actor starts
    with pytest.raises(ValueError, match=r"debugging.gpu_memory_gb=0 is not allowed"):
        config.debugging(gpu_memory_gb=0).validate()


def test_an_example_prints_its_gpu_presets_plan(tmp_path, monkeypatch, capsys):
    from memrl_tuned_examples import memagent_dapo

    model = _checkpoint(tmp_path, QWEN25_7B)
    monkeypatch.setattr("sys.argv", ["memagent_dapo.py", "--model", model, "--num-gpus", "8", "--gpu-memory-gb", "80",
                                     "--plan"])
    with pytest.raises(SystemExit) as exit_:
        memagent_dapo.main()
    out = capsys.readouterr().out
    assert exit_.value.code == 0
    assert out.startswith("learner (1 GPU each)") and "engine (1 GPU each)" in out
    assert "of 80.0 GB: fits" in out
    monkeypatch.setattr("sys.argv", ["memagent_dapo.py", "--plan"])
    with pytest.raises(SystemExit):
        memagent_dapo.main()
    assert "--plan and --gpu-memory-gb are for GPU runs" in capsys.readouterr().err


QWEN25_32B = {**QWEN25_7B, "hidden_size": 5120, "num_hidden_layers": 64, "num_attention_heads": 40,
              "num_key_value_heads": 8, "intermediate_size": 27648}
"""Qwen2.5-32B-Instruct's sizes: its bfloat16 weights alone (65 GB) leave an 80 GB GPU too little for the KV cache."""


def test_engines_too_large_for_one_gpu_split_over_more_by_tensor_parallelism(tmp_path):
    from memrl.engines import tensor_parallel_size

    config = _dapo_7b(_checkpoint(tmp_path, QWEN25_32B), num_learners=8, checkpointing=True).env_runners(
        num_engines=4, num_env_runners=8)
    (problem,) = [p for p in config.plan(gpu_memory_gb=80).problems() if p.startswith("each engine")]
    assert "weights 65.5 GB" in problem and "env_runners.num_gpus_per_engine (tensor parallel)" in problem
    fitted = fit_engines(config, 80)
    run = fitted.env_runners_cfg
    assert (run.num_engines, run.num_gpus_per_engine, run.num_env_runners) == (2, 2, 4)  # the same 4 GPUs
    assert fitted.resources()[0]["GPU"] == config.resources()[0]["GPU"] == 12
    engine = fitted.plan(gpu_memory_gb=80).needs[-1]
    assert engine.parts["weights"] == pytest.approx(config.plan(80).needs[-1].parts["weights"] / 2)  # a half each
    assert not [n for n in fitted.plan(gpu_memory_gb=80).misfits() if n.name == "engine"]
    assert fit_engines(config, 141).env_runners_cfg.num_gpus_per_engine == 1  # fits one larger GPU as it is
    # Engines on a share of one GPU are not regrouped (the plan names them), nor are GPUs that do not halve.
    shared = config.env_runners(num_engines=2, num_gpus_per_engine=0.5)
    assert fit_engines(shared, 80).env_runners_cfg.num_gpus_per_engine == 0.5
    odd = config.env_runners(num_engines=3)
    assert fit_engines(odd, 80).env_runners_cfg.num_engines == 3
    assert [tensor_parallel_size(g) for g in (0, 0.5, 1, 2, 4)] == [1, 1, 1, 2, 4]
    with pytest.raises(ValueError, match=r"num_gpus_per_engine=1.5 is not allowed; .* a whole number of GPUs"):
        config.environment("memrl/Echo-v0").env_runners(num_gpus_per_engine=1.5).validate()
