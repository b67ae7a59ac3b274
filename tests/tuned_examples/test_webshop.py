import argparse
import dataclasses
import json
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from memrl_envs.webshop import WebShopEnv
from memrl.algorithms.sft import SUMMARY_FILE
from memrl.workflows import workflow_class
from memrl_tuned_examples import mem1_webshop_ppo, webshop_eval, webshop_sft
from memrl.experiment import train
from memrl_tuned_examples.webshop_agents import (
    MAX_TOKENS,
    REACT_WINDOW,
    WORKFLOWS,
    env_config,
    warm_start,
    workflow_config,
)


def _env_expert_reward(seed: int) -> float:
    env = WebShopEnv(**env_config("test"))
    env.reset(seed=seed)
    while True:
        _, reward, terminated, truncated, _ = env.step(env.expert_action())
        if terminated or truncated:
            return reward


@pytest.mark.parametrize("workflow", WORKFLOWS)
def test_cpu_task_experts_earn_the_envs_expert_reward_within_the_token_limits(tiny_checkpoint, workflow):
    tokenizer = AutoTokenizer.from_pretrained(tiny_checkpoint)
    env = WebShopEnv(**env_config("test"))
    for seed in range(5):
        obs, info = env.reset(seed=seed)
        wf = workflow_class(workflow)(tokenizer, **workflow_config(workflow))
        wf.reset(obs, info)
        done = False
        while not done:
            limit = {"webshop_mem1": 700, "webshop_react": 4096, "webshop_react_truncated": REACT_WINDOW + 1}
            assert len(wf.prompt_ids()) < limit[workflow]
            reply = tokenizer.encode(wf.expert_response(env.expert_action()), add_special_tokens=False)
            assert len(reply) < MAX_TOKENS  # the stop token still fits
            action, _ = wf.on_response(reply + [tokenizer.eos_token_id])
            obs, reward, terminated, truncated, info = env.step(action)
            done = terminated or truncated
            if not done:
                wf.observe(obs, info)
        assert reward == _env_expert_reward(seed) > 0.5


def test_cpu_task_names_bad_workflows_and_shares_reacts_warm_start():
    with pytest.raises(ValueError, match="workflow='mem1' is not allowed"):
        workflow_config("mem1")
    assert warm_start("webshop_react_truncated") == warm_start("webshop_react")
    assert env_config("test", 0.5)["malformed_reward"] == -1.0


@pytest.mark.slow
def test_warm_start_build_short_form(ray_session, tiny_checkpoint, tmp_path):
    stages = [(2, 4, lengths) for _, _, lengths in webshop_sft.COPY_STAGES]
    copying = webshop_sft.build_copying(tmp_path / "copying", stages, num_train_tasks=6, num_eval_tasks=3,
                                        work=tmp_path)
    first = json.loads((tmp_path / "copying_stage1" / SUMMARY_FILE).read_text())["config"]
    assert first["training"]["task_options"] == webshop_sft.COPY_STAGES[0][2]
    assert copying["config"]["learners"]["model_path"] == str((tmp_path / "copying_stage1").resolve())
    assert copying["config"]["training"]["task_options"] == webshop_sft.COPY_STAGES[1][2]
    assert copying["config"]["environment"]["env"] == "memrl/Copy-v0" and copying["final"]["step"] == 2
    summary = webshop_sft.build("webshop_mem1", tmp_path / "mem1", steps=2, num_train_tasks=4, num_eval_tasks=4,
                                recall=0.5, init=tmp_path / "copying")
    written = json.loads((tmp_path / "mem1" / SUMMARY_FILE).read_text())
    assert written["final"]["step"] == summary["final"]["step"] == 2
    config = written["config"]
    assert config["learners"]["model_path"] == str((tmp_path / "copying").resolve())
    assert config["environment"]["env_config"]["split"] == "train"
    assert config["environment"]["env_config"]["expert_recall"] == 0.5
    assert config["evaluation"]["evaluation_env_config"] == {"split": "val"}


def test_warm_start_builds_need_the_copying_stage(tmp_path):
    with pytest.raises(FileNotFoundError, match="python tuned_examples/webshop_sft.py --workflow copying"):
        webshop_sft.build("webshop_mem1", tmp_path / "mem1", init=tmp_path / "missing")


