"""Policy-gradient losses, KL estimators, entropy and loss aggregation over padded [B, T] token batches."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from memrl.registry import Registry

KL_ESTIMATORS = ("k1", "k2", "k3")
"""Sample estimators of KL(pi || ref) from tokens drawn from pi (Schulman's k1/k2/k3)."""

AGGREGATIONS: Registry = Registry("loss aggregation", "training.loss.aggregation")
"""How per-token values are reduced to one scalar (names follow verl / Dr.GRPO): functions
`(masked, mask, num_tokens, num_seqs, max_tokens) -> scalar` registered with `@AGGREGATIONS.register("name")`, where
`masked` is the [B, T] values with 0 off the mask and the counts are the whole step's (see `aggregate`)."""

OFF_POLICY_CORRECTIONS = ("none", "tis", "decoupled")
"""How tokens sampled under other weights than the learner's are weighted (LossConfig.off_policy_correction)."""

LOSS_KINDS = ("policy", "sft")
"""What compute_loss optimises: the clipped policy gradient, or the negative log-likelihood (supervised warm-start)."""

# Bound on |logprobs - old_logprobs| before exp(): a larger gap only happens on numerically broken tokens, and an
# infinite ratio would turn the zero gradient of a clipped branch into NaN (0 * inf).
_MAX_LOG_RATIO = 20.0


@dataclass
class LossConfig:
    """The clipped policy-gradient loss with optional KL and entropy terms, or the SFT negative log-likelihood."""

    clip_low: float = 0.2
    """Ratio lower bound is 1 - clip_low; in [0, 1)."""
    clip_high: float = 0.28
    """Ratio upper bound is 1 + clip_high (DAPO clip-higher); equal to clip_low gives plain PPO; >= 0."""
    dual_clip: float | None = None
    """Dual-clip constant c > 1: for negative advantages the loss is capped at -c * A. None turns it off."""
    kl_coef: float = 0.0
    """Weight of the KL(pi || ref) term (in the loss, or in the reward when kl_in_reward); >= 0, 0 turns it off."""
    kl_estimator: str = "k3"
    """Per-token KL estimator: "k1", "k2" or "k3"."""
    kl_in_reward: bool = False
    """When True the KL is not part of the loss; kl_penalty_in_reward subtracts it from rewards instead."""
    aggregation: str = "token_mean"
    """"token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm" (Dr.GRPO), or another AGGREGATIONS name."""
    entropy_coef: float = 0.0
    """Weight of the entropy bonus subtracted from the loss; >= 0, 0 turns it off."""
    value_clip: float = 0.5
    """PPO critics: a new value may move at most this far from the value at sampling time before its loss stops
    improving (value clipping, as in verl's cliprange_value); 0 turns clipping off."""
    off_policy_correction: str = "none"
    """Weighting of tokens whose rollout policy (the engine's weights and numerics) differs from the learner's policy
    before the update (pi_old, recomputed by the learner): "none"; "tis", truncated importance sampling: each token's
    loss times min(pi_old / pi_rollout, importance_cap); "decoupled", decoupled PPO: the ratio is clipped around
    pi_old (the proximal policy) and each token's loss is weighted by pi_old / pi_rollout, tokens whose weight exceeds
    importance_cap left out. Both need the engine's logprobs in the rows as "rollout_logprobs"."""
    importance_cap: float = 2.0
    """Cap of the importance weight pi_old / pi_rollout: "tis" truncates at it, "decoupled" drops tokens above it;
    > 1."""
    kind: str = "policy"
    """"policy" (the terms above) or "sft": the aggregated negative log-likelihood of the response tokens alone
    (advantages and old logprobs are ignored; clip settings unused; kl_coef and entropy_coef must be 0)."""

    def __post_init__(self) -> None:
        if not 0 <= self.clip_low < 1:
            raise ValueError(f"LossConfig.clip_low must be in [0, 1), got {self.clip_low}")
        if not self.clip_high >= 0:
            raise ValueError(f"LossConfig.clip_high must be >= 0, got {self.clip_high}")
        if self.dual_clip is not None and not self.dual_clip > 1:
            raise ValueError(f"LossConfig.dual_clip must be None or > 1, got {self.dual_clip}")
        if not self.kl_coef >= 0:
            raise ValueError(f"LossConfig.kl_coef must be >= 0, got {self.kl_coef}")
        if self.kl_estimator not in KL_ESTIMATORS:
            raise ValueError(f"LossConfig.kl_estimator must be one of {KL_ESTIMATORS}, got {self.kl_estimator!r}")
        AGGREGATIONS.check(self.aggregation)
        if not self.entropy_coef >= 0:
            raise ValueError(f"LossConfig.entropy_coef must be >= 0, got {self.entropy_coef}")
        if not self.value_clip >= 0:
            raise ValueError(f"LossConfig.value_clip must be >= 0 (0 = off), got {self.value_clip}")
        if self.off_policy_correction not in OFF_POLICY_CORRECTIONS:
            raise ValueError(f"LossConfig.off_policy_correction must be one of {OFF_POLICY_CORRECTIONS}, got "
                             f"{self.off_policy_correction!r}")
        if not self.importance_cap > 1:
            raise ValueError(f"LossConfig.importance_cap must be > 1, got {self.importance_cap}")
        if self.kind not in LOSS_KINDS:
            raise ValueError(f"LossConfig.kind must be one of {LOSS_KINDS}, got {self.kind!r}")
        if self.kind == "sft" and (self.kl_coef > 0 or self.entropy_coef > 0):
            raise ValueError(
                f"LossConfig.kind='sft' is the negative log-likelihood alone; kl_coef ({self.kl_coef}) and "
                f"entropy_coef ({self.entropy_coef}) must be 0"
            )


def _check_shapes(reference: torch.Tensor, **tensors: torch.Tensor) -> None:
    for name, tensor in tensors.items():
        if tensor.shape != reference.shape:
            raise ValueError(f"{name} has shape {tuple(tensor.shape)}, expected {tuple(reference.shape)}")


def kl_estimate(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, estimator: str) -> torch.Tensor:
    """Per-token estimate of KL(pi || ref) from tokens sampled from pi.

    With log_ratio = logprobs - ref_logprobs: k1 = log_ratio (unbiased, can be negative), k2 = log_ratio**2 / 2,
    k3 = exp(-log_ratio) - 1 + log_ratio (unbiased and never negative).
    """
    _check_shapes(logprobs, ref_logprobs=ref_logprobs)
    log_ratio = logprobs - ref_logprobs
    if estimator == "k1":
        return log_ratio
    if estimator == "k2":
        return 0.5 * log_ratio.square()
    if estimator == "k3":
        # Clamped like the PPO ratio: exp of a huge negative log ratio would overflow to inf.
        log_ratio = log_ratio.clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO)
        return torch.exp(-log_ratio) - 1 + log_ratio
    raise ValueError(f"kl estimator must be one of {KL_ESTIMATORS}, got {estimator!r}")


