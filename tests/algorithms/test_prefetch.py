"""Asynchronous training (training.max_staleness): batches sampled one iteration ahead on the real stack (torch
engines, a DeepSpeed ZeRO-3 learner, gloo sync), their version accounting, off-policy correction and exact resume."""


import threading

import gymnasium as gym
import pytest
import ray

from memrl.algorithms import DAPOConfig
from memrl.algorithms.prefetch import load_batches
from memrl.algorithms.trainer import FAILURE_COUNTERS
from memrl_envs.echo import EchoEnv

pytestmark = pytest.mark.slow

TRAJECTORIES = 12  # 3 groups x 4 per iteration
ACROSS_BROADCASTS = "memrl_test/EchoAcrossBroadcasts-v0"


def _config(checkpoint, max_staleness: int = 1, env_config: dict | None = None,
            env: str = "memrl/Echo-v0") -> DAPOConfig:
    """Runners, the engine and the learner in the driver's process: sampling ahead runs on a thread of the driver
    while the learner trains on its own, and each broadcast reaches the engine there."""
    return (DAPOConfig()
            .environment(env, env_config=env_config or {"num_turns": 2, "reward": "similarity"})
            .env_runners(num_env_runners=0, num_engines=0, num_envs_per_env_runner=4, engine="torch", max_tokens=6)
            .learners(model_path=str(checkpoint), num_learners=0, token_budget=256)
            .training(lr=1e-3, tasks_per_iteration=3, group_size=4, max_staleness=max_staleness,
                      use_rollout_logprobs=False, off_policy_correction="tis", importance_cap=2.0)
            .debugging(seed=3))


def _figures(result: dict) -> dict[str, float]:
    keys = [("env_runners", "reward_mean"), ("env_runners", "new_tokens"), ("learners", "loss"),
            ("learners", "grad_norm"), ("learners", "is_weight_mean"), ("off_policy", "is_weight_max"),
            ("weight_sync", "version")]
    return {f"{a}/{b}": result[a][b] for a, b in keys}


