"""How an Algorithm meets failed actors: engines that die or stall are replaced and their round run again; learners
that do are started anew from the run's newest periodic checkpoint and the iterations since replayed. Both keep the
figures an uninterrupted run gets, as every iteration's randomness follows from (seed, iteration).

`Recovery` is a base class of Algorithm; it uses the algorithm's engines, learner groups, weight sync and checkpoints.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any

import ray
from ray.exceptions import RayActorError

from memrl import checkpoints
from memrl.learner.learner_group import LearnerFailed
from memrl.rollout import EngineFailed, EnvRunnerGroup, Task

logger = logging.getLogger(__name__)

FAILURE_COUNTERS = ("engine_restarts", "learner_restarts", "runner_failures", "resubmitted", "failed_rounds")
"""Counters of failures, which a recovery from a periodic checkpoint keeps instead of taking the checkpoint's."""


class Recovery:
    """Periodic checkpoints, learner recovery and engine replacement for Algorithm."""

    _periodic: tuple[Path, ...] = ()
    """This run's periodic checkpoints, newest first (fault_tolerance.checkpoint_frequency)."""
    _periodic_bytes: int = 0
    """Size of the newest periodic checkpoint: the room the next one is checked for before it starts."""

    # -- learners ------------------------------------------------------------------------
    def train(self) -> dict[str, Any]:
        """One iteration (Tune's Trainable.train), then the periodic checkpoint when one is due. A learner that dies
        or stalls during that save is recovered as during a step (from the newest periodic checkpoint, the
        iterations since run again), and the save is made again. A save that cannot be written (a full disk) raises
        a CheckpointError naming the path and the room it needs, leaving nothing of itself behind; it stopped the
        learners, so the next call starts them anew from the newest periodic checkpoint before it goes on."""
        result = super().train()
        faults = self.cfg.fault_tolerance_cfg
        if faults.checkpoint_frequency and self.iteration % faults.checkpoint_frequency == 0:
            target = Path(faults.checkpoint_dir) / f"iteration_{self.iteration:06d}"
            checkpoints.check_room(target, self._periodic_bytes)  # known after the first save
            while True:
                try:
                    path = Path(self.save_to_path(target))
                    break
                except LearnerFailed as failure:
                    self._recover_learners(failure)
                    # The dead save's other ranks may have written on after it gave up; they are gone now.
                    checkpoints.remove_own_staging(target)
                except checkpoints.CheckpointError as error:  # save_to_path removed what it had written
                    if not self._periodic_bytes:
                        raise
                    raise checkpoints.CheckpointError(f"{error}; the last periodic checkpoint took "
                                                      f"{self._periodic_bytes:,} bytes") from None
            self._periodic_bytes = checkpoints.size_bytes(path)
            saved = (path, *(p for p in self._periodic if p != path))
            for old in saved[faults.keep_checkpoints:]:
                shutil.rmtree(old)
            self._periodic = saved[: faults.keep_checkpoints]
        return result

    def step(self) -> dict[str, Any]:
        """One iteration; a learner that dies or stalls is recovered from the newest periodic checkpoint first."""
        while True:
            try:
                return self._step()
            except LearnerFailed as failure:
                self._recover_learners(failure)

    def _recover_learners(self, failure: LearnerFailed) -> None:
        """Start the learner groups anew from the newest periodic checkpoint and run the iterations since it again
        (the same tasks and seeds: the same figures), up to the one that failed."""
        target = self.iteration
        found = self._periodic  # this run's own: a directory may hold another run's too
        if not found:
            raise LearnerFailed(f"{failure}; no periodic checkpoint to recover from (set fault_tolerance."
                                f"checkpoint_frequency and checkpoint_dir)") from None
        self._learner_budget.spend(str(failure))
        logger.warning("%s; starting the learners anew from %s and running the iterations since again", failure,
                       found[0])
        for group in self.learner_groups().values():
            group.shutdown()
        self.start_learners()
        self._rejoin_learners(failure)
        # The checkpoint's work counters are right again once the iterations since are rerun; the failures that
        # happened in between stay counted.
        live = self._counter_dicts()
        kept = [{k: v for k, v in c.items() if k in FAILURE_COUNTERS} for c in live]
        self.load_checkpoint(str(found[0]))
        for counters, failures in zip(live, kept):
            counters.update(failures)
        self.counters["learner_restarts"] += 1
        while self.iteration < target:
            self._step(replay=True)
            self._iteration += 1  # what Tune's train() does after each step

    def _rejoin_learners(self, failure: Exception) -> None:
        """Connect new learner groups to the rest of the run: engines that broke with them replaced, weight sync."""
        broken = self._broken_engines()
        if broken:
            self._start_engines(broken, failure)
        self._init_weight_sync()

    def _counter_dicts(self) -> list[dict[str, int]]:
        return [self.counters, self.env_runner_group.counters]

    # -- engines -------------------------------------------------------------------------
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
