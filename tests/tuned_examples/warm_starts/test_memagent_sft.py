"""The MemAgent warm-start recipe: the baseline's budget, a deeper model, and the two-stage build's short form."""

import re
from pathlib import Path

import pytest
from transformers import AutoConfig, AutoModelForCausalLM

from memrl.algorithms.sft import SUMMARY_FILE
from memrl import experiment
from memrl.experiment import training_budget
from memrl_tuned_examples.memagent_dapo import CPU_ITERATIONS
from memrl_tuned_examples.tasks.memagent import (
    NUM_DOCS,
)
from memrl_tuned_examples.warm_starts import memagent_sft


def test_the_baseline_build_gets_the_rl_policys_budget():
    # The same schedule, at least the warm-start's optimizer steps plus one per DAPO iteration, and at least as many
    # expert calls to learn from as MemAgent's (one per question, against about ten).
    agent, base = memagent_sft.STAGES["memagent"], memagent_sft.STAGES["full_context"]
    assert [s.lr_schedule for s in base] == [s.lr_schedule for s in agent]
    assert sum(s.steps for s in base) >= sum(s.steps for s in agent) + CPU_ITERATIONS
    assert all(b.num_train_tasks >= 5 * a.num_train_tasks for a, b in zip(agent, base))


def test_baseline_build_from_a_deeper_model(monkeypatch, tmp_path, capsys):
    built = []
    monkeypatch.setattr(experiment, "RUNS", tmp_path)
    monkeypatch.setattr(memagent_sft, "build_all", lambda workflow, out, num_eval_tasks, init=None:
                        built.append((workflow, out, init)))
    monkeypatch.setattr("sys.argv", ["memagent_sft.py", "--workflow", "full_context", "--layers", "6",
                                     "--out", str(tmp_path / "ckpt")])
    memagent_sft.main()
    ((workflow, out, init),) = built
    assert (workflow, out) == ("full_context", tmp_path / "ckpt" / "full_context_6_layers_sft")
    assert AutoConfig.from_pretrained(init).num_hidden_layers == 6
    for argv in (["--layers", "0"], ["--layers", "6", "--steps", "2", "--init", "/ckpt"]):
        monkeypatch.setattr("sys.argv", ["memagent_sft.py", *argv])
        with pytest.raises(SystemExit):
            memagent_sft.main()
        assert "--layers must be a positive number of blocks and excludes --init" in capsys.readouterr().err


@pytest.mark.slow
def test_warm_start_build_in_two_short_stages(ray_session, tiny_checkpoint, tmp_path, monkeypatch):
    # MemAgent's build in two stages.
    stages = (memagent_sft.Stage(2, 4), memagent_sft.Stage(2, 4, "linear"))
    out = tmp_path / "memagent"
    summary = memagent_sft.build_all("memagent", out, num_eval_tasks=2, stages=stages, init=tiny_checkpoint,
                                     stage_dir=tmp_path / "stages")
    assert summary["config"]["env_runners"]["workflow"] == "memagent"
    assert [m["step"] for m in summary["curve"]] == [0, 2]
    assert (out / SUMMARY_FILE).is_file()
    assert AutoModelForCausalLM.from_pretrained(out) is not None
    # Evaluated at the base length, trained at it.
    assert summary["config"]["evaluation"]["evaluation_env_config"] == {"num_docs": NUM_DOCS}
    assert summary["config"]["environment"]["env_config"]["num_docs"] == NUM_DOCS
    # The second stage starts from the first one's weights, with its own seed and a decaying rate.
    (first,) = summary["earlier_stages"]
    assert summary["initial"]["eval_nll"] < first["initial"]["eval_nll"]
    assert summary["config"]["learners"]["model_path"] == str((tmp_path / "stages" / "memagent_stage1"))
    assert (summary["config"]["debugging"]["seed"], first["config"]["debugging"]["seed"]) == (1, 0)
    assert summary["config"]["training"]["optimizer"]["lr_schedule"] == "linear"
    assert summary["final"]["eval_nll"] < first["initial"]["eval_nll"]
    assert re.fullmatch(r"SFT 2\+2 steps x 64 rows, lr constant\+linear, \d+ min", training_budget(out))

    # The baseline's build goes through the same build_all in one stage; what is its own is the config it hands
    # the SFT run (the run itself is the one above): its training lengths, from the starting checkpoint.
    ran = []
    monkeypatch.setattr(memagent_sft.sft, "run", lambda config, out: ran.append((config.to_dict(), out)) or {})
    memagent_sft.build_all("full_context", tmp_path / "full_context", num_eval_tasks=2, stages=stages[:1],
                           init=tiny_checkpoint, stage_dir=tmp_path / "stages")
    ((config, written),) = ran
    assert written == (tmp_path / "full_context").resolve() and config["env_runners"]["workflow"] == "full_context"
    assert config["environment"]["env_config"]["num_docs"] == (2, 4, 6, 8, NUM_DOCS)
    assert config["evaluation"]["evaluation_env_config"] == {"num_docs": NUM_DOCS}
    assert config["learners"]["model_path"] == str(Path(tiny_checkpoint).resolve())
    assert config["debugging"]["seed"] == 0 and config["training"]["optimizer"]["lr_schedule"] == "constant"
