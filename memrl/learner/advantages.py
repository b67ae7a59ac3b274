"""The methods' maths in one place: advantage estimators and reward shapers, by name, in numpy float64.

An iteration's rewards are first shaped (REWARD_SHAPERS, in training.reward_shapers' order), then one advantage
estimator (ADVANTAGES, training.advantage_estimator) gives every learner row's tokens their advantages:

| estimator          | advantage                                                                      | used by    |
|--------------------|--------------------------------------------------------------------------------|------------|
| "group"            | A_i = (R_i - mean_g R) / (std_g R + eps) on every token of trajectory i         | GRPO, DAPO |
| "call"             | A_ik = (r_ik - mean r) / (std r + eps) over all calls of the group, on call k   | Mem-α      |
| "call_by_position" | as "call", against the group's calls at the same position k only               | MemAgent   |
| "gae"              | GAE over each trajectory's trained tokens from the critic's values              | PPO        |
| "mempo"            | "group", plus A^M (normalised P(gold | memory) - P(gold | context)) on `<mem>` | MemPO      |

(the std only with training.norm_adv_by_std; below-mean advantages times training.negative_advantage_weight).
Code outside memrl adds its own with `@ADVANTAGES.register("name")` / `@REWARD_SHAPERS.register("name")`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

from memrl.learner.losses import kl_penalty_in_reward
from memrl.registry import Registry

if TYPE_CHECKING:
    from memrl.config import TrainingConfig
    from memrl.episode import Trajectory
    from memrl.learner.rows import RowBatch, TrainRow

ADVANTAGES: Registry = Registry("advantage estimator", "training.advantage_estimator")
"""Advantage estimators: `estimator(inputs: AdvantageInputs) -> figures` sets every row's "advantages" in
inputs.batch and returns figures for the result's "learners" section."""
REWARD_SHAPERS: Registry = Registry("reward shaper", "training.reward_shapers")
"""Reward shapers: `shaper(rewards, inputs)` adds its term to the per-trajectory rewards in place."""
MEMORY_SPAN = "mem"
"""The span (Conversation.spans) MemPO's memory advantage lands on."""


@dataclass
class AdvantageInputs:
    """What estimators and shapers read: the batch, its trajectories and settings, and the models' scores."""

    trajectories: Sequence[Trajectory]
    batch: RowBatch
    """The trajectories' learner rows (memrl.learner.rows.build_rows); estimators set their "advantages"."""
    training: TrainingConfig
    max_tokens: int
    """env_runners.max_tokens: the most tokens a response may have."""
    score: Callable[[list[dict]], list[np.ndarray]]
    """The policy's logprobs of each {"prompt_ids", "response_ids"} row's response after its prompt."""
    values: Callable[[list[TrainRow]], list[np.ndarray]] | None = None
    """The critic's value of each row token's context; None without a critic (only PPO has one)."""
    rewards: np.ndarray | None = None
    """Per-trajectory rewards once shaped (estimators read these; shapers build them)."""


def _as_1d(name: str, values: Sequence[float] | np.ndarray) -> np.ndarray:
    array = np.asarray(values, dtype=np.float64)
    if array.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {array.shape}")
    return array


def _group_index(group_ids: Sequence[object] | np.ndarray, size: int) -> np.ndarray:
    """Dense group index 0..G-1 per sample (group ids may be any sortable labels)."""
    ids = np.asarray(group_ids)
    if ids.shape != (size,):
        raise ValueError(f"group_ids must have shape ({size},) like rewards, got {ids.shape}")
    return np.unique(ids, return_inverse=True)[1].reshape(-1)


