"""The trainers, each with its config: the RL methods (each an Algorithm) and SFT, both Trainers
(memrl.algorithms.trainer, a Ray Tune Trainable)."""

from memrl.algorithms.algorithm import Algorithm
from memrl.algorithms.grpo import DAPO, GRPO, DAPOConfig, GRPOConfig
from memrl.algorithms.memalpha import MemAlpha, MemAlphaConfig
from memrl.algorithms.mempo import MemPO, MemPOConfig
from memrl.algorithms.ppo import PPO, PPOConfig
from memrl.algorithms.sft import SFT, SFTConfig

__all__ = ["DAPO", "GRPO", "PPO", "SFT", "Algorithm", "DAPOConfig", "GRPOConfig", "MemAlpha", "MemAlphaConfig", "MemPO",
           "MemPOConfig", "PPOConfig", "SFTConfig"]
