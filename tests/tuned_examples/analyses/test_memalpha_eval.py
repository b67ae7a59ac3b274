"""Mem-α's evaluation tables: the shipped warm-start and the baselines on small sizes, and the average's interval."""


import pytest

from memrl_tuned_examples.analyses import memalpha_eval
from memrl_tuned_examples.tasks.memalpha import ANSWERER_CHECKPOINT, start_answerer


@pytest.mark.slow
def test_evaluation_tables_of_the_shipped_warm_start_and_the_baselines(ray_session, tmp_path):
    answerer = start_answerer(ANSWERER_CHECKPOINT)
    try:
        rows = memalpha_eval.evaluate(memalpha_eval.policies({}), [1, 2], num_tasks=2, length_tasks=1,
                                      engine="torch", num_env_runners=0)
    finally:
        ray_session.kill(answerer)
    by = {(r["policy"], r["category"], r["multiplier"]): r for r in rows}
    assert len(rows) == 7 * (3 + 2) and all(r["num_failed"] == 0 for r in rows)
    assert [r["num_tasks"] for r in rows[:5]] == [2, 2, 2, 1, 1]
    for category in ("accurate_retrieval", "test_time_learning", "long_range_understanding"):
        # Long context reads every chunk at the training length, RAG-top2 two of the three.
        full, rag = by["long-context", category, 1], by["RAG-top2", category, 1]
        assert full["memory_tokens"] == pytest.approx(full["chunk_tokens"])
        assert rag["memory_tokens"] < rag["chunk_tokens"]
        assert by["Mem-α warm-start", category, 1]["tool_success"] > 0.8
        # The expert's store is written outside the episode, and a paragraph is no call: no calls of the policy's.
        for name in ("expert memory", "empty memory", "MemAgent warm-start", "MEM1-style warm-start"):
            assert by[name, category, 1]["tool_success"] == 0.0
            if name not in ("expert memory", "empty memory"):  # each baseline wrote a paragraph
                assert by[name, category, 1]["memory_tokens"] > 0
        empty, expert = by["empty memory", category, 1], by["expert memory", category, 1]
        assert empty["memory_tokens"] == 0.0 < expert["memory_tokens"]
    assert by["Mem-α warm-start", "mixed", 2]["chunk_tokens"] > 1.5 * by["Mem-α warm-start", "mixed", 1]["chunk_tokens"]
    table = memalpha_eval.markdown(rows)
    assert table.count("\n") == 2 + 7 + 1 + 2 + 7 and "RAG-top2" in table and "MEM1-style warm-start" in table
    memalpha_eval.plot(rows, tmp_path / "eval.png")
    assert (tmp_path / "eval.png").stat().st_size > 10_000


def test_the_average_over_categories_has_its_interval():
    cells = [{"r_acc": 0.2, "ci_low": 0.1, "ci_high": 0.3}, {"r_acc": 0.5, "ci_low": 0.4, "ci_high": 0.6},
             {"r_acc": 0.2, "ci_low": 0.15, "ci_high": 0.25}]
    mean, low, high = memalpha_eval.average(cells)
    # Standard errors 0.1, 0.1 and 0.05 (over 1.96): the mean's is sqrt(0.01 + 0.01 + 0.0025) / 3 (over 1.96).
    assert mean == pytest.approx(0.3) and high - mean == pytest.approx(0.15 / 3) and mean - low == pytest.approx(0.05)
    row = {"policy": "p", "category": "x", "multiplier": 1, "memory_tokens": 1.0}
    rows = [{**row, **cell, "category": c} for cell, c in zip(cells, memalpha_eval.CATEGORIES)]
    assert "| 0.300 [0.250, 0.350] | 1 |" in memalpha_eval.markdown(rows)
