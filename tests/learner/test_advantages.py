"""Tests for group advantages, conversation broadcast, dynamic sampling, overlong penalty and GAE (hand-computed)."""

from __future__ import annotations

import numpy as np
import pytest

from memrl.config import TrainingConfig
from memrl.episode import Conversation, Trajectory
from memrl.learner.advantages import (
    AdvantageInputs,
    dynamic_sampling_mask,
    gae,
    group_advantages,
    overlong_penalty,
    row_advantages,
    shape_rewards,
)
from memrl.learner.losses import LossConfig
from memrl.learner.rows import RowBatch, build_rows

# Groups interleaved on purpose: "a" = [1, 2, 3], "b" = [4, 0], "c" = [5] (size 1), "d" = [2, 2] (zero variance).
REWARDS = [1.0, 4.0, 2.0, 5.0, 2.0, 3.0, 0.0, 2.0]
GROUPS = ["a", "b", "a", "c", "d", "a", "b", "d"]


def test_group_advantages_with_unbiased_std():
    adv = group_advantages(REWARDS, GROUPS, norm_std=True, eps=1e-6)
    assert adv.dtype == np.float64
    # a: mean 2, unbiased std sqrt((1 + 0 + 1) / 2) = 1 (the population std would be 0.8165 -> +-1.2247)
    # b: mean 2, unbiased std sqrt((4 + 4) / 1) = 2.8284271 -> +-2 / 2.8284281 = +-0.7071065
    # c: single sample -> 0; d: zero variance -> 0 / (0 + eps) = 0
    expected = [-0.999999, 0.7071065, 0.0, 0.0, 0.0, 0.999999, -0.7071065, 0.0]
    np.testing.assert_allclose(adv, expected, rtol=0, atol=1e-7)


def test_group_advantages_with_zero_eps_keeps_flat_groups_at_zero():
    adv = group_advantages(REWARDS, GROUPS, norm_std=True, eps=0.0)
    # 1 / sqrt(2) = 0.70710678; no 0 / 0 for the single sample or the zero-variance group
    np.testing.assert_allclose(adv, [-1.0, 0.70710678, 0.0, 0.0, 0.0, 1.0, -0.70710678, 0.0], rtol=0, atol=1e-8)


def test_group_advantages_without_std():
    adv = group_advantages(REWARDS, GROUPS, norm_std=False)
    np.testing.assert_allclose(adv, [-1.0, 2.0, 0.0, 0.0, 0.0, 1.0, -2.0, 0.0], rtol=0, atol=1e-12)


def test_group_advantages_integer_ids_and_errors():
    adv = group_advantages([0.0, 1.0, 1.0, 1.0], [7, 7, 3, 3], norm_std=False)
    np.testing.assert_allclose(adv, [-0.5, 0.5, 0.0, 0.0], rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match="group_ids must have shape"):
        group_advantages([1.0, 2.0], [0])
    with pytest.raises(ValueError, match="eps"):
        group_advantages([1.0, 2.0], [0, 0], eps=-1.0)
    with pytest.raises(ValueError, match="rewards must be one-dimensional"):
        group_advantages([[1.0, 2.0]], [0, 0])


def test_dynamic_sampling_mask():
    keep = dynamic_sampling_mask(REWARDS, GROUPS)
    assert keep.dtype == bool
    # a and b have spread; c (single) and d (all equal) carry no signal
    np.testing.assert_array_equal(keep, [True, True, True, False, False, True, True, False])
    np.testing.assert_array_equal(dynamic_sampling_mask([1.0, 1.0, 0.0, 1.0], [0, 0, 1, 1]), [False, False, True, True])


def test_overlong_penalty_boundaries():
    lengths = [10, 16, 17, 18, 19, 20, 25]
    # max 20, buffer 4: free up to 16, then -1/4 per token, -1 at 20 and beyond
    np.testing.assert_allclose(overlong_penalty(lengths, 20, 4), [0, 0, -0.25, -0.5, -0.75, -1, -1], atol=1e-12)
    np.testing.assert_allclose(
        overlong_penalty(lengths, 20, 4, penalty=0.5), [0, 0, -0.125, -0.25, -0.375, -0.5, -0.5], atol=1e-12
    )


