"""The WebShop warm-start recipe: the build's short form and its copying stage."""

import json

import pytest

from memrl.algorithms.sft import SUMMARY_FILE
from memrl_tuned_examples.warm_starts import webshop_sft


@pytest.mark.slow
def test_warm_start_build_short_form(ray_session, tiny_checkpoint, tmp_path):
    stages = [(2, 4, lengths) for _, _, lengths in webshop_sft.COPY_STAGES]
    copying = webshop_sft.build_copying(tmp_path / "copying", stages, num_train_tasks=6, num_eval_tasks=3,
                                        work=tmp_path)
    first = json.loads((tmp_path / "copying_stage1" / SUMMARY_FILE).read_text())["config"]
    assert first["training"]["task_options"] == webshop_sft.COPY_STAGES[0][2]
    assert copying["config"]["learners"]["model_path"] == str((tmp_path / "copying_stage1").resolve())
    assert copying["config"]["training"]["task_options"] == webshop_sft.COPY_STAGES[1][2]
    assert copying["config"]["environment"]["env"] == "memrl/Copy-v0" and copying["final"]["step"] == 2
    summary = webshop_sft.build("webshop_mem1", tmp_path / "mem1", steps=2, num_train_tasks=4, num_eval_tasks=2,
                                recall=0.5, init=tmp_path / "copying")
    written = json.loads((tmp_path / "mem1" / SUMMARY_FILE).read_text())
    assert written["final"]["step"] == summary["final"]["step"] == 2
    config = written["config"]
    assert config["learners"]["model_path"] == str((tmp_path / "copying").resolve())
    assert config["environment"]["env_config"]["split"] == "train"
    assert config["environment"]["env_config"]["expert_recall"] == 0.5
    assert config["evaluation"]["evaluation_env_config"] == {"split": "val"}


def test_warm_start_builds_need_the_copying_stage(tmp_path):
    with pytest.raises(FileNotFoundError, match="python tuned_examples/warm_starts/webshop_sft.py --workflow copying"):
        webshop_sft.build("webshop_mem1", tmp_path / "mem1", init=tmp_path / "missing")
