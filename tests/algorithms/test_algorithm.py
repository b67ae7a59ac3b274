"""End-to-end iterations of DAPO on the Echo toy env: the torch engine, DeepSpeed ZeRO-3 learners (two ranks where the
test is about ranks), gloo sync."""

import math
from pathlib import Path

import numpy as np
import pytest
import ray

from memrl import checkpoints
from memrl.algorithms import DAPOConfig
from memrl.engines.local import LocalEngine

pytestmark = pytest.mark.slow


def _config(checkpoint, num_learners: int = 2) -> DAPOConfig:
    """Echo on 2 env runners over one engine; 2 learners where ranks matter to the test (a rank left behind in a
    collective, ZeRO-3 partitions checkpointed and restored, weights gathered for the sync), 1 where a learner actor
    dies, stalls or is placed, else 0 (in this process: learner actors are not the point)."""
    return (DAPOConfig()
            .environment("memrl/Echo-v0", env_config={"num_turns": 2, "reward": "similarity"})
            .env_runners(num_env_runners=2, num_envs_per_env_runner=4, engine="torch", max_tokens=6)
            .learners(model_path=str(checkpoint), num_learners=num_learners, token_budget=256)
            .training(lr=1e-3, tasks_per_iteration=3, group_size=4, dynamic_sampling=False)
            .evaluation(evaluation_num_tasks=4, evaluation_num_envs_per_env_runner=2)
            .debugging(seed=3))


def _initial_logprobs(checkpoint, prompt: list[int], continuation: list[int]) -> np.ndarray:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32)
    with torch.no_grad():
        logits = model(torch.tensor([prompt + continuation])).logits[0, len(prompt) - 1 : -1]
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(continuation)[:, None])[:, 0].numpy()


def _figures(result: dict) -> dict[str, float]:
    """What must match between a resumed and an uninterrupted run."""
    keys = [("env_runners", "reward_mean"), ("env_runners", "new_tokens"), ("env_runners", "response_tokens_mean"),
            ("learners", "loss"), ("learners", "pg_loss"), ("learners", "grad_norm"), ("learners", "tokens"),
            ("weight_sync", "version")]
    return {f"{a}/{b}": result[a][b] for a, b in keys}


