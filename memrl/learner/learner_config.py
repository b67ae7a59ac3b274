"""LearnerConfig: how each learner rank builds its model, optimizer and micro-batches, and the DeepSpeed config
made from it. Kept apart from the learner actor so that configs build and validate without importing DeepSpeed."""

from __future__ import annotations

import math
from dataclasses import dataclass

DTYPE_NAMES = ("float32", "bfloat16")
"""Training dtypes a learner accepts, by name."""

HEADS = ("lm", "value")
"""What a learner trains: the policy (a causal LM) or a critic (the same backbone with a scalar value head)."""

ATTN_IMPLEMENTATIONS = ("sdpa", "eager", "flash_attention_2")
"""transformers attention backends a learner may use (flash_attention_2 needs its package and a GPU)."""

LR_SCHEDULES = ("constant", "linear", "cosine")
"""Shapes of the learning rate after warm-up: held, or decayed linearly or along a half cosine to lr_min_ratio."""


@dataclass
class LearnerConfig:
    """How each learner rank builds its model, optimizer and micro-batches."""

    model_path: str
    """Local Hugging Face checkpoint to train (policy) and, with compute_ref, to keep frozen (reference)."""
    lr: float = 1e-6
    """AdamW peak learning rate (see lr_schedule)."""
    lr_schedule: str = "constant"
    """"constant", "linear" or "cosine": how the learning rate moves from lr (after warm-up) to lr * lr_min_ratio
    at optimizer step lr_decay_steps, where it then stays."""
    lr_warmup_steps: int = 0
    """Optimizer steps of linear warm-up: step k (from 0) uses lr * (k + 1) / lr_warmup_steps."""
    lr_decay_steps: int = 0
    """Optimizer step at which a linear or cosine schedule reaches its floor (> lr_warmup_steps); unused when
    constant."""
    lr_min_ratio: float = 0.0
    """Floor of a decaying schedule, as a share of lr."""
    weight_decay: float = 0.0
    """AdamW decoupled weight decay."""
    betas: tuple[float, float] = (0.9, 0.999)
    """AdamW moment decay rates."""
    eps: float = 1e-8
    """AdamW denominator epsilon."""
    grad_clip: float = 1.0
    """Clip the global gradient norm to this value; 0 turns clipping off."""
    zero_stage: int = 3
    """DeepSpeed ZeRO stage: 3 partitions parameters, gradients and optimizer state; 2 and 1 keep whole parameters."""
    param_persistence_threshold: int = 100_000
    """ZeRO-3 keeps parameters with fewer elements than this whole on every rank (fewer small gathers)."""
    token_budget: int = 8192
    """Most padded tokens (rows x longest row) in one forward pass."""
    seed: int = 0
    """Seed for torch's RNG on every rank."""
    compute_ref: bool = False
    """Also keep a frozen copy of the initial model to compute reference logprobs (KL terms)."""
    dtype: str = "float32"
    """Parameter dtype: "float32" (CPU) or "bfloat16" (GPUs; DeepSpeed keeps float32 master weights)."""
    attn_implementation: str = "sdpa"
    """transformers attention backend: "sdpa" or "eager" (or "flash_attention_2" where installed)."""
    dist_timeout_s: float = 1800.0
    """Timeout of the learners' collectives; a rank that never arrives fails the step instead of hanging."""
    logit_temperature: float = 1.0
    """The policy's logits are divided by this before logprobs and entropy: the distribution the engines sample from
    at that temperature, so tokens sampled at T != 1 are scored exactly on-policy. 1 scores the model's own."""
    head: str = "lm"
    """"lm": the policy, trained with the policy-gradient (or SFT) loss; "value": a PPO critic, the checkpoint's
    backbone with a fresh scalar head (AutoModelForTokenClassification, one label), trained on value targets."""

    def __post_init__(self) -> None:
        # model_path is checked where the learners start (LearnerGroup): a config may name a checkpoint that lives
        # on the cluster's nodes, not on the machine that builds the config.
        if not self.lr > 0:
            raise ValueError(f"LearnerConfig.lr must be > 0, got {self.lr}")
        if self.lr_schedule not in LR_SCHEDULES:
            raise ValueError(f"LearnerConfig.lr_schedule must be one of {LR_SCHEDULES}, got {self.lr_schedule!r}")
        if not isinstance(self.lr_warmup_steps, int) or self.lr_warmup_steps < 0:
            raise ValueError(f"LearnerConfig.lr_warmup_steps must be an integer >= 0, got {self.lr_warmup_steps!r}")
        if self.lr_schedule != "constant" and not self.lr_decay_steps > self.lr_warmup_steps:
            raise ValueError(f"LearnerConfig.lr_decay_steps must be > lr_warmup_steps ({self.lr_warmup_steps}) with "
                             f"lr_schedule={self.lr_schedule!r} (the step its decay ends), got {self.lr_decay_steps!r}")
        if not 0 <= self.lr_min_ratio <= 1:
            raise ValueError(f"LearnerConfig.lr_min_ratio must be in [0, 1], got {self.lr_min_ratio!r}")
        if not self.weight_decay >= 0:
            raise ValueError(f"LearnerConfig.weight_decay must be >= 0, got {self.weight_decay}")
        if len(self.betas) != 2 or not all(0 <= b < 1 for b in self.betas):
            raise ValueError(f"LearnerConfig.betas must be two values in [0, 1), got {self.betas}")
        if not self.eps > 0:
            raise ValueError(f"LearnerConfig.eps must be > 0, got {self.eps}")
        if not self.grad_clip >= 0:
            raise ValueError(f"LearnerConfig.grad_clip must be >= 0 (0 = off), got {self.grad_clip}")
        if self.zero_stage not in (1, 2, 3):
            raise ValueError(f"LearnerConfig.zero_stage must be 1, 2 or 3, got {self.zero_stage}")
        if self.param_persistence_threshold < 0:
            raise ValueError(
                f"LearnerConfig.param_persistence_threshold must be >= 0, got {self.param_persistence_threshold}"
            )
        if self.token_budget < 1:
            raise ValueError(f"LearnerConfig.token_budget must be >= 1, got {self.token_budget}")
        if self.dtype not in DTYPE_NAMES:
            raise ValueError(f"LearnerConfig.dtype must be one of {DTYPE_NAMES}, got {self.dtype!r}")
        if not self.logit_temperature > 0:
            raise ValueError(f"LearnerConfig.logit_temperature must be > 0, got {self.logit_temperature}")
        if self.head not in HEADS:
            raise ValueError(f"LearnerConfig.head must be one of {HEADS}, got {self.head!r}")
        if self.head == "value" and self.compute_ref:
            raise ValueError("LearnerConfig.compute_ref is for policies; a critic (head='value') has no reference")
        if not self.dist_timeout_s > 0:
            raise ValueError(f"LearnerConfig.dist_timeout_s must be > 0, got {self.dist_timeout_s}")
        if self.attn_implementation not in ATTN_IMPLEMENTATIONS:
            raise ValueError(f"LearnerConfig.attn_implementation must be one of {ATTN_IMPLEMENTATIONS}, got "
                             f"{self.attn_implementation!r}")


