"""The accuracy-vs-length analysis: its command line, its table's columns and the table of the shipped policies."""


import pytest

from memrl_tuned_examples.analyses import memagent_eval
from memrl_tuned_examples.tasks.memagent import (
    BASELINE,
    BASELINE_WINDOW,
    MEMORY_TOKENS,
    WARM_START,
)


def test_length_evaluation_pairs_with_the_given_warm_start(tmp_path, capsys):
    names = memagent_eval.policies(tmp_path / "rl", warm_start=tmp_path / "ws", baseline=tmp_path / "fc")
    assert [(n, p) for n, p, _ in names] == [("RL-MemAgent", tmp_path / "rl"),
                                             (memagent_eval.WARM_START_NAME, tmp_path / "ws"),
                                             ("full-context baseline", tmp_path / "fc")]
    assert memagent_eval.policies(None)[0][1] == WARM_START and memagent_eval.policies(None)[1][1] == BASELINE
    # A warm-start that is not a checkpoint is refused before Ray or any engine starts.
    with pytest.raises(SystemExit):
        memagent_eval.main(["--policy", str(WARM_START), "--warm-start", str(tmp_path)])
    assert f"--warm-start {tmp_path} is not a Hugging Face checkpoint" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        memagent_eval.main(["--policy", str(WARM_START), "--baseline", str(tmp_path)])
    assert f"--baseline {tmp_path} is not a Hugging Face checkpoint" in capsys.readouterr().err
    # More than one answer per question needs a temperature: greedy answers would repeat each other.
    with pytest.raises(SystemExit):
        memagent_eval.main(["--policy", str(WARM_START), "--samples", "4"])
    assert "with --temperature > 0 when --samples > 1" in capsys.readouterr().err


def test_a_sampled_length_table_adds_pass_at_k_and_all_k():
    row = {"policy": "RL-MemAgent", "multiplier": 1, "num_docs": 10, "document_tokens": 128.0, "accuracy": 0.7,
           "ci_low": 0.65, "ci_high": 0.75, "sub_em": 0.7, "f1": 0.7, "all_facts_held": 0.75,
           "distractors_held": 0.125, "peak_tokens_per_call": 152.0,
           "total_tokens_per_task": 1250.0, "temperature": 1.0, "samples": 4, "change_vs_warm_start": 0.02,
           "change_ci_low": -0.01, "change_ci_high": 0.05}
    for key, value in (("pass_at_k", 0.85), ("all_k", 0.5)):
        row.update({key: value, f"{key}_ci_low": value - 0.03, f"{key}_ci_high": value + 0.03,
                    f"{key}_change": -0.02, f"{key}_change_ci_low": -0.05, f"{key}_change_ci_high": 0.01})
    header, rule, line = memagent_eval.markdown([row]).splitlines()
    assert "mean of 4 samples at T=1" in header
    assert header.endswith("pass@4 | change, paired | all 4 right | change, paired |")
    assert rule.count("|") == header.count("|") == line.count("|")
    assert "| both gold facts held | distractors held |" in header and "| 0.750 | 0.12 | 152 | 1250 |" in line
    assert line.endswith("| 0.850 [0.820, 0.880] | -0.020 [-0.050, +0.010] | 0.500 [0.470, 0.530] | "
                         "-0.020 [-0.050, +0.010] |")


@pytest.mark.slow
def test_length_table_of_the_shipped_policies(ray_session, tmp_path):
    rows = memagent_eval.length_table(memagent_eval.policies(None), [1, 4], num_tasks=8, engine="torch",
                                      num_env_runners=0)
    by = {(r["policy"], r["multiplier"]): r for r in rows}
    assert len(rows) == 4 and all(r["num_tasks"] == 8 for r in rows)
    assert by["MemAgent warm-start", 4]["document_tokens"] > 3 * by["MemAgent warm-start", 1]["document_tokens"]
    # MemAgent's calls stay the same size however long the document; the baseline's grow up to its window.
    agent = [by["MemAgent warm-start", m]["peak_tokens_per_call"] for m in (1, 4)]
    assert agent[1] <= agent[0] + MEMORY_TOKENS
    assert by["MemAgent warm-start", 4]["calls_per_task"] > 3 * by["MemAgent warm-start", 1]["calls_per_task"]
    base = [by["full-context baseline", m]["peak_tokens_per_call"] for m in (1, 4)]
    assert base[0] < base[1] <= BASELINE_WINDOW + MEMORY_TOKENS
    assert by["MemAgent warm-start", 1]["accuracy"] >= 0.3
    # What each answer rested on (its last memory, or the baseline's quotes): shares of questions and counts.
    for r in rows:
        assert 0 <= r["all_facts_held"] <= r["facts_held"] <= 1 and r["distractors_held"] >= 0
    assert by["MemAgent warm-start", 1]["all_facts_held"] >= 0.3
    # The baseline is paired with the warm-start on the same questions; the warm-start has no change of its own.
    base_1x, agent_1x = by["full-context baseline", 1], by["MemAgent warm-start", 1]
    assert base_1x["change_vs_warm_start"] == pytest.approx(base_1x["accuracy"] - agent_1x["accuracy"])
    assert base_1x["change_ci_low"] <= base_1x["change_vs_warm_start"] <= base_1x["change_ci_high"]
    assert "change_vs_warm_start" not in agent_1x
    memagent_eval.plot(rows, tmp_path / "length.png")
    assert (tmp_path / "length.png").stat().st_size > 10_000
    assert memagent_eval.markdown(rows).count("\n") == 2 + len(rows)
