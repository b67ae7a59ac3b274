"""Held-out scoring of the tuned examples: the reward, or one env figure of each trajectory."""

import argparse
import json
import re
import shutil

import pytest

from memrl.algorithms import DAPOConfig, PPOConfig
from memrl.episode import Trajectory
from memrl.experiment import (
    budget_table,
    heldout_summary,
    score,
    size_for_gpus,
    trained_policy,
    training_budget,
    use_engine,
)
from memrl_tuned_examples.tasks.search import warm_start


def _trajectory(reward: float, r_acc: float, failure: str | None = None) -> Trajectory:
    return Trajectory([], reward=reward, metrics={"r_acc": r_acc}, failure=failure)


def test_an_env_figure_is_scored_with_its_interval_next_to_the_reward():
    trajectories = [_trajectory(2.0, 1.0), _trajectory(1.0, 0.0), _trajectory(1.5, 0.5), _trajectory(9.0, 1.0, "x")]
    summary = heldout_summary(trajectories, "r_acc")
    assert summary["r_acc_mean"] == pytest.approx(0.5) and summary["reward_mean"] == pytest.approx(1.5)
    assert summary["r_acc_ci_low"] < 0.5 < summary["r_acc_ci_high"] and summary["num_failed"] == 1
    assert "r_acc_ci_low" not in heldout_summary(trajectories, None)
    assert score(trajectories[0], None) == 2.0 and score(trajectories[0], "r_acc") == 1.0
    with pytest.raises(KeyError, match="'tool_success' is not among"):
        score(trajectories[0], "tool_success")


def test_trained_policy_is_the_given_path_or_a_written_default(tmp_path):
    p = argparse.ArgumentParser()
    written = tmp_path / "model"
    assert trained_policy(p, None, written) is None  # nothing trained yet: evaluate the rest
    written.mkdir()
    (written / "config.json").write_text("{}")
    assert trained_policy(p, None, written) == written
    with pytest.raises(SystemExit):  # a given path without a checkpoint is an error, not a silent skip
        trained_policy(p, tmp_path / "missing", written)


def test_policy_arg_reads_name_checkpoint_and_workflow():
    from pathlib import Path

    from memrl.experiment import policy_arg

    assert policy_arg("RL=runs/x:y/model:mem1") == ("RL", Path("runs/x:y/model"), "mem1")
    for bad in ("RL", "RL=runs/model", "=runs/model:mem1"):
        with pytest.raises(argparse.ArgumentTypeError, match="NAME=CHECKPOINT:WORKFLOW"):
            policy_arg(bad)
    with pytest.raises(argparse.ArgumentTypeError, match="is not one of"):
        policy_arg("RL=runs/model:mem1", workflows=("react",))


@pytest.mark.parametrize("num_gpus, learners, engines, share, backend", [
    (1, 1, 1, 0.5, "gloo"), (2, 1, 1, 1, "nccl"), (16, 8, 8, 1, "nccl")])
def test_gpu_presets_split_the_gpus_and_share_a_single_one(num_gpus, learners, engines, share, backend):
    cfg = size_for_gpus(DAPOConfig().learners(model_path="/ckpt"), num_gpus)
    learn, run = cfg.learners_cfg, cfg.env_runners_cfg
    assert (learn.num_learners, learn.num_gpus_per_learner) == (learners, share)
    assert (run.num_engines, run.num_gpus_per_engine, run.engine) == (engines, share, "vllm")
    assert cfg.resources()[0]["GPU"] == num_gpus
    assert cfg.weight_sync_backend() == backend
    with pytest.raises(ValueError, match="num_gpus must be >= 1"):
        size_for_gpus(cfg, 0)