def test_paper_preset_sized_for_gpus_on_the_original_files():
    cfg = mem1_webshop_ppo.paper_config("/ckpt/Qwen2.5-7B-Instruct", num_gpus=4, data_dir="/data/webshop")
    cfg.validate()
    assert cfg.training_cfg.optimizer.lr == mem1_webshop_ppo.PAPER["lr"] == 1e-6
    assert cfg.training_cfg.tasks_per_iteration == 64
    assert cfg.environment_cfg.env_config == {"split": "train", "max_turns": 10, "malformed_reward": -1.0,
                                              "data_dir": "/data/webshop"}
    assert cfg.evaluation_cfg.evaluation_env_config == {"split": "test"}
    assert cfg.env_runners_cfg.workflow == "webshop_mem1" and cfg.env_runners_cfg.workflow_config == {}
    assert cfg.learners_cfg.num_learners == 2 and cfg.env_runners_cfg.num_engines == 2
    react = mem1_webshop_ppo.config(workflow="webshop_react")
    assert react.env_runners_cfg.workflow == "webshop_react"
    assert react.learners_cfg.model_path == str(warm_start("webshop_react"))
    mem1 = mem1_webshop_ppo.config().training_cfg
    # The same budget and settings; only how rows are built differs (ReAct's calls share their history).
    assert react.training_cfg.stitch_trajectories and not mem1.stitch_trajectories
    assert dataclasses.replace(react.training_cfg, stitch_trajectories=False) == mem1


def test_gpu_runs_need_a_model(monkeypatch, capsys):
    monkeypatch.setattr("sys.argv", ["x", "--num-gpus", "2"])
    with pytest.raises(SystemExit):
        mem1_webshop_ppo.main()
    assert "--num-gpus needs --model" in capsys.readouterr().err


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


@pytest.mark.slow
def test_table_measures_each_policy_greedily(ray_session, tiny_checkpoint, tmp_path):
    policies = [("MEM1", tiny_checkpoint, "webshop_mem1"), ("ReAct", tiny_checkpoint, "webshop_react")]
    result = webshop_eval.run(policies, num_tasks=3, engine="torch", out=tmp_path)
    for row in result["rows"]:
        # Random weights write no <answer> block: MEM1's -1 ends every task at its first call.
        assert row["num_tasks"] == 3 and row["reward"] == -1.0 and row["success"] == 0.0 and row["calls"] == 1.0
        assert row["format_ok"] == 0.0 and row["peak_tokens"] <= row["peak_tokens_max"] and row["dependency"] > 0
        assert row["peak_by_calls"] == {}  # fewer than five tasks of any length
    assert json.loads((tmp_path / "webshop_table.json").read_text()) == result
    assert (tmp_path / "webshop_table.png").stat().st_size > 10_000


def test_the_cpu_default_names_the_warm_start_to_build(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(mem1_webshop_ppo, "warm_start", lambda workflow: tmp_path / f"{workflow}_sft")
    monkeypatch.setattr("sys.argv", ["x", "--workflow", "webshop_react"])
    with pytest.raises(SystemExit):
        mem1_webshop_ppo.main()
    assert "python tuned_examples/webshop_sft.py --workflow webshop_react" in capsys.readouterr().err


@pytest.mark.slow
def test_short_run_of_the_cpu_default(ray_session, tmp_path):
    cfg = (mem1_webshop_ppo.config()
           .env_runners(num_envs_per_env_runner=4)
           .training(tasks_per_iteration=4)
           .evaluation(evaluation_num_tasks=16, evaluation_num_envs_per_env_runner=8))
    summary = train(cfg, iterations=2, out=tmp_path)
    assert len(summary["reward_per_iteration"]) == 2
    # The shipped warm-start already shops before any RL: it writes its actions and earns reward on held-out goals.
    assert summary["eval_before"]["format_ok_mean"] > 0.5 and summary["eval_before"]["reward_mean"] > 0.1
    assert summary["eval_after"]["num_tasks"] == 16
    assert (tmp_path / "model" / "config.json").is_file()