def test_iterations_checkpoint_kill_resume(ray_session, tiny_checkpoint, tmp_path, killed_commit):
    # Three iterations, with a checkpoint after the second. (vLLM's side of the weight sync is held to the sender's
    # model in tests/engines/test_vllm_engine.py, and the tuned examples' tests train through it.)
    algo = _config(tiny_checkpoint).build()
    algo.evaluate()  # held-out generation before training counts into no iteration's timers, nor changes its figures
    straight = [algo.train() for _ in range(2)]
    path = algo.save_to_path(tmp_path / "ckpt")
    # A second save is killed between its renames: nothing is left at the path, the first checkpoint sits aside.
    staged = checkpoints.staging_dir(Path(path))
    algo.save_checkpoint(str(staged))
    killed_commit(staged, path, at=2)
    assert not Path(path).exists()
    straight.append(algo.train())
    # After the syncs, the engine scores a fixed prompt + continuation exactly as the trained ZeRO-3 model does.
    prompt, continuation = [1, 87, 85, 261, 201, 74, 75, 2, 201, 1], [342, 85, 75, 308, 322, 86, 2]
    row = {"prompt_ids": np.array(prompt), "response_ids": np.array(continuation)}
    (learner_lp,), _ = algo.learner_group.compute_logprobs([row])
    engine_lp = ray.get(algo.engines[0].score.remote(prompt, continuation))
    np.testing.assert_allclose(engine_lp, learner_lp, atol=1e-5, rtol=0)
    initial = _initial_logprobs(tiny_checkpoint, prompt, continuation)
    assert np.abs(initial - learner_lp).max() > 1e-4  # training moved the weights the engine now holds
    # Then every actor is killed, as when the job dies.
    for actor in [*algo.engines, *algo.learner_group.learners, *algo.env_runner_group.runners]:
        ray.kill(actor)
    algo.learner_group.shutdown()  # frees its placement group, as Ray does when a killed job's driver dies

    first = straight[0]
    assert 0 < first["timers"]["generate_s"] < first["timers"]["sample_s"]
    assert 0 < first["timers"]["outside_model_fraction"] < 1
    for section in ("env_runners", "learners", "timers", "throughput", "weight_sync", "counters"):
        assert section in first, section
    assert first["env_runners"]["num_trajectories"] == 12
    assert first["counters"]["trajectories_trained"] == 12
    assert first["counters"]["conversations_trained"] == 24  # 2 conversations per trajectory
    assert first["weight_sync"]["version"] == 1 and first["weight_sync"]["bytes"] > 0
    assert first["weight_sync"]["version_lag"] == 0
    assert first["learners"]["tokens"] == first["env_runners"]["new_tokens"]  # every sampled token is trained on
    assert math.isfinite(first["learners"]["loss"]) and first["learners"]["grad_norm"] > 0
    assert {"clip_frac", "entropy", "ratio_mean"} <= set(first["learners"])
    assert first["training_iteration"] == 1

    # A new algorithm restores the checkpoint and does the third iteration exactly as the uninterrupted run did
    # (saving it changed nothing either).
    algo = _config(tiny_checkpoint).build()
    algo.restore_from_path(path)
    resumed = algo.train()
    assert resumed["training_iteration"] == 3
    assert resumed["counters"] == straight[2]["counters"]  # the runners' counters come back with the checkpoint
    g, w = _figures(resumed), _figures(straight[2])
    assert g.keys() == w.keys()
    for k in g:
        assert g[k] == pytest.approx(w[k], rel=1e-5, abs=1e-6), k
    evaluation = algo.evaluate()
    assert evaluation["num_tasks"] == 4
    assert algo._eval_group.spec.num_envs == 2 and algo.env_runner_group.spec.num_envs == 4
    assert evaluation["reward_ci_low"] <= evaluation["reward_mean"] <= evaluation["reward_ci_high"]
    # Other env settings for one evaluation: the same evaluation runners take them, then go back.
    runners = [r._actor_id for r in algo._eval_group.runners]
    assert [len(t.conversations) for t in algo.heldout_trajectories(env_config={"num_turns": 1})] == [1] * 4
    assert algo.evaluate() == evaluation and [r._actor_id for r in algo._eval_group.runners] == runners
    # evaluation_num_env_runners=0 runs the held-out episodes in this process, laid out as the runner actors were:
    # the same replies, token for token.
    on_actors = algo.heldout_trajectories()
    algo._eval_group.shutdown()
    algo.cfg.evaluation_cfg.evaluation_num_env_runners = 0
    algo._eval_group = None
    here = algo.heldout_trajectories()
    assert algo._eval_group.local and len(algo._eval_group.runners) == 2
    assert [t.traj_id for t in here] == [t.traj_id for t in on_actors]
    assert [[c.response_ids.tolist() for c in t.conversations] for t in here] == \
        [[c.response_ids.tolist() for c in t.conversations] for t in on_actors]
    assert [t.reward for t in here] == [t.reward for t in on_actors]
    algo.stop()


def test_no_episode_lost_when_a_runner_dies_mid_iteration(ray_session, tiny_checkpoint):
    import threading
    import time

    config = _config(tiny_checkpoint, num_learners=1).environment(
        env_config={"num_turns": 2, "reward": "similarity", "step_delay_s": 0.3})
    algo = config.build()
    out = {}
    thread = threading.Thread(target=lambda: out.update(result=algo.train()))
    thread.start()
    time.sleep(0.5)  # both runners are inside their first trajectories' steps
    ray.kill(algo.env_runner_group.runners[0], no_restart=False)
    thread.join(timeout=300)
    counters = out["result"]["counters"]
    assert counters["runner_failures"] == 1 and counters["resubmitted"] > 0
    assert counters["tasks_submitted"] == counters["trajectories_returned"] == 12
    assert counters["trajectories_sampled"] == counters["trajectories_trained"] == 12
    assert counters["conversations_trained"] == 24
    assert out["result"]["learners"]["rows"] == 24

    # A learner dies, and this run keeps no periodic checkpoints: it stops at once, naming the learner and what to set.
    from memrl.learner.learner_group import LearnerFailed

    ray.kill(algo.learner_group.learners[0], no_restart=True)
    start = time.monotonic()
    with pytest.raises(LearnerFailed, match=r"learner 0 died during .*no periodic checkpoint to recover from \(set "
                                            r"fault_tolerance.checkpoint_frequency and checkpoint_dir\)"):
        algo.train()
    assert time.monotonic() - start < 60
    algo.stop()


