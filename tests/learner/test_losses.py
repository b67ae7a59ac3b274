"""Tests for policy losses, KL estimators, entropy and loss aggregation (numbers worked out by hand)."""

from __future__ import annotations

import math

import pytest
import torch

from memrl.learner.losses import (
    LossConfig,
    aggregate,
    compute_loss,
    entropy_from_logits,
    kl_estimate,
    kl_penalty_in_reward,
    policy_loss_per_token,
    value_loss,
)

LN2 = math.log(2.0)


def close(actual: torch.Tensor, expected: list, atol: float = 1e-6) -> None:
    torch.testing.assert_close(actual, torch.tensor(expected, dtype=actual.dtype), atol=atol, rtol=0)


# --- KL estimators ---------------------------------------------------------------------------------------------


def test_kl_estimators_at_known_log_ratios():
    # log ratios 0.5, ln 2, -ln 2, 0
    logprobs = torch.tensor([[-1.0, -1.0 + LN2, -1.0 - LN2, -3.0]])
    ref = torch.tensor([[-1.5, -1.0, -1.0, -3.0]])
    close(kl_estimate(logprobs, ref, "k1"), [[0.5, 0.6931472, -0.6931472, 0.0]])
    # 0.5 * x^2: 0.125, 0.2402265, 0.2402265, 0
    close(kl_estimate(logprobs, ref, "k2"), [[0.125, 0.2402265, 0.2402265, 0.0]])
    # exp(-x) - 1 + x: e^-0.5 - 0.5 = 0.1065307; 0.5 - 1 + ln2 = 0.1931472; 2 - 1 - ln2 = 0.3068528; 0
    close(kl_estimate(logprobs, ref, "k3"), [[0.1065307, 0.1931472, 0.3068528, 0.0]])


def test_kl_estimate_rejects_unknown_estimator():
    x = torch.zeros(1, 2)
    with pytest.raises(ValueError, match="k4"):
        kl_estimate(x, x, "k4")


def test_kl_estimate_rejects_mismatched_shapes():
    with pytest.raises(ValueError, match="ref_logprobs has shape"):
        kl_estimate(torch.zeros(2, 3), torch.zeros(2, 4), "k1")


# --- PPO clipping ----------------------------------------------------------------------------------------------


def ppo(ratios: list[float], advantages: list[float], clip_low=0.2, clip_high=0.28, dual_clip=None):
    old = torch.full((1, len(ratios)), -2.0)
    logprobs = (old + torch.log(torch.tensor([ratios]))).requires_grad_(True)
    loss, clipped = policy_loss_per_token(logprobs, old, torch.tensor([advantages]), clip_low, clip_high, dual_clip)
    return logprobs, loss, clipped


def test_ppo_positive_advantage_below_inside_above_bounds():
    logprobs, loss, clipped = ppo([0.5, 1.1, 1.25, 1.5], [1.0, 1.0, 1.0, 2.0])
    # ratio 0.5: max(-0.5, -0.8) = -0.5; 1.1: -1.1; 1.25 inside [0.8, 1.28]: -1.25;
    # 1.5 with A = 2: max(-3.0, -2 * 1.28 = -2.56) = -2.56, clipped.
    close(loss, [[-0.5, -1.1, -1.25, -2.56]])
    close(clipped, [[0.0, 0.0, 0.0, 1.0]])
    loss.sum().backward()
    # d(-A * ratio)/d logprob = -A * ratio on unclipped tokens, 0 where the clip is active.
    close(logprobs.grad, [[-0.5, -1.1, -1.25, 0.0]], atol=1e-5)


def test_ppo_negative_advantage_below_inside_above_bounds():
    logprobs, loss, clipped = ppo([0.5, 0.75, 1.1, 1.5], [-1.0, -1.0, -1.0, -1.0])
    # A = -1: loss = max(ratio, clip(ratio)); 0.5 -> 0.8 (clipped), 0.75 -> 0.8 (clipped), 1.1 -> 1.1,
    # 1.5 -> max(1.5, 1.28) = 1.5 (not clipped: a too-large ratio on a bad token is still pushed down).
    close(loss, [[0.8, 0.8, 1.1, 1.5]])
    close(clipped, [[1.0, 1.0, 0.0, 0.0]])
    loss.sum().backward()
    close(logprobs.grad, [[0.0, 0.0, 1.1, 1.5]], atol=1e-5)


