"""A group of EnvRunner actors: spreads tasks over them, replaces a runner that dies or stalls, and names the actor
at fault when a round cannot finish."""

from __future__ import annotations

import dataclasses
import logging
import time

import pyarrow as pa
import ray
from ray.exceptions import RayActorError, RayTaskError

from envs.tokenizer import tokenizer_class_path
from memrl.cluster import FailureBudget, get
from memrl.episode import concat
from memrl.rollout.env_runner import EngineFailed, EnvRunner, EnvRunnerSpec, EpisodeFailed
from memrl.rollout.loop import Task
from memrl.seeds import spawn_seeds

logger = logging.getLogger(__name__)

CANCEL_WAIT_S = 30.0
"""How long a failed round waits for the other runners' cancelled work to stop before it reports the failure."""


class EnvRunnerGroup:
    """`num_runners` EnvRunner actors; runner i sends its requests to engine i % len(engines).

    A runner that dies, or holds its share of a round past `sample_timeout_s`, is replaced by a new actor and its
    tasks are resubmitted; more than `max_failures` such failures within `failure_window_s` stop the run. An
    engine's failure or an episode that failed on every attempt ends the round with the runner's error (naming
    the engine or the task), after the other runners' work is cancelled.
    """

    def __init__(self, spec: EnvRunnerSpec, engines: list, num_runners: int, *, max_failures: int = 3,
                 failure_window_s: float = 3600.0, sample_timeout_s: float = 3600.0, start_timeout_s: float = 900.0,
                 resources_per_runner: dict | None = None, wait: bool = True):
        """Starts the runner actors, each reserving the Ray custom `resources_per_runner` (which nodes it may run
        on); with `wait` (the default) returns once they answer, else `wait_started` does."""
        if num_runners < 1:
            raise ValueError(f"num_runners must be >= 1, got {num_runners}")
        if not engines:
            raise ValueError("EnvRunnerGroup needs at least one engine actor")
        if not spec.tokenizer_class:
            spec = dataclasses.replace(spec, tokenizer_class=tokenizer_class_path(spec.tokenizer_path))
        self.spec = spec
        self.sample_timeout_s = sample_timeout_s
        self.start_timeout_s = start_timeout_s
        # Ray's own restarts count over the actor's lifetime; the group replaces dead runners itself instead.
        self._actor_cls = ray.remote(num_cpus=0, max_restarts=0, max_task_retries=0,
                                     resources=resources_per_runner or {})(EnvRunner)
        self.runners = [self._actor_cls.remote(spec, i) for i in range(num_runners)]
        self.set_engines(engines)
        self.engine_names = [f"inference engine {i % len(engines)}" for i in range(num_runners)]
        self.counters = {"tasks_submitted": 0, "trajectories_returned": 0, "runner_failures": 0, "resubmitted": 0,
                         "episodes_retried": 0, "episodes_failed": 0, "failed_rounds": 0}
        self._budget = FailureBudget(max_failures, failure_window_s, "env runner")
        if wait:
            self.wait_started()

    def wait_started(self) -> None:
        """Return once every runner answers (its env, workflow and tokenizer built), within start_timeout_s."""
        get([r.ping.remote() for r in self.runners], self.start_timeout_s, f"starting {len(self.runners)} env runners",
            "fault_tolerance.actor_start_timeout_s")

    def configure(self, spec: EnvRunnerSpec) -> None:
        """Run `spec` (other envs, workflow or sampling over the same tokenizer) on the same runner actors from now
        on, without starting new processes; a runner replaced later starts with it too."""
        spec = dataclasses.replace(spec, tokenizer_class=spec.tokenizer_class or self.spec.tokenizer_class)
        get([r.configure.remote(spec) for r in self.runners], self.start_timeout_s,
            f"configuring {len(self.runners)} env runners", "fault_tolerance.actor_start_timeout_s")
        self.spec = spec

    def sample(self, tasks: list[Task], seed: int | None = None) -> tuple[pa.Table, dict[str, float]]:
        """Run all tasks; returns their trajectories in task order and merged runner stats.

        With a `seed`, runner i samples under a seed derived from (seed, i), so the result is reproducible.
        Tasks are split into contiguous chunks, one per runner (groups stay together); every task comes back
        exactly once, or the round raises.
        """
        self.counters["tasks_submitted"] += len(tasks)
        chunks = _split(tasks, len(self.runners))
        seeds = spawn_seeds(seed, len(chunks)) if seed is not None else [None] * len(chunks)
        pending = {self._submit(i, chunk, seeds[i]): (i, chunk, time.monotonic() + self.sample_timeout_s)
                   for i, chunk in enumerate(chunks) if chunk}
        batches: dict[int, pa.RecordBatch] = {}
        stats: dict[str, float] = {}
        while pending:
            first_deadline = min(deadline for *_, deadline in pending.values())
            done, _ = ray.wait(list(pending), num_returns=1, timeout=max(0.0, first_deadline - time.monotonic()))
            if not done:  # a runner holds its share past the deadline: replace it, as if it had died
                ref = min(pending, key=lambda r: pending[r][2])
                i, chunk, _ = pending.pop(ref)
                self._replace(i, f"env runner {i} did not finish its {len(chunk)} tasks within "
                                 f"{self.sample_timeout_s:g} s (fault_tolerance.sample_timeout_s)", pending)
                pending[self._submit(i, chunk, seeds[i])] = (i, chunk, time.monotonic() + self.sample_timeout_s)
                self.counters["resubmitted"] += len(chunk)
                continue
            ref = done[0]
            i, chunk, _ = pending.pop(ref)
            try:
                batch, runner_stats = ray.get(ref, timeout=self.sample_timeout_s)  # done already
            except RayTaskError as exc:  # the runner is alive; something it used failed (checked first: a
                # RayTaskError whose cause is an actor's death is a RayActorError too)
                self._fail_round(pending)
                cause = exc.cause
                if isinstance(cause, (EngineFailed, EpisodeFailed)):
                    raise cause from None
                raise RuntimeError(f"env runner {i} failed: {exc}") from None
            except RayActorError as exc:
                self._replace(i, f"env runner {i} died ({type(exc).__name__})", pending)
                pending[self._submit(i, chunk, seeds[i])] = (i, chunk, time.monotonic() + self.sample_timeout_s)
                self.counters["resubmitted"] += len(chunk)
                continue
            batches[i] = batch
            for k, v in runner_stats.items():
                stats[k] = stats.get(k, 0.0) + v
        table = concat([batches[i] for i in sorted(batches)])
        returned = table.column("traj_id").unique().to_pylist()
        expected = [t.traj_id for t in tasks]
        if sorted(returned) != sorted(expected):
            raise RuntimeError(
                f"episode accounting mismatch: submitted {len(expected)} tasks, got back {len(returned)} trajectories"
            )
        self.counters["trajectories_returned"] += len(returned)
        self.counters["episodes_retried"] += int(stats.get("episode_retries", 0))
        self.counters["episodes_failed"] += int(stats.get("episodes_failed", 0))
        return table, stats

    def _submit(self, i: int, chunk: list[Task], seed: int | None):
        return self.runners[i].sample.remote(chunk, self.engines[i], seed, self.engine_names[i])

    def _replace(self, i: int, what: str, pending: dict) -> None:
        """Count runner i's failure against the budget (or end the round), then start a new runner i."""
        self.counters["runner_failures"] += 1
        try:
            self._budget.spend(what)
        except RuntimeError:
            self._fail_round(pending)
            raise
        logger.warning("%s; starting a new env runner %d and resubmitting its tasks", what, i)
        ray.kill(self.runners[i], no_restart=True)
        self.runners[i] = self._actor_cls.remote(self.spec, i)
        get(self.runners[i].ping.remote(), self.start_timeout_s, f"restarting env runner {i}",
            "fault_tolerance.actor_start_timeout_s")

    def set_engines(self, engines: list) -> None:
        """Sample from these engine actors from now on (after an engine was replaced)."""
        self.engines = [engines[i % len(engines)] for i in range(len(self.runners))]

    def _fail_round(self, pending: dict) -> None:
        """Cancel the other runners' work of a round that cannot finish, and wait (briefly) until it stopped, so
        the next round starts on idle runners."""
        self.counters["failed_rounds"] += 1
        for ref in pending:
            ray.cancel(ref)
        if pending:
            ray.wait(list(pending), num_returns=len(pending), timeout=CANCEL_WAIT_S)

    def shutdown(self) -> None:
        """Kill every runner actor."""
        for r in self.runners:
            ray.kill(r)
        self.runners = []


def _split(tasks: list[Task], n: int) -> list[list[Task]]:
    """Contiguous, near-equal chunks that never split a group across runners."""
    groups: list[list[Task]] = []
    for t in tasks:
        if groups and groups[-1][0].group_id == t.group_id:
            groups[-1].append(t)
        else:
            groups.append([t])
    chunks: list[list[Task]] = [[] for _ in range(n)]
    for k, group in enumerate(groups):
        chunks[k * n // max(1, len(groups))].extend(group)
    return chunks