@pytest.mark.parametrize("num_env_runners", [2, 0])
def test_failed_episodes_are_counted_and_neither_trained_on_nor_scored(ray_session, tiny_checkpoint, num_env_runners):
    # The learner in this process (num_learners=0); with runners here, the engine too (num_engines=0).
    config = _config(tiny_checkpoint, num_learners=0).environment(
        env_config={"num_turns": 2, "reward": "similarity", "failure_rate": 0.4}).env_runners(
        num_env_runners=num_env_runners, num_engines=1 if num_env_runners else 0)
    algo = config.build()
    assert algo.env_runner_group.local == (num_env_runners == 0)
    assert isinstance(algo.engines[0], LocalEngine) == (num_env_runners == 0)
    result = algo.train()
    counters = result["counters"]
    failed = counters["trajectories_failed"]
    assert 0 < failed < 12 and counters["episodes_failed"] == failed == result["env_runners"]["num_failed"]
    assert counters["trajectories_sampled"] == 12 and counters["trajectories_trained"] == 12 - failed
    assert result["learners"]["rows"] == 2 * (12 - failed)  # two calls per finished episode, none of a failed one
    # The broadcast reached the engine, wherever it runs: it scores a reply as the trained learner does.
    prompt, continuation = [1, 87, 85, 261, 201, 74, 75, 2, 201, 1], [342, 85, 75, 308, 322, 86, 2]
    (learner_lp,), _ = algo.learner_group.compute_logprobs([{"prompt_ids": np.array(prompt),
                                                             "response_ids": np.array(continuation)}])
    np.testing.assert_allclose(ray.get(algo.engines[0].score.remote(prompt, continuation)), learner_lp, atol=1e-5,
                               rtol=0)
    assert np.abs(_initial_logprobs(tiny_checkpoint, prompt, continuation) - learner_lp).max() > 1e-4
    trajectories = algo.heldout_trajectories(16)
    evaluation = algo.evaluate(16)
    scored = [t.reward for t in trajectories if not t.failure]
    assert evaluation["num_failed"] == 16 - len(scored) > 0 and evaluation["num_tasks"] == len(scored)
    assert evaluation["reward_mean"] == pytest.approx(np.mean(scored))
    if num_env_runners == 0:
        # The env's service goes down for good: every episode fails. One such iteration is ridden out (the limit is
        # 2 here), the second in a row stops the run naming the failure, with nothing trained meanwhile.
        from memrl.algorithms.algorithm import AllEpisodesFailed

        temperature = config.env_runners_cfg.sampling.temperature
        algo.env_runner_group.configure(algo._runner_spec({"failure_rate": 1.0}, temperature))
        algo.cfg.fault_tolerance_cfg.failed_iterations_to_stop = 2
        trained = algo.counters["trajectories_trained"]
        assert algo.train()["counters"]["trajectories_trained"] == trained
        with pytest.raises(AllEpisodesFailed, match=r"every one of the 12 episodes of iteration 3 failed \(2 "
                                                    r"iterations in a row\), so nothing was trained; the first "
                                                    r"failure: .*failed_iterations_to_stop"):
            algo.train()
        assert algo.counters["trajectories_trained"] == trained
    algo.stop()


def test_dynamic_sampling_refills_then_skips_an_all_equal_batch(ray_session, tiny_checkpoint, tmp_path, monkeypatch):
    # With the exact-match reward an untrained model scores 0 everywhere: every group has zero variance.
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    config = (_config(tiny_checkpoint, num_learners=0)  # sampling rounds, not where they run, are the point
              .environment(env_config={"num_turns": 1, "reward": "exact"})
              .env_runners(num_env_runners=0, num_engines=0)
              .training(dynamic_sampling=True, dynamic_sampling_max_rounds=2)
              .debugging(wandb_project="memrl-test"))
    algo = config.build()
    result = algo.train()
    counters = result["counters"]
    assert counters["trajectories_sampled"] == 2 * 12  # two rounds of 3 groups x 4
    assert counters["groups_dropped"] == 6
    assert counters["trajectories_trained"] == 0
    assert result["learners"] == {}
    algo.stop()
    runs = list((tmp_path / "wandb").glob("offline-run-*"))  # no key: metrics were logged offline
    assert len(runs) == 1 and any(runs[0].glob("*.wandb"))


