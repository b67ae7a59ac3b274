"""RL algorithms: each an Algorithm (a Ray Tune Trainable) with its AlgorithmConfig."""

from memrl.algorithms.algorithm import Algorithm
from memrl.algorithms.grpo import DAPO, GRPO, DAPOConfig, GRPOConfig
from memrl.algorithms.mempo import MemPO, MemPOConfig
from memrl.algorithms.ppo import PPO, PPOConfig

__all__ = ["DAPO", "GRPO", "PPO", "Algorithm", "DAPOConfig", "GRPOConfig", "MemPO", "MemPOConfig", "PPOConfig"]
