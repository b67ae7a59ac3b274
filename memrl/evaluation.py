"""Held-out evaluation: greedy rollouts of a policy on tasks no training run sees, summarised with 95% intervals.

`Algorithm.evaluate()` uses it on the engines of a training run; `evaluate_checkpoint` does the same for any
Hugging Face checkpoint on engines of its own (warm-starts, baselines, trained policies, longer documents).
"""

from __future__ import annotations

import time

import numpy as np
import ray
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from memrl.engines.base import SamplingConfig
from memrl.env_runner import EnvRunnerSpec, Task, summarize
from memrl.env_runner_group import EnvRunnerGroup
from memrl.episode import Trajectory, from_arrow
from memrl.stats import reward_interval


def heldout_tasks(seed: int, num_tasks: int) -> list[Task]:
    """`num_tasks` distinct odd env seeds drawn from `seed`: training draws even seeds, so they never overlap."""
    rng = np.random.default_rng([seed, 2**31 - 1])
    seeds = 2 * rng.choice(2**30, size=num_tasks, replace=False) + 1
    return [Task(seed=int(s), group_id=f"eval-{i}", traj_id=f"eval-{i}") for i, s in enumerate(seeds)]


def eval_summary(trajectories: list[Trajectory]) -> dict[str, float]:
    """Mean reward with its 95% interval (Wilson for 0/1 rewards, normal otherwise) plus the env's mean figures."""
    mean, low, high = reward_interval([t.reward for t in trajectories])
    return {**summarize(trajectories), "reward_mean": mean, "reward_ci_low": low, "reward_ci_high": high,
            "num_tasks": float(len(trajectories))}


def sample_heldout(group: EnvRunnerGroup, num_tasks: int, seed: int) -> list[Trajectory]:
    """Run the held-out tasks of `seed` through `group`, sampling seeded from `seed` too; trajectories in task order."""
    sampling_seed = int(np.random.SeedSequence([seed, 2**31 - 1]).generate_state(1)[0])
    table, _ = group.sample(heldout_tasks(seed, num_tasks), seed=sampling_seed)
    return from_arrow(table)


def start_engine(model_path: str, engine: str = "vllm", seed: int = 0, num_gpus: float = 0.0, **engine_config):
    """An inference engine actor ("vllm" or "torch") serving `model_path`.

    Not inside the caller's placement group: under Tune that group holds only the trial actor itself."""
    if engine == "vllm":
        from memrl.engines.vllm_engine import VLLMEngine as engine_cls
    elif engine == "torch":
        from memrl.engines.torch_engine import TorchEngine as engine_cls
    else:
        raise ValueError(f"engine={engine!r} is not allowed; choose 'vllm' or 'torch'")
    actor = ray.remote(num_cpus=1, num_gpus=num_gpus)(engine_cls).options(
        scheduling_strategy=PlacementGroupSchedulingStrategy(placement_group=None))
    return actor.remote(model_path, seed=seed, **engine_config)


def evaluate_checkpoint(
    model_path: str,
    env: str,
    env_configs: list[dict],
    workflow: str,
    workflow_config: dict,
    num_tasks: int,
    max_tokens: int,
    *,
    engine: str = "vllm",
    engine_config: dict | None = None,
    num_env_runners: int = 2,
    max_calls: int = 4096,
    seed: int = 0,
) -> list[tuple[dict[str, float], list[Trajectory]]]:
    """Greedy held-out rollouts of a checkpoint under each of `env_configs` (e.g. one per document length).

    One engine serves every config; each config gets its own runner group. Returns, per config, the
    `eval_summary` (plus "sample_s", the wall time of that config's rollouts) and the trajectories. Needs a
    running Ray instance.
    """
    actor = start_engine(model_path, engine, seed=seed, **(engine_config or {}))
    results = []
    try:
        ray.get(actor.max_model_len.remote())  # the engine is up: its start-up stays out of the first sample_s
        for env_config in env_configs:
            spec = EnvRunnerSpec(env=env, env_config=env_config, workflow=workflow, workflow_config=workflow_config,
                                 tokenizer_path=model_path,
                                 sampling=SamplingConfig(max_tokens=max_tokens, temperature=0.0),
                                 num_envs=-(-num_tasks // num_env_runners), max_calls=max_calls)
            group = EnvRunnerGroup(spec, [actor], num_env_runners)
            start = time.perf_counter()
            try:
                trajectories = sample_heldout(group, num_tasks, seed)
            finally:
                group.shutdown()
            summary = {**eval_summary(trajectories), "sample_s": time.perf_counter() - start}
            results.append((summary, trajectories))
    finally:
        ray.kill(actor)
    return results
