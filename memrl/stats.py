"""Figures of a set of trajectories, and confidence intervals (held-out accuracy is always reported with one)."""

from __future__ import annotations

import math

import numpy as np

from memrl.episode import Trajectory

Z95 = 1.959963984540054
"""Two-sided 95% normal quantile."""


def wilson_interval(successes: float, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion; (0, 1) when n is 0."""
    if n <= 0:
        return 0.0, 1.0
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    # min/max with p: at p = 0 or 1 the bound equals p exactly, not a rounding error beside it.
    return max(0.0, min(p, centre - half)), min(1.0, max(p, centre + half))


def mean_interval(values, z: float = Z95) -> tuple[float, float, float]:
    """Mean and normal-approximation 95% interval (mean ± z·s/√n) of real-valued samples."""
    x = np.asarray(values, dtype=np.float64)
    if x.size == 0:
        return float("nan"), float("nan"), float("nan")
    mean = float(x.mean())
    if x.size == 1:
        return mean, mean, mean
    half = z * float(x.std(ddof=1)) / math.sqrt(x.size)
    return mean, mean - half, mean + half


def paired_interval(before, after) -> tuple[float, float, float]:
    """Mean per-task change `after - before` and its 95% interval, for two evaluations of the same tasks in the same
    order: the interval of the change itself, far tighter than comparing the two evaluations' own intervals."""
    before, after = np.asarray(before, dtype=np.float64), np.asarray(after, dtype=np.float64)
    if before.shape != after.shape:
        raise ValueError(f"paired_interval needs one value per task in both evaluations; got {before.shape} before "
                         f"and {after.shape} after")
    return mean_interval(after - before)


def reward_interval(rewards) -> tuple[float, float, float]:
    """Mean reward and its 95% interval: Wilson when every reward is 0 or 1 (success rates near 0 or 1 get a
    sensible interval inside [0, 1]), the normal approximation otherwise."""
    mean, low, high = mean_interval(rewards)
    rewards = [float(r) for r in rewards]
    if rewards and set(rewards) <= {0.0, 1.0}:
        low, high = wilson_interval(sum(rewards), len(rewards))
    return mean, low, high


def summarize(trajectories: list[Trajectory]) -> dict[str, float]:
    """Mean reward and the mean of each env figure of a set of trajectories, plus the largest context, for result
    dicts. Failed episodes (`Trajectory.failure`) are counted in num_failed and left out of every other figure."""
    failed = sum(1 for t in trajectories if t.failure)
    trajectories = [t for t in trajectories if not t.failure]
    if not trajectories:
        return {"num_failed": float(failed)} if failed else {}
    out = {"reward_mean": float(np.mean([t.reward for t in trajectories])), "num_failed": float(failed)}
    keys = sorted(set().union(*(t.metrics for t in trajectories)))
    for k in keys:
        out[f"{k}_mean"] = float(np.mean([t.metrics.get(k, 0.0) for t in trajectories]))
    out["peak_context_tokens_max"] = float(max(t.metrics.get("peak_context_tokens", 0.0) for t in trajectories))
    return out


def eval_summary(trajectories: list[Trajectory]) -> dict[str, float]:
    """`summarize`, with the mean reward's 95% interval (Wilson for 0/1 rewards, normal otherwise) and the count of
    tasks scored (num_tasks; failed episodes are in num_failed instead)."""
    scored = [t for t in trajectories if not t.failure]
    mean, low, high = reward_interval([t.reward for t in scored])
    return {**summarize(trajectories), "reward_mean": mean, "reward_ci_low": low, "reward_ci_high": high,
            "num_tasks": float(len(scored)), "num_failed": float(len(trajectories) - len(scored))}


def task_rewards(rounds: list[list[Trajectory]]) -> np.ndarray:
    """Rewards of k rounds over the same tasks as a [k, tasks] array (rounds in task order); NaN where an episode
    failed."""
    return np.array([[float("nan") if t.failure else t.reward for t in trajs] for trajs in rounds], dtype=np.float64)


def per_task_of_k(rewards: np.ndarray) -> dict[str, np.ndarray]:
    """Each task's figures from k samples ([k, tasks] rewards): "reward" (its mean), "pass_at_k" (its best) and
    "all_k" (its worst); NaN for a task with a failed round."""
    rewards = np.asarray(rewards, dtype=np.float64)
    if rewards.ndim != 2 or rewards.shape[0] < 1:
        raise ValueError(f"k samples per task need a [k, tasks] array with k >= 1, got shape {rewards.shape}")
    return {"reward": rewards.mean(axis=0), "pass_at_k": rewards.max(axis=0), "all_k": rewards.min(axis=0)}


def best_and_worst_of_k(rewards: np.ndarray) -> dict[str, float]:
    """Figures of k samples per task ([k, tasks] rewards; tasks with a failed round are left out), each a mean over
    tasks with its 95% interval: reward (the task's mean over its samples; the interval is over tasks, since a task's
    samples are not independent), pass_at_k (its best sample: for 0/1 rewards, any right) and all_k (its worst: all
    right). num_tasks and samples say what they are over."""
    figures = per_task_of_k(rewards)
    scored = ~np.isnan(figures["reward"])
    out = {"num_tasks": float(scored.sum()), "samples": float(np.shape(rewards)[0])}
    for name, per_task in figures.items():
        interval = mean_interval if name == "reward" else reward_interval
        out[f"{name}_mean"], out[f"{name}_ci_low"], out[f"{name}_ci_high"] = interval(per_task[scored])
    return out