@pytest.mark.parametrize(
    "args, message",
    [((20, 0), "buffer_tokens"), ((20, 21), "buffer_tokens"), ((0, 1), "max_tokens")],
)
def test_overlong_penalty_errors(args, message):
    with pytest.raises(ValueError, match=message):
        overlong_penalty([1], *args)
    with pytest.raises(ValueError, match="penalty"):
        overlong_penalty([1], 20, 4, penalty=-1.0)


def test_gae_single_sequence_skips_masked_middle_token():
    rewards = np.array([0.0, 0.0, 0.0, 1.0])
    values = np.array([0.5, 9.0, 0.2, 0.4])  # 9.0 sits on a masked token and must be ignored
    mask = np.array([1, 0, 1, 1])
    adv, ret = gae(rewards, values, mask, gamma=0.9, lam=0.8)
    # t=3: delta = 1 + 0.9 * 0 - 0.4 = 0.6; A3 = 0.6
    # t=2: delta = 0 + 0.9 * 0.4 - 0.2 = 0.16; A2 = 0.16 + 0.72 * 0.6 = 0.592
    # t=1: masked -> 0, recursion jumps over it
    # t=0: delta = 0 + 0.9 * 0.2 - 0.5 = -0.32; A0 = -0.32 + 0.72 * 0.592 = 0.10624
    np.testing.assert_allclose(adv, [0.10624, 0.0, 0.592, 0.6], rtol=0, atol=1e-12)
    np.testing.assert_allclose(ret, [0.60624, 0.0, 0.792, 1.0], rtol=0, atol=1e-12)
    assert adv.shape == (4,) and adv.dtype == np.float64


def test_gae_batch_with_padding_and_monte_carlo_limit():
    rewards = np.array([[0.0, 0.0, 0.0, 1.0], [0.0, 2.0, 0.0, 0.0]])
    values = np.array([[0.5, 9.0, 0.2, 0.4], [1.0, 0.5, np.nan, np.nan]])  # row 2 padded after 2 tokens
    mask = np.array([[1, 0, 1, 1], [1, 1, 0, 0]])
    adv, ret = gae(rewards, values, mask, gamma=0.9, lam=0.8)
    # row 2: t=1: delta = 2 - 0.5 = 1.5; t=0: delta = 0.9 * 0.5 - 1 = -0.55, A0 = -0.55 + 0.72 * 1.5 = 0.53
    np.testing.assert_allclose(adv, [[0.10624, 0.0, 0.592, 0.6], [0.53, 1.5, 0.0, 0.0]], rtol=0, atol=1e-12)
    np.testing.assert_allclose(ret, [[0.60624, 0.0, 0.792, 1.0], [1.53, 2.0, 0.0, 0.0]], rtol=0, atol=1e-12)
    # gamma = lam = 1: A_t = (sum of later real rewards) - V_t
    adv, ret = gae(rewards, values, mask, gamma=1.0, lam=1.0)
    np.testing.assert_allclose(adv, [[0.5, 0.0, 0.8, 0.6], [1.0, 1.5, 0.0, 0.0]], rtol=0, atol=1e-12)
    np.testing.assert_allclose(ret, [[1.0, 0.0, 1.0, 1.0], [2.0, 2.0, 0.0, 0.0]], rtol=0, atol=1e-12)


def test_gae_errors():
    ok = np.zeros(3)
    with pytest.raises(ValueError, match="rewards must be 0 where mask is 0"):
        gae(np.array([0.0, 1.0, 0.0]), ok, np.array([1, 0, 1]), 0.9, 0.9)
    with pytest.raises(ValueError, match="mask must hold only 0 and 1"):
        gae(ok, ok, np.array([1, 2, 1]), 0.9, 0.9)
    with pytest.raises(ValueError, match="share one shape"):
        gae(ok, np.zeros(4), ok, 0.9, 0.9)
    with pytest.raises(ValueError, match="gamma"):
        gae(ok, ok, ok, 1.5, 0.9)
    with pytest.raises(ValueError, match="lam"):
        gae(ok, ok, ok, 0.9, -0.1)
    with pytest.raises(ValueError, match=r"\[T\] or \[B, T\]"):
        gae(np.zeros((1, 1, 3)), np.zeros((1, 1, 3)), np.zeros((1, 1, 3)), 0.9, 0.9)