def test_one_batch_ahead_counts_versions_corrects_and_resumes_exactly(ray_session, tiny_checkpoint, tmp_path):
    config = _config(tiny_checkpoint).env_runners(num_engines=1)  # an engine actor, which dies below
    algo = config.build()
    straight = [algo.train() for _ in range(2)]
    # A checkpoint after two iterations keeps the batch sampled for the third; the run goes on as if it had not saved.
    path = algo.save_to_path(tmp_path / "ckpt")
    assert list(load_batches(path)) == [2]
    straight += [algo.train(), algo.train()]
    ray.kill(algo.engines[0])  # the runners and the learner live in this process: dropped with it
    algo.learner_group.shutdown()

    for i, result in enumerate(straight, start=1):
        counters = result["counters"]
        # Every sampled trajectory is trained once, or waits in the batch sampled ahead: nothing lost, none twice.
        assert counters["trajectories_sampled"] == (i + 1) * TRAJECTORIES
        assert counters["trajectories_trained"] == i * TRAJECTORIES
        assert counters["trajectories_prefetched"] == TRAJECTORIES
        assert counters["trajectories_stale"] == counters["trajectories_failed"] == 0
        assert counters["trajectories_dropped"] == 0
        assert counters["conversations_trained"] == 2 * i * TRAJECTORIES
        assert result["weight_sync"]["version"] == i
        assert result["learners"]["tokens"] == result["env_runners"]["new_tokens"]
    # The first batch comes from the starting weights, trained at once; later ones from the weights one step behind.
    assert straight[0]["off_policy"]["staleness_0"] == 2 * TRAJECTORIES
    assert straight[0]["weight_sync"]["version_lag"] == 0
    for result in straight[1:]:
        assert result["off_policy"]["staleness_1"] == 2 * TRAJECTORIES and "staleness_0" not in result["off_policy"]
        assert result["weight_sync"]["version_lag"] == 1
        # The learner's weights moved since the batch was sampled: importance weights differ from 1 and are reported.
        assert result["off_policy"]["is_weight_max"] > 1.0
        assert result["learners"]["is_weight_mean"] == pytest.approx(result["off_policy"]["is_weight_mean"], rel=1e-4)
    first = straight[0]["off_policy"]
    assert first["is_weight_mean"] == pytest.approx(1.0, abs=1e-3)  # same weights: engine and learner agree
    assert 0 <= straight[0]["timers"]["outside_model_fraction"] < 1

    # After all of it was gone, the restored run trains the batch sampled ahead and goes on exactly. Its engine
    # dies while the learners train on batch 3 and batch 4 is sampled ahead: the new engine gets the weights batch 4
    # was meant for (learner rank 0's copy), so batch 4 and the run's figures are the uninterrupted ones, not those of
    # weights one step on.
    algo = config.build()
    algo.restore_from_path(path)
    learn = algo._learn

    def engine_dies_while_the_next_batch_is_sampled(kept):
        algo._learn = learn
        ray.kill(algo.engines[0], no_restart=True)
        return learn(kept)

    algo._learn = engine_dies_while_the_next_batch_is_sampled
    resumed = [algo.train(), algo.train()]
    algo.stop()
    # Beside the fault's own counters, only the tasks submitted may differ: a failed round's are submitted again.
    faulty = {*FAILURE_COUNTERS, "tasks_submitted"}
    for got, want in zip(resumed, straight[2:]):
        assert got["counters"]["engine_restarts"] == 1
        assert got["counters"]["tasks_submitted"] >= want["counters"]["tasks_submitted"]
        kept = {k: v for k, v in got["counters"].items() if k not in faulty}
        assert kept == {k: v for k, v in want["counters"].items() if k not in faulty}
        g, w = _figures(got), _figures(want)
        for k in g:
            assert g[k] == pytest.approx(w[k], rel=1e-5, abs=1e-6), k

    # A synchronous run restored from it does not train on the batch sampled a version ago: dropped and counted.
    algo = _config(tiny_checkpoint, max_staleness=0).build()
    algo.restore_from_path(path)
    result = algo.train()
    algo.stop()
    counters = result["counters"]
    assert counters["trajectories_stale"] == TRAJECTORIES and result["learners"] == {}
    assert counters["trajectories_trained"] == 2 * TRAJECTORIES and counters["trajectories_prefetched"] == 0
    assert result["off_policy"]["staleness_1"] == 2 * TRAJECTORIES


def _staleness(result: dict) -> list[int]:
    return sorted(int(k.removeprefix("staleness_")) for k in result["off_policy"] if k.startswith("staleness_"))


class _Broadcasts:
    """Orders a run's sampling ahead against its broadcasts, so that a partial-rollouts test sees versions mix every
    time rather than when the machine's timing allows: each sampling thread begins once the learner is training; an
    episode that began before the broadcast waits after its first call until the broadcast has landed, and the
    broadcast waits for such a first call."""

    TIMEOUT_S = 120.0

    def __init__(self, algo):
        self.pending = threading.Event()  # the learner trains; its broadcast has not landed yet
        self.first_call = threading.Event()  # an episode begun while pending has made its first call
        self.landed = threading.Event()
        self.threads: set[threading.Thread] = set()
        learn, sync, sample = algo._learn, algo.sync_weights, algo.env_runner_group.sample

        def learning(kept):
            self.first_call.clear()
            self.landed.clear()
            self.pending.set()
            return learn(kept)

        def sampling(tasks, seed=None):
            thread = threading.current_thread()
            if thread is not threading.main_thread() and thread not in self.threads:
                self.threads.add(thread)  # a new sampling thread's first batch
                self._wait(self.pending, "the learner to begin training")
            return sample(tasks, seed=seed)

        def broadcast():
            self._wait(self.first_call, "an episode sampled ahead to make its first call")
            result = sync()
            self.pending.clear()
            self.landed.set()
            return result

        algo._learn, algo.sync_weights, algo.env_runner_group.sample = learning, broadcast, sampling

    def _wait(self, event: threading.Event, what: str) -> None:
        if not event.wait(self.TIMEOUT_S):
            raise TimeoutError(f"waited {self.TIMEOUT_S:g} s for {what}")