def test_clip_higher_is_asymmetric_and_equal_bounds_give_plain_ppo():
    # ratio 1.25, A = 1: inside the DAPO bound 1.28, outside plain PPO's 1.2.
    _, loss, clipped = ppo([1.25], [1.0], clip_low=0.2, clip_high=0.28)
    close(loss, [[-1.25]])
    close(clipped, [[0.0]])
    _, loss, clipped = ppo([1.25], [1.0], clip_low=0.2, clip_high=0.2)
    close(loss, [[-1.2]])
    close(clipped, [[1.0]])
    # The lower bound is clip_low on both: ratio 0.75 with A = -1 is clipped to 0.8.
    _, loss, _ = ppo([0.75], [-1.0], clip_low=0.2, clip_high=0.28)
    close(loss, [[0.8]])


def test_dual_clip_caps_negative_advantages_only():
    logprobs, loss, clipped = ppo([5.0, 2.0, 5.0, 5.0], [-1.0, -1.0, 1.0, -2.0], dual_clip=3.0)
    # A = -1, ratio 5: max(5, 1.28) = 5, capped at -3 * -1 = 3. ratio 2: 2 < 3, unchanged.
    # A = +1, ratio 5: -1.28 (upper clip), no dual clip for positive A. A = -2, ratio 5: 10 capped at 6.
    close(loss, [[3.0, 2.0, -1.28, 6.0]], atol=1e-5)
    close(clipped, [[1.0, 0.0, 1.0, 1.0]])
    loss.sum().backward()
    close(logprobs.grad, [[0.0, 2.0, 0.0, 0.0]], atol=1e-5)
    _, loss, _ = ppo([5.0], [-1.0], dual_clip=None)
    close(loss, [[5.0]], atol=1e-5)


def test_huge_log_ratio_gives_finite_gradient():
    old = torch.zeros(1, 2)
    logprobs = torch.tensor([[200.0, -200.0]], requires_grad=True)
    loss, _ = policy_loss_per_token(logprobs, old, torch.tensor([[1.0, -1.0]]), 0.2, 0.28)
    loss.sum().backward()
    assert torch.isfinite(loss).all() and torch.isfinite(logprobs.grad).all()
    close(loss, [[-1.28, 0.8]])


# --- aggregation -----------------------------------------------------------------------------------------------

# Rows of unequal length; padding holds 100 (and a NaN) to prove it never leaks in.
VALUES = torch.tensor(
    [
        [1.0, 2.0, 3.0, 100.0],
        [4.0, 100.0, float("nan"), 100.0],
        [2.0, 2.0, 2.0, 2.0],
        [-1.0, 5.0, 100.0, 100.0],
    ]
)
MASK = torch.tensor(
    [
        [1.0, 1.0, 1.0, 0.0],
        [1.0, 0.0, 0.0, 0.0],
        [1.0, 1.0, 1.0, 1.0],
        [1.0, 1.0, 0.0, 0.0],
    ]
)
# Row sums 6, 4, 8, 4; row lengths 3, 1, 4, 2; 10 tokens, 4 rows.
EXPECTED = {
    "token_mean": 22.0 / 10.0,  # (6 + 4 + 8 + 4) / 10
    "seq_mean_token_mean": (2.0 + 4.0 + 2.0 + 2.0) / 4.0,  # 2.5
    "seq_mean_token_sum_norm": (6.0 / 8 + 4.0 / 8 + 8.0 / 8 + 4.0 / 8) / 4.0,  # max_tokens 8 -> 0.6875
}


@pytest.mark.parametrize("mode", sorted(EXPECTED))
def test_aggregations_on_rows_of_unequal_length(mode):
    result = aggregate(VALUES, MASK, mode, num_tokens=10, num_seqs=4, max_tokens=8)
    assert result.item() == pytest.approx(EXPECTED[mode], abs=1e-6)


