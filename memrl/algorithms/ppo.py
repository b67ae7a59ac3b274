"""PPO with a critic and GAE (MEM1): token-level advantages from a learned value of every context.

Each trajectory's trained tokens, in the order they were generated, form one sequence; its reward sits on the last
of them and GAE runs back over it, jumping tokens the model did not generate (information blocks, templates). By
default trajectories are stitched (memrl.learner.stitching), so the critic and the policy see each token in exactly
its rollout context while a MEM1 trajectory costs one forward pass. The critic is a second DeepSpeed learner group:
the policy checkpoint's backbone with a scalar head, trained on the GAE returns with value clipping.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from memrl.algorithms.algorithm import Algorithm
from memrl.config import AlgorithmConfig, TrainingConfig
from memrl.episode import Trajectory
from memrl.learner.advantages import gae
from memrl.learner.learner_group import LearnerGroup
from memrl.learner.losses import LossConfig
from memrl.learner.rows import RowBatch, TrainRow


@dataclass
class PPOTrainingConfig(TrainingConfig):
    """TrainingConfig plus the critic and GAE settings."""

    gamma: float = 1.0
    """GAE discount per generated token; in [0, 1]."""
    lam: float = 1.0
    """GAE lambda; in [0, 1]. 1 with gamma 1 gives every token the reward minus its value."""
    critic_lr: float = 1e-5
    """AdamW learning rate of the critic (MEM1: 1e-5, ten times the actor's)."""
    critic_model_path: str | None = None
    """Checkpoint the critic's backbone starts from; None uses learners.model_path."""
    critic_warmup_iterations: int = 0
    """Iterations at the start that train the critic alone, so the first policy steps see useful values."""
    whiten_advantages: bool = True
    """Normalise advantages over the batch's trained tokens to mean 0 and std 1 (as verl's PPO does)."""


class PPOConfig(AlgorithmConfig):
    """PPO defaults: critic + GAE, stitched trajectories, symmetric clip 0.2, token mean, one task per group."""

    def __init__(self):
        super().__init__()
        self.training_cfg = PPOTrainingConfig(group_size=1, tasks_per_iteration=16, stitch_trajectories=True,
                                              loss=LossConfig(clip_low=0.2, clip_high=0.2, aggregation="token_mean"))

    def actor_groups(self) -> list[tuple[str, int, int, float, str]]:
        """The policy's actors plus the critic's learners (as many as the policy's, same resources each)."""
        groups = super().actor_groups()
        return [*groups, ("critic learners", *groups[0][1:])]

    def validate(self) -> None:
        super().validate()
        train = self.training_cfg
        for name in ("gamma", "lam"):
            if not 0 <= getattr(train, name) <= 1:
                raise ValueError(f"training.{name}={getattr(train, name)!r} is not allowed; it must be in [0, 1]")
        if train.negative_advantage_weight != 1 or train.call_advantages:
            raise ValueError(f"training.negative_advantage_weight={train.negative_advantage_weight!r} and "
                             f"call_advantages={train.call_advantages!r} are not allowed for PPO: its GAE advantages "
                             "are per token, not against a group; they must be 1 and False")
        if not train.critic_lr > 0:
            raise ValueError(f"training.critic_lr={train.critic_lr!r} is not allowed; it must be > 0")
        if not isinstance(train.critic_warmup_iterations, int) or train.critic_warmup_iterations < 0:
            raise ValueError(f"training.critic_warmup_iterations={train.critic_warmup_iterations!r} is not allowed; "
                             "it must be an integer >= 0")


class PPO(Algorithm):
    """Proximal policy optimisation with a learned critic and generalised advantage estimation."""

    @classmethod
    def get_default_config(cls) -> PPOConfig:
        return PPOConfig()

    def start_learners(self) -> None:
        super().start_learners()
        learn, train = self.cfg.learners_cfg, self.cfg.training_cfg
        self.critic_group = LearnerGroup(
            self.cfg.learner_config(model_path=train.critic_model_path or learn.model_path, lr=train.critic_lr,
                                    head="value"),
            **self.cfg.learner_group_options(), placement=self.placement("critic learners"),
        )

    def compute_advantages(self, trajectories: list[Trajectory], batch: RowBatch) -> dict[str, float]:
        """Per-token GAE advantages and returns from the critic's values; the reward sits on each trajectory's
        last trained token."""
        train = self.cfg.training_cfg
        rows = batch.rows
        rewards = self.training_rewards(trajectories, rows)
        batch.set("old_values", self.critic_group.compute_values(rows))
        token_advantages(rows, rewards, train.gamma, train.lam)
        trained = np.concatenate([row["advantages"][row["loss_mask"] > 0] for row in rows])
        figures = {"advantage_abs_mean": float(np.abs(trained).mean()) if len(trained) else 0.0}
        if train.whiten_advantages:
            whiten([row["advantages"] for row in rows], [row["loss_mask"] for row in rows])
        return figures

    def _train_minibatches(self, rows: list[TrainRow], trajectories: list[Trajectory],
                           group: LearnerGroup | None = None) -> dict[str, float]:
        """A critic step on the returns, then (after the warm-up iterations) the policy's steps."""
        critic = super()._train_minibatches(rows, trajectories, self.critic_group)
        metrics = {f"critic_{k}": v for k, v in critic.items()}
        if self.iteration >= self.cfg.training_cfg.critic_warmup_iterations:
            metrics.update(super()._train_minibatches(rows, trajectories))
        return metrics

    def learner_groups(self) -> dict[str, LearnerGroup]:
        return {**super().learner_groups(), "critic": self.critic_group}


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


PPOConfig.algo_class = PPO