@pytest.mark.parametrize("num_gpus", [1, 2, 3, 4, 5, 8, 16, 32, 64])
def test_a_ppo_preset_asks_for_the_gpus_it_is_given(num_gpus):
    cfg = size_for_gpus(PPOConfig().learners(model_path="/ckpt"), num_gpus)
    assert cfg.resources()[0]["GPU"] == pytest.approx(num_gpus)
    learn, run = cfg.learners_cfg, cfg.env_runners_cfg
    # As many critic learners as policy learners, each a GPU (or half of one, beside its policy learner).
    assert learn.num_learners * learn.num_gpus_per_learner * 2 + run.num_engines * run.num_gpus_per_engine == (
        pytest.approx(num_gpus))
    assert learn.gradient_checkpointing and run.num_engines >= 1


def test_a_gpu_preset_can_be_served_by_the_torch_engine():
    def preset():
        return size_for_gpus(DAPOConfig(), 2).env_runners(
            engine_config={"kv_cache_bytes": 1 << 30, "dtype": "bfloat16", "max_model_len": 8192})

    torch_cfg = use_engine(preset(), "torch")
    assert torch_cfg.env_runners_cfg.engine == "torch"
    assert torch_cfg.env_runners_cfg.engine_config == {"dtype": "bfloat16", "max_model_len": 8192}
    assert use_engine(preset(), "vllm").env_runners_cfg.engine_config["kv_cache_bytes"] == 1 << 30


def test_training_budget_reads_sft_stages_and_rl_runs(tmp_path):
    # A shipped warm-start carries every stage it was built in, each with its wall time.
    base = warm_start("react")
    stage = json.loads((base / "sft_summary.json").read_text())
    minutes = f"{stage['wall_s'] / 60:.0f} min"
    assert training_budget(base) == f"SFT 400 steps x 32 rows, {minutes}"
    # Stages that decayed the rate say so.
    assert re.fullmatch(r"SFT 400\+800\+1800 steps x 32 rows, lr constant\+constant\+linear, \d+ min",
                        training_budget(warm_start("mem1", multi=True)))
    run = tmp_path / "run"
    (run / "model").mkdir(parents=True)
    summary = {"init": str(base), "reward_per_iteration": [0.1, 0.2, 0.3], "counters": {"trajectories_trained": 192},
               "wall_s": 600.0}
    (run / "summary.json").write_text(json.dumps(summary))
    shutil.copy(base / "sft_summary.json", run / "model")  # a saved policy keeps its warm-start's files
    rl = f"SFT 400 steps x 32 rows, {minutes}, then RL 3 iterations, 192 trajectories trained, 10 min"
    assert training_budget(run / "model") == rl
    assert training_budget(tmp_path) == "not recorded"
    table = budget_table([("RL", run / "model"), ("other", tmp_path)])
    assert table.splitlines()[2:] == [f"| RL | {rl} |", "| other | not recorded |"]


def test_write_table_writes_the_json_the_table_and_the_plot(tmp_path):
    from memrl.experiment import write_table

    write_table(tmp_path / "out", "t", {"rows": [1]}, "| a |\n", lambda p: p.write_bytes(b"png"))
    assert json.loads((tmp_path / "out" / "t.json").read_text()) == {"rows": [1]}
    assert (tmp_path / "out" / "t.md").read_text() == "| a |\n" and (tmp_path / "out" / "t.png").read_bytes() == b"png"


def test_seed_flag_sets_the_runs_seed_and_its_own_run_directory(monkeypatch):
    import memrl.experiment as experiment

    runs = []
    monkeypatch.setattr(experiment, "init_ray", lambda num_gpus: None)
    monkeypatch.setattr(experiment, "train", lambda cfg, iterations, out, metric=None: runs.append(
        (cfg.debugging_cfg.seed, str(out))))
    for argv in ([], ["--seed", "3"], ["--seed", "3", "--out", "elsewhere"]):
        p = experiment.parser("an example")
        config = DAPOConfig().debugging(seed=0)
        experiment.run_example(p, p.parse_args(argv), "an_example", lambda: config, lambda: config, 1)
    assert runs == [
        (0, "runs/an_example"), (3, "runs/an_example_seed3"), (3, "elsewhere")]
