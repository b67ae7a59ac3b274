"""PPO with a critic and GAE (MEM1): token-level advantages from a learned value of every context.

Each trajectory's trained tokens, in the order they were generated, form one sequence; its reward sits on the last
of them and GAE runs back over it, jumping tokens the model did not generate (information blocks, templates). By
default trajectories are stitched (memrl.learner.stitching), so the critic and the policy see each token in exactly
its rollout context while a MEM1 trajectory costs one forward pass. The critic is a second DeepSpeed learner group:
the policy checkpoint's backbone with a scalar head, trained on the GAE returns with value clipping. The advantage
maths is the "gae" estimator of memrl.learner.advantages.
"""

from __future__ import annotations

import dataclasses

from dataclasses import dataclass
from typing import Self

from memrl.algorithms.algorithm import Algorithm
from memrl.config import NOT_SET, AlgorithmConfig, TrainingConfig, builder, given
from memrl.episode import Trajectory
from memrl.learner.learner_group import LearnerGroup
from memrl.learner.losses import LossConfig
from memrl.learner.rows import TrainRow


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

    has_critic = True

    def __init__(self):
        super().__init__()
        self.training_cfg = PPOTrainingConfig(group_size=1, tasks_per_iteration=16, stitch_trajectories=True,
                                              advantage_estimator="gae",
                                              loss=LossConfig(clip_low=0.2, clip_high=0.2, aggregation="token_mean"))

    @builder
    def training(self, *, gamma: float = NOT_SET, lam: float = NOT_SET, critic_lr: float = NOT_SET,
                 critic_model_path: str | None = NOT_SET, critic_warmup_iterations: int = NOT_SET,
                 whiten_advantages: bool = NOT_SET, **common) -> Self:
        """Set PPOTrainingConfig's own settings (the critic's and GAE's) and, through AlgorithmConfig.training, the
        common ones."""
        super().training(**common)
        return self._set("training", **given(locals()))

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
        if train.negative_advantage_weight != 1:
            raise ValueError(f"training.negative_advantage_weight={train.negative_advantage_weight!r} is not allowed "
                             "for PPO: its GAE advantages are per token, not against a group; it must be 1")
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
        critic = dataclasses.replace(
            self.cfg.learner_config(head="value"),
            learners=dataclasses.replace(learn, model_path=train.critic_model_path or learn.model_path),
            optimizer=dataclasses.replace(train.optimizer, lr=train.critic_lr))
        self.critic_group = LearnerGroup(critic, faults=self.cfg.fault_tolerance_cfg,
                                         placement=self.placement("critic learners"))

    def critic_values(self):
        return self.critic_group.compute_values

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


PPOConfig.algo_class = PPO
