"""The cross-method table: which cells apply, that each one's configs are whole, that a table never mixes budgets,
and a quick run of a trained cell and an evaluate-only one through the command."""

import json
import sys

import pytest

from memrl.algorithms import PPOConfig
from memrl_tuned_examples import compare
from memrl_tuned_examples.compare import BUDGET, COLUMNS, QUICK, ROWS, cell_name, cells, make_table, rl_config


def test_the_table_has_the_methods_and_tasks_and_every_method_fits_somewhere():
    assert list(ROWS) == ["MemAgent", "MEM1", "MemSearcher", "MemPO", "Mem-α", "ReSum", "Memory-R1", "ReAct",
                          "truncated ReAct", "full context", "RAG top-2"]
    assert list(COLUMNS) == ["chunk_stream", "search_1", "search_4", "webshop", "memory_store", "memory_bank"]
    assert all(set(row.policies) <= set(COLUMNS) and row.policies for row in ROWS.values())
    applicable = cells(list(ROWS.values()), list(COLUMNS.values()))
    assert len(applicable) == sum(len(row.policies) for row in ROWS.values())
    assert (ROWS["ReSum"], COLUMNS["webshop"]) in applicable
    assert (ROWS["MemAgent"], COLUMNS["search_1"]) not in applicable


@pytest.mark.parametrize("row, column", [(r.label, c.key) for r, c in cells(list(ROWS.values()),
                                                                             list(COLUMNS.values()))])
def test_every_applicable_cell_makes_whole_configs_of_the_same_budget(row, column, tmp_path):
    row, column = ROWS[row], COLUMNS[column]
    policy = row.policies[column.key]
    if column.key in row.evaluate_only:
        from memrl_tuned_examples.tasks.memalpha import ANSWER_MEMORIES
        assert policy in ANSWER_MEMORIES
        return
    sft = column.sft(policy, BUDGET.sft_steps)
    sft.validate()
    assert sft.env_runners_cfg.workflow in (policy, "memalpha", "last_observation")
    cfg = rl_config(row, column, compare.INIT, BUDGET, "vllm")
    cfg.validate()
    train = cfg.training_cfg
    # The same trajectories per iteration and held-out tasks in every cell, whatever the algorithm.
    assert train.tasks_per_iteration * train.group_size == BUDGET.trajectories
    assert cfg.evaluation_cfg.evaluation_num_tasks == BUDGET.heldout_tasks
    assert isinstance(cfg, PPOConfig) == (row.algorithm == "PPO")
    assert cfg.learners_cfg.token_budget == column.token_budget  # the critic's learners take the policy's settings


def _record(row: str, column: str, budget=QUICK, score=0.5) -> dict:
    return {"row": row, "column": column, "policy": ROWS[row].policies[column], "budget": compare.asdict(budget),
            "metric": "reward", "trained": "SFT 2 steps", "score": {"mean": score, "ci_low": 0.25, "ci_high": 0.75},
            "warm_start_score": {"mean": 0.4, "ci_low": 0.15, "ci_high": 0.65},
            "change": {"mean": 0.1, "ci_low": -0.05, "ci_high": 0.25}, "peak_tokens": 123.0, "num_tasks": 4}


def test_the_table_marks_missing_and_inapplicable_cells_and_refuses_another_budget(tmp_path, monkeypatch, capsys):
    cell = tmp_path / cell_name(ROWS["ReAct"], COLUMNS["search_1"]) / "cell.json"
    cell.parent.mkdir()
    cell.write_text(json.dumps(_record("ReAct", "search_1")))
    data = make_table(tmp_path, tmp_path / "results", QUICK)
    assert [c["row"] for c in data["cells"]] == ["ReAct"]
    table = (tmp_path / "results" / "compare_table.md").read_text()
    react = next(line for line in table.splitlines() if line.startswith("| ReAct |"))
    assert react == "| ReAct | n/a | 0.500 [0.250, 0.750] | not run yet | not run yet | n/a | n/a |"
    assert "| ReAct | n/a | 0.400 [0.150, 0.650] | not run yet |" in table  # after SFT, before RL
    assert "+0.100 [-0.050, +0.250], 123" in table and (tmp_path / "results" / "compare_table.png").is_file()
    with pytest.raises(ValueError, match="was trained with .* not this table's"):
        make_table(tmp_path, tmp_path / "results", BUDGET)
    # The command refuses it before it trains anything.
    monkeypatch.setattr(sys, "argv", ["compare.py", "--out", str(tmp_path), "--rows", "ReAct"])
    with pytest.raises(SystemExit):
        compare.main()
    assert "not this table's" in capsys.readouterr().err


