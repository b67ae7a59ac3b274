"""Advantage estimators and reward shaping (GRPO/DAPO group baselines, GAE, overlong penalty), numpy float64."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


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
