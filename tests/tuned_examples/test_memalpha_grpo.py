"""The Mem-α example for real: the paper preset, the command line's checks, the flat-memory baselines and a short
GRPO run of the CPU default from the shipped warm-start with the shipped frozen answerer."""

import json

import pytest
from transformers import AutoModelForCausalLM

from memrl.experiment import train, use_engine
from memrl_tuned_examples import memalpha_grpo
from memrl_tuned_examples.memalpha_grpo import PAPER, config, paper_config
from memrl_tuned_examples.tasks.memalpha import ANSWERER, WARM_START, WRITERS


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
def test_command_line_refuses_gpu_runs_without_room_for_the_answerer(args, message, monkeypatch, capsys):
    monkeypatch.setattr("sys.argv", ["memalpha_grpo.py", *args])
    with pytest.raises(SystemExit) as exit_:
        memalpha_grpo.main()
    assert exit_.value.code == 2 and message in capsys.readouterr().err


@pytest.mark.slow
def test_short_grpo_run_of_the_cpu_default(ray_session, tmp_path, actor_gone):
    # The algorithm serves the frozen answerer itself (a side service) and stops it at the end.
    assert config(WARM_START).resources()[0]["CPU"] == 4  # two learners, the engine and the answerer
    # On the torch engine, the env runner and the learner, all in this process: the example's env, workflow, reward and
    # evaluation are the point here; vLLM serving training end to end is tests/algorithms/test_algorithm.py's, learner
    # actors and ZeRO-3 over two ranks tests/learner's and tests/algorithms', runner actors tests/rollout's.
    cfg = (use_engine(config(WARM_START), "torch")
           .env_runners(num_env_runners=0, num_engines=0, num_envs_per_env_runner=8)
           .learners(num_learners=0)
           .training(tasks_per_iteration=2, group_size=4)
           .evaluation(evaluation_num_tasks=6))
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
    assert before["num_tasks"] == 6 and before["num_failed"] == 0
    change = summary["change"]  # paired over the same 6 tasks
    assert change["mean"] == pytest.approx(summary["eval_after"]["r_acc_mean"] - before["r_acc_mean"])
    assert AutoModelForCausalLM.from_pretrained(tmp_path / "model") is not None
    assert json.loads((tmp_path / "summary.json").read_text())["wall_s"] > 0


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
