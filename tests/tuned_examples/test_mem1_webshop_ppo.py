"""The WebShop example and its CPU task: the experts within the task's limits, the paper preset on the original
files, the command line, and a short run of the CPU default."""

import dataclasses

import pytest
from transformers import AutoTokenizer

from memrl_envs.webshop import WebShopEnv
from memrl.workflows import workflow_class
from memrl.experiment import train, use_engine
from memrl_tuned_examples import mem1_webshop_ppo
from memrl_tuned_examples.tasks.webshop import (
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
            limit = {"webshop_mem1": 700, "webshop_react": 4096, "webshop_react_truncated": REACT_WINDOW + 1,
                     "webshop_resum": 4096}  # its summary call reads the turns it condenses
            assert len(wf.prompt_ids()) < limit[workflow]
            reply = tokenizer.encode(wf.expert_response(env.expert_action()), add_special_tokens=False)
            assert len(reply) < MAX_TOKENS  # the stop token still fits
            action, _ = wf.on_response(reply + [tokenizer.eos_token_id])
            if action is None:  # ReSum's summary call: the env waits
                continue
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


def test_paper_preset_sized_for_gpus_on_the_original_files():
    cfg = mem1_webshop_ppo.paper_config("/ckpt/Qwen2.5-7B-Instruct", num_gpus=4, data_dir="/data/webshop")
    cfg.validate()
    assert cfg.training_cfg.optimizer.lr == mem1_webshop_ppo.PAPER["lr"] == 1e-6
    assert cfg.training_cfg.tasks_per_iteration == 64
    assert cfg.environment_cfg.env_config == {"split": "train", "max_turns": 10, "malformed_reward": -1.0,
                                              "data_dir": "/data/webshop"}
    assert cfg.evaluation_cfg.evaluation_env_config == {"split": "test"}
    assert cfg.env_runners_cfg.workflow == "webshop_mem1" and cfg.env_runners_cfg.workflow_config == {}
    # 4 GPUs: a policy learner, a critic learner and two engines.
    assert cfg.learners_cfg.num_learners == 1 and cfg.env_runners_cfg.num_engines == 2
    assert cfg.resources()[0]["GPU"] == 4
    react = mem1_webshop_ppo.config(workflow="webshop_react")
    assert react.env_runners_cfg.workflow == "webshop_react"
    assert react.learners_cfg.model_path == str(warm_start("webshop_react"))
    mem1 = mem1_webshop_ppo.config().training_cfg
    # The same budget and settings; only how rows are built differs (ReAct's calls share their history).
    assert react.training_cfg.stitch_trajectories and not mem1.stitch_trajectories
    assert dataclasses.replace(react.training_cfg, stitch_trajectories=False) == mem1
    # Truncated ReAct: ReAct's warm-start, MEM1's training (one row per call: its windows share little), its context
    # cut to the window.
    truncated = mem1_webshop_ppo.config(workflow="webshop_react_truncated")
    assert truncated.learners_cfg.model_path == react.learners_cfg.model_path
    assert truncated.training_cfg == mem1
    assert truncated.env_runners_cfg.workflow_config == workflow_config("webshop_react_truncated")


def test_gpu_runs_need_a_model(monkeypatch, capsys):
    monkeypatch.setattr("sys.argv", ["x", "--num-gpus", "2"])
    with pytest.raises(SystemExit):
        mem1_webshop_ppo.main()
    assert "--num-gpus needs --model" in capsys.readouterr().err


def test_the_cpu_default_names_the_warm_start_to_build(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(mem1_webshop_ppo, "warm_start", lambda workflow: tmp_path / f"{workflow}_sft")
    monkeypatch.setattr("sys.argv", ["x", "--workflow", "webshop_react"])
    with pytest.raises(SystemExit):
        mem1_webshop_ppo.main()
    assert "python tuned_examples/warm_starts/webshop_sft.py --workflow webshop_react" in capsys.readouterr().err


@pytest.mark.slow
def test_short_run_of_the_cpu_default(ray_session, tmp_path):
    # On the torch engine, the env runner and the learner, all in this process: the example's env, workflow, reward and
    # evaluation are the point here; vLLM serving training end to end is tests/algorithms/test_algorithm.py's, learner
    # actors and ZeRO-3 over two ranks tests/learner's and tests/algorithms', runner actors tests/rollout's.
    cfg = (use_engine(mem1_webshop_ppo.config(), "torch")
           .env_runners(num_env_runners=0, num_engines=0, num_envs_per_env_runner=4)
           .learners(num_learners=0)
           .training(tasks_per_iteration=4)
           .evaluation(evaluation_num_tasks=4, evaluation_num_envs_per_env_runner=4))
    summary = train(cfg, iterations=2, out=tmp_path)
    assert len(summary["reward_per_iteration"]) == 2
    # The shipped warm-start already shops before any RL: it writes its actions and earns reward on held-out goals.
    assert summary["eval_before"]["format_ok_mean"] > 0.5 and summary["eval_before"]["reward_mean"] > 0.1
    assert summary["eval_after"]["num_tasks"] == 4
    assert (tmp_path / "model" / "config.json").is_file()