def test_the_written_table_is_the_record_a_fresh_checkout_goes_on_from(tmp_path, monkeypatch):
    results, out = tmp_path / "results", tmp_path / "runs"
    cell = out / cell_name(ROWS["ReSum"], COLUMNS["search_1"]) / "cell.json"
    cell.parent.mkdir(parents=True)
    cell.write_text(json.dumps(_record("ReSum", "search_1", score=0.25)))
    make_table(out, results, QUICK)
    # The runs are gone (a fresh checkout); the table keeps the cell, and a cell trained since joins it.
    cell.unlink()
    (out / cell_name(ROWS["ReAct"], COLUMNS["search_1"])).mkdir()
    (out / cell_name(ROWS["ReAct"], COLUMNS["search_1"]) / "cell.json").write_text(
        json.dumps(_record("ReAct", "search_1", score=0.75)))
    data = make_table(out, results, QUICK)
    assert {(c["row"], c["score"]["mean"]) for c in data["cells"]} == {("ReSum", 0.25), ("ReAct", 0.75)}
    # A cell.json replaces the record of its cell.
    cell.write_text(json.dumps(_record("ReSum", "search_1", score=0.5)))
    assert {c["score"]["mean"] for c in make_table(out, results, QUICK)["cells"]} == {0.5, 0.75}
    cell.unlink()
    # The command sees both cells done and trains nothing (no Ray started, no cell.json written).
    monkeypatch.setattr(compare, "init_ray", lambda *a: pytest.fail("a done cell was trained again"))
    monkeypatch.setattr(sys, "argv", ["compare.py", "--quick", "--out", str(out), "--results", str(results),
                                      "--rows", "ReSum", "ReAct", "--columns", "search_1"])
    compare.main()
    assert not cell.exists()
    assert "| ReSum | n/a | 0.500 [0.250, 0.750] |" in (results / "compare_table.md").read_text()
    # --redo names the cells it runs again.
    monkeypatch.setattr(sys, "argv", ["compare.py", "--quick", "--out", str(out), "--redo"])
    with pytest.raises(SystemExit):
        compare.main()


@pytest.mark.slow
def test_quick_command_trains_a_cell_scores_a_baseline_and_keeps_done_cells(ray_session, tmp_path, monkeypatch):
    argv = ["compare.py", "--quick", "--out", str(tmp_path), "--engine", "torch", "--rows", "ReAct", "RAG top-2",
            "--columns", "search_1", "memory_store"]
    monkeypatch.setattr(sys, "argv", argv)
    compare.main()
    react = json.loads((tmp_path / "ReAct__search_1" / "cell.json").read_text())
    assert react["budget"] == compare.asdict(QUICK) and react["num_tasks"] == QUICK.heldout_tasks
    # The copying checkpoint's steps, then the cell's, each with its rows per step.
    assert react["trained"].startswith("SFT 300+2 steps x 32+8 rows") and "then RL 1 iterations" in react["trained"]
    assert 0 <= react["score"]["ci_low"] <= react["score"]["mean"] <= react["score"]["ci_high"] <= 1
    assert react["peak_tokens"] > 0 and "change" in react
    rag = json.loads((tmp_path / "RAG_top-2__memory_store" / "cell.json").read_text())
    assert "change" not in rag and rag["num_tasks"] == QUICK.heldout_tasks and rag["trained"].startswith("no policy")
    table = (tmp_path / "compare_table.md").read_text()
    assert "(evaluated only)" in table
    # A second run trains nothing: both cells are done.
    stamp = (tmp_path / "ReAct__search_1" / "cell.json").stat().st_mtime_ns
    compare.main()
    assert (tmp_path / "ReAct__search_1" / "cell.json").stat().st_mtime_ns == stamp