def test_minibatches_take_one_optimizer_step_each_and_train_every_row_once(ray_session, tiny_checkpoint, tmp_path,
                                                                          monkeypatch):
    # WANDB_MODE=disabled turns a configured wandb project off: nothing is written.
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_MODE", "disabled")
    # Under continuous batching: the engine serves both runners' requests from one running batch.
    algo = (_config(tiny_checkpoint, num_learners=0).training(num_minibatches=2)
            .env_runners(continuous_batching=True).debugging(wandb_project="memrl-test").build())
    result = algo.train()
    assert ray.get(algo.engines[0].max_requests_in_flight.remote(), timeout=60) > 1  # calls shared a step
    assert algo._wandb is None and not (tmp_path / "wandb").exists()
    learners = result["learners"]
    assert learners["optimizer_steps"] == 2
    assert learners["rows"] == result["counters"]["conversations_trained"] == 24
    assert learners["tokens"] == result["env_runners"]["new_tokens"]
    # The learners' seconds of both steps, summed: within the iteration's time for learning.
    assert 0 < learners["step_s"] <= result["timers"]["learn_s"]
    algo.stop()


def _slow_steps(checkpoint) -> DAPOConfig:
    """Echo steps of 0.1 s: a runner steps its envs one after another, so sampling an iteration's 12 episodes of 2
    steps takes at least 1.2 s, and a fault injected half a second into an iteration lands while episodes are
    running. One learner: a second rank left waiting in a collective when the first fails, and the group started
    anew around it, is test_a_periodic_save_without_room_fails_at_once_naming_the_disk's to show."""
    return _config(checkpoint, num_learners=1).environment(
        env_config={"num_turns": 2, "reward": "similarity", "step_delay_s": 0.1})


@pytest.fixture(scope="module")
def straight_slow_steps(ray_session, tiny_checkpoint) -> list[dict]:
    """Eight iterations of _slow_steps without a fault: what every recovered run must reproduce. Its learner runs in
    this process (num_learners=0), which trains as a learner actor does."""
    algo = _slow_steps(tiny_checkpoint).learners(num_learners=0).build()
    try:
        return [algo.train() for _ in range(8)]
    finally:
        algo.stop()


