"""Every tuned example's GPU preset asks for exactly the GPUs it is given, from 1 to 64, trains with gradient
checkpointing, and on GPUs of 40, 80 and 141 GB either fits a 7B and a 3B model once its micro-batches are sized by
the memory plan or is refused before any actor starts, naming the figures."""

import json
from pathlib import Path

import pytest

from memrl.experiment import gpu_preset
from memrl.memory_plan import ModelShape

from memrl_tuned_examples import (
    mem1_ppo,
    mem1_webshop_ppo,
    memagent_dapo,
    memalpha_grpo,
    memory_r1,
    mempo_grpo,
    memsearcher_grpo,
)

MODEL = "/ckpt/Qwen2.5-7B-Instruct"

PRESETS = {
    "memagent_dapo": lambda n, model=MODEL: memagent_dapo.paper_config(model, n),
    "mem1_ppo": lambda n, model=MODEL: mem1_ppo.paper_config(model, n, None, None),
    "memsearcher_grpo": lambda n, model=MODEL: memsearcher_grpo.paper_config(model, n, None, None),
    "mempo_grpo": lambda n, model=MODEL: mempo_grpo.paper_config(model, n, None, None),
    "mem1_webshop_ppo": lambda n, model=MODEL: mem1_webshop_ppo.paper_config(model, n, None),
    # The answerer behind a URL: every GPU is the policy's (a local answerer's GPUs are its own, on top).
    "memalpha_grpo": lambda n, model=MODEL: memalpha_grpo.paper_config(model, n, "http://127.0.0.1:8001/v1"),
    "memory_r1_manager": lambda n, model=MODEL: memory_r1.paper_config("manager", model, n,
                                                                       "http://127.0.0.1:8001/v1"),
    "memory_r1_answer": lambda n, model=MODEL: memory_r1.paper_config("answer", model, n, banks=Path("/data/banks")),
}

QWEN25 = {
    "7B": {"model_type": "qwen2", "hidden_size": 3584, "num_hidden_layers": 28, "num_attention_heads": 28,
           "num_key_value_heads": 4, "intermediate_size": 18944, "vocab_size": 152064, "tie_word_embeddings": False,
           "max_position_embeddings": 32768},
    "3B": {"model_type": "qwen2", "hidden_size": 2048, "num_hidden_layers": 36, "num_attention_heads": 16,
           "num_key_value_heads": 2, "intermediate_size": 11008, "vocab_size": 151936, "tie_word_embeddings": True,
           "max_position_embeddings": 32768},
}
"""Qwen2.5-7B-Instruct's and Qwen2.5-3B-Instruct's sizes (their config.json)."""


@pytest.mark.parametrize("num_gpus", [1, 2, 4, 8, 16, 32, 64])
@pytest.mark.parametrize("example", sorted(PRESETS))
def test_every_preset_asks_for_the_gpus_it_is_given(example, num_gpus):
    cfg = PRESETS[example](num_gpus)
    cfg.validate()
    assert cfg.resources()[0]["GPU"] == pytest.approx(num_gpus), example
    assert cfg.learners_cfg.gradient_checkpointing and cfg.learners_cfg.dtype == "bfloat16"


@pytest.mark.parametrize("size", sorted(QWEN25))
@pytest.mark.parametrize("example", sorted(PRESETS))
def test_every_preset_fits_its_gpus_or_is_refused_naming_the_figures(tmp_path, example, size):
    (tmp_path / "config.json").write_text(json.dumps(QWEN25[size]))
    fitting = set()
    for num_gpus in (1, 2, 4, 8, 16, 32, 64):
        for gpu_memory_gb in (40, 80, 141):
            preset = PRESETS[example](num_gpus, str(tmp_path))
            try:
                cfg = gpu_preset(preset, gpu_memory_gb)
            except ValueError as e:
                assert f"do not fit GPUs of {gpu_memory_gb} GB" in str(e) and "learner needs" in str(e)
                continue
            plan = cfg.plan(gpu_memory_gb)
            assert plan.fits, (num_gpus, gpu_memory_gb, plan.problems())
            assert cfg.debugging_cfg.gpu_memory_gb == gpu_memory_gb  # build() checks the same plan again
            assert cfg.learners_cfg.token_budget <= preset.learners_cfg.token_budget
            assert cfg.resources()[0]["GPU"] == pytest.approx(num_gpus)
            fitting.add((num_gpus, gpu_memory_gb))
    # A larger GPU never stops a preset from fitting.
    for num_gpus, gpu_memory_gb in fitting:
        assert (num_gpus, max(141, gpu_memory_gb)) in fitting or gpu_memory_gb == 141
    # What the presets were written for: a 7B on 16 GPUs of 80 GB (the GRPO and DAPO presets on 8), a 3B on 8.
    assert (16, 80) in fitting and (8, 80 if size == "3B" or "ppo" not in example else 141) in fitting
    shape = ModelShape.from_config(QWEN25[size])
    assert shape.num_params() == pytest.approx({"7B": 7.62e9, "3B": 3.09e9}[size], rel=0.01)


GPU_INSTANCES = {"p5.48xlarge": (8, 80), "p4de.24xlarge": (8, 80), "p4d.24xlarge": (8, 40)}
"""AWS instance types: (GPUs, GB of each)."""


def test_the_cluster_files_gpu_nodes_hold_every_preset_at_the_readmes_size(tmp_path):
    """cluster.yaml's GPU workers, as many as it lets the autoscaler start, hold every preset of a 7B model at the
    GPU count the README submits (--num-gpus 16)."""
    from pathlib import Path

    import yaml

    cluster = yaml.safe_load((Path(__file__).resolve().parents[2] / "cluster.yaml").read_text())
    worker = cluster["available_node_types"]["gpu_worker"]
    gpus_per_node, gpu_memory_gb = GPU_INSTANCES[worker["node_config"]["InstanceType"]]
    assert worker["max_workers"] * gpus_per_node >= 16
    (tmp_path / "config.json").write_text(json.dumps(QWEN25["7B"]))
    for example, preset in PRESETS.items():
        cfg = gpu_preset(preset(16, str(tmp_path)), gpu_memory_gb)
        assert cfg.plan(gpu_memory_gb).fits, example
        # No engine or learner spans more GPUs than one node has.
        assert max(cfg.env_runners_cfg.num_gpus_per_engine, cfg.learners_cfg.num_gpus_per_learner) <= gpus_per_node
