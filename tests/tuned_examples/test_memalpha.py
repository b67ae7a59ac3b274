"""The Mem-α tuned example for real: the paper preset, the command line's checks, a short GRPO run of the CPU
default from the shipped warm-start with the shipped frozen answerer, the short forms of the builds and the
evaluation tables."""

import json
import subprocess
import sys

import pytest
from transformers import AutoModelForCausalLM

from memrl.algorithms.sft import SUMMARY_FILE
from memrl_tuned_examples import memalpha_eval, memalpha_sft
from memrl.experiment import train
from memrl_tuned_examples.memalpha_grpo import (
    ANSWERER,
    ANSWERER_CHECKPOINT,
    PAPER,
    WARM_START,
    WRITERS,
    config,
    paper_config,
    start_answerer,
)


def test_paper_preset_sized_for_gpus():
    cfg = paper_config("/ckpt/Qwen3-4B", num_gpus=8, answerer="http://127.0.0.1:8001/v1")
    cfg.validate()
    train_cfg, env = cfg.training_cfg, cfg.environment_cfg.env_config
    assert train_cfg.group_size == 8 and train_cfg.optimizer.lr == 1e-6 and train_cfg.tasks_per_iteration == 32
    assert train_cfg.loss.kl_coef == 1e-3 and train_cfg.loss.aggregation == "token_mean"
    assert (env["beta"], env["gamma"], env["answerer"]) == (0.05, 0.1, "http://127.0.0.1:8001/v1")
    assert cfg.learners_cfg.num_learners == 4 and cfg.env_runners_cfg.num_engines == 4
    assert cfg.env_runners_cfg.engine_config["max_model_len"] == PAPER["max_model_len"]
    assert cfg.env_runners_cfg.workflow_config["max_prompt_tokens"] == PAPER["max_model_len"] - PAPER["max_tokens"]
    on_file = paper_config("/ckpt", 2, "actor:a", data_path="/data/train.parquet").environment_cfg.env_config
    assert (on_file["data"], on_file["data_path"]) == ("file", "/data/train.parquet")


