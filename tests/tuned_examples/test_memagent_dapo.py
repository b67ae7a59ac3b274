"""The MemAgent example for real: the paper preset, the CPU task and command line, and a short DAPO run of the CPU
default from the shipped warm-start."""

import json
import re

import pytest
from transformers import AutoModelForCausalLM

from memrl.experiment import train, training_budget, use_engine
from memrl_tuned_examples import memagent_dapo
from memrl_tuned_examples.memagent_dapo import PAPER, config, paper_config
from memrl_tuned_examples.tasks.memagent import (
    BASELINE,
    BASELINE_WINDOW,
    NUM_DOCS,
    RL_NUM_DOCS,
    WARM_START,
    cpu_task,
)


def test_paper_preset_sized_for_gpus():
    cfg = paper_config("/ckpt/Qwen2.5-7B-Instruct", num_gpus=16)
    cfg.validate()
    assert cfg.training_cfg.group_size == 16 and cfg.training_cfg.optimizer.lr == 1e-6
    assert cfg.training_cfg.loss.kl_coef == 1e-3 and cfg.training_cfg.loss.clip_high == 0.28
    assert cfg.environment_cfg.env_config["chunk_tokens"] == 5000
    assert cfg.env_runners_cfg.workflow_config == {"memory_tokens": 1024}
    assert cfg.learners_cfg.num_learners == 8 and cfg.env_runners_cfg.num_engines == 8
    assert paper_config("/ckpt", 2, data_path="/data/train.parquet").environment_cfg.env_config["task"] == "file"
    assert cfg.env_runners_cfg.engine_config["max_model_len"] == PAPER["window_tokens"] == 8192


def test_cpu_default_trains_and_scores_at_four_times_the_warm_starts_length():
    cfg = config(WARM_START)
    cfg.validate()
    assert cfg.environment_cfg.env_config["num_docs"] == RL_NUM_DOCS == 4 * NUM_DOCS
    assert cfg.evaluation_cfg.evaluation_env_config == {"num_docs": RL_NUM_DOCS}
    # The full-context baseline gets the same training at the length its window holds: only the workflow, its
    # window, the whole document and its length differ.
    base = config(BASELINE, "full_context")
    base.validate()
    assert base.env_runners_cfg.workflow == "full_context" and base.env_runners_cfg.workflow_config == {
        "max_context_tokens": BASELINE_WINDOW}
    assert base.environment_cfg.env_config == {**cfg.environment_cfg.env_config, "stream": False,
                                               "num_docs": NUM_DOCS, "tokenizer_path": str(BASELINE)}
    assert base.training_cfg == cfg.training_cfg
    assert base.evaluation_cfg.evaluation_env_config == {"num_docs": NUM_DOCS}
    assert base.evaluation_cfg.evaluation_num_tasks == cfg.evaluation_cfg.evaluation_num_tasks


def test_the_baseline_is_trained_on_cpu_only(monkeypatch, capsys):
    monkeypatch.setattr("sys.argv", ["memagent_dapo.py", "--workflow", "full_context", "--num-gpus", "2",
                                     "--model", "/ckpt"])
    with pytest.raises(SystemExit):
        memagent_dapo.main()
    assert "--workflow full_context is the CPU baseline" in capsys.readouterr().err


def test_length_and_rate_of_the_cpu_default_can_be_changed(monkeypatch, capsys):
    cfg = config(WARM_START, num_docs=NUM_DOCS, lr=2e-4)
    assert cfg.environment_cfg.env_config["num_docs"] == NUM_DOCS and cfg.training_cfg.optimizer.lr == 2e-4
    assert cfg.evaluation_cfg.evaluation_env_config == {"num_docs": NUM_DOCS}
    for argv, message in [(["--num-docs", "0"], "--num-docs must be a positive integer and --lr positive"),
                          (["--lr", "-1"], "--num-docs must be a positive integer and --lr positive"),
                          (["--num-gpus", "2", "--model", "/ckpt", "--lr", "1e-5"],
                           "--num-docs and --lr set the CPU default")]:
        monkeypatch.setattr("sys.argv", ["memagent_dapo.py", *argv])
        with pytest.raises(SystemExit):
            memagent_dapo.main()
        assert message in capsys.readouterr().err