@pytest.mark.parametrize("mode", sorted(EXPECTED))
def test_micro_batches_and_ranks_with_global_counts_sum_to_full_batch(mode):
    # Two "ranks" of two rows each, each rank splitting its rows into two micro-batches of one row.
    rank_rows = [[0, 1], [2, 3]]
    total = 0.0
    for rows in rank_rows:
        for row in rows:
            total += aggregate(VALUES[row : row + 1], MASK[row : row + 1], mode, 10, 4, max_tokens=8).item()
    assert total == pytest.approx(EXPECTED[mode], abs=1e-6)
    # And one micro-batch per rank.
    halves = sum(aggregate(VALUES[r], MASK[r], mode, 10, 4, max_tokens=8).item() for r in rank_rows)
    assert halves == pytest.approx(EXPECTED[mode], abs=1e-6)


def test_seq_mean_token_mean_row_without_tokens_contributes_zero():
    values = torch.tensor([[3.0, 5.0], [7.0, 7.0]])
    mask = torch.tensor([[1.0, 1.0], [0.0, 0.0]])
    # (8 / 2 + 0) / 2 rows
    assert aggregate(values, mask, "seq_mean_token_mean", 2, 2).item() == pytest.approx(2.0)


def test_aggregate_errors():
    with pytest.raises(ValueError, match="max_tokens"):
        aggregate(VALUES, MASK, "seq_mean_token_sum_norm", 10, 4)
    with pytest.raises(ValueError, match="'sum'"):
        aggregate(VALUES, MASK, "sum", 10, 4)
    with pytest.raises(ValueError, match="num_tokens"):
        aggregate(VALUES, MASK, "token_mean", 0, 4)
    with pytest.raises(ValueError, match="num_seqs"):
        aggregate(VALUES, MASK, "seq_mean_token_mean", 10, 0)
    with pytest.raises(ValueError, match="mask has shape"):
        aggregate(VALUES, MASK[:, :2], "token_mean", 10, 4)


# --- entropy ---------------------------------------------------------------------------------------------------


def test_entropy_from_logits():
    logits = torch.tensor(
        [
            [0.0, 0.0, 0.0, 0.0],  # uniform over 4: ln 4
            [0.0, math.log(3.0), -1e4, -1e4],  # p = (1/4, 3/4): 0.25 ln 4 + 0.75 ln(4/3)
            [1000.0, 0.0, 0.0, 0.0],  # one-hot: 0, no overflow
        ]
    )
    close(entropy_from_logits(logits), [1.3862944, 0.5623351, 0.0], atol=1e-5)


# --- KL in reward ----------------------------------------------------------------------------------------------


def test_kl_penalty_in_reward_subtracts_on_real_tokens_without_grad():
    rewards = torch.tensor([[0.0, 0.0, 1.0, 0.0]])
    logprobs = torch.tensor([[-1.0, -2.0, -1.0, -1.0]], requires_grad=True)
    ref = torch.tensor([[-1.5, -1.0, -1.0, -3.0]])  # log ratios 0.5, -1, 0, (2 on padding)
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    shaped = kl_penalty_in_reward(rewards, logprobs, ref, mask, kl_coef=0.1, estimator="k1")
    close(shaped, [[-0.05, 0.1, 1.0, 0.0]])
    assert not shaped.requires_grad
    with pytest.raises(ValueError, match="kl_coef"):
        kl_penalty_in_reward(rewards, logprobs, ref, mask, kl_coef=-0.1)


# --- compute_loss ----------------------------------------------------------------------------------------------