def group_advantages(
    rewards: Sequence[float] | np.ndarray,
    group_ids: Sequence[object] | np.ndarray,
    norm_std: bool = True,
    eps: float = 1e-6,
    negative_weight: float = 1.0,
) -> np.ndarray:
    """Group-relative advantage per sample: A_i = r_i - mean(group), divided by (std(group) + eps) when norm_std;
    below-mean ones (A_i < 0) times `negative_weight`.

    norm_std=True is GRPO; False is DAPO / Dr.GRPO. The std is the unbiased one (n - 1), as torch.std in verl.
    A group of one sample is its own mean, so its advantage is 0 (verl instead uses mean 0 and std 1 there).
    """
    if not eps >= 0:
        raise ValueError(f"eps must be >= 0, got {eps}")
    r = _as_1d("rewards", rewards)
    index = _group_index(group_ids, len(r))
    counts = np.bincount(index).astype(np.float64)
    means = np.bincount(index, weights=r) / counts
    centred = r - means[index]
    if norm_std:
        squares = np.bincount(index, weights=centred**2)
        # n - 1 in the denominator; max() keeps a size-1 group away from 0 / 0.
        stds = np.sqrt(squares / np.maximum(counts - 1, 1))
        scale = stds[index] + eps
        # Zero-variance groups have centred == 0; leaving them at 0 keeps eps = 0 free of 0 / 0.
        centred = np.divide(centred, scale, out=np.zeros_like(centred), where=scale > 0)
    return np.where(centred < 0, negative_weight * centred, centred)


def dynamic_sampling_mask(
    rewards: Sequence[float] | np.ndarray, group_ids: Sequence[object] | np.ndarray
) -> np.ndarray:
    """Bool per trajectory: False for every member of a group whose rewards are all equal (DAPO dynamic sampling).

    Such groups (a single sample included) have zero advantage and carry no learning signal.
    """
    r = _as_1d("rewards", rewards)
    index = _group_index(group_ids, len(r))
    groups = int(index.max()) + 1 if len(r) else 0
    lowest = np.full(groups, np.inf)
    highest = np.full(groups, -np.inf)
    np.minimum.at(lowest, index, r)
    np.maximum.at(highest, index, r)
    return (highest > lowest)[index]


def overlong_penalty(
    response_lengths: Sequence[int] | np.ndarray, max_tokens: int, buffer_tokens: int, penalty: float = 1.0
) -> np.ndarray:
    """DAPO soft overlong punishment, a reward term per sample (0 or negative).

    0 when length <= max_tokens - buffer_tokens; (max_tokens - buffer_tokens - length) / buffer_tokens * penalty
    inside the buffer; -penalty from max_tokens on.
    """
    if not max_tokens >= 1:
        raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
    if not 1 <= buffer_tokens <= max_tokens:
        raise ValueError(f"buffer_tokens must be in [1, max_tokens={max_tokens}], got {buffer_tokens}")
    if not penalty >= 0:
        raise ValueError(f"penalty must be >= 0, got {penalty}")
    lengths = _as_1d("response_lengths", response_lengths)
    return np.clip((max_tokens - buffer_tokens - lengths) / buffer_tokens, -1.0, 0.0) * penalty


def gae(
    rewards: np.ndarray, values: np.ndarray, mask: np.ndarray, gamma: float, lam: float
) -> tuple[np.ndarray, np.ndarray]:
    """Generalised advantage estimation per token for one sequence [T] or a batch [B, T] -> (advantages, returns).

    delta_t = r_t + gamma * V_next - V_t and A_t = delta_t + gamma * lam * A_next, where "next" is the next token
    with mask = 1 (masked tokens inside a sequence, such as the information tokens of a stitched trajectory, are
    jumped over) and V after the last real token is 0. Masked tokens get advantage and return 0; a nonzero reward
    on a masked token would be lost, so it is an error. returns = advantages + values on real tokens.
    """
    if not 0 <= gamma <= 1:
        raise ValueError(f"gamma must be in [0, 1], got {gamma}")
    if not 0 <= lam <= 1:
        raise ValueError(f"lam must be in [0, 1], got {lam}")
    r = np.asarray(rewards, dtype=np.float64)
    v = np.asarray(values, dtype=np.float64)
    m = np.asarray(mask, dtype=np.float64)
    if r.ndim not in (1, 2):
        raise ValueError(f"rewards must have shape [T] or [B, T], got {r.shape}")
    if v.shape != r.shape or m.shape != r.shape:
        raise ValueError(f"rewards, values and mask must share one shape, got {r.shape}, {v.shape}, {m.shape}")
    if not np.isin(m, (0.0, 1.0)).all():
        raise ValueError("mask must hold only 0 and 1")
    if np.any((m == 0) & (r != 0)):
        raise ValueError("rewards must be 0 where mask is 0 (a reward on a masked token would be dropped)")
    single = r.ndim == 1
    if single:
        r, v, m = r[None], v[None], m[None]

    advantages = np.zeros_like(r)
    next_value = np.zeros(r.shape[0])
    next_advantage = np.zeros(r.shape[0])
    for t in reversed(range(r.shape[1])):
        real = m[:, t] > 0
        delta = r[:, t] + gamma * next_value - v[:, t]
        advantage = delta + gamma * lam * next_advantage
        advantages[:, t] = np.where(real, advantage, 0.0)
        # A masked token leaves the carried value and advantage untouched, so the recursion jumps over it.
        next_value = np.where(real, v[:, t], next_value)
        next_advantage = np.where(real, advantage, next_advantage)
    returns = np.where(m > 0, advantages + v, 0.0)
    if single:
        return advantages[0], returns[0]
    return advantages, returns