def test_engines_and_learners_that_die_or_stall_are_replaced_and_the_run_goes_on_as_if_they_had_not(
        ray_session, tiny_checkpoint, tmp_path, straight_slow_steps):
    import os
    import signal
    import threading
    import time

    (tmp_path / "periodic" / "iteration_000003").mkdir(parents=True)  # another run's: not this run's to use or remove
    algo = _slow_steps(tiny_checkpoint).fault_tolerance(
        checkpoint_frequency=2, checkpoint_dir=str(tmp_path / "periodic"), keep_checkpoints=1,
        learner_timeout_s=12, engine_call_timeout_s=5, max_actor_failures=5).build()

    def during_next_iteration(fault) -> dict:
        out = {}
        thread = threading.Thread(target=lambda: out.update(result=algo.train()))
        thread.start()
        time.sleep(0.5)  # sampling: the runners are inside their first trajectories' steps, the learners idle
        fault()
        thread.join(timeout=600)
        return out["result"]

    # Iterations 1-3, the engine: it dies while the runners sample, then stalls (given up after the 5 s call
    # deadline, twice at most), then dies while the learners train (found dead after the step, replaced before the
    # broadcast). Each time it is replaced, and a failed round is sampled again.
    results = [during_next_iteration(lambda: ray.kill(algo.engines[0], no_restart=True))]
    pid = ray.get(algo.engines[0].__ray_call__.remote(lambda self: os.getpid()))
    start = time.monotonic()
    results.append(during_next_iteration(lambda: os.kill(pid, signal.SIGSTOP)))
    assert time.monotonic() - start < 120  # two 5 s deadlines and a new engine, not the default 600 s deadline
    learn = algo._learn

    def engine_dies_while_the_learners_train(kept):
        algo._learn = learn
        ray.kill(algo.engines[0], no_restart=True)
        return learn(kept)

    algo._learn = engine_dies_while_the_learners_train
    results.append(algo.train())  # a checkpoint after iteration 2, then the third
    assert [r["counters"]["engine_restarts"] for r in results] == [1, 2, 3]
    assert [r["counters"]["failed_rounds"] for r in results] == [1, 2, 2]
    assert results[2]["counters"]["learner_restarts"] == 0  # nothing rolled back: the step was taken once
    assert sorted(p.name for p in (tmp_path / "periodic").iterdir()) == ["iteration_000002", "iteration_000003"]

    # Iteration 4, the learner dies while the runners sample: the next learner call finds it dead.
    results.append(during_next_iteration(lambda: ray.kill(algo.learner_group.learners[0], no_restart=True)))
    # Iteration 3 was run again from the checkpoint of 2, then iteration 4.
    assert results[3]["training_iteration"] == 4 and results[3]["counters"]["learner_restarts"] == 1
    assert sorted(p.name for p in (tmp_path / "periodic").iterdir()) == ["iteration_000003", "iteration_000004"]

    # An engine dies as the weights of iteration 5 are broadcast: the learner's broadcast group breaks with it, so
    # both are started anew and iteration 5 is run again from the checkpoint of 4.
    sync = algo.sync_weights

    def engine_dies_first():
        algo.sync_weights = sync
        ray.kill(algo.engines[0], no_restart=True)
        return sync()

    algo.sync_weights = engine_dies_first
    results.append(algo.train())
    assert results[4]["counters"]["learner_restarts"] == 2 and results[4]["counters"]["engine_restarts"] == 4

    # The learner stalls in iteration 6: past learner_timeout_s it is started anew from the checkpoint of 4,
    # iteration 5 is replayed and 6 run again.
    pid = ray.get(algo.learner_group.learners[0].__ray_call__.remote(lambda self: os.getpid()))
    out = {}
    thread = threading.Thread(target=lambda: out.update(result=algo.train()))
    thread.start()
    time.sleep(0.5)
    os.kill(pid, signal.SIGSTOP)
    thread.join(timeout=600)
    results.append(out["result"])
    assert results[5]["counters"]["learner_restarts"] == 3

    # Iteration 7 fails after its learner step: the next call does not train on its batch again on top of that
    # step, but starts the learner anew from the checkpoint of 6 and runs iteration 7 once.
    sync = algo.sync_weights

    def fails_after_the_step():
        algo.sync_weights = sync
        raise RuntimeError("the broadcast could not start")

    algo.sync_weights = fails_after_the_step
    with pytest.raises(RuntimeError, match="the broadcast could not start"):
        algo.train()
    results.append(algo.train())
    assert results[6]["training_iteration"] == 7 and results[6]["counters"]["learner_restarts"] == 4

    # The learner dies as the periodic save after iteration 8 starts: it starts anew from the checkpoint of 6,
    # iterations 7 and 8 are run again, the save is made, and the dead save leaves nothing behind.
    group = algo.learner_group
    save = group.save_checkpoint

    def learner_dies_as_the_save_starts(*args, **kwargs):
        group.save_checkpoint = save
        ray.kill(group.learners[0], no_restart=True)
        return save(*args, **kwargs)

    group.save_checkpoint = learner_dies_as_the_save_starts
    results.append(algo.train())
    assert results[7]["training_iteration"] == 8 and algo.learner_group is not group
    assert algo.counters["learner_restarts"] == 5
    assert sorted(p.name for p in (tmp_path / "periodic").iterdir()) == ["iteration_000003", "iteration_000008"]
    assert len(results) == len(straight_slow_steps)
    # The two failed rounds sampled their 12 tasks again; the learners' recoveries, from checkpoints that carry the
    # runners' counters, submitted none twice.
    extra = [12, 24, 24, 24, 24, 24, 24, 24]
    for got, want, more in zip(results, straight_slow_steps, extra, strict=True):
        assert got["counters"]["trajectories_trained"] == want["counters"]["trajectories_trained"]
        assert got["counters"]["tasks_submitted"] == want["counters"]["tasks_submitted"] + more
        g, w = _figures(got), _figures(want)
        for k in g:
            assert g[k] == pytest.approx(w[k], rel=1e-5, abs=1e-6), k
    algo.stop()


