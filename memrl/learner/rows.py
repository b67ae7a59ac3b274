"""Learner rows: trajectories laid out for training once, then given their shaped rewards' advantages.

A row is what one forward pass trains on: a conversation, or (stitched) a whole trajectory's token tree
(memrl.learner.stitching). `build_rows` lays a batch out once and keeps, beside the rows, where every
conversation's response tokens sit, so that anything scored per conversation (MemPO's memories, a per-call reward)
lands on exactly those tokens however the batch was laid out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypedDict

import numpy as np

from memrl.episode import Trajectory
from memrl.learner.stitching import stitch


class _RowTokens(TypedDict):
    prompt_ids: np.ndarray
    """Prompt token ids: the context the response is predicted from."""
    response_ids: np.ndarray
    """Response token ids, the ones trained on (where loss_mask is 1)."""


class TrainRow(_RowTokens, total=False):
    """One learner row (a plain dict, as learners receive it). Every array but prompt_ids and parents has one value
    per response token."""

    trajectory: int
    """Index of the row's trajectory in its batch."""
    parents: np.ndarray
    """Stitched rows only: each prompt + response token's parent in the token tree (-1 for a root)."""
    loss_mask: np.ndarray
    """1 where the token is trained on, 0 for env, tool and template tokens (int8)."""
    old_logprobs: np.ndarray
    """Logprobs under the sampling policy: the engine's, or recomputed by the learner."""
    ref_logprobs: np.ndarray
    """Logprobs under the frozen reference model, when a KL term needs them."""
    advantages: np.ndarray
    """Policy-gradient advantage of each token."""
    old_values: np.ndarray
    """PPO: the critic's value of each token's context before the update."""
    returns: np.ndarray
    """PPO: the critic's regression targets."""


@dataclass
class RowBatch:
    """The rows of a batch of trajectories and where each conversation's response tokens went."""

    rows: list[TrainRow]
    """Learner rows in trajectory order."""
    positions: list[list[tuple[int, np.ndarray]]]
    """Per trajectory, per conversation: (index of its row, where its response tokens sit in that row's response)."""

    def set(self, key: str, per_row: Sequence[np.ndarray]) -> None:
        """Give every row its array `key` (one per row, in row order), e.g. logprobs the learners computed."""
        if len(per_row) != len(self.rows):
            raise ValueError(f"RowBatch.set({key!r}) got {len(per_row)} arrays for {len(self.rows)} rows")
        for row, values in zip(self.rows, per_row):
            row[key] = values

    def assign_advantages(self, advantages: np.ndarray | Sequence[np.ndarray]) -> None:
        """Set every row's "advantages": one value per trajectory (shape [T]) on all of its tokens, or one value per
        conversation (a sequence of T arrays, each [calls of that trajectory]) on that conversation's response
        tokens (tokens no conversation generated, in a stitched row, get 0 and are masked anyway)."""
        if isinstance(advantages, np.ndarray) and advantages.ndim == 1:
            advantages = np.asarray(advantages, dtype=np.float64)
            if advantages.shape != (len(self.positions),):
                raise ValueError(f"need one advantage per trajectory ({len(self.positions)}), got shape "
                                 f"{advantages.shape}")
            for row in self.rows:
                row["advantages"] = np.full(len(row["response_ids"]), advantages[row["trajectory"]], dtype=np.float32)
            return
        if len(advantages) != len(self.positions):
            raise ValueError(f"need per-conversation advantages for {len(self.positions)} trajectories, got "
                             f"{len(advantages)}")
        for row in self.rows:
            row["advantages"] = np.zeros(len(row["response_ids"]), dtype=np.float32)
        for i, (where, values) in enumerate(zip(self.positions, advantages)):
            if len(values) != len(where):
                raise ValueError(f"trajectory {i} has {len(where)} conversations; got {len(values)} advantages")
            for (row, index), value in zip(where, values):
                self.rows[row]["advantages"][index] = np.float32(value)

    def add_to_span(self, trajectory: int, conversation: int, ranges: Sequence[tuple[int, int]], value: float) -> None:
        """Add `value` to the advantages of the [start, end) ranges of one conversation's response tokens."""
        row, index = self.positions[trajectory][conversation]
        for start, end in ranges:
            self.rows[row]["advantages"][index[start:end]] += np.float32(value)


def build_rows(trajectories: Sequence[Trajectory], stitched: bool = False) -> RowBatch:
    """The batch's rows, in trajectory order: one per conversation, or, stitched, one token tree per trajectory in
    which tokens no conversation generated carry loss mask 0. Advantages come later."""
    rows: list[TrainRow] = []
    positions = []
    for i, t in enumerate(trajectories):
        if not stitched:
            positions.append([(len(rows) + k, np.arange(len(c.response_ids))) for k, c in enumerate(t.conversations)])
            rows += [TrainRow(prompt_ids=c.prompt_ids, response_ids=c.response_ids, loss_mask=c.loss_mask,
                              old_logprobs=c.logprobs, trajectory=i) for c in t.conversations]
            continue
        tree = stitch([(c.prompt_ids, c.response_ids) for c in t.conversations])
        positions.append([(len(rows), index) for index in tree.response_index])
        rows.append(TrainRow(prompt_ids=tree.prompt_ids, response_ids=tree.response_ids, parents=tree.parents,
                             loss_mask=tree.scatter([c.loss_mask for c in t.conversations], dtype=np.int8),
                             old_logprobs=tree.scatter([c.logprobs for c in t.conversations]), trajectory=i))
    return RowBatch(rows, positions)


def importance_figures(rows: Sequence[TrainRow], rollout_logprobs: Sequence[np.ndarray],
                       cap: float) -> dict[str, float]:
    """How far the engines' sampling policy is from the learner's on the rows' loss tokens: the importance weight
    pi_old / pi_rollout (rows' "old_logprobs" against `rollout_logprobs`), its mean and max, and the share of tokens
    whose weight is above `cap`."""
    mask = np.concatenate([np.asarray(r["loss_mask"]) > 0 for r in rows])
    gap = np.concatenate([np.asarray(r["old_logprobs"], np.float64) - np.asarray(lp, np.float64)
                          for r, lp in zip(rows, rollout_logprobs)])[mask]
    if gap.size == 0:
        return {}
    weights = np.exp(np.clip(gap, -20.0, 20.0))
    return {"is_weight_mean": float(weights.mean()), "is_weight_max": float(weights.max()),
            "is_capped_share": float((weights > cap).mean())}