class _EchoAcrossBroadcasts(EchoEnv):
    """Echo whose episodes, when begun while a broadcast is pending, wait after their first call for it to land."""

    broadcasts: _Broadcasts | None = None

    def reset(self, *, seed=None, options=None):
        self._across = self.broadcasts is not None and self.broadcasts.pending.is_set()
        return super().reset(seed=seed, options=options)

    def step(self, action):
        if self._across and self._turn == 0:
            self.broadcasts.first_call.set()
            self.broadcasts._wait(self.broadcasts.landed, "the broadcast to land")
        return super().step(action)


def test_two_batches_ahead_with_partial_rollouts_mix_versions_within_the_bound(ray_session, tiny_checkpoint):
    if ACROSS_BROADCASTS not in gym.registry:
        gym.register(ACROSS_BROADCASTS, entry_point=_EchoAcrossBroadcasts)
    algo = (_config(tiny_checkpoint, max_staleness=2, env_config={"num_turns": 3, "reward": "similarity"},
                    env=ACROSS_BROADCASTS).training(partial_rollouts=True).build())
    _EchoAcrossBroadcasts.broadcasts = _Broadcasts(algo)
    try:
        results = [algo.train() for _ in range(4)]
    finally:
        _EchoAcrossBroadcasts.broadcasts = None
        algo.stop()
    for i, result in enumerate(results, start=1):
        counters = result["counters"]
        assert counters["trajectories_trained"] == i * TRAJECTORIES and counters["trajectories_stale"] == 0
        assert counters["trajectories_prefetched"] == 2 * TRAJECTORIES  # the next two iterations' batches
        assert counters["trajectories_sampled"] == (i + 2) * TRAJECTORIES
    # Batch 0 is sampled before any training. Batches 1 and 2 are sampled while iteration 1 trains, one after the other:
    # the broadcast lands while batch 1 is in flight, so its calls carry versions 0 and 1 (1 and 0 behind the weights
    # that train it in iteration 2), and batch 2 comes wholly from version 1. Batch 3, sampled while iteration 2
    # trains, crosses versions 1 and 2: 2 and 1 behind, within the bound of 2.
    assert [_staleness(r) for r in results] == [[0], [0, 1], [1], [1, 2]], [r["off_policy"] for r in results]


def test_accounting_holds_when_dynamic_sampling_drops_groups_sampled_ahead(ray_session, tiny_checkpoint):
    # Exact-match rewards of an untrained model are all 0: every group is dropped, in the batch sampled ahead too.
    algo = (_config(tiny_checkpoint, env_config={"num_turns": 1, "reward": "exact"})
            .training(dynamic_sampling=True, dynamic_sampling_max_rounds=2).build())
    for i in range(1, 3):
        counters = algo.train()["counters"]
        assert counters["trajectories_sampled"] == (i + 1) * 2 * TRAJECTORIES  # two rounds per batch
        assert counters["trajectories_dropped"] == counters["trajectories_sampled"]
        assert counters["trajectories_trained"] == counters["trajectories_prefetched"] == 0
    algo.stop()


def test_tempered_engines_and_learners_score_the_same_distribution(ray_session, tiny_checkpoint):
    # Sampled at 0.7: the engines return the tempered logprobs and the learners divide their logits by 0.7, so the
    # importance weights between the two are 1 at the same weights, and the rollout logprobs can be the old ones.
    config = _config(tiny_checkpoint, max_staleness=0).env_runners(temperature=0.7).training(tempered_logprobs=True)
    algo = config.build()
    first = algo.train()["off_policy"]
    algo.stop()
    assert first["is_weight_mean"] == pytest.approx(1.0, abs=1e-3)
    assert first["is_weight_max"] < 1.01
    algo = config.training(use_rollout_logprobs=True, off_policy_correction="none").build()
    learners = algo.train()["learners"]
    algo.stop()
    assert learners["ratio_mean"] == pytest.approx(1.0, abs=1e-3) and learners["clip_frac"] == 0.0
