"""A group of EnvRunner actors: spreads tasks over them, replaces a runner that dies or stalls, and names the actor
at fault when a round cannot finish. With no runner actors, the group's runners live in the calling process."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time

import pyarrow as pa
import ray
from ray.exceptions import RayActorError, RayTaskError

from memrl.tokenizer import tokenizer_class_path
from memrl.cluster import FailureBudget, get
from memrl.episode import concat
from memrl.rollout.env_runner import EngineFailed, EnvRunner, EnvRunnerSpec, EpisodeFailed
from memrl.rollout.loop import Task, run_sync
from memrl.seeds import spawn_seeds

logger = logging.getLogger(__name__)

CANCEL_WAIT_S = 30.0
"""How long a failed round waits for the other runners' cancelled work to stop before it reports the failure."""


class EnvRunnerGroup:
    """`num_runners` EnvRunner actors; runner i sends its requests to engine i % len(engines).

    Deadlines and budgets are the spec's (spec.faults). A runner that dies, or holds its share of a round past
    sample_timeout_s, is replaced by a new actor and its tasks are resubmitted; more than max_actor_failures such
    failures within failure_window_s stop the run. An
    engine's failure or an episode that failed on every attempt ends the round with the runner's error (naming
    the engine or the task), after the other runners' work is cancelled.

    With `num_runners` 0 the runners are plain objects in this process, one per engine (RLlib's
    num_env_runners=0): no process to start or to ship trajectories from, and a debugger stops inside envs and
    workflows; `in_process` puts `num_runners` of them here, laid out over the engines as the actors would be (their
    trajectories are the actors'). A local round is one event loop over all of them; past sample_timeout_s it is
    cancelled and fails, there being no process to replace.
    """

    def __init__(self, spec: EnvRunnerSpec, engines: list, num_runners: int, *,
                 resources_per_runner: dict | None = None, wait: bool = True, in_process: bool = False):
        """Starts the runner actors, each reserving the Ray custom `resources_per_runner` (which nodes it may run
        on); with `wait` (the default) returns once they answer, else `wait_started` does. `num_runners` 0 builds
        one runner per engine here instead, and `in_process` builds `num_runners` runners here."""
        if num_runners < 0:
            raise ValueError(f"num_runners must be >= 0 (0: runners in this process), got {num_runners}")
        if not engines:
            raise ValueError("EnvRunnerGroup needs at least one engine actor")
        if not spec.tokenizer_class:
            spec = dataclasses.replace(spec, tokenizer_class=tokenizer_class_path(spec.tokenizer_path))
        self.spec = spec
        self.sample_timeout_s = spec.faults.sample_timeout_s
        self.start_timeout_s = spec.faults.actor_start_timeout_s
        self.local = in_process or num_runners == 0
        if self.local:
            if resources_per_runner:
                raise ValueError(f"resources_per_runner={resources_per_runner!r} places runner actors; with "
                                 "num_runners 0 or in_process the runners run in this process")
            self.runners = [EnvRunner(spec, i) for i in range(num_runners or len(engines))]
        else:
            # Ray's own restarts count over the actor's lifetime; the group replaces dead runners itself instead.
            self._actor_cls = ray.remote(num_cpus=0, max_restarts=0, max_task_retries=0,
                                         resources=resources_per_runner or {})(EnvRunner)
            self.runners = [self._actor_cls.remote(spec, i) for i in range(num_runners)]
        self.set_engines(engines)
        self.engine_names = [f"inference engine {i % len(engines)}" for i in range(len(self.runners))]
        self.counters = {"tasks_submitted": 0, "trajectories_returned": 0, "runner_failures": 0, "resubmitted": 0,
                         "episodes_retried": 0, "episodes_failed": 0, "failed_rounds": 0}
        self._budget = FailureBudget(spec.faults.max_actor_failures, spec.faults.failure_window_s, "env runner")
        if wait:
            self.wait_started()

    def wait_started(self) -> None:
        """Return once every runner answers (its env, workflow and tokenizer built), within start_timeout_s."""
        if self.local:
            return  # built in the constructor
        get([r.ping.remote() for r in self.runners], self.start_timeout_s, f"starting {len(self.runners)} env runners",
            "fault_tolerance.actor_start_timeout_s")

    def configure(self, spec: EnvRunnerSpec) -> None:
        """Run `spec` (other envs, workflow or sampling over the same tokenizer) on the same runner actors from now
        on, without starting new processes; a runner replaced later starts with it too."""
        spec = dataclasses.replace(spec, tokenizer_class=spec.tokenizer_class or self.spec.tokenizer_class)
        if self.local:
            for runner in self.runners:
                runner.configure(spec)
        else:
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
        results = (self._sample_here if self.local else self._sample_on_actors)(chunks, seeds)
        stats: dict[str, float] = {}
        for _, runner_stats in results.values():
            for k, v in runner_stats.items():
                stats[k] = stats.get(k, 0.0) + v
        table = concat([results[i][0] for i in sorted(results)])
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

    def _sample_on_actors(self, chunks: list[list[Task]], seeds: list) -> dict[int, tuple[pa.RecordBatch, dict]]:
        """Runner i's (batch, stats) for each non-empty chunk i, from the runner actors."""
        pending = {self._submit(i, chunk, seeds[i]): (i, chunk, time.monotonic() + self.sample_timeout_s)
                   for i, chunk in enumerate(chunks) if chunk}
        results: dict[int, tuple[pa.RecordBatch, dict[str, float]]] = {}
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
            results[i] = (batch, runner_stats)
        return results

    def _sample_here(self, chunks: list[list[Task]], seeds: list) -> dict[int, tuple[pa.RecordBatch, dict]]:
        """Runner i's (batch, stats) for each non-empty chunk i, from the runners in this process."""

        async def round_() -> dict[int, tuple[pa.RecordBatch, dict]]:
            jobs = {i: asyncio.ensure_future(self.runners[i].sample(chunk, self.engines[i], seeds[i],
                                                                    self.engine_names[i]))
                    for i, chunk in enumerate(chunks) if chunk}
            done, late = await asyncio.wait(jobs.values(), timeout=self.sample_timeout_s,
                                            return_when=asyncio.FIRST_EXCEPTION)
            failed = next((i for i, job in jobs.items() if job in done and job.exception() is not None), None)
            if failed is None and not late:
                return {i: job.result() for i, job in jobs.items()}
            self.counters["failed_rounds"] += 1
            for job in late:
                job.cancel()
            await asyncio.gather(*late, return_exceptions=True)
            if failed is None:
                raise TimeoutError(f"the env runners in this process did not finish their {sum(map(len, chunks))} "
                                   f"tasks within {self.sample_timeout_s:g} s; if they need longer, raise "
                                   "fault_tolerance.sample_timeout_s")
            cause = jobs[failed].exception()
            if isinstance(cause, (EngineFailed, EpisodeFailed)):
                raise cause
            raise RuntimeError(f"env runner {failed} failed: {type(cause).__name__}: {cause}") from cause

        return run_sync(round_())

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
        """Kill every runner actor (close the envs of runners in this process)."""
        for r in self.runners:
            if self.local:
                for env in r.envs:
                    env.close()
            else:
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