@pytest.mark.parametrize("args, message", [
    (["--num-gpus", "4", "--model", "/ckpt"], "--num-gpus needs --answerer"),
    (["--num-gpus", "1", "--model", "/ckpt", "--answerer", "/ckpt/Qwen3-32B"], "leaves no GPU for the policy"),
    (["--num-gpus", "2", "--model", "/ckpt", "--answerer", "/ckpt/a", "--writer", "mem1"], "picks a CPU baseline"),
])
def test_command_line_refuses_gpu_runs_without_room_for_the_answerer(args, message):
    run = subprocess.run([sys.executable, "tuned_examples/memalpha_grpo.py", *args], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 2 and message in run.stderr


@pytest.mark.slow
def test_short_grpo_run_of_the_cpu_default(ray_session, tmp_path, actor_gone):
    # The algorithm serves the frozen answerer itself (a side service) and stops it at the end.
    cfg = (config(WARM_START)
           .env_runners(num_envs_per_env_runner=8)
           .training(tasks_per_iteration=2, group_size=4)
           .evaluation(evaluation_num_tasks=12))
    assert cfg.resources()[0]["CPU"] == 4  # two learners, the engine and the answerer
    summary = train(cfg, iterations=2, out=tmp_path, metric="r_acc")
    assert actor_gone(ANSWERER)
    assert summary["score"] == "r_acc" and len(summary["score_per_iteration"]) == 2
    # Every sampled trajectory is counted: trained, or in a group whose rollouts all scored the same r_acc.
    counters = summary["counters"]
    assert counters["trajectories_sampled"] == 2 * 2 * 4 and len(summary["learners_per_iteration"]) == 2
    assert counters["trajectories_trained"] == counters["trajectories_sampled"] - 4 * counters["groups_dropped"]
    before = summary["eval_before"]
    # The shipped warm-start writes memory the frozen answerer answers some questions from, in calls that run.
    assert before["r_acc_mean"] > 0.05 and before["tool_success_mean"] > 0.9
    assert before["num_tasks"] == 12 and before["num_failed"] == 0
    change = summary["change"]  # paired over the same 12 tasks
    assert change["mean"] == pytest.approx(summary["eval_after"]["r_acc_mean"] - before["r_acc_mean"])
    assert AutoModelForCausalLM.from_pretrained(tmp_path / "model") is not None
    assert json.loads((tmp_path / "summary.json").read_text())["wall_s"] > 0


@pytest.mark.slow
@pytest.mark.parametrize("role, answerer, workflow, memory", [
    ("base", "policy", "memalpha", "tools"),  # writes and answers
    ("policy", None, "memalpha", "tools"),  # writes only
    ("memagent", None, "memagent", "text"),  # a flat-memory baseline: rewrites one paragraph
])
def test_warm_start_builds_short_form(ray_session, tiny_checkpoint, tmp_path, role, answerer, workflow, memory):
    summary = memalpha_sft.build(tmp_path, steps=2, num_train_tasks=4, num_eval_tasks=4, model=tiny_checkpoint,
                                 role=role)
    env_config = summary["config"]["environment"]["env_config"]
    assert summary["config"]["env_runners"]["workflow"] == workflow
    assert (env_config["answerer"], env_config["memory"]) == (answerer, memory)
    # The base learns from the full expert; the warm-starts RL continues from one that keeps a fact 30% of the time.
    assert env_config["expert_recall"] == (1.0 if role == "base" else memalpha_sft.WARM_START_RECALL)
    assert summary["config"]["training"]["task_options"] == memalpha_sft.ROLES[role].task_options
    assert [m["step"] for m in summary["curve"]] == [0, 2]
    assert summary["final"]["eval_nll"] < summary["initial"]["eval_nll"]
    assert (tmp_path / SUMMARY_FILE).is_file() and AutoModelForCausalLM.from_pretrained(tmp_path) is not None


@pytest.mark.slow
def test_answerer_build_short_form_trains_on_answers_over_every_kind_of_memory(ray_session, tiny_checkpoint,
                                                                               tmp_path):
    summary = memalpha_sft.build(tmp_path, steps=2, num_train_tasks=5, num_eval_tasks=5, model=tiny_checkpoint,
                                 role="answerer")
    assert summary["config"]["training"]["task_options"] == memalpha_sft.ANSWERER_TASKS
    assert summary["final"]["eval_nll"] < summary["initial"]["eval_nll"]
    with pytest.raises(ValueError, match="role must be one of"):
        memalpha_sft.build(tmp_path, steps=2, num_train_tasks=5, num_eval_tasks=5, role="judge")


def test_flat_memory_baselines_share_the_cpu_default_but_their_memory():
    tools, paragraph = config(), config(writer="memagent")
    assert tools.learners_cfg.model_path == str(WARM_START)
    assert paragraph.learners_cfg.model_path == str(WRITERS["memagent"].warm_start)
    assert (paragraph.env_runners_cfg.workflow, paragraph.environment_cfg.env_config["memory"]) == ("memagent", "text")
    assert config(writer="mem1").env_runners_cfg.workflow_config == tools.env_runners_cfg.workflow_config
    for part in ("training_cfg", "evaluation_cfg"):
        assert getattr(paragraph, part) == getattr(tools, part)
    same = {k: v for k, v in tools.environment_cfg.env_config.items() if k not in ("memory", "tokenizer_path")}
    assert same.items() <= paragraph.environment_cfg.env_config.items()


def test_cpu_env_reaches_the_answerer_actor_or_a_given_url():
    assert config(WARM_START).environment_cfg.env_config["answerer"] == f"actor:{ANSWERER}"
    url = "http://127.0.0.1:8001/v1"
    assert config(WARM_START, answerer=url).environment_cfg.env_config["answerer"] == url


@pytest.mark.slow
def test_evaluation_tables_of_the_shipped_warm_start_and_the_baselines(ray_session, tmp_path):
    answerer = start_answerer(ANSWERER_CHECKPOINT)
    try:
        rows = memalpha_eval.evaluate(memalpha_eval.policies({}), [1, 2], num_tasks=4, length_tasks=3,
                                      engine="torch")
    finally:
        ray_session.kill(answerer)
    by = {(r["policy"], r["category"], r["multiplier"]): r for r in rows}
    assert len(rows) == 6 * (3 + 2) and all(r["num_failed"] == 0 for r in rows)
    assert [r["num_tasks"] for r in rows[:5]] == [4, 4, 4, 3, 3]
    for category in ("accurate_retrieval", "test_time_learning", "long_range_understanding"):
        # Long context reads every chunk at the training length, RAG-top2 two of the three.
        full, rag = by["long-context", category, 1], by["RAG-top2", category, 1]
        assert full["memory_tokens"] == pytest.approx(full["chunk_tokens"])
        assert rag["memory_tokens"] < rag["chunk_tokens"]
        assert by["Mem-α warm-start", category, 1]["tool_success"] > 0.8
        # The expert's store is written outside the episode, and a paragraph is no call: no calls of the policy's.
        for name in ("expert memory", "MemAgent warm-start", "MEM1-style warm-start"):
            assert by[name, category, 1]["tool_success"] == 0.0
            if name != "expert memory":  # each baseline wrote a paragraph
                assert by[name, category, 1]["memory_tokens"] > 0
    assert by["Mem-α warm-start", "mixed", 2]["chunk_tokens"] > 1.5 * by["Mem-α warm-start", "mixed", 1]["chunk_tokens"]
    table = memalpha_eval.markdown(rows)
    assert table.count("\n") == 2 + 6 + 1 + 2 + 6 and "RAG-top2" in table and "MEM1-style warm-start" in table
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
