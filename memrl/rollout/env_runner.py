"""Env runners: Ray actors that drive gymnasium text envs through a workflow against an inference engine.

Each trajectory is one `run_episode` coroutine (memrl.rollout.loop); a runner keeps `num_envs` of them in flight
and their pending requests reach the engine as one batch, so the engine always works on everything that is
waiting, and the batches are the same on every run with the same seeds.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import gymnasium as gym
import pyarrow as pa
from transformers import AutoTokenizer

from memrl.engines.base import GenerationOutput, SamplingConfig
from memrl.episode import Trajectory, to_arrow
from memrl.rollout.loop import BatchingResponder, Task, run_episode
from memrl.seeds import derive_seed
from memrl.workflows import workflow_class


@dataclass
class EnvRunnerSpec:
    """What each env runner builds: env, workflow, tokenizer and sampling settings."""

    env: str
    """Registered gymnasium id, e.g. "memrl/Echo-v0"."""
    env_config: dict
    """Keyword arguments for gymnasium.make."""
    workflow: str
    """Registered workflow name (memrl.workflows.WORKFLOWS)."""
    workflow_config: dict
    """Keyword arguments for the workflow."""
    tokenizer_path: str
    """Where the tokenizer lives (the model checkpoint)."""
    sampling: SamplingConfig
    """Sampling settings for every call; empty stop_token_ids means the tokenizer's EOS."""
    num_envs: int = 8
    """Env instances per runner: trajectories that run at once in one runner."""
    max_calls: int = 64
    """Safety cap on LLM calls per trajectory; a trajectory reaching it is truncated."""


class EnvRunner:
    """Holds `num_envs` envs and runs tasks through them against the engine actor each `sample` call names.

    The engine comes with each call rather than to the constructor: Ray re-runs the constructor of a restarted
    actor, and a handle among constructor arguments is an object-store argument it warns may be gone by then."""

    def __init__(self, spec: EnvRunnerSpec, runner_index: int = 0):
        import envs  # noqa: F401  (registers the memrl/ gymnasium ids in this process)

        self.spec = spec
        self.engine = None
        self.runner_index = runner_index
        self.tokenizer = AutoTokenizer.from_pretrained(spec.tokenizer_path)
        self.workflow_cls = workflow_class(spec.workflow)
        self.sampling = spec.sampling
        if not self.sampling.stop_token_ids:
            self.sampling = SamplingConfig(**{**vars(spec.sampling), "stop_token_ids": [self.tokenizer.eos_token_id]})
        self.envs = [gym.make(spec.env, **spec.env_config) for _ in range(spec.num_envs)]
        self._respond = BatchingResponder(self._generate_batch)
        self._max_model_len: int | None = None
        self._seed: int | None = None
        self._stats: dict[str, float] = {}

    def ping(self) -> int:
        """Liveness check; returns the runner index."""
        return self.runner_index

    async def sample(self, tasks: list[Task], engine,
                     seed: int | None = None) -> tuple[pa.RecordBatch, dict[str, float]]:
        """Run every task to the end against `engine` (an engine actor); returns their trajectories as one Arrow
        batch, plus runner stats.

        With a `seed`, engine batch k is sampled under a seed derived from (seed, k): the same tasks and seed
        give the same trajectories, whichever other runners share the engine.
        """
        self._seed = seed
        self.engine = engine
        self._max_model_len = await engine.max_model_len.remote()
        self._stats = {"generate_s": 0.0, "env_s": 0.0, "calls": 0, "batches": 0, "new_tokens": 0}
        start = time.perf_counter()
        free_envs: asyncio.Queue = asyncio.Queue()
        for env in self.envs:
            free_envs.put_nowait(env)

        async def run(task: Task) -> Trajectory:
            env = await free_envs.get()
            try:
                return await self._run(env, task)
            finally:
                free_envs.put_nowait(env)

        trajectories = await asyncio.gather(*(run(t) for t in tasks))
        self._stats["sample_s"] = time.perf_counter() - start
        self._stats["trajectories"] = len(trajectories)
        return to_arrow(list(trajectories)), dict(self._stats)

    async def _run(self, env: gym.Env, task: Task) -> Trajectory:
        workflow = self.workflow_cls(self.tokenizer, **self.spec.workflow_config)
        return await run_episode(env, workflow, task, self._respond, max_calls=self.spec.max_calls,
                                 max_model_len=self._max_model_len, timers=self._stats)

    async def _generate_batch(self, prompts: list[list[int]]) -> list[GenerationOutput]:
        """One engine call for every request pending at once; engine batch k is seeded from (seed, k)."""
        t0 = time.perf_counter()
        batch_seed = None if self._seed is None else derive_seed(self._seed, int(self._stats["batches"]))
        outputs = await self.engine.generate_batch.remote(prompts, self.sampling, batch_seed)
        self._stats["generate_s"] += time.perf_counter() - t0
        self._stats["calls"] += len(prompts)
        self._stats["batches"] += 1
        self._stats["new_tokens"] += int(sum(len(o.token_ids) for o in outputs))
        return outputs


