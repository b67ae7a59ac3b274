"""Env runners: Ray actors that drive gymnasium text envs through a workflow against an inference engine.

Each trajectory is one `run_episode` coroutine (memrl.rollout.loop); a runner keeps `num_envs` of them in flight
and their pending requests reach the engine as one batch, so the engine always works on everything that is
waiting, and the batches are the same on every run with the same seeds (for envs that step in threads, in rounds:
memrl.rollout.loop.BatchingResponder). Under continuous batching (spec.continuous_batching) each request goes to
the engine on its own as soon as it is made, and the engine batches the requests of all its runners together
(memrl.engines.batcher).
"""

from __future__ import annotations

import asyncio
import functools
import time
from dataclasses import dataclass, field

import gymnasium as gym
import pyarrow as pa
import ray

from memrl.cluster import FaultToleranceConfig
from memrl.engines.base import GenerationOutput, SamplingConfig
from memrl.episode import Trajectory, to_arrow, tokenizer_metadata
from memrl.rollout.loop import BatchingResponder, Task, run_episode
from memrl.plugins import make_env
from memrl.seeds import derive_seed
from memrl.tokenizer import load_tokenizer
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
    num_envs: int
    """Env instances per runner: trajectories that run at once in one runner (env_runners.num_envs_per_env_runner,
    or evaluation's)."""
    max_calls: int
    """Safety cap on LLM calls per trajectory; a trajectory reaching it is truncated
    (env_runners.max_calls_per_episode)."""
    continuous_batching: bool
    """Send each request to the engine on its own (an engine started with continuous_batching batches them with
    other runners'), instead of one batch of every request pending at once (env_runners.continuous_batching)."""
    tokenizer_class: str = ""
    """The class AutoTokenizer picks for tokenizer_path ("module:Class"), so runners load it without importing
    torch; empty: EnvRunnerGroup fills it in."""
    faults: FaultToleranceConfig = field(default_factory=FaultToleranceConfig)
    """The run's deadlines and retries: episode_retries (a failed episode run again on a fresh env) and
    engine_call_timeout_s (one engine call's deadline) are the runner's."""


class EngineFailed(RuntimeError):
    """The inference engine a runner samples from died, stalled past its deadline or failed a call: the engine's
    fault, not the runner's."""


class EpisodeFailed(RuntimeError):
    """An episode failed on every attempt (its env or workflow raised each time)."""