def batch():
    """Two rows (3 and 1 real tokens), ratios 1, 1.5, 0.5 | 1, advantages +1, +1, -1 | +2."""
    old = torch.full((2, 3), -1.0)
    logprobs = (old + torch.log(torch.tensor([[1.0, 1.5, 0.5], [1.0, 9.0, 9.0]]))).requires_grad_(True)
    advantages = torch.tensor([[1.0, 1.0, -1.0], [2.0, 2.0, 2.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    return logprobs, old, advantages, mask


def test_compute_loss_value_metrics_and_gradient():
    logprobs, old, advantages, mask = batch()
    loss, metrics = compute_loss(LossConfig(), logprobs, old, advantages, mask, num_tokens=4, num_seqs=2)
    # per token: -1, max(-1.5, -1.28) = -1.28 (clipped), max(0.5, 0.8) = 0.8 (clipped) | -2; mean of 4 = -0.87
    assert loss.item() == pytest.approx(-0.87, abs=1e-6)
    assert metrics["pg_loss"] == pytest.approx(-0.87, abs=1e-6)
    assert metrics["clip_frac"] == pytest.approx(0.5)
    assert metrics["ratio_mean"] == pytest.approx((1 + 1.5 + 0.5 + 1) / 4, abs=1e-6)
    assert "kl" not in metrics and "entropy" not in metrics
    loss.backward()
    # grad of the token mean: -A * ratio / 4 on unclipped tokens; clipped and padded tokens get 0.
    close(logprobs.grad, [[-0.25, 0.0, 0.0], [-0.5, 0.0, 0.0]], atol=1e-6)


@pytest.mark.parametrize("correction", ["tis", "decoupled"])
def test_off_policy_correction_weights_each_token_by_hand_computed_values(correction):
    logprobs, old, advantages, mask = batch()
    # pi_old / pi_rollout per token: 0.5, 1.0, 3.0 | 2.5 (cap 2): tis uses 0.5, 1, 2 | 2; decoupled 0.5, 1, 0 | 0.
    rollout = old - torch.log(torch.tensor([[0.5, 1.0, 3.0], [2.5, 1.0, 1.0]]))
    config = LossConfig(off_policy_correction=correction, importance_cap=2.0)
    loss, metrics = compute_loss(config, logprobs, old, advantages, mask, num_tokens=4, num_seqs=2,
                                 rollout_logprobs=rollout)
    # the uncorrected per-token losses are -1, -1.28, 0.8 | -2 (test_compute_loss_value_metrics_and_gradient)
    weights = [0.5, 1.0, 2.0, 2.0] if correction == "tis" else [0.5, 1.0, 0.0, 0.0]
    want = sum(w * x for w, x in zip(weights, [-1.0, -1.28, 0.8, -2.0])) / 4
    assert loss.item() == pytest.approx(want, abs=1e-6)
    assert metrics["is_weight_mean"] == pytest.approx((0.5 + 1.0 + 3.0 + 2.5) / 4, abs=1e-6)
    assert metrics["is_capped_frac"] == pytest.approx(0.5)
    loss.backward()
    # only the first tokens' ratios are unclipped: -A * ratio * weight / 4 (no gradient through the weight)
    close(logprobs.grad, [[-0.25 * 0.5, 0.0, 0.0], [-0.5 * weights[3], 0.0, 0.0]], atol=1e-6)


def test_off_policy_correction_needs_rollout_logprobs():
    logprobs, old, advantages, mask = batch()
    with pytest.raises(ValueError, match="rollout_logprobs"):
        compute_loss(LossConfig(off_policy_correction="tis"), logprobs, old, advantages, mask, 4, 2)


def test_compute_loss_seq_mean_token_mean():
    logprobs, old, advantages, mask = batch()
    config = LossConfig(aggregation="seq_mean_token_mean")
    loss, _ = compute_loss(config, logprobs, old, advantages, mask, num_tokens=4, num_seqs=2)
    # row means: (-1 - 1.28 + 0.8) / 3 = -0.4933333, -2; mean -1.2466667
    assert loss.item() == pytest.approx(-1.2466667, abs=1e-6)


def test_compute_loss_kl_in_loss_and_in_reward():
    logprobs, old, advantages, mask = batch()
    ref = logprobs.detach() - 0.5  # k1 = 0.5 on every token
    config = LossConfig(kl_coef=0.1, kl_estimator="k1")
    loss, metrics = compute_loss(config, logprobs, old, advantages, mask, 4, 2, ref_logprobs=ref)
    assert metrics["kl"] == pytest.approx(0.5, abs=1e-6)
    assert loss.item() == pytest.approx(-0.87 + 0.05, abs=1e-6)
    loss.backward()
    # the k1 term adds kl_coef / num_tokens = 0.025 to every real token's gradient
    close(logprobs.grad, [[-0.225, 0.025, 0.025], [-0.475, 0.0, 0.0]], atol=1e-6)

    in_reward = LossConfig(kl_coef=0.1, kl_estimator="k1", kl_in_reward=True)
    loss, metrics = compute_loss(in_reward, logprobs, old, advantages, mask, 4, 2, ref_logprobs=ref)
    assert loss.item() == pytest.approx(-0.87, abs=1e-6)
    assert metrics["kl"] == pytest.approx(0.5, abs=1e-6)


def test_compute_loss_kl_in_loss_needs_ref_logprobs():
    logprobs, old, advantages, mask = batch()
    with pytest.raises(ValueError, match="ref_logprobs"):
        compute_loss(LossConfig(kl_coef=0.1), logprobs, old, advantages, mask, 4, 2)
    # in reward, or with coefficient 0, the loss needs no reference
    compute_loss(LossConfig(kl_coef=0.1, kl_in_reward=True), logprobs, old, advantages, mask, 4, 2)


def test_compute_loss_entropy_bonus():
    logprobs, old, advantages, mask = batch()
    entropy = torch.tensor([[1.0, 2.0, 3.0], [2.0, 50.0, 50.0]])
    config = LossConfig(entropy_coef=0.01)
    loss, metrics = compute_loss(config, logprobs, old, advantages, mask, 4, 2, entropy=entropy)
    assert metrics["entropy"] == pytest.approx(2.0)  # (1 + 2 + 3 + 2) / 4
    assert loss.item() == pytest.approx(-0.87 - 0.02, abs=1e-6)
    with pytest.raises(ValueError, match="entropy_coef"):
        compute_loss(config, logprobs, old, advantages, mask, 4, 2)


def test_compute_loss_micro_batches_sum_to_full_batch():
    logprobs, old, advantages, mask = batch()
    config = LossConfig(aggregation="seq_mean_token_sum_norm", kl_coef=0.1, kl_estimator="k2")
    ref = logprobs.detach() - 1.0  # k2 = 0.5 everywhere
    full, full_metrics = compute_loss(config, logprobs, old, advantages, mask, 4, 2, ref_logprobs=ref, max_tokens=3)
    parts = [
        compute_loss(config, logprobs[i : i + 1], old[i : i + 1], advantages[i : i + 1], mask[i : i + 1], 4, 2,
                     ref_logprobs=ref[i : i + 1], max_tokens=3)
        for i in range(2)
    ]
    # pg row sums -1.48 and -2 over max_tokens 3, mean of 2 rows: -0.58; kl: (1.5 / 3 + 0.5 / 3) / 2 = 1/3
    assert full.item() == pytest.approx(-0.58 + 0.1 / 3, abs=1e-6)
    assert sum(loss.item() for loss, _ in parts) == pytest.approx(full.item(), abs=1e-6)
    for key, value in full_metrics.items():
        assert sum(metrics[key] for _, metrics in parts) == pytest.approx(value, abs=1e-6)


def test_compute_loss_sft_is_the_negative_log_likelihood():
    logprobs, old, advantages, mask = batch()
    config = LossConfig(kind="sft")
    loss, metrics = compute_loss(config, logprobs, old, advantages, mask, num_tokens=4, num_seqs=2)
    # logprobs on real tokens: -1, -1 + ln 1.5, -1 + ln 0.5 | -1; NLL mean = (4 - ln 0.75) / 4 = 1.0719205
    assert loss.item() == pytest.approx(1.0719205, abs=1e-6)
    assert metrics == {"nll": pytest.approx(1.0719205, abs=1e-6)}
    loss.backward()
    # d(-logprob / num_tokens) = -0.25 on every real token, 0 on padding
    close(logprobs.grad, [[-0.25, -0.25, -0.25], [-0.25, 0.0, 0.0]])
    # advantages and old logprobs play no part
    other, _ = compute_loss(config, logprobs, old - 3.0, -5 * advantages, mask, num_tokens=4, num_seqs=2)
    assert other.item() == pytest.approx(loss.item(), abs=1e-7)
    # seq_mean_token_mean: row means (3 - ln 0.75) / 3 = 1.0958940 and 1; their mean 1.0479470
    per_seq, _ = compute_loss(LossConfig(kind="sft", aggregation="seq_mean_token_mean"), logprobs, old, advantages,
                              mask, num_tokens=4, num_seqs=2)
    assert per_seq.item() == pytest.approx(1.0479470, abs=1e-6)


# --- config validation -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"clip_low": 1.0}, "clip_low"),
        ({"clip_low": -0.1}, "clip_low"),
        ({"clip_high": -0.1}, "clip_high"),
        ({"dual_clip": 1.0}, "dual_clip"),
        ({"kl_coef": -0.1}, "kl_coef"),
        ({"kl_estimator": "k4"}, "kl_estimator"),
        ({"aggregation": "sum"}, "aggregation"),
        ({"entropy_coef": -0.1}, "entropy_coef"),
        ({"clip_low": float("nan")}, "clip_low"),
        ({"kind": "dpo"}, "kind"),
        ({"value_clip": -0.5}, "value_clip"),
        ({"kind": "sft", "kl_coef": 0.1}, "kind"),
        ({"kind": "sft", "entropy_coef": 0.01}, "kind"),
        ({"off_policy_correction": "vtrace"}, "off_policy_correction"),
        ({"importance_cap": 1.0}, "importance_cap"),
    ],
)
def test_config_rejects_bad_values(kwargs, field):
    with pytest.raises(ValueError, match=rf"(LossConfig|training\.loss)\.{field}"):
        LossConfig(**kwargs)


def test_config_defaults_are_valid():
    config = LossConfig()
    assert (config.clip_low, config.clip_high, config.aggregation, config.kl_estimator, config.kind) == (
        0.2, 0.28, "token_mean", "k3", "policy",
    )


# --- critic loss -------------------------------------------------------------------------------------------------


def test_value_loss_clips_moves_beyond_the_range_around_old_values():
    old = torch.tensor([[0.0, 0.0, 0.0, 9.0]])
    returns = torch.tensor([[1.0, 1.0, -1.0, 9.0]])
    values = torch.tensor([[0.3, 2.0, 1.0, 0.0]], requires_grad=True)
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])  # the last token is padding: ignored whatever its values
    loss, metrics = value_loss(values, old, returns, mask, clip=0.5, num_tokens=3)
    # token 0: inside the range, 0.5 * 0.7^2. token 1: clipped value 0.5 -> 0.5 * max(1.0, 0.25) = 0.5 (unclipped
    # is worse, so it counts). token 2: clipped value 0.5 -> 0.5 * max(4, 2.25) = 2.0 (unclipped counts again).
    assert loss.item() == pytest.approx((0.5 * 0.49 + 0.5 + 2.0) / 3)
    assert metrics["vf_clip_frac"] == 0.0 and metrics["value_mean"] == pytest.approx(3.3 / 3)
    loss.backward()
    close(values.grad, [[-0.7 / 3, 1.0 / 3, 2.0 / 3, 0.0]])
    # Moving towards the return beyond the range: the clipped branch is the larger loss and carries no gradient.
    values = torch.tensor([[0.0, 0.0, -2.0, 0.0]], requires_grad=True)
    old = torch.tensor([[0.0, 0.0, -0.5, 0.0]])
    returns = torch.tensor([[0.0, 0.0, -3.0, 0.0]])
    loss, metrics = value_loss(values, old, returns, mask, clip=0.5, num_tokens=3)
    assert loss.item() == pytest.approx(0.5 * 2.0**2 / 3) and metrics["vf_clip_frac"] == pytest.approx(1 / 3)
    loss.backward()
    close(values.grad, [[0.0, 0.0, 0.0, 0.0]])
    unclipped, _ = value_loss(values, old, returns, mask, clip=0.0, num_tokens=3)
    assert unclipped.item() == pytest.approx(0.5 * 1.0 / 3)