def lr_factor(config: LearnerConfig, step: int) -> float:
    """The share of config.lr that optimizer step `step` (counted from 0) uses under config's schedule."""
    if step < config.lr_warmup_steps:
        return (step + 1) / config.lr_warmup_steps
    if config.lr_schedule == "constant":
        return 1.0
    progress = min(1.0, (step - config.lr_warmup_steps) / (config.lr_decay_steps - config.lr_warmup_steps))
    shape = 1.0 - progress if config.lr_schedule == "linear" else 0.5 * (1.0 + math.cos(math.pi * progress))
    return config.lr_min_ratio + (1.0 - config.lr_min_ratio) * shape


def deepspeed_config(config: LearnerConfig, train: bool) -> dict:
    """The DeepSpeed config of the policy engine (train=True) or the frozen reference engine."""
    ds = {
        # Batches are ours (token-budget micro-batches); DeepSpeed only needs consistent numbers here.
        "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": 1,
        # ZeRO-1/2 partition only optimizer state and gradients, which a frozen model has none of.
        "zero_optimization": {"stage": config.zero_stage if train or config.zero_stage == 3 else 0},
        "bf16": {"enabled": config.dtype == "bfloat16"},
        "steps_per_print": 1 << 62,
        "wall_clock_breakdown": False,
    }
    if config.zero_stage == 3:
        ds["zero_optimization"]["stage3_param_persistence_threshold"] = config.param_persistence_threshold
    if train:
        # Each train_step runs a varying number of backward passes and then exactly one step(): in unmanaged
        # mode backward() only accumulates and every step() is the boundary that reduces and updates.
        ds["managed_gradient_accumulation"] = False
        ds["gradient_clipping"] = config.grad_clip
    return ds
