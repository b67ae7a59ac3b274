"""MemPO: GRPO plus a memory advantage on the tokens of each `<mem>` block.

Every token gets its trajectory's group-normalised advantage A^T. Each memory the policy wrote is also scored by
the learner's own model: R^M = P(gold answer | questions + this memory alone) - P(gold answer | the context the
memory was written from), with P the geometric mean of the answer tokens' probabilities. The R^M of all memories
in a group (every step of every trajectory of one task) are normalised by the group's mean and std into A^M,
which is added on that memory's `<mem>` tokens only (scaled by `memory_advantage_coef`; the paper adds it as it
is). The probes to score come from the workflow (mempo).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from memrl.algorithms.algorithm import Algorithm
from memrl.algorithms.grpo import GRPOConfig
from memrl.config import TrainingConfig
from memrl.episode import Trajectory
from memrl.learner.advantages import group_advantages, memory_rewards
from memrl.learner.rows import RowBatch

MEMORY_SPAN = "mem"
"""The span (Conversation.spans) the memory advantage lands on."""


@dataclass
class MemPOTrainingConfig(TrainingConfig):
    """TrainingConfig plus the weight of the memory advantage."""

    memory_advantage_coef: float = 1.0
    """A^M is multiplied by this before it is added on the `<mem>` tokens; >= 0. 1 is the paper's sum A^T + A^M, 0
    leaves plain GRPO on the mempo workflow. A probe the policy reads poorly makes A^M noisy, and a smaller weight
    keeps that noise from drowning A^T on the memory tokens."""


class MemPOConfig(GRPOConfig):
    """GRPO's defaults (std-normalised group advantages, clip 0.2); workflow "mempo" supplies the memory probes."""

    def __init__(self):
        super().__init__()
        self.training_cfg = MemPOTrainingConfig(**vars(self.training_cfg))

    def validate(self) -> None:
        super().validate()
        coef = self.training_cfg.memory_advantage_coef
        if not coef >= 0:
            raise ValueError(f"training.memory_advantage_coef={coef!r} is not allowed; it must be >= 0")


class MemPO(Algorithm):
    """Self-memory policy optimisation: trajectory advantage everywhere, plus memory advantage on `<mem>` tokens."""

    @classmethod
    def get_default_config(cls) -> MemPOConfig:
        return MemPOConfig()

    def compute_advantages(self, trajectories: list[Trajectory], batch: RowBatch) -> dict[str, float]:
        super().compute_advantages(trajectories, batch)
        return add_memory_advantages(trajectories, batch,
                                     lambda score_rows: self.learner_group.compute_logprobs(score_rows)[0],
                                     self.cfg.training_cfg.memory_advantage_coef)


def add_memory_advantages(trajectories: list[Trajectory], batch: RowBatch, score,
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


MemPOConfig.algo_class = MemPO
