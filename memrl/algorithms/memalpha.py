"""Mem-α's GRPO: every chunk row has its own reward, and the group is the rows of one instance's rollouts.

The env (memrl/MemoryStore-v0) gives each conversation (one reply per chunk) its reward r_acc + beta * r_compress +
r_tool + gamma * r_content (Conversation.reward). A row's advantage is its reward minus the mean over all rows of the
rollouts of the same task, divided by their std (paper, section 3.2; the "call" estimator of
memrl.learner.advantages); it lands on that row's tokens. The loss is the
token mean over all rows; the authors' script adds a KL loss of 1e-3 (the paper uses none).
"""

from __future__ import annotations

from memrl.algorithms.algorithm import Algorithm
from memrl.algorithms.grpo import GRPOConfig
from memrl.learner.losses import LossConfig


class MemAlphaConfig(GRPOConfig):
    """GRPO over rows: std-normalised row advantages within each task's rollouts, clip 0.2, token-mean loss."""

    def __init__(self):
        super().__init__()
        self.training_cfg.loss = LossConfig(clip_low=0.2, clip_high=0.2, aggregation="token_mean")
        self.training_cfg.advantage_estimator = "call"


class MemAlpha(Algorithm):
    """GRPO with per-row rewards and row groups (Mem-α)."""

    @classmethod
    def get_default_config(cls) -> MemAlphaConfig:
        return MemAlphaConfig()


MemAlphaConfig.algo_class = MemAlpha
