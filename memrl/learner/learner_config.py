"""The learner side's settings: the learner group (LearnersConfig), the optimizer (OptimizerConfig), what each rank
builds from them (LearnerConfig) and the DeepSpeed config made from that. Kept apart from the learner actor so that
configs build and validate without importing DeepSpeed; the builder (memrl.config) holds the first two as its
learners and training sections, and hands them to the learners unchanged."""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field

DTYPE_NAMES = ("float32", "bfloat16")
"""Training dtypes a learner accepts, by name."""

HEADS = ("lm", "value")
"""What a learner trains: the policy (a causal LM) or a critic (the same backbone with a scalar value head)."""

ATTN_IMPLEMENTATIONS = ("sdpa", "eager", "flash_attention_2")
"""transformers attention backends a learner may use (flash_attention_2 needs its package and a GPU)."""

LR_SCHEDULES = ("constant", "linear", "cosine")
"""Shapes of the learning rate after warm-up: held, or decayed linearly or along a half cosine to lr_min_ratio."""


def _at_least(where: str, value, low, *, strict: bool = False) -> None:
    if not (value > low if strict else value >= low):
        raise ValueError(f"{where}={value!r} is not allowed; it must be {'>' if strict else '>='} {low}")


@dataclass
class OptimizerConfig:
    """AdamW and its learning-rate schedule: the builder's training(lr=..., ...) settings, handed to every learner
    unchanged (a PPO critic's copy differs in its lr)."""

    lr: float = 1e-5
    """AdamW peak learning rate (see lr_schedule)."""
    lr_schedule: str = "constant"
    """"constant", "linear" or "cosine": how the learning rate moves from lr (after warm-up) to lr * lr_min_ratio
    at optimizer step lr_decay_steps, where it then stays. Resuming a checkpoint continues the schedule."""
    lr_warmup_steps: int = 0
    """Optimizer steps of linear warm-up: step k (from 0) uses lr * (k + 1) / lr_warmup_steps."""
    lr_decay_steps: int = 0
    """Optimizer step at which a linear or cosine schedule reaches its floor (> lr_warmup_steps); with
    num_minibatches steps per iteration, iterations x num_minibatches. Unused when constant."""
    lr_min_ratio: float = 0.0
    """Floor of a decaying schedule, as a share of lr."""
    weight_decay: float = 0.0
    """AdamW decoupled weight decay."""
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    """AdamW moment decay rates, two values each in [0, 1) (a list, as the config's JSON form keeps it)."""
    eps: float = 1e-8
    """AdamW denominator epsilon."""
    grad_clip: float = 1.0
    """Clip the global gradient norm to this value; 0 turns clipping off."""

    def __post_init__(self) -> None:
        self.check()

    def check(self) -> None:
        """Raise ValueError naming the first setting (as training.<name>) outside what is allowed."""
        _at_least("training.lr", self.lr, 0, strict=True)
        if self.lr_schedule not in LR_SCHEDULES:
            raise ValueError(f"training.lr_schedule={self.lr_schedule!r} is not allowed; it must be one of "
                             f"{LR_SCHEDULES}")
        if not isinstance(self.lr_warmup_steps, int) or self.lr_warmup_steps < 0:
            raise ValueError(f"training.lr_warmup_steps={self.lr_warmup_steps!r} is not allowed; it must be an "
                             "integer >= 0")
        if self.lr_schedule != "constant" and not self.lr_decay_steps > self.lr_warmup_steps:
            raise ValueError(f"training.lr_decay_steps={self.lr_decay_steps!r} is not allowed with lr_schedule="
                             f"{self.lr_schedule!r}: it must be > lr_warmup_steps ({self.lr_warmup_steps}), the step "
                             "its decay ends")
        if not 0 <= self.lr_min_ratio <= 1:
            raise ValueError(f"training.lr_min_ratio={self.lr_min_ratio!r} is not allowed; it must be in [0, 1]")
        _at_least("training.weight_decay", self.weight_decay, 0)
        if len(self.betas) != 2 or not all(0 <= b < 1 for b in self.betas):
            raise ValueError(f"training.betas={self.betas!r} is not allowed; it must be two values in [0, 1)")
        _at_least("training.eps", self.eps, 0, strict=True)
        _at_least("training.grad_clip", self.grad_clip, 0)


