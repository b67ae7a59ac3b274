"""The search agents' warm-start recipe: the staged build and the multi-count stage, in short form."""

import json

import pytest

from memrl.checkpoints import portable
from memrl.algorithms.sft import SUMMARY_FILE
from memrl_tuned_examples.warm_starts import search_sft


@pytest.mark.slow
def test_warm_start_build_short_form(ray_session, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # earlier stages go under runs/
    stages = (search_sft.Stage(2, 4), search_sft.Stage(1, 6, objectives=(1, 3)))
    summary = search_sft.build_all("mempo", tmp_path / "mempo", stages, num_eval_tasks=2)
    written = json.loads((tmp_path / "mempo" / SUMMARY_FILE).read_text())
    config = written["config"]
    assert config["env_runners"]["workflow"] == "mempo" and written["final"]["step"] == summary["final"]["step"] == 1
    # The second stage continues from the first one's weights, on more episodes.
    (first,) = written["earlier_stages"]
    assert first["final"]["step"] == 2 and first["config"]["training"]["num_train_tasks"] == 4
    assert config["learners"]["model_path"] == first["out"]
    assert config["training"]["num_train_tasks"] == 6
    # ... and mixes one- and three-question episodes, each with the CPU task's turn budget for its size.
    assert first["config"]["training"]["task_options"] == []
    assert first["config"]["environment"]["env_config"]["num_objectives"] == 2
    assert config["environment"]["env_config"]["num_objectives"] == 3
    assert config["training"]["task_options"] == [{"num_objectives": 1, "max_turns": 4},
                                                  {"num_objectives": 3, "max_turns": 8}]
    # --multi's build goes on from a finished warm-start and keeps all its stages.
    multi = search_sft.build_multi("mempo", tmp_path / "multi", num_eval_tasks=2,
                                   stage=search_sft.Stage(1, 4, (1, 4), expert_notes=True), base=tmp_path / "mempo")
    assert json.loads((tmp_path / "multi" / SUMMARY_FILE).read_text()) == portable(multi)  # paths under the cwd
    assert multi["out"] == str(tmp_path / "multi") and portable(multi)["out"] == "multi"
    assert multi["config"]["learners"]["model_path"] == str((tmp_path / "mempo").resolve())
    assert [s["final"]["step"] for s in multi["earlier_stages"]] == [2, 1]
    assert [o["num_objectives"] for o in multi["config"]["training"]["task_options"]] == [1, 4]
    assert multi["config"]["environment"]["env_config"]["expert_notes"] is True  # the expert keeps per-question notes
    assert "expert_notes" not in config["environment"]["env_config"]