def policy_loss_per_token(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    clip_low: float,
    clip_high: float,
    dual_clip: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Clipped PPO loss per token and a 0/1 float indicator of tokens whose gradient the clipping cut.

    ratio = exp(logprobs - old_logprobs); loss = max(-A * ratio, -A * clip(ratio, 1 - clip_low, 1 + clip_high));
    with dual_clip = c, tokens with A < 0 get loss = min(loss, -c * A).
    """
    _check_shapes(logprobs, old_logprobs=old_logprobs, advantages=advantages)
    log_ratio = (logprobs - old_logprobs).clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO)
    ratio = torch.exp(log_ratio)
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1 - clip_low, 1 + clip_high)
    loss = torch.maximum(unclipped, clipped)
    was_clipped = clipped > unclipped
    if dual_clip is not None:
        capped = -dual_clip * advantages
        use_cap = (advantages < 0) & (capped < loss)
        loss = torch.where(use_cap, capped, loss)
        was_clipped = was_clipped | use_cap
    return loss, was_clipped.to(logprobs.dtype)


def importance_weights(old_logprobs: torch.Tensor, rollout_logprobs: torch.Tensor, correction: str,
                       cap: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(weight applied to each token's loss, raw weight pi_old / pi_rollout, 0/1 float of tokens past the cap) for
    an off_policy_correction other than "none"; no gradient flows through them."""
    _check_shapes(old_logprobs, rollout_logprobs=rollout_logprobs)
    with torch.no_grad():
        raw = torch.exp((old_logprobs - rollout_logprobs).clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO))
        over = raw > cap
        if correction == "tis":
            applied = raw.clamp(max=cap)
        elif correction == "decoupled":
            applied = torch.where(over, torch.zeros_like(raw), raw)
        else:
            raise ValueError(f"importance_weights: correction must be 'tis' or 'decoupled', got {correction!r}")
    return applied, raw, over.to(old_logprobs.dtype)