class EnvRunner:
    """Holds `num_envs` envs and runs tasks through them against the engine actor each `sample` call names.

    The engine comes with each call rather than to the constructor: Ray re-runs the constructor of a restarted
    actor, and a handle among constructor arguments is an object-store argument it warns may be gone by then."""

    def __init__(self, spec: EnvRunnerSpec, runner_index: int = 0):
        self.spec = spec
        self.engine = None
        self.runner_index = runner_index
        self.tokenizer = load_tokenizer(spec.tokenizer_path, spec.tokenizer_class)
        self._metadata = tokenizer_metadata(self.tokenizer)
        self.envs: list[gym.Env] = []
        self._batching = BatchingResponder(self._generate_batch)
        self.configure(spec)
        self._max_model_len: int | None = None
        self._engine_name = "engine"
        self._seed: int | None = None
        self._stats: dict[str, float] = {}

    def configure(self, spec: EnvRunnerSpec) -> None:
        """Run `spec` from now on (its env and config, workflow, sampling and number of envs) in this process,
        which keeps its imports and tokenizer: the tokenizer path must stay the same."""
        if spec.tokenizer_path != self.spec.tokenizer_path:
            raise ValueError(f"an env runner keeps its tokenizer ({self.spec.tokenizer_path}); a spec with "
                             f"tokenizer_path={spec.tokenizer_path!r} needs new runners")
        self.spec = spec
        self.workflow_cls = workflow_class(spec.workflow)
        self._respond = self._generate_one if spec.continuous_batching else self._batching
        self.sampling = spec.sampling
        if not self.sampling.stop_token_ids:
            self.sampling = SamplingConfig(**{**vars(spec.sampling), "stop_token_ids": [self.tokenizer.eos_token_id]})
        for env in self.envs:
            env.close()
        self.envs = [make_env(spec.env, spec.env_config) for _ in range(spec.num_envs)]

    def ping(self) -> int:
        """Liveness check; returns the runner index."""
        return self.runner_index

    async def sample(self, tasks: list[Task], engine, seed: int | None = None,
                     engine_name: str = "engine") -> tuple[pa.RecordBatch, dict[str, float]]:
        """Run every task to the end against `engine` (an engine actor, `engine_name` in errors); returns their
        trajectories as one Arrow batch, plus runner stats.

        With a `seed`, engine batch k is sampled under a seed derived from (seed, k): the same tasks and seed
        give the same trajectories, whichever other runners share the engine.

        A failed episode is run again on a fresh env (spec.faults.episode_retries times) while the others carry on.
        When an episode fails for good, or the engine fails (EngineFailed), every other episode is cancelled before
        the error is raised, so no episode of this call keeps stepping an env the next call will use.
        """
        self._seed = seed
        self.engine, self._engine_name = engine, engine_name
        self._stats = {"generate_s": 0.0, "env_s": 0.0, "calls": 0, "batches": 0, "new_tokens": 0,
                       "episode_retries": 0}
        self._max_model_len = await self._engine_call(engine.max_model_len.remote(), "max_model_len")
        start = time.perf_counter()
        free_envs: asyncio.Queue = asyncio.Queue()
        for index in range(len(self.envs)):
            free_envs.put_nowait(index)
        unfinished = len(tasks)
        # Envs that step in threads finish their steps in the server's order: batches then go out in rounds, once
        # every running episode waits (as many as there are envs, while tasks remain to fill them). Under continuous
        # batching no batch is formed here.
        rounds = not self.spec.continuous_batching and any(env.metadata.get("blocking_io") for env in self.envs)
        self._batching.rounds = (lambda: min(len(self.envs), unfinished)) if rounds else None

        async def run(position: int, task: Task) -> Trajectory:
            nonlocal unfinished
            index = await free_envs.get()
            try:
                return await self._run_with_retries(index, task, position)
            finally:
                free_envs.put_nowait(index)
                unfinished -= 1
                if rounds:
                    self._batching.check()

        jobs = [asyncio.ensure_future(run(position, task)) for position, task in enumerate(tasks)]
        try:
            trajectories = await asyncio.gather(*jobs)
        except BaseException:
            for job in jobs:
                job.cancel()
            await asyncio.gather(*jobs, return_exceptions=True)
            raise
        finally:
            self._batching.rounds = None
        self._stats["sample_s"] = time.perf_counter() - start
        self._stats["trajectories"] = len(trajectories)
        self._stats["episodes_failed"] = sum(1 for t in trajectories if t.failure)
        return to_arrow(list(trajectories), self._metadata), dict(self._stats)

    async def _run_with_retries(self, index: int, task: Task, position: int = 0) -> Trajectory:
        for attempt in range(self.spec.faults.episode_retries + 1):
            try:
                workflow = self.workflow_cls(self.tokenizer, **self.spec.workflow_config)
                return await run_episode(self.envs[index], workflow, task,
                                         functools.partial(self._respond, key=position),
                                         max_calls=self.spec.max_calls, max_model_len=self._max_model_len,
                                         timers=self._stats)
            except EngineFailed:
                raise
            except Exception as exc:
                if attempt == self.spec.faults.episode_retries:
                    raise EpisodeFailed(
                        f"env runner {self.runner_index}: task {task.traj_id} (env seed {task.seed}) failed "
                        f"{attempt + 1} times; the last error: {type(exc).__name__}: {exc}") from exc
                self._stats["episode_retries"] += 1
                self.envs[index].close()
                self.envs[index] = make_env(self.spec.env, self.spec.env_config)

    async def _engine_call(self, ref, step: str):
        """Await one engine call within engine_call_timeout_s; any failure of it becomes EngineFailed."""
        limit = self.spec.faults.engine_call_timeout_s
        try:
            return await asyncio.wait_for(ref, timeout=limit)
        except asyncio.TimeoutError:
            raise EngineFailed(f"{self._engine_name} did not answer {step} within {limit:g} s (stalled?); if it "
                               "needs longer, raise fault_tolerance.engine_call_timeout_s") from None
        except ray.exceptions.RayActorError as exc:
            raise EngineFailed(f"{self._engine_name} died during {step}: {exc}") from None
        except ray.exceptions.RayTaskError as exc:
            raise EngineFailed(f"{self._engine_name} failed {step}: {exc}") from None

    async def _generate_one(self, prompt_ids: list[int], key: int = 0) -> GenerationOutput:
        """One engine call for one request (continuous batching: the engine batches it with other calls)."""
        (output,) = await self._generate_batch([prompt_ids])
        return output

    async def _generate_batch(self, prompts: list[list[int]]) -> list[GenerationOutput]:
        """One engine call for every request pending at once; engine batch k is seeded from (seed, k) (not under
        continuous batching, where other callers' requests share the engine's steps)."""
        t0 = time.perf_counter()
        batch_seed = (None if self._seed is None or self.spec.continuous_batching
                      else derive_seed(self._seed, int(self._stats["batches"])))
        outputs = await self._engine_call(self.engine.generate_batch.remote(prompts, self.sampling, batch_seed),
                                          f"a generate call of {len(prompts)} prompts")
        self._stats["generate_s"] += time.perf_counter() - t0
        self._stats["calls"] += len(prompts)
        self._stats["batches"] += 1
        self._stats["new_tokens"] += int(sum(len(o.token_ids) for o in outputs))
        return outputs


