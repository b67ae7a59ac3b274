"""The WebShop table: its rows and lengths, and each policy measured greedily on small sizes."""

import argparse
import json
from pathlib import Path

import pytest

from memrl_tuned_examples.analyses import webshop_eval
from memrl_tuned_examples.tasks.webshop import warm_start


def test_table_rows_and_lengths(tmp_path):
    assert webshop_eval.by_length([(4, 300.0)] * 5 + [(5, 320.0)] * 5 + [(9, 900.0)] * 2) == {4: 300.0, 5: 320.0}
    rows = [{"policy": "MEM1", "reward": 0.7, "reward_ci_low": 0.6, "reward_ci_high": 0.8, "success": 0.5,
             "success_ci_low": 0.4, "success_ci_high": 0.6, "peak_tokens": 400.0, "peak_tokens_max": 450.0,
             "dependency": 1e5, "calls": 4.5, "seconds_per_task": 0.1, "peak_by_calls": {4: 400.0, 5: 410.0}},
            {"policy": "ReAct", "reward": 0.6, "reward_ci_low": 0.5, "reward_ci_high": 0.7, "success": 0.4,
             "success_ci_low": 0.3, "success_ci_high": 0.5, "peak_tokens": 1600.0, "peak_tokens_max": 2400.0,
             "dependency": 4e5, "calls": 4.6, "seconds_per_task": 0.2, "peak_by_calls": {5: 1900.0, 6: 2300.0}}]
    table = webshop_eval.markdown(rows)
    assert "| MEM1 | 0.700 [0.600, 0.800] | 0.500 [0.400, 0.600] | 400 (450) |" in table
    assert "| policy | 4 calls | 5 calls | 6 calls |" in table and "| ReAct |  | 1900 | 2300 |" in table
    webshop_eval.plot(rows, tmp_path / "t.png")
    assert (tmp_path / "t.png").stat().st_size > 0
    assert webshop_eval._policy("M=/x/y:webshop_mem1") == ("M", Path("/x/y"), "webshop_mem1")
    with pytest.raises(argparse.ArgumentTypeError, match="not one of"):
        webshop_eval._policy("M=/x/y:mem1")


def test_the_table_shows_every_warm_start_then_each_rl_policy_trained(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no RL runs here
    warm = [("MEM1 warm-start", warm_start("webshop_mem1"), "webshop_mem1"),
            ("ReAct warm-start", warm_start("webshop_react"), "webshop_react"),
            ("ReAct (truncated) warm-start", warm_start("webshop_react"), "webshop_react_truncated")]
    assert webshop_eval.default_policies() == warm
    for workflow in ("webshop_react_truncated", "webshop_mem1"):  # what mem1_webshop_ppo.py writes
        (tmp_path / webshop_eval.TRAINED[workflow]).mkdir(parents=True)
        (tmp_path / webshop_eval.TRAINED[workflow] / "config.json").write_text("{}")
    assert webshop_eval.default_policies() == warm + [
        ("RL MEM1", Path("runs/mem1_webshop_ppo/model"), "webshop_mem1"),
        ("RL ReAct (truncated)", Path("runs/mem1_webshop_ppo_react_truncated/model"), "webshop_react_truncated")]


@pytest.mark.slow
def test_table_measures_each_policy_greedily(ray_session, tiny_checkpoint, tmp_path):
    policies = [("MEM1", tiny_checkpoint, "webshop_mem1"), ("ReAct", tiny_checkpoint, "webshop_react")]
    result = webshop_eval.run(policies, num_tasks=3, engine="torch", out=tmp_path, num_env_runners=0)
    for row in result["rows"]:
        # Random weights write no <answer> block: MEM1's -1 ends every task at its first call.
        assert row["num_tasks"] == 3 and row["reward"] == -1.0 and row["success"] == 0.0 and row["calls"] == 1.0
        assert row["format_ok"] == 0.0 and row["peak_tokens"] <= row["peak_tokens_max"] and row["dependency"] > 0
        assert row["peak_by_calls"] == {}  # fewer than five tasks of any length
    assert json.loads((tmp_path / "webshop_table.json").read_text()) == result
    assert (tmp_path / "webshop_table.png").stat().st_size > 10_000