def _traj(reward: float, response_lengths: list[int], group: str = "g") -> Trajectory:
    convs = [Conversation(prompt_ids=[1, 2], response_ids=[5] * n, logprobs=[-1.0] * n) for n in response_lengths]
    return Trajectory(convs, reward=reward, group_id=group)


def _inputs(trajs, rows, train, max_tokens=10) -> AdvantageInputs:
    return AdvantageInputs(trajs, RowBatch(rows, []), train, max_tokens, score=None)


def test_plain_rewards_pass_through():
    trajs = [_traj(1.0, [3, 2]), _traj(0.0, [4])]
    rows = build_rows(trajs).rows
    assert len(rows) == 3 and [len(r["response_ids"]) for r in rows] == [3, 2, 4]
    np.testing.assert_array_equal(shape_rewards(_inputs(trajs, rows, TrainingConfig())), [1.0, 0.0])


def test_overlong_penalty_per_conversation():
    # max 10, buffer 4: length <= 6 free; 8 -> -(8-6)/4 = -0.5; 10 -> -1
    trajs = [_traj(1.0, [8, 10]), _traj(1.0, [6])]
    train = TrainingConfig(overlong_buffer_tokens=4, overlong_penalty=1.0)
    rewards = shape_rewards(_inputs(trajs, build_rows(trajs).rows, train))
    np.testing.assert_allclose(rewards, [1.0 - 0.5 - 1.0, 1.0])


def test_kl_in_reward_sums_over_loss_tokens():
    trajs = [_traj(1.0, [2, 1])]
    rows = build_rows(trajs).rows
    # rollout logprob -1 everywhere; ref -1 - ln2 -> log ratio ln2, k1 = ln2 per token
    for row in rows:
        row["ref_logprobs"] = np.full(len(row["response_ids"]), -1.0 - np.log(2), dtype=np.float32)
    rows[0]["loss_mask"] = np.array([1, 0], dtype=np.int8)  # a masked (env) token carries no KL
    train = TrainingConfig(loss=LossConfig(kl_coef=0.1, kl_estimator="k1", kl_in_reward=True))
    rewards = shape_rewards(_inputs(trajs, rows, train))
    assert rewards[0] == pytest.approx(1.0 - 0.1 * 2 * np.log(2), abs=1e-6)
    train.loss.kl_in_reward = False  # KL in the loss instead: rewards untouched
    assert shape_rewards(_inputs(trajs, rows, train))[0] == 1.0


def _scored(rewards: list[float], group: str) -> Trajectory:
    convs = [Conversation(prompt_ids=[1, 2], response_ids=[5, 6], logprobs=[-1.0, -1.0], reward=r) for r in rewards]
    return Trajectory(convs, reward=rewards[-1], group_id=group)


def test_call_advantages_compare_calls_at_the_same_position_of_one_group():
    # Group "a": three trajectories of three calls; group "b": two of two. Call k of a trajectory is compared with
    # call k of its group's other trajectories only.
    trajs = [_scored([1, 1, 1], "a"), _scored([1, 0, 1], "a"), _scored([1, 1, 0], "a"),
             _scored([0, 1], "b"), _scored([1, 1], "b")]
    adv = row_advantages(trajs, norm_std=False, by_position=True)
    np.testing.assert_allclose(np.concatenate(adv[:3]), [0, 1 / 3, 1 / 3, 0, -2 / 3, 1 / 3, 0, 1 / 3, -2 / 3])
    np.testing.assert_allclose(np.concatenate(adv[3:]), [-0.5, 0, 0.5, 0])
    # Against the whole group instead (Mem-α's rows): group "a" has mean 7/9.
    flat = row_advantages(trajs, norm_std=False)
    np.testing.assert_allclose(flat[1], np.array([1, 0, 1]) - 7 / 9)
    # Below-mean calls scaled by the negative weight, the others untouched.
    half = row_advantages(trajs, norm_std=False, negative_weight=0.5, by_position=True)
    np.testing.assert_allclose(half[1], [0, -1 / 3, 1 / 3])