def aggregate(
    per_token: torch.Tensor,
    mask: torch.Tensor,
    mode: str,
    num_tokens: float,
    num_seqs: float,
    max_tokens: int | None = None,
) -> torch.Tensor:
    """Reduce per-token values [B, T] to a scalar with the AGGREGATIONS entry `mode`, normalised by GLOBAL counts.

    num_tokens and num_seqs count the real tokens and the rows holding any of them in the whole step (all
    micro-batches on all data-parallel ranks), so summing each micro-batch's result gives the mean over the step.
    """
    _check_shapes(per_token, mask=mask)
    reduce = AGGREGATIONS.get(mode)
    # where(), not a product: padding may hold inf/NaN (e.g. logprobs of pad tokens), and NaN * 0 is NaN.
    masked = torch.where(mask > 0, per_token, torch.zeros_like(per_token))
    return reduce(masked, mask, num_tokens, num_seqs, max_tokens)


def _need_rows(name: str, num_seqs: float) -> None:
    if not num_seqs > 0:
        raise ValueError(f"num_seqs must be > 0 for aggregation {name!r}, got {num_seqs}")


@AGGREGATIONS.register("token_mean")
def token_mean(masked, mask, num_tokens, num_seqs, max_tokens=None) -> torch.Tensor:
    """sum(x * mask) / num_tokens: every token of the step weighs the same (DAPO)."""
    if not num_tokens > 0:
        raise ValueError(f"num_tokens must be > 0 for aggregation 'token_mean', got {num_tokens}")
    return masked.sum() / num_tokens


@AGGREGATIONS.register("seq_mean_token_mean")
def seq_mean_token_mean(masked, mask, num_tokens, num_seqs, max_tokens=None) -> torch.Tensor:
    """sum over rows of (row sum / max(1, row token count)) / num_seqs: every row weighs the same (GRPO)."""
    _need_rows("seq_mean_token_mean", num_seqs)
    return (masked.sum(dim=-1) / mask.sum(dim=-1).clamp(min=1)).sum() / num_seqs