def test_cpu_task_rejects_unknown_workflows():
    with pytest.raises(ValueError, match="workflow='react' is not allowed"):
        cpu_task("react", tokenizer_path="x")


@pytest.mark.slow
def test_short_dapo_run_of_the_cpu_default(ray_session, tmp_path):
    # At the warm-start's length (10 documents, a quarter of the main job's calls), on the torch engine, the env runner
    # and the learner, all in this process: the example's env, workflow, reward and evaluation are the point here; vLLM
    # serving training end to end is tests/algorithms/test_algorithm.py's, learner actors and ZeRO-3 over two ranks
    # tests/learner's and tests/algorithms', runner actors tests/rollout's.
    cfg = use_engine(config(WARM_START, num_docs=NUM_DOCS), "torch")
    cfg = (cfg
           .env_runners(num_env_runners=0, num_engines=0, num_envs_per_env_runner=8)
           .learners(num_learners=0)
           .training(tasks_per_iteration=2, group_size=4)
           .evaluation(evaluation_num_tasks=8))
    summary = train(cfg, iterations=2, out=tmp_path)
    assert len(summary["reward_per_iteration"]) == 2
    # The shipped warm-start already answers: greedy accuracy well above chance on held-out questions.
    assert summary["eval_before"]["reward_mean"] >= 0.3
    assert summary["eval_after"]["num_tasks"] == 8
    change = summary["change"]  # paired over the same 8 tasks
    assert change["ci_low"] <= change["mean"] <= change["ci_high"]
    assert change["mean"] == pytest.approx(summary["eval_after"]["reward_mean"] - summary["eval_before"]["reward_mean"])
    assert AutoModelForCausalLM.from_pretrained(tmp_path / "model") is not None
    assert (tmp_path / "checkpoint" / "algorithm_state.json").is_file()
    # The main job samples one batch ahead: its checkpoint keeps the batch sampled for the next iteration.
    assert (tmp_path / "checkpoint" / "prefetched" / "iteration_000002" / "batch.arrow").is_file()
    assert json.loads((tmp_path / "summary.json").read_text())["wall_s"] > 0
    assert (tmp_path / "curve.png").stat().st_size > 10_000
    # Comparison tables say what a policy was trained with: its warm-start's SFT, then these RL iterations.
    trained = summary["counters"]["trajectories_trained"]
    assert re.fullmatch(rf"SFT 900\+900 steps x 64 rows, lr constant\+linear, \d+ min, then RL 2 iterations, "
                        rf"{trained} trajectories trained, \d+ min", training_budget(tmp_path / "model"))


@pytest.mark.slow
def test_each_memory_write_is_credited_on_its_own(ray_session):
    # One task of four trajectories per iteration: every trajectory has the same number of calls n, so the mean
    # reward of the trained calls is (memory_score * (n - 1) + em) / n of the env's own figures.
    cfg = (use_engine(config(WARM_START), "torch")
           .environment(env_config={**config(WARM_START).environment_cfg.env_config, "num_docs": NUM_DOCS,
                                    "score_memories": True})
           .env_runners(num_envs_per_env_runner=4)
           .learners(num_learners=0)
           .training(tasks_per_iteration=1, group_size=4, advantage_estimator="call_by_position",
                     dynamic_sampling=False, max_staleness=0))
    algo = cfg.build()
    try:
        for _ in range(2):
            result = algo.train()
            runs, learned = result["env_runners"], result["learners"]
            n = runs["num_calls_mean"]
            want = (runs["memory_score_mean"] * (n - 1) + runs["em_mean"]) / n
            assert learned["call_reward_mean"] == pytest.approx(want)
            assert learned["rows"] == 4 * n and 0 < learned["call_reward_mean"] <= 1
    finally:
        algo.stop()
