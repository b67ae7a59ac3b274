"""The Memory-R1 example for real: the paper preset, the command line's checks, and a short answer stage on the banks
a fixed manager wrote for every task the stage meets."""

import json

import pytest

from memrl.experiment import train, use_engine
from memrl.seeds import heldout_env_seeds, training_env_seeds
from memrl_tuned_examples import memory_r1
from memrl_tuned_examples.memory_r1 import PAPER, answer_stage_seeds, manager_config, paper_config
from memrl_tuned_examples.tasks.memory_r1 import ANSWER_AGENT, ANSWER_WARM_START, MANAGER_WARM_START


def test_paper_preset_sized_for_gpus(tmp_path):
    cfg = paper_config("manager", "/ckpt/Qwen2.5-7B-Instruct", num_gpus=4, answerer="http://127.0.0.1:8001/v1")
    cfg.validate()
    train_cfg, env = cfg.training_cfg, cfg.environment_cfg.env_config
    assert train_cfg.tasks_per_iteration * train_cfg.group_size == 128 and train_cfg.optimizer.lr == 1e-6
    assert cfg.env_runners_cfg.sampling.temperature == 1.0 and cfg.evaluation_cfg.evaluation_temperature == 0.0
    assert cfg.env_runners_cfg.sampling.max_tokens == PAPER["max_tokens"]
    assert cfg.env_runners_cfg.engine_config["max_model_len"] == PAPER["max_prompt_tokens"] + PAPER["max_tokens"]
    assert (env["role"], env["answerer"], env.get("prompt", "paper")) == ("manager", "http://127.0.0.1:8001/v1",
                                                                         "paper")
    served = paper_config("manager", "/ckpt", 2, answerer="/ckpt/answer", answerer_gpus=2)
    assert served.services_cfg.actors[ANSWER_AGENT]["num_gpus"] == 2
    answer = paper_config("answer", "/ckpt", 4, banks=tmp_path).environment_cfg.env_config
    assert (answer["role"], answer["banks_dir"]) == ("answer", str(tmp_path))


@pytest.mark.parametrize("args, message", [
    (["--stage", "manager", "--num-gpus", "4", "--model", "/ckpt"], "--num-gpus needs --answerer"),
    (["--stage", "manager", "--num-gpus", "1", "--model", "/ckpt", "--answerer", "/ckpt/a"],
     "leaves no GPU for the policy"),
    (["--stage", "manager", "--manager", "/ckpt/m"], "--manager is the answer stage's"),
    (["--stage", "answer", "--answerer", "/ckpt/a"], "--answerer scores the manager stage"),
    (["--stage", "answer", "--manager", "/nowhere/manager"], "--manager"),
])
def test_command_line_refuses_what_a_stage_cannot_use(args, message, monkeypatch, capsys):
    monkeypatch.setattr("sys.argv", ["memory_r1.py", *args])
    with pytest.raises(SystemExit) as exit_:
        memory_r1.main()
    assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_the_manager_stage_is_scored_by_the_shipped_answer_agent_served_beside_it():
    cfg = manager_config()
    env = cfg.environment_cfg.env_config
    assert cfg.learners_cfg.model_path == str(MANAGER_WARM_START)
    assert env["answerer"] == f"actor:{ANSWER_AGENT}" and env["prompt"] == "brief"
    assert cfg.services_cfg.actors[ANSWER_AGENT]["options"]["model_path"] == str(ANSWER_WARM_START)
    assert manager_config(answerer="http://127.0.0.1:8001/v1").environment_cfg.env_config["answerer"] == \
        "http://127.0.0.1:8001/v1"


def test_the_answer_stage_seeds_are_every_training_and_heldout_seed():
    seeds = set(answer_stage_seeds(iterations=3, num_eval_tasks=5, tasks_per_iteration=2))
    assert set(heldout_env_seeds(0, 5)) <= seeds
    assert {s for it in range(3) for s in training_env_seeds(0, it, 0, 2)} <= seeds


@pytest.mark.slow
def test_short_answer_stage_on_the_banks_a_fixed_manager_wrote(ray_session, tmp_path):
    iterations, banks = 2, tmp_path / "banks"
    seeds = answer_stage_seeds(iterations, 6, 2)
    # The torch engine: what it writes is the point here, vLLM serving the same calls is tests/engines'.
    memory_r1.write_banks(MANAGER_WARM_START, seeds, banks, 64, memory_r1.env_config("manager"), engine="torch")
    assert sorted(p.name for p in banks.iterdir()) == sorted(f"memory-r1-{s}.json" for s in seeds)
    assert all(json.loads((banks / f"memory-r1-{s}.json").read_text())["banks"] for s in seeds)
    # The writer's output went to its log, beside the banks; a manager that is no checkpoint fails before it starts.
    assert (tmp_path / "banks.log").is_file()
    with pytest.raises(FileNotFoundError, match=r"the manager '.*no-manager' is not a Hugging Face checkpoint"):
        memory_r1.write_banks(tmp_path / "no-manager", seeds[:1], tmp_path / "bad", 64,
                              memory_r1.env_config("manager"), engine="torch")
    # On the torch engine, the env runner and the learner, all in this process: the stage's env, banks and reward
    # are the point here.
    cfg = (use_engine(memory_r1._cpu(memory_r1.GRPOConfig(), ANSWER_WARM_START,
                                     memory_r1.env_config("answer", banks_dir=str(banks)), 64), "torch")
           .env_runners(num_env_runners=0, num_engines=0, num_envs_per_env_runner=8)
           .learners(num_learners=0)
           .training(tasks_per_iteration=2, group_size=4)
           .evaluation(evaluation_num_tasks=6))
    summary = train(cfg, iterations=iterations, out=tmp_path / "run")
    assert summary["eval_before"]["num_tasks"] == 6 and summary["eval_before"]["num_failed"] == 0
    assert summary["counters"]["trajectories_sampled"] == iterations * 2 * 4