@dataclass
class LearnersConfig:
    """The learner group: the model, the DeepSpeed ranks, their placement and micro-batches (the builder's
    learners(...) settings), handed to the learner group and every rank unchanged."""

    model_path: str | None = None
    """Local Hugging Face checkpoint to train (policy) and, with compute_ref, to keep frozen (reference); the tuned
    examples default to the shipped tiny model."""
    num_learners: int = 1
    """DeepSpeed data-parallel ranks, one Ray actor each; 0: one learner in the algorithm's own process, on its CPUs
    (memrl.learner.local: no process to start, and a debugger stops inside it)."""
    num_gpus_per_learner: float = 0.0
    """GPUs each learner reserves (0 on CPU machines)."""
    num_cpus_per_learner: int = 1
    """CPUs each learner reserves; Ray sets its OMP_NUM_THREADS to the same, so a CPU learner trains on as many
    threads (one learner on a 2-core machine: 2)."""
    resources_per_learner: dict = field(default_factory=dict)
    """Ray custom resources each learner reserves, which places learners on the nodes that offer them: e.g.
    {"learner_node": 1} with those nodes started `ray start --resources='{"learner_node": 8}'`."""
    token_budget: int = 8192
    """Most tokens in one forward pass: padded tokens (rows x longest row), or with padding_free the rows' own."""
    padding_free: bool = False
    """Pack each micro-batch's rows one after another into a single row, with no padding (memrl.learner.batching
    .pack_rows): the forward pass computes only real tokens. Exact under every attn_implementation; under
    flash_attention_2 the rows run as variable-length sequences with no mask, while under sdpa and eager transformers
    builds a block-causal [S, S] mask over the packed row (token_budget squared bytes and more; the memory plan
    counts it). Stitched trajectories (token trees) keep their masks and stay padded."""
    dtype: str = "float32"
    """Parameter dtype: "float32" (CPU) or "bfloat16" (GPUs; DeepSpeed keeps float32 master weights)."""
    zero_stage: int = 3
    """DeepSpeed ZeRO stage: 3 partitions parameters, gradients and optimizer state; 2 and 1 keep whole parameters.
    With one learner there is nothing to partition and 2 is faster (benchmarks/vs_trl.py)."""
    gradient_checkpointing: bool = False
    """Keep only each layer's input through the forward pass and recompute the layer in backward: activations of
    about (hidden size x dtype bytes) per token and layer instead of the whole layer's (for Qwen2.5-7B 0.2 MB instead
    of 6 MB per token; memrl.memory_plan), for about a third more compute per step. On in every GPU preset."""
    param_persistence_threshold: int = 100_000
    """ZeRO-3 keeps parameters with fewer elements than this whole on every rank (fewer small gathers)."""
    attn_implementation: str = "sdpa"
    """transformers attention backend of the learners: "sdpa", "eager" or "flash_attention_2" (GPUs, where
    installed). Stitched trajectories (4D masks) are exact under sdpa and eager."""
    dist_timeout_s: float = 1800.0
    """Deadline of the learners' collectives: a rank that never arrives fails the step instead of hanging it."""
    weight_sync_bucket_bytes: int = 64 * 1024**2
    """Bucket size of the learner-to-engine weight broadcast."""

    def check(self) -> None:
        """Raise ValueError naming the first setting (as learners.<name>) outside what is allowed; model_path is
        checked where the learners start (a config may name a checkpoint on the cluster's nodes only)."""
        for name in ("num_learners", "num_cpus_per_learner", "token_budget", "weight_sync_bucket_bytes"):
            value, least = getattr(self, name), 0 if name == "num_learners" else 1
            if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < least:
                raise ValueError(f"learners.{name}={value!r} is not allowed; it must be an integer >= {least}")
        _at_least("learners.num_gpus_per_learner", self.num_gpus_per_learner, 0)
        if self.num_learners == 0 and (self.num_gpus_per_learner or self.resources_per_learner):
            raise ValueError(f"learners.num_learners=0 trains in the algorithm's own process, on its CPUs, where "
                             f"nothing is reserved; got num_gpus_per_learner={self.num_gpus_per_learner} and "
                             f"resources_per_learner={self.resources_per_learner} (leave them unset, or use "
                             f"num_learners >= 1)")
        if self.dtype not in DTYPE_NAMES:
            raise ValueError(f"learners.dtype={self.dtype!r} is not allowed; it must be one of {DTYPE_NAMES}")
        for name in ("gradient_checkpointing", "padding_free"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"learners.{name}={getattr(self, name)!r} is not allowed; it must be True or False")
        if self.zero_stage not in (1, 2, 3):
            raise ValueError(f"learners.zero_stage={self.zero_stage!r} is not allowed; it must be 1, 2 or 3")
        _at_least("learners.param_persistence_threshold", self.param_persistence_threshold, 0)
        if self.attn_implementation not in ATTN_IMPLEMENTATIONS:
            raise ValueError(f"learners.attn_implementation={self.attn_implementation!r} is not allowed; it must be "
                             f"one of {ATTN_IMPLEMENTATIONS}")
        _at_least("learners.dist_timeout_s", self.dist_timeout_s, 0, strict=True)


