"""Held-out evaluation: greedy rollouts of a policy on tasks no training run sees, summarised with 95% intervals.

`Algorithm.evaluate()` uses it on the engines of a training run; `evaluate_checkpoint` does the same for any
Hugging Face checkpoint on engines of its own (warm-starts, baselines, trained policies, longer documents), greedily
or as k samples per task at a temperature (what RL trains on: sampled accuracy, pass@k and all-k-right).
"""

from __future__ import annotations

import time

from memrl.cluster import FaultToleranceConfig, get
from memrl.engines import start_engine, stop_engine
from memrl.engines.base import SamplingConfig
from memrl.episode import Trajectory, from_arrow
from memrl.rollout import EnvRunnerGroup, EnvRunnerSpec, Task
from memrl.seeds import derive_seed, heldout_env_seeds, heldout_sampling_seed
from memrl.stats import best_and_worst_of_k, eval_summary, task_rewards


def heldout_tasks(seed: int, num_tasks: int) -> list[Task]:
    """The held-out tasks of `seed` (memrl.seeds.heldout_env_seeds: odd env seeds, disjoint from training's)."""
    seeds = heldout_env_seeds(seed, num_tasks)
    return [Task(seed=s, group_id=f"eval-{i}", traj_id=f"eval-{i}") for i, s in enumerate(seeds)]


def sample_heldout(group: EnvRunnerGroup, num_tasks: int, seed: int, sample=None, round_: int = 0) -> list[Trajectory]:
    """Run the held-out tasks of `seed` through `group`, sampling seeded from `seed` and `round_` (another round of
    the same tasks samples anew); trajectories in task order. `sample(group, tasks, seed)` runs the round
    (Algorithm.sample replaces engines that fail); default group.sample."""
    tasks = heldout_tasks(seed, num_tasks)
    sampling_seed = heldout_sampling_seed(seed) if round_ == 0 else derive_seed(heldout_sampling_seed(seed), round_)
    table, _ = sample(group, tasks, sampling_seed) if sample else group.sample(tasks, seed=sampling_seed)
    return from_arrow(table)


def check_sampling(samples: int, temperature: float) -> None:
    """Raise a ValueError unless `samples` answers per task at `temperature` make sense: samples >= 1,
    temperature >= 0, and temperature > 0 when samples > 1 (greedy rounds would repeat each other)."""
    if not isinstance(samples, int) or samples < 1 or temperature < 0 or (samples > 1 and temperature == 0):
        raise ValueError(f"samples must be an integer >= 1 and temperature >= 0, with temperature > 0 when samples "
                         f"> 1; got samples={samples!r}, temperature={temperature!r}")


def evaluate_checkpoint(
    model_path: str,
    env: str,
    env_configs: list[dict],
    workflow: str,
    workflow_config: dict,
    num_tasks: int | list[int],
    max_tokens: int,
    *,
    engine: str = "vllm",
    engine_config: dict | None = None,
    num_env_runners: int = 2,
    num_engines: int | None = None,
    max_calls: int = 4096,
    seed: int = 0,
    faults: FaultToleranceConfig | None = None,
    temperature: float = 0.0,
    samples: int = 1,
) -> list[tuple[dict[str, float], list[Trajectory]]]:
    """Held-out rollouts of a checkpoint under each of `env_configs` (e.g. one per document length), on `num_tasks`
    tasks each (or num_tasks[i] for env_configs[i]): greedy by default, else `samples` rounds of the same tasks at
    `temperature` (samples > 1 needs temperature > 0: greedy rounds would repeat each other).

    One engine and one group of runners serve every config (the runners take each config in turn). Returns, per
    config, the `eval_summary` over every round's trajectories (plus "sample_s", the wall time of that config's
    rollouts, and with samples > 1 `memrl.stats.best_and_worst_of_k`'s figures) and the trajectories, round after
    round, each round in task order. `num_env_runners` runner actors share the tasks (0: one runner in this process,
    as env_runners(num_env_runners=0) in training); `num_engines` 0 runs a torch engine in this process too, as
    env_runners(num_engines=0), and 1 an engine actor (None: 0 for the torch engine with num_env_runners=0, else 1).
    Needs a running Ray instance; `faults` gives the deadlines (the engine's start: actor_start_timeout_s) and
    retries (None: FaultToleranceConfig's defaults).
    """
    counts = [num_tasks] * len(env_configs) if isinstance(num_tasks, int) else list(num_tasks)
    if len(counts) != len(env_configs) or min(counts, default=1) < 1:
        raise ValueError(f"num_tasks must be a positive int or one positive count per env config "
                         f"({len(env_configs)}), got {num_tasks!r}")
    check_sampling(samples, temperature)
    faults = faults or FaultToleranceConfig()
    if num_engines is None:
        num_engines = 0 if num_env_runners == 0 and engine == "torch" else 1
    if num_engines not in (0, 1) or num_engines == 0 and (num_env_runners or engine != "torch"):
        raise ValueError(f"num_engines={num_engines!r} is not allowed with num_env_runners={num_env_runners} and "
                         f"engine={engine!r}; it must be 1 (an engine actor) or 0 (a torch engine in this process, "
                         "with num_env_runners=0)")
    runners = num_env_runners or 1  # 0: one runner in this process, for the one engine
    actor = start_engine(model_path, engine, seed=seed, in_process=num_engines == 0, **(engine_config or {}))
    results, group = [], None
    try:
        # The engine is up: its start-up stays out of the first sample_s.
        get(actor.max_model_len.remote(), faults.actor_start_timeout_s, "starting the inference engine",
            "evaluate_checkpoint(faults=FaultToleranceConfig(actor_start_timeout_s=...))")
        for env_config, n in zip(env_configs, counts):
            spec = EnvRunnerSpec(env=env, env_config=env_config, workflow=workflow, workflow_config=workflow_config,
                                 tokenizer_path=model_path,
                                 sampling=SamplingConfig(max_tokens=max_tokens, temperature=temperature),
                                 num_envs=-(-n // runners), max_calls=max_calls, faults=faults,
                                 continuous_batching=False)
            if group is None:
                group = EnvRunnerGroup(spec, [actor], num_env_runners)
            else:
                group.configure(spec)
            start = time.perf_counter()
            rounds = [sample_heldout(group, n, seed, round_=r) for r in range(samples)]
            trajectories = [t for trajs in rounds for t in trajs]
            summary = {**eval_summary(trajectories), "sample_s": time.perf_counter() - start}
            if samples > 1:
                summary.update(best_and_worst_of_k(task_rewards(rounds)))
            results.append((summary, trajectories))
    finally:
        if group is not None:
            group.shutdown()
        stop_engine(actor)
    return results
