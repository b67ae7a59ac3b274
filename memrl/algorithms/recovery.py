"""How an Algorithm meets failed inference engines: an engine that dies or stalls is replaced, rejoined to the weight
sync with the current weights, and its round run again, which gives the figures an uninterrupted run gets (every
round's randomness follows from (seed, iteration, round)). Failed learners are the Trainer's to recover
(memrl.algorithms.trainer).

`EngineRecovery` is a base class of Algorithm; it uses the algorithm's engines, runner groups and weight sync.
"""

from __future__ import annotations

import logging
from typing import Any

import ray
from ray.exceptions import RayActorError

from memrl.rollout import EngineFailed, EnvRunnerGroup, Task

logger = logging.getLogger(__name__)


class EngineRecovery:
    """Engine replacement for Algorithm."""

    def sample(self, group: EnvRunnerGroup, tasks: list[Task], seed: int) -> tuple[Any, dict[str, float]]:
        """`group.sample(tasks, seed)`. A round an engine fails by dying or stalling is run again, whole, once the
        engine is replaced and holds the current weights: the same tasks and seed give the same trajectories."""
        while True:
            try:
                return group.sample(tasks, seed=seed)
            except EngineFailed as failure:
                self._replace_broken_engines(failure)

    def _broken_engines(self) -> list[int]:
        """Indices of the engines that are dead or do not answer a ping within engine_call_timeout_s."""
        limit = self.cfg.fault_tolerance_cfg.engine_call_timeout_s
        pings = [e.__ray_ready__.remote() for e in self.engines]
        ready, _ = ray.wait(pings, num_returns=len(pings), timeout=limit)
        broken = []
        for i, ping in enumerate(pings):
            try:
                if ping not in ready:
                    raise TimeoutError
                ray.get(ping, timeout=limit)  # done already: raises a death, returns at once otherwise
            except (TimeoutError, RayActorError):
                broken.append(i)
        return broken

    def _replace_broken_engines(self, failure: Exception) -> None:
        """Start new engines in place of the broken ones, rejoin every engine to the weight-sync group and send the
        current weights. Raise `failure` when every engine is fine (the call itself failed: a new engine would fail
        it too) or the engine failure budget is spent."""
        self._replace_engines_for_sync(failure)
        self._broadcast_weights()

    def _replace_engines_for_sync(self, failure: Exception) -> None:
        """Start new engines in place of the broken ones and rejoin the weight-sync group, for the broadcast that comes
        next (a failed prefetched batch). Raise `failure` when every engine is fine."""
        broken = self._broken_engines()
        if not broken:
            raise failure
        self._start_engines(broken, failure)
        self._init_weight_sync()

    def _start_engines(self, broken: list[int], failure: Exception) -> None:
        """Kill engines `broken` and start new ones in their places (counted against the engine failure budget); the
        runner groups sample from the new ones."""
        for i in broken:
            self._engine_budget.spend(f"inference engine {i} failed ({failure})")
            logger.warning("inference engine %d died or stalled (%s); starting a new one", i, failure)
            ray.kill(self.engines[i], no_restart=True)
            self.engines[i] = self._make_engine(i)
        self.counters["engine_restarts"] += len(broken)
        wait_engines_ready([self.engines[i] for i in broken], self.cfg)
        for group in (self.env_runner_group, self._eval_group):
            if group is not None:
                group.set_engines(self.engines)


def wait_engines_ready(engines: list, cfg) -> None:
    """Fail with a clear message when engine actors cannot start (most often: the cluster lacks the CPUs/GPUs)."""
    run, timeout_s = cfg.env_runners_cfg, cfg.fault_tolerance_cfg.actor_start_timeout_s
    ready, _ = ray.wait([a.__ray_ready__.remote() for a in engines], num_returns=len(engines), timeout=timeout_s)
    if len(ready) < len(engines):
        raise RuntimeError(
            f"{len(engines) - len(ready)} of {len(engines)} inference engine actors did not start within "
            f"{timeout_s:g} s (fault_tolerance.actor_start_timeout_s); each needs {run.num_cpus_per_engine} CPU and "
            f"{run.num_gpus_per_engine:g} GPU. Cluster resources: {ray.cluster_resources()}, available now: "
            f"{ray.available_resources()}"
        )
    ray.get(ready, timeout=timeout_s)  # all started already: re-raises a constructor error
