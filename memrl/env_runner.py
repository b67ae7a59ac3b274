"""Env runners: Ray actors that drive gymnasium text envs through a workflow against an inference engine.

Each trajectory runs as its own agent loop (a coroutine). Requests that are pending at the same
moment go to the engine as one batch, so the engine always works on everything that is waiting,
and — because env steps are synchronous — the batches are the same on every run with the same seeds.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

import gymnasium as gym
import numpy as np
import pyarrow as pa
from transformers import AutoTokenizer

from memrl.engines.base import GenerationOutput, SamplingConfig
from memrl.episode import Conversation, Trajectory, to_arrow
from memrl.workflows import workflow_class


@dataclass
class Task:
    """One trajectory to sample: which env instance to build and how to seed it."""

    seed: int
    """Seed passed to env.reset; tasks of one group share it so the group sees the same problem."""
    group_id: str
    """Trajectories of the same group are compared with each other (GRPO-style)."""
    traj_id: str
    """Unique id, used to check that every task comes back exactly once."""
    options: dict = field(default_factory=dict)
    """Passed to env.reset as `options` (e.g. an evaluation length)."""


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
    """Holds `num_envs` envs and runs tasks through them against one engine actor."""

    def __init__(self, spec: EnvRunnerSpec, engine, runner_index: int = 0):
        import envs  # noqa: F401  (registers the memrl/ gymnasium ids in this process)

        self.spec = spec
        self.engine = engine
        self.runner_index = runner_index
        self.tokenizer = AutoTokenizer.from_pretrained(spec.tokenizer_path)
        self.workflow_cls = workflow_class(spec.workflow)
        self.sampling = spec.sampling
        if not self.sampling.stop_token_ids:
            self.sampling = SamplingConfig(**{**vars(spec.sampling), "stop_token_ids": [self.tokenizer.eos_token_id]})
        self.envs = [gym.make(spec.env, **spec.env_config) for _ in range(spec.num_envs)]
        self._pending: list[tuple[list[int], asyncio.Future]] = []
        self._max_model_len: int | None = None
        self._seed: int | None = None
        self._stats: dict[str, float] = {}

    def ping(self) -> int:
        """Liveness check; returns the runner index."""
        return self.runner_index

    async def sample(self, tasks: list[Task], seed: int | None = None) -> tuple[pa.RecordBatch, dict[str, float]]:
        """Run every task to the end; returns their trajectories as one Arrow batch, plus runner stats.

        With a `seed`, engine batch k is sampled under a seed derived from (seed, k): the same tasks and seed
        give the same trajectories, whichever other runners share the engine.
        """
        self._seed = seed
        if self._max_model_len is None:
            self._max_model_len = await self.engine.max_model_len.remote()
        self._stats = {"generate_s": 0.0, "env_s": 0.0, "calls": 0, "batches": 0, "new_tokens": 0}
        start = time.perf_counter()
        free_envs: asyncio.Queue = asyncio.Queue()
        for env in self.envs:
            free_envs.put_nowait(env)

        async def run(task: Task) -> Trajectory:
            env = await free_envs.get()
            try:
                return await self._run_one(env, task)
            finally:
                free_envs.put_nowait(env)

        trajectories = await asyncio.gather(*(run(t) for t in tasks))
        self._stats["sample_s"] = time.perf_counter() - start
        self._stats["trajectories"] = len(trajectories)
        return to_arrow(list(trajectories)), dict(self._stats)

    async def _run_one(self, env: gym.Env, task: Task) -> Trajectory:
        t0 = time.perf_counter()
        obs, info = env.reset(seed=task.seed, options=task.options or None)
        workflow = self.workflow_cls(self.tokenizer, **self.spec.workflow_config)
        workflow.reset(obs, info)
        self._stats["env_s"] += time.perf_counter() - t0
        conversations: list[Conversation] = []
        total_reward = 0.0
        done = overflow = False
        while not done:
            prompt = workflow.prompt_ids()
            if len(prompt) >= self._max_model_len:
                if not conversations:
                    raise ValueError(f"task {task.traj_id} (seed {task.seed}): the first prompt has {len(prompt)} "
                                     f"tokens, and the engine's model holds {self._max_model_len}; shorten the task "
                                     "or serve a model with a longer context")
                # A history that outgrew the model's context ends the episode unfinished (truncated).
                overflow = True
                break
            out = await self._generate(prompt)
            action, spans = workflow.on_response(out.token_ids)
            t0 = time.perf_counter()
            obs, reward, terminated, truncated, info = env.step(action)
            self._stats["env_s"] += time.perf_counter() - t0
            total_reward += float(reward)
            conversations.append(
                Conversation(
                    prompt_ids=prompt,
                    response_ids=out.token_ids,
                    logprobs=out.logprobs,
                    spans=spans,
                    reward=float(reward),
                    finish_reason=out.finish_reason,
                    weight_version=out.weight_version,
                )
            )
            done = terminated or truncated or len(conversations) >= self.spec.max_calls
            if not done:
                workflow.observe(obs, info)
        probes = workflow.probes(info)
        if probes:
            if len(probes) != len(conversations):
                raise RuntimeError(f"{type(workflow).__name__}.probes gave {len(probes)} entries for "
                                   f"{len(conversations)} calls; it must give one per call")
            for conversation, named in zip(conversations, probes):
                conversation.probes = {name: np.asarray(ids, dtype=np.int32) for name, ids in named.items()}
        metrics = {k: float(v) for k, v in info.get("metrics", {}).items()}
        metrics.update(
            num_calls=float(len(conversations)),
            peak_context_tokens=float(max(c.num_tokens for c in conversations)),
            total_tokens=float(sum(c.num_tokens for c in conversations)),
            response_tokens=float(sum(len(c.response_ids) for c in conversations)),
            # MEM1's dependency: each generated token depends on the prompt and the tokens generated before it.
            dependency=float(sum((2 * len(c.response_ids) + len(c.prompt_ids)) * len(c.response_ids) / 2
                                 for c in conversations)),
            truncated=float(not (terminated or truncated)),
            context_overflow=float(overflow),
        )
        return Trajectory(conversations, reward=total_reward, group_id=task.group_id, traj_id=task.traj_id,
                          metrics=metrics)

    async def _generate(self, prompt_ids: list[int]) -> GenerationOutput:
        # Queue the request; the first request of a round schedules one flush for everything queued
        # before the event loop comes back to it.
        future = asyncio.get_running_loop().create_future()
        self._pending.append((prompt_ids, future))
        if len(self._pending) == 1:
            asyncio.get_running_loop().call_soon(lambda: asyncio.ensure_future(self._flush()))
        return await future

    async def _flush(self) -> None:
        batch, self._pending = self._pending, []
        t0 = time.perf_counter()
        try:
            batch_seed = None
            if self._seed is not None:
                batch_seed = int(np.random.SeedSequence([self._seed, int(self._stats["batches"])]).generate_state(1)[0])
            outputs = await self.engine.generate_batch.remote([p for p, _ in batch], self.sampling, batch_seed)
        except Exception as exc:  # the engine failed: every waiting trajectory fails with it
            for _, future in batch:
                future.set_exception(exc)
            return
        self._stats["generate_s"] += time.perf_counter() - t0
        self._stats["calls"] += len(batch)
        self._stats["batches"] += 1
        self._stats["new_tokens"] += int(sum(len(o.token_ids) for o in outputs))
        for (_, future), out in zip(batch, outputs):
            future.set_result(out)


def summarize(trajectories: list[Trajectory]) -> dict[str, float]:
    """Mean reward and episode figures of a set of trajectories, for result dicts."""
    if not trajectories:
        return {}
    out = {"reward_mean": float(np.mean([t.reward for t in trajectories]))}
    keys = sorted(set().union(*(t.metrics for t in trajectories)))
    for k in keys:
        out[f"{k}_mean"] = float(np.mean([t.metrics.get(k, 0.0) for t in trajectories]))
    out["peak_context_tokens_max"] = float(max(t.metrics.get("peak_context_tokens", 0.0) for t in trajectories))
    return out
