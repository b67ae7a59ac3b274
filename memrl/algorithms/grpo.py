"""GRPO and DAPO: group-relative advantages, broadcast from each trajectory to all its conversations.

Multi-conversation trajectories (MemAgent, MemSearcher) train every conversation as its own row with
the trajectory's advantage; the loss aggregates over all rows' tokens with global counts.
"""

from __future__ import annotations

from memrl.algorithms.algorithm import Algorithm
from memrl.config import AlgorithmConfig
from memrl.learner.losses import LossConfig


class GRPOConfig(AlgorithmConfig):
    """GRPO defaults: advantages normalised by the group std, symmetric clip 0.2, per-sequence token mean."""

    min_group_size = 2

    def __init__(self):
        super().__init__()
        self.training_cfg.norm_adv_by_std = True
        self.training_cfg.loss = LossConfig(clip_low=0.2, clip_high=0.2, aggregation="seq_mean_token_mean")


class DAPOConfig(AlgorithmConfig):
    """DAPO defaults: no std normalisation, clip-higher (0.2 / 0.28), token mean over all rows, dynamic sampling."""

    min_group_size = 2

    def __init__(self):
        super().__init__()
        self.training_cfg.norm_adv_by_std = False
        self.training_cfg.dynamic_sampling = True
        self.training_cfg.loss = LossConfig(clip_low=0.2, clip_high=0.28, aggregation="token_mean")


class GRPO(Algorithm):
    """Group Relative Policy Optimization over multi-conversation trajectories."""

    @classmethod
    def get_default_config(cls) -> GRPOConfig:
        return GRPOConfig()


class DAPO(Algorithm):
    """DAPO (clip-higher, dynamic sampling, token-level loss) over multi-conversation trajectories."""

    @classmethod
    def get_default_config(cls) -> DAPOConfig:
        return DAPOConfig()


GRPOConfig.algo_class = GRPO
DAPOConfig.algo_class = DAPO
