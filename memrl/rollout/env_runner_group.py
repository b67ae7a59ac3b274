"""A group of EnvRunner actors: spreads tasks over them and survives a runner that dies."""

from __future__ import annotations

import logging
import time

import pyarrow as pa
import ray
from ray.exceptions import GetTimeoutError, RayActorError

from memrl.episode import concat
from memrl.rollout.env_runner import EnvRunner, EnvRunnerSpec
from memrl.rollout.loop import Task
from memrl.seeds import spawn_seeds

logger = logging.getLogger(__name__)


class EnvRunnerGroup:
    """`num_runners` EnvRunner actors; runner i sends its requests to engine i % len(engines)."""

    def __init__(self, spec: EnvRunnerSpec, engines: list, num_runners: int, max_restarts: int = 3):
        if num_runners < 1:
            raise ValueError(f"num_runners must be >= 1, got {num_runners}")
        if not engines:
            raise ValueError("EnvRunnerGroup needs at least one engine actor")
        self.spec = spec
        self.max_restarts = max_restarts
        actor_cls = ray.remote(num_cpus=0, max_restarts=max_restarts, max_task_retries=0)(EnvRunner)
        self.engines = [engines[i % len(engines)] for i in range(num_runners)]
        self.runners = [actor_cls.remote(spec, i) for i in range(num_runners)]
        self.counters = {"tasks_submitted": 0, "trajectories_returned": 0, "runner_failures": 0, "resubmitted": 0}
        ray.get([r.ping.remote() for r in self.runners])

    def sample(self, tasks: list[Task], seed: int | None = None) -> tuple[pa.Table, dict[str, float]]:
        """Run all tasks; returns their trajectories in task order and merged runner stats.

        With a `seed`, runner i samples under a seed derived from (seed, i), so the result is reproducible.

        Tasks are split into contiguous chunks, one per runner (groups stay together). A chunk whose
        runner dies is resubmitted to the restarted runner; every task comes back exactly once.
        """
        self.counters["tasks_submitted"] += len(tasks)
        chunks = _split(tasks, len(self.runners))
        seeds = spawn_seeds(seed, len(chunks)) if seed is not None else [None] * len(chunks)
        pending = {self.runners[i].sample.remote(chunk, self.engines[i], seeds[i]): (i, chunk, 0)
                   for i, chunk in enumerate(chunks) if chunk}
        batches: dict[int, pa.RecordBatch] = {}
        stats: dict[str, float] = {}
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            ref = done[0]
            i, chunk, attempt = pending.pop(ref)
            try:
                batch, runner_stats = ray.get(ref)
            except RayActorError as exc:
                self.counters["runner_failures"] += 1
                if attempt >= self.max_restarts:
                    raise RuntimeError(
                        f"env runner {i} died {attempt + 1} times while sampling; giving up (max_restarts="
                        f"{self.max_restarts})"
                    ) from exc
                logger.warning("env runner %d died (%s); resubmitting its %d tasks", i, exc, len(chunk))
                self._wait_until_restarted(i)
                self.counters["resubmitted"] += len(chunk)
                pending[self.runners[i].sample.remote(chunk, self.engines[i], seeds[i])] = (i, chunk, attempt + 1)
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
        return table, stats

    def _wait_until_restarted(self, i: int, timeout_s: float = 120.0) -> None:
        """Block until Ray has restarted runner i (calls made while it restarts fail)."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                ray.get(self.runners[i].ping.remote(), timeout=10)
                return
            except (RayActorError, GetTimeoutError):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"env runner {i} did not come back within {timeout_s:.0f} s") from None
                time.sleep(0.2)

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
