"""The Table-1 evaluation of the search agents: the shipped policies it measures, and its rows, plot and ratios on
small sizes."""

import json

import pytest

from memrl.algorithms.sft import SUMMARY_FILE
from memrl_tuned_examples.analyses import search_eval
from memrl_tuned_examples.warm_starts import search_sft
from memrl_tuned_examples.tasks.search import warm_start


def test_table_one_measures_the_shipped_policies_of_every_question_count(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no RL runs here
    policies = search_eval.default_policies()
    assert [(name, workflow) for name, _, workflow in policies] == [
        ("MEM1", "mem1"), ("MemSearcher", "memsearcher"), ("MemPO", "mempo"), ("ReAct", "react"),
        ("ReAct (truncated)", "react_truncated")]
    for _, path, workflow in policies:
        assert path == warm_start(workflow.removesuffix("_truncated"), multi=True)
        summary = json.loads((path / SUMMARY_FILE).read_text())
        assert [o["num_objectives"] for o in summary["config"]["training"]["task_options"]] == [1, 2, 4, 8]
        assert summary["earlier_stages"]  # it went on from the two-question warm-start
    # The memory agents and the ReAct baselines they are compared with went through the same multi-count stage: steps x
    # batch, episodes and schedule.
    multi = search_sft.MULTI
    for workflow in ("mem1", "mempo", "memsearcher", "react"):
        train = json.loads((warm_start(workflow, multi=True) / SUMMARY_FILE).read_text())["config"]["training"]
        assert (train["steps"], train["batch_size"], train["num_train_tasks"], train["lr_schedule"]) == \
            (multi.steps, 32, multi.num_train_tasks, multi.lr_schedule)
        assert train["lr_decay_steps"] == multi.steps


@pytest.mark.slow
def test_table_one_rows_plot_and_ratio(ray_session, tiny_checkpoint, tmp_path):
    policies = [("MEM1", tiny_checkpoint, "mem1"), ("ReAct", tiny_checkpoint, "react")]
    result = search_eval.run(policies, [1, 2], num_tasks=3, engine="torch", out=tmp_path, num_env_runners=0)
    rows = result["rows"]
    assert [(r["policy"], r["objectives"]) for r in rows] == [("MEM1", 1), ("MEM1", 2), ("ReAct", 1), ("ReAct", 2)]
    for r in rows:
        assert r["num_tasks"] == 3 and 0 <= r["em_ci_low"] <= r["em"] <= r["em_ci_high"] <= 1
        assert r["peak_tokens"] <= r["peak_tokens_max"] and r["dependency"] > 0 and r["seconds_per_task"] > 0
        assert r["context_overflow"] == 0.0  # two questions fit the tiny model's 4096 positions
    assert list(result["react_peak_ratio"]) == ["MEM1 @ 2"]
    assert list(result["peak_growth"]) == ["MEM1 1 -> 2", "ReAct 1 -> 2"]
    assert result["peak_growth"]["ReAct 1 -> 2"] == rows[3]["peak_tokens"] / rows[2]["peak_tokens"]
    table, budgets = (tmp_path / "search_table.md").read_text().split("\n\n")
    assert table.count("\n") == 2 + len(rows) - 1
    # Then what each policy was trained with (a freshly built model: nothing recorded).
    assert budgets.splitlines()[2:] == ["| MEM1 | not recorded |", "| ReAct | not recorded |"]
    assert result["budgets"] == {"MEM1": "not recorded", "ReAct": "not recorded"}
    assert (tmp_path / "search_table.png").stat().st_size > 10_000
