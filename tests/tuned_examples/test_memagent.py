"""The MemAgent tuned example for real: the paper preset, a short DAPO run of the CPU default from the shipped
warm-start, the warm-start build's short form and the accuracy-vs-length command."""

import json
import re

import pytest
from transformers import AutoConfig, AutoModelForCausalLM

from memrl.algorithms.sft import SUMMARY_FILE
from memrl import experiment
from memrl_tuned_examples import memagent_dapo, memagent_eval, memagent_sft
from memrl.experiment import train, training_budget
from memrl_tuned_examples.memagent_dapo import (
    BASELINE,
    BASELINE_WINDOW,
    CPU_ITERATIONS,
    MEMORY_TOKENS,
    NUM_DOCS,
    PAPER,
    RL_NUM_DOCS,
    WARM_START,
    config,
    cpu_task,
    paper_config,
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


def test_the_baseline_build_gets_the_rl_policys_budget():
    # The same schedule, at least the warm-start's optimizer steps plus one per DAPO iteration, and at least as many
    # expert calls to learn from as MemAgent's (one per question, against about ten).
    agent, base = memagent_sft.STAGES["memagent"], memagent_sft.STAGES["full_context"]
    assert [s.lr_schedule for s in base] == [s.lr_schedule for s in agent]
    assert sum(s.steps for s in base) >= sum(s.steps for s in agent) + CPU_ITERATIONS
    assert all(b.num_train_tasks >= 5 * a.num_train_tasks for a, b in zip(agent, base))


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


def test_cpu_task_rejects_unknown_workflows():
    with pytest.raises(ValueError, match="workflow='react' is not allowed"):
        cpu_task("react", tokenizer_path="x")


@pytest.mark.slow
def test_short_dapo_run_of_the_cpu_default(ray_session, tmp_path):
    cfg = (config(WARM_START)
           .env_runners(num_envs_per_env_runner=8)
           .training(tasks_per_iteration=2, group_size=4)
           .evaluation(evaluation_num_tasks=16))
    summary = train(cfg, iterations=2, out=tmp_path)
    assert len(summary["reward_per_iteration"]) == 2
    # The shipped warm-start already answers: greedy accuracy well above chance on held-out questions.
    assert summary["eval_before"]["reward_mean"] >= 0.3
    assert summary["eval_after"]["num_tasks"] == 16
    change = summary["change"]  # paired over the same 16 tasks
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
    cfg = (config(WARM_START)
           .environment(env_config={**config(WARM_START).environment_cfg.env_config, "num_docs": NUM_DOCS,
                                    "score_memories": True})
           .env_runners(num_envs_per_env_runner=4)
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


@pytest.mark.slow
def test_warm_start_build_in_two_short_stages(ray_session, tiny_checkpoint, tmp_path):
    stages = (memagent_sft.Stage(2, 4), memagent_sft.Stage(2, 4, "linear"))
    for workflow in ("memagent", "full_context"):
        out = tmp_path / workflow
        summary = memagent_sft.build_all(workflow, out, num_eval_tasks=4, stages=stages, init=tiny_checkpoint,
                                         stage_dir=tmp_path / "stages")
        assert summary["config"]["env_runners"]["workflow"] == workflow
        assert [m["step"] for m in summary["curve"]] == [0, 2]
        # The second stage starts from the first one's weights, with its own seed and a decaying rate.
        (first,) = summary["earlier_stages"]
        assert summary["initial"]["eval_nll"] < first["initial"]["eval_nll"]
        assert summary["config"]["learners"]["model_path"] == str((tmp_path / "stages" / f"{workflow}_stage1"))
        assert (summary["config"]["debugging"]["seed"], first["config"]["debugging"]["seed"]) == (1, 0)
        assert summary["config"]["training"]["optimizer"]["lr_schedule"] == "linear"
        assert summary["final"]["eval_nll"] < first["initial"]["eval_nll"]
        assert (out / SUMMARY_FILE).is_file()
        assert AutoModelForCausalLM.from_pretrained(out) is not None
        assert re.fullmatch(r"SFT 2\+2 steps x 64 rows, lr constant\+linear, \d+ min", training_budget(out))
        # Both are evaluated at the base length; the baseline trains on 2 to 10 documents.
        assert summary["config"]["evaluation"]["evaluation_env_config"] == {"num_docs": NUM_DOCS}
        lengths = summary["config"]["environment"]["env_config"]["num_docs"]
        assert lengths == ((2, 4, 6, 8, NUM_DOCS) if workflow == "full_context" else NUM_DOCS)


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
    rows = memagent_eval.length_table(memagent_eval.policies(None), [1, 4], num_tasks=16, engine="torch")
    by = {(r["policy"], r["multiplier"]): r for r in rows}
    assert len(rows) == 4 and all(r["num_tasks"] == 16 for r in rows)
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
