"""MemPO: GRPO plus a memory advantage on the tokens of each `<mem>` block.

Every token gets its trajectory's group-normalised advantage A^T. Each memory the policy wrote is also scored by
the learner's own model: R^M = P(gold answer | questions + this memory alone) - P(gold answer | the context the
memory was written from), with P the geometric mean of the answer tokens' probabilities. The R^M of all memories
in a group (every step of every trajectory of one task) are normalised by the group's mean and std into A^M,
which is added on that memory's `<mem>` tokens only (scaled by `memory_advantage_coef`; the paper adds it as it
is). The probes to score come from the workflow (mempo); the maths is the "mempo" estimator of
memrl.learner.advantages.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Self

from memrl.algorithms.algorithm import Algorithm
from memrl.algorithms.grpo import GRPOConfig
from memrl.config import NOT_SET, TrainingConfig, builder, given


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
        self.training_cfg = MemPOTrainingConfig(**{**vars(self.training_cfg), "advantage_estimator": "mempo"})

    @builder
    def training(self, *, memory_advantage_coef: float = NOT_SET, **common) -> Self:
        """Set MemPO's weight of the memory advantage and, through AlgorithmConfig.training, the common settings."""
        super().training(**common)
        return self._set("training", **given(locals()))

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


MemPOConfig.algo_class = MemPO