@AGGREGATIONS.register("seq_mean_token_sum_norm")
def seq_mean_token_sum_norm(masked, mask, num_tokens, num_seqs, max_tokens=None) -> torch.Tensor:
    """sum over rows of (row sum / max_tokens) / num_seqs (Dr.GRPO; max_tokens is a constant such as the maximum
    response length)."""
    _need_rows("seq_mean_token_sum_norm", num_seqs)
    if max_tokens is None or not max_tokens > 0:
        raise ValueError(f"aggregation 'seq_mean_token_sum_norm' needs max_tokens > 0, got {max_tokens}")
    return (masked.sum(dim=-1) / max_tokens).sum() / num_seqs


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of softmax(logits) over the last dimension (finite logits): logsumexp(z) - sum(softmax(z) * z)."""
    return torch.logsumexp(logits, dim=-1) - (torch.softmax(logits, dim=-1) * logits).sum(dim=-1)


def kl_penalty_in_reward(
    token_rewards: torch.Tensor,
    logprobs: torch.Tensor,
    ref_logprobs: torch.Tensor,
    mask: torch.Tensor,
    kl_coef: float,
    estimator: str = "k3",
) -> torch.Tensor:
    """Per-token rewards (or advantages) minus kl_coef * KL estimate on real tokens (the KL-in-reward variant).

    The penalty is a reward, so it carries no gradient; padding and loss-masked tokens are returned unchanged.
    """
    if not kl_coef >= 0:
        raise ValueError(f"kl_coef must be >= 0, got {kl_coef}")
    _check_shapes(token_rewards, logprobs=logprobs, ref_logprobs=ref_logprobs, mask=mask)
    with torch.no_grad():
        kl = kl_estimate(logprobs.detach(), ref_logprobs.detach(), estimator)
        penalty = torch.where(mask > 0, kl, torch.zeros_like(kl)) * kl_coef
    return token_rewards - penalty.to(token_rewards.dtype)


def compute_loss(
    config: LossConfig,
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    num_tokens: float,
    num_seqs: float,
    ref_logprobs: torch.Tensor | None = None,
    entropy: torch.Tensor | None = None,
    max_tokens: int | None = None,
    rollout_logprobs: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The micro-batch loss and its metrics, both aggregated with global counts so they sum over micro-batches.

    loss = agg(pg) + kl_coef * agg(kl) (unless kl_in_reward) - entropy_coef * agg(entropy).
    With an off_policy_correction, pg is weighted per token by `importance_weights` (rollout_logprobs needed).
    Metrics: pg_loss, clip_frac, ratio_mean always; kl when ref_logprobs is given; entropy when entropy is given;
    is_weight_mean and is_capped_frac with a correction.
    With config.kind "sft": loss = agg(-logprobs), metric nll; old_logprobs and advantages are not used.
    """
    _check_shapes(logprobs, old_logprobs=old_logprobs, advantages=advantages, mask=mask)

    def agg(values: torch.Tensor) -> torch.Tensor:
        return aggregate(values, mask, config.aggregation, num_tokens, num_seqs, max_tokens)

    if config.kind == "sft":
        nll = agg(-logprobs)
        return nll, {"nll": nll.item()}

    pg, was_clipped = policy_loss_per_token(
        logprobs, old_logprobs, advantages, config.clip_low, config.clip_high, config.dual_clip
    )
    metrics: dict[str, float] = {}
    if config.off_policy_correction != "none":
        if rollout_logprobs is None:
            raise ValueError(f"off_policy_correction={config.off_policy_correction!r} needs rollout_logprobs, the "
                             "engine's logprobs of the sampled tokens")
        applied, raw, over = importance_weights(old_logprobs, rollout_logprobs, config.off_policy_correction,
                                                config.importance_cap)
        pg = pg * applied
        metrics.update(is_weight_mean=agg(raw).item(), is_capped_frac=agg(over).item())
    pg_loss = agg(pg)
    loss = pg_loss
    with torch.no_grad():
        ratio = torch.exp((logprobs - old_logprobs).clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO))
        metrics.update(pg_loss=pg_loss.item(), clip_frac=agg(was_clipped).item(), ratio_mean=agg(ratio).item())

    kl_in_loss = config.kl_coef > 0 and not config.kl_in_reward
    if kl_in_loss and ref_logprobs is None:
        raise ValueError(
            f"kl_coef={config.kl_coef} with kl_in_reward=False puts the KL in the loss, which needs ref_logprobs"
        )
    if ref_logprobs is not None:
        kl = agg(kl_estimate(logprobs, ref_logprobs, config.kl_estimator))
        metrics["kl"] = kl.item()
        if kl_in_loss:
            loss = loss + config.kl_coef * kl

    if config.entropy_coef > 0 and entropy is None:
        raise ValueError(f"entropy_coef={config.entropy_coef} needs the per-token entropy tensor")
    if entropy is not None:
        _check_shapes(logprobs, entropy=entropy)
        entropy_mean = agg(entropy)
        metrics["entropy"] = entropy_mean.item()
        if config.entropy_coef > 0:
            loss = loss - config.entropy_coef * entropy_mean
    return loss, metrics


def value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    mask: torch.Tensor,
    clip: float,
    num_tokens: float,
) -> tuple[torch.Tensor, dict[str, float]]:
    """PPO critic loss over a micro-batch, a share of the step's token mean (num_tokens counts the whole step).

    0.5 * max((V - R)^2, (clip(V, V_old - clip, V_old + clip) - R)^2) per token; clip = 0 is the plain squared error.
    Metrics: vf_loss, vf_clip_frac (tokens where the clipped branch was taken) and value_mean.
    """
    _check_shapes(values, old_values=old_values, returns=returns, mask=mask)
    unclipped = (values - returns).square()
    if clip > 0:
        clipped = (old_values + (values - old_values).clamp(-clip, clip) - returns).square()
        per_token = 0.5 * torch.maximum(unclipped, clipped)
        was_clipped = (clipped > unclipped).to(values.dtype)
    else:
        per_token = 0.5 * unclipped
        was_clipped = torch.zeros_like(values)
    loss = aggregate(per_token, mask, "token_mean", num_tokens, 1.0)
    with torch.no_grad():
        metrics = {
            "vf_loss": loss.item(),
            "vf_clip_frac": aggregate(was_clipped, mask, "token_mean", num_tokens, 1.0).item(),
            "value_mean": aggregate(values, mask, "token_mean", num_tokens, 1.0).item(),
        }
    return loss, metrics