def test_a_periodic_save_without_room_fails_at_once_naming_the_disk(ray_session, tiny_checkpoint, tmp_path,
                                                                    monkeypatch):
    import shutil
    import time

    from memrl.checkpoints import CheckpointError

    # Two learner ranks (one left in DeepSpeed's barrier is the point); the runner and the engine in this process.
    algo = _config(tiny_checkpoint).env_runners(num_env_runners=0, num_engines=0).fault_tolerance(
        checkpoint_frequency=1, checkpoint_dir=str(tmp_path / "periodic"), keep_checkpoints=2,
        learner_timeout_s=300).build()
    algo.train()  # the first save: its size is what the next one needs
    size = sum(p.stat().st_size for p in (tmp_path / "periodic" / "iteration_000001").rglob("*") if p.is_file())
    real = shutil.disk_usage
    monkeypatch.setattr(shutil, "disk_usage", lambda p: real(p)._replace(free=size // 2))
    start = time.monotonic()
    with pytest.raises(CheckpointError, match=rf"not enough disk for the checkpoint at .*iteration_000002: it needs "
                                              rf"about {size:,} bytes .* has {size // 2:,} free"):
        algo.train()
    assert time.monotonic() - start < 30  # no save began: no rank waits in a barrier
    monkeypatch.setattr(shutil, "disk_usage", real)
    assert algo.train()["training_iteration"] == 3  # the learners are fine: the run goes on and saves again
    assert sorted(p.name for p in (tmp_path / "periodic").iterdir()) == ["iteration_000001", "iteration_000003"]

    # The disk fills up in the middle of the save after iteration 4: learner 0's model file goes to /dev/full, whose
    # every write fails with ENOSPC, while learner 1 writes its part and waits for it in DeepSpeed's barrier.
    def model_file_meets_a_full_disk(learner):
        real = learner.engine.checkpoint_engine.save

        def save(state_dict, path):
            return real(state_dict, "/dev/full" if "model_states" in str(path) else path)

        learner.engine.checkpoint_engine.save = save

    ray.get(algo.learner_group.learners[0].__ray_call__.remote(model_file_meets_a_full_disk))
    with pytest.raises(CheckpointError, match=r"(?s)learner 0 could not write its part of the checkpoint at "
                                              r".*iteration_000004.*; .* has [\d,]+ bytes free\. The learner group "
                                              r"is stopped.*; the last periodic checkpoint took [\d,]+ bytes"):
        algo.train()
    assert sorted(p.name for p in (tmp_path / "periodic").iterdir()) == ["iteration_000001", "iteration_000003"]
    # No rank is left in the barrier (the next call would wait out learner_timeout_s behind it): the learners start
    # anew from the checkpoint of 3, iteration 4 is run again, and the run goes on.
    start = time.monotonic()
    result = algo.train()
    assert time.monotonic() - start < 150
    assert result["training_iteration"] == 5 and result["counters"]["learner_restarts"] == 1
    assert sorted(p.name for p in (tmp_path / "periodic").iterdir()) == ["iteration_000003", "iteration_000005"]
    algo.stop()


def test_tune_trials_hold_their_learners_and_engines_in_their_placement_groups(ray_session, tiny_checkpoint, tmp_path,
                                                                              actor_gone):
    from ray import tune

    from memrl.algorithms import DAPO

    class PlacedDAPO(DAPO):
        """DAPO that reports which placement group holds the trial and each of its actors."""

        def step(self):
            def group_of(actor):
                return ray.get(actor.__ray_call__.remote(
                    lambda self: ray.util.get_current_placement_group().id.hex()), timeout=60)

            result = super().step()
            judge = self.services["judge"]
            result["placement"] = {"trial": ray.util.get_current_placement_group().id.hex(),
                                   "learners": [group_of(a) for a in self.learner_group.learners],
                                   "engines": [group_of(e) for e in self.engines], "services": [group_of(judge)],
                                   "judge": ray.get(judge.__ray_call__.remote(
                                       lambda self: ray.get_runtime_context().get_actor_name()), timeout=60)}
            return result

    # Any actor class serves as the side service here, where its placement and name are the point (a ChatActor
    # judge answering a run's envs: tests/test_services.py).
    judge = {"actor_class": "collections:Counter", "num_cpus": 0.5}
    # Runners in each trial's own process: the actors placed are its learner, its engine and its service.
    config = (_config(tiny_checkpoint, num_learners=1).services(actors={"judge": judge})
              .env_runners(num_env_runners=0).training(lr=tune.grid_search([1e-4, 1e-3])))
    bundles = DAPO.default_resource_request(config.to_dict()).bundles
    # The algorithm, its learner, its engine and its side service.
    assert bundles == [{"CPU": 1.0}, {"CPU": 1.0}, {"CPU": 1.0}, {"CPU": 0.5}]
    tuner = tune.Tuner(PlacedDAPO, param_space=config,
                       run_config=tune.RunConfig(storage_path=str(tmp_path), stop={"training_iteration": 1},
                                                 verbose=0))
    grid = tuner.fit()
    assert not grid.errors and len(grid) == 2
    placements = [r.metrics["placement"] for r in grid]
    for placed in placements:
        assert placed["learners"] == placed["engines"] == placed["services"] == [placed["trial"]]
    assert placements[0]["trial"] != placements[1]["trial"]
    # Each trial serves its own judge, under a name of its own; both are stopped with their trials.
    names = sorted(placed["judge"] for placed in placements)
    assert names[0] != names[1] and all(name.startswith("judge.") for name in names)
    assert all(actor_gone(name) for name in names)