def memory_rewards(
    memory_logprobs: Sequence[np.ndarray], prefix_logprobs: Sequence[np.ndarray]
) -> np.ndarray:
    """MemPO's memory reward per memory: P(gold | memory) - P(gold | context it was written from).

    Each P is the geometric mean of the gold answer tokens' probabilities, exp(mean(logprobs)), so answers of any
    length score in [0, 1]; the reward is in [-1, 1] and positive when the memory alone makes the gold answer
    likelier than the full context before it did.
    """
    if len(memory_logprobs) != len(prefix_logprobs):
        raise ValueError(f"got {len(memory_logprobs)} memory and {len(prefix_logprobs)} prefix scores; need pairs")
    for i, (m, p) in enumerate(zip(memory_logprobs, prefix_logprobs)):
        if len(m) == 0 or len(m) != len(p):
            raise ValueError(f"memory {i}: the same non-empty gold answer must be scored after both contexts, "
                             f"got {len(m)} and {len(p)} tokens")
    geometric = [float(np.exp(np.mean(np.asarray(lp, dtype=np.float64)))) for lp in memory_logprobs]
    baseline = [float(np.exp(np.mean(np.asarray(lp, dtype=np.float64)))) for lp in prefix_logprobs]
    return np.asarray(geometric) - np.asarray(baseline)


def row_advantages(trajectories: Sequence[Trajectory], norm_std: bool = True, negative_weight: float = 1.0,
                   by_position: bool = False) -> list[np.ndarray]:
    """Per trajectory, one advantage per conversation from its own reward (Conversation.reward): that reward minus
    the mean over its group's conversations (all of them, or with `by_position` only those at the same position in
    their trajectories: the same chunk of one task, in MemAgent), over their std when `norm_std`; below-mean ones
    times `negative_weight`."""
    rewards = np.array([c.reward for t in trajectories for c in t.conversations], dtype=np.float64)
    groups = [f"{t.group_id}#{k}" if by_position else str(t.group_id)
              for t in trajectories for k in range(len(t.conversations))]
    flat = group_advantages(rewards, groups, norm_std=norm_std, negative_weight=negative_weight)
    bounds = np.cumsum([0] + [len(t.conversations) for t in trajectories])
    return [flat[a:b] for a, b in zip(bounds[:-1], bounds[1:])]


def shape_rewards(inputs: AdvantageInputs) -> np.ndarray:
    """The trajectories' env rewards with each of training.reward_shapers' terms added, in that order."""
    rewards = np.array([t.reward for t in inputs.trajectories], dtype=np.float64)
    for name in inputs.training.reward_shapers:
        REWARD_SHAPERS.get(name)(rewards, inputs)
    return rewards


@REWARD_SHAPERS.register("overlong")
def overlong_shaper(rewards: np.ndarray, inputs: AdvantageInputs) -> None:
    """DAPO's soft overlong punishment (`overlong_penalty`) of each conversation, summed per trajectory; nothing
    while training.overlong_buffer_tokens is 0."""
    train = inputs.training
    if not train.overlong_buffer_tokens:
        return
    for i, t in enumerate(inputs.trajectories):
        lengths = [len(c.response_ids) for c in t.conversations]
        rewards[i] += overlong_penalty(lengths, inputs.max_tokens, train.overlong_buffer_tokens,
                                       train.overlong_penalty).sum()