@dataclass
class LearnerConfig:
    """What each learner rank builds: the learner group's settings and the optimizer's as the builder holds them,
    and what the algorithm chooses (the seed, a reference model, the logits' temperature, the head)."""

    learners: LearnersConfig
    """The model, ZeRO, micro-batches, dtype and placement (AlgorithmConfig.learners)."""
    optimizer: OptimizerConfig
    """AdamW and its schedule (AlgorithmConfig.training)."""
    seed: int
    """Seed for torch's RNG on every rank (debugging.seed)."""
    compute_ref: bool = False
    """Also keep a frozen copy of the initial model to compute reference logprobs (KL terms)."""
    logit_temperature: float = 1.0
    """The policy's logits are divided by this before logprobs and entropy: the distribution the engines sample from
    at that temperature, so tokens sampled at T != 1 are scored exactly on-policy. 1 scores the model's own."""
    head: str = "lm"
    """"lm": the policy, trained with the policy-gradient (or SFT) loss; "value": a PPO critic, the checkpoint's
    backbone with a fresh scalar head (AutoModelForTokenClassification, one label), trained on value targets."""

    def __post_init__(self) -> None:
        self.learners.check()
        self.optimizer.check()
        if not self.logit_temperature > 0:
            raise ValueError(f"LearnerConfig.logit_temperature must be > 0, got {self.logit_temperature}")
        if self.head not in HEADS:
            raise ValueError(f"LearnerConfig.head must be one of {HEADS}, got {self.head!r}")
        if self.head == "value" and self.compute_ref:
            raise ValueError("LearnerConfig.compute_ref is for policies; a critic (head='value') has no reference")

    @property
    def model_path(self) -> str:
        """The checkpoint the ranks load (learners.model_path)."""
        return self.learners.model_path


def lr_factor(config: OptimizerConfig, step: int) -> float:
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
    learners = config.learners
    ds = {
        # Batches are ours (token-budget micro-batches); DeepSpeed only needs consistent numbers here.
        "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": 1,
        # ZeRO-1/2 partition only optimizer state and gradients, which a frozen model has none of.
        "zero_optimization": {"stage": learners.zero_stage if train or learners.zero_stage == 3 else 0},
        "bf16": {"enabled": learners.dtype == "bfloat16"},
        "steps_per_print": 1 << 62,
        "wall_clock_breakdown": False,
    }
    if learners.zero_stage == 3:
        ds["zero_optimization"]["stage3_param_persistence_threshold"] = learners.param_persistence_threshold
    if train:
        # Each train_step runs a varying number of backward passes and then exactly one step(): in unmanaged
        # mode backward() only accumulates and every step() is the boundary that reduces and updates.
        ds["managed_gradient_accumulation"] = False
        ds["gradient_clipping"] = config.optimizer.grad_clip
    return ds