@REWARD_SHAPERS.register("kl_in_reward")
def kl_shaper(rewards: np.ndarray, inputs: AdvantageInputs) -> None:
    """R_i -= kl_coef * sum of KL(pi || ref) over trajectory i's loss tokens, with training.loss.kl_in_reward (the
    rows then carry "ref_logprobs"); nothing otherwise."""
    loss = inputs.training.loss
    if not (loss.kl_in_reward and loss.kl_coef > 0):
        return
    for row in inputs.batch.rows:
        lp, ref = torch.as_tensor(row["old_logprobs"]), torch.as_tensor(row["ref_logprobs"])
        mask = torch.as_tensor(row["loss_mask"], dtype=torch.float32)
        shaped = kl_penalty_in_reward(torch.zeros_like(lp), lp, ref, mask, loss.kl_coef, loss.kl_estimator)
        rewards[row["trajectory"]] += float(shaped.sum())


@ADVANTAGES.register("group")
def group_estimator(inputs: AdvantageInputs) -> dict[str, float]:
    """GRPO / DAPO: each trajectory's `group_advantages` of its shaped reward, on all of its tokens."""
    train = inputs.training
    inputs.batch.assign_advantages(group_advantages(
        inputs.rewards, [t.group_id for t in inputs.trajectories], norm_std=train.norm_adv_by_std,
        negative_weight=train.negative_advantage_weight))
    return {}


def _call_estimator(inputs: AdvantageInputs, by_position: bool, figure: str) -> dict[str, float]:
    """Each conversation the advantage of its own reward (`row_advantages`); the calls' mean reward and mean absolute
    advantage as `<figure>_reward_mean` and `<figure>_advantage_abs_mean`."""
    train, trajectories = inputs.training, inputs.trajectories
    advantages = row_advantages(trajectories, train.norm_adv_by_std, train.negative_advantage_weight,
                                by_position=by_position)
    inputs.batch.assign_advantages(advantages)
    rows = np.concatenate(advantages) if advantages else np.zeros(0)
    return {f"{figure}_reward_mean": float(np.mean([c.reward for t in trajectories for c in t.conversations])),
            f"{figure}_advantage_abs_mean": float(np.abs(rows).mean()) if rows.size else 0.0}


@ADVANTAGES.register("call")
def call_estimator(inputs: AdvantageInputs) -> dict[str, float]:
    """Mem-α: every call (row) against all calls of its group's rollouts (paper, section 3.2); "row_" figures."""
    return _call_estimator(inputs, by_position=False, figure="row")


@ADVANTAGES.register("call_by_position")
def call_by_position_estimator(inputs: AdvantageInputs) -> dict[str, float]:
    """Each call against its group's calls at the same position (the same chunk of one task, in MemAgent with the
    env's per-call rewards, score_memories); "call_" figures."""
    return _call_estimator(inputs, by_position=True, figure="call")


@ADVANTAGES.register("gae")
def gae_estimator(inputs: AdvantageInputs) -> dict[str, float]:
    """PPO: per-token GAE advantages and returns from the critic's values (`token_advantages`), whitened over the
    batch with training.whiten_advantages; the reward sits on each trajectory's last trained token."""
    if inputs.values is None:
        raise ValueError("training.advantage_estimator='gae' needs a critic's values; only PPO trains a critic")
    train, batch = inputs.training, inputs.batch
    rows = batch.rows
    batch.set("old_values", inputs.values(rows))
    token_advantages(rows, inputs.rewards, train.gamma, train.lam)
    trained = np.concatenate([row["advantages"][row["loss_mask"] > 0] for row in rows])
    figures = {"advantage_abs_mean": float(np.abs(trained).mean()) if len(trained) else 0.0}
    if train.whiten_advantages:
        whiten([row["advantages"] for row in rows], [row["loss_mask"] for row in rows])
    return figures


@ADVANTAGES.register("mempo")
def mempo_estimator(inputs: AdvantageInputs) -> dict[str, float]:
    """MemPO: "group" on every token, plus training.memory_advantage_coef * A^M on each memory's `<mem>` tokens
    (`add_memory_advantages`)."""
    coef = getattr(inputs.training, "memory_advantage_coef", None)
    if coef is None:
        raise ValueError("training.advantage_estimator='mempo' needs training.memory_advantage_coef (MemPOConfig)")
    group_estimator(inputs)
    return add_memory_advantages(inputs.trajectories, inputs.batch, inputs.score, coef)


def token_advantages(rows: list[TrainRow], rewards: np.ndarray, gamma: float, lam: float) -> None:
    """In place: per-token "advantages" and "returns" of rows (memrl.learner.rows.build_rows, with "old_values") by
    GAE.

    A trajectory's rows, in order, are one sequence; its reward sits on its last trained token, and tokens with
    loss mask 0 are jumped over (they get 0), so plain and stitched rows of a trajectory get the same values.
    """
    by_trajectory: dict[int, list[TrainRow]] = {}
    for row in rows:
        by_trajectory.setdefault(row["trajectory"], []).append(row)
    for i, own in by_trajectory.items():
        mask = np.concatenate([r["loss_mask"] for r in own]).astype(np.float64)
        token_rewards = np.zeros_like(mask)
        trained = np.flatnonzero(mask)
        if len(trained):
            token_rewards[trained[-1]] = rewards[i]
        advantages, returns = gae(token_rewards, np.concatenate([r["old_values"] for r in own]), mask, gamma, lam)
        bounds = np.cumsum([0] + [len(r["response_ids"]) for r in own])
        for r, start, end in zip(own, bounds[:-1], bounds[1:]):
            r["advantages"] = advantages[start:end].astype(np.float32)
            r["returns"] = returns[start:end].astype(np.float32)


def whiten(advantages: list[np.ndarray], masks: list[np.ndarray], eps: float = 1e-8) -> None:
    """In place: advantages on trained tokens (mask > 0) to mean 0 and std 1 over all rows; others stay 0."""
    trained = np.concatenate([a[np.asarray(m) > 0] for a, m in zip(advantages, masks)])
    if len(trained) < 2:
        return
    mean, std = trained.mean(), trained.std()
    for a, m in zip(advantages, masks):
        on = np.asarray(m) > 0
        a[on] = (a[on] - mean) / (std + eps)


def add_memory_advantages(trajectories: Sequence[Trajectory], batch: RowBatch, score,
                          coef: float = 1.0) -> dict[str, float]:
    """Add coef * A^M to the batch's "advantages" on each memory's span tokens; returns the batch's memory figures.

    `score(rows)` gives per-row logprobs of each row's response (the gold answer) after its prompt (a probe
    context). `batch` is the trajectories' rows (memrl.learner.rows.build_rows) with advantages already set.
    """
    memories = [(i, k) for i, t in enumerate(trajectories) for k, c in enumerate(t.conversations)
                if MEMORY_SPAN in c.spans and {"memory", "prefix", "answer"} <= c.probes.keys()]
    if not memories:
        return {"memory_count": 0.0}
    score_rows = []
    for i, k in memories:
        probes = trajectories[i].conversations[k].probes
        score_rows += [{"prompt_ids": probes["memory"], "response_ids": probes["answer"]},
                       {"prompt_ids": probes["prefix"], "response_ids": probes["answer"]}]
    logprobs = score(score_rows)
    rewards = memory_rewards(logprobs[0::2], logprobs[1::2])
    advantages = coef * group_advantages(rewards, [trajectories[i].group_id for i, _ in memories], norm_std=True)
    for (i, k), advantage in zip(memories, advantages):
        batch.add_to_span(i, k, trajectories[i].conversations[k].spans[MEMORY_SPAN], advantage)
    return {"memory_count": float(len(memories)), "memory_reward_mean": float(rewards.mean()),
            "memory_p_gold_mean": float(np.mean([np.exp(np.mean(lp)) for lp in logprobs[0::2]]))}
