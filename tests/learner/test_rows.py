"""Learner rows: laid out once (plain or stitched), shaped rewards, and advantages per trajectory or per call."""

import numpy as np
import pytest

from memrl.config import TrainingConfig
from memrl.episode import Conversation, Trajectory
from memrl.learner.losses import LossConfig
from memrl.learner.rows import build_rows, importance_figures, row_advantages, shape_rewards


def _traj(reward: float, response_lengths: list[int], group: str = "g") -> Trajectory:
    convs = [Conversation(prompt_ids=[1, 2], response_ids=[5] * n, logprobs=[-1.0] * n) for n in response_lengths]
    return Trajectory(convs, reward=reward, group_id=group)


def test_plain_rewards_pass_through():
    trajs = [_traj(1.0, [3, 2]), _traj(0.0, [4])]
    rows = build_rows(trajs).rows
    assert len(rows) == 3 and [len(r["response_ids"]) for r in rows] == [3, 2, 4]
    np.testing.assert_array_equal(shape_rewards(trajs, rows, TrainingConfig(), max_tokens=10), [1.0, 0.0])


def test_overlong_penalty_per_conversation():
    # max 10, buffer 4: length <= 6 free; 8 -> -(8-6)/4 = -0.5; 10 -> -1
    trajs = [_traj(1.0, [8, 10]), _traj(1.0, [6])]
    train = TrainingConfig(overlong_buffer_tokens=4, overlong_penalty=1.0)
    rewards = shape_rewards(trajs, build_rows(trajs).rows, train, max_tokens=10)
    np.testing.assert_allclose(rewards, [1.0 - 0.5 - 1.0, 1.0])


def test_kl_in_reward_sums_over_loss_tokens():
    trajs = [_traj(1.0, [2, 1])]
    rows = build_rows(trajs).rows
    # rollout logprob -1 everywhere; ref -1 - ln2 -> log ratio ln2, k1 = ln2 per token
    for row in rows:
        row["ref_logprobs"] = np.full(len(row["response_ids"]), -1.0 - np.log(2), dtype=np.float32)
    rows[0]["loss_mask"] = np.array([1, 0], dtype=np.int8)  # a masked (env) token carries no KL
    train = TrainingConfig(loss=LossConfig(kl_coef=0.1, kl_estimator="k1", kl_in_reward=True))
    rewards = shape_rewards(trajs, rows, train, max_tokens=10)
    assert rewards[0] == pytest.approx(1.0 - 0.1 * 2 * np.log(2), abs=1e-6)
    train.loss.kl_in_reward = False  # KL in the loss instead: rewards untouched
    assert shape_rewards(trajs, rows, train, max_tokens=10)[0] == 1.0


def test_stitched_rows_put_each_conversations_arrays_on_its_own_tokens():
    # Both calls start with the task prompt [1, 2]; the second adds context [7] before its reply.
    convs = [Conversation(prompt_ids=[1, 2], response_ids=[5, 6], logprobs=[-0.5, -0.6], loss_mask=[1, 0]),
             Conversation(prompt_ids=[1, 2, 7], response_ids=[8], logprobs=[-0.8])]
    trajs = [Trajectory(convs, reward=1.0, group_id="g"), _traj(0.0, [2], "g")]
    batch = build_rows(trajs, stitched=True)
    rows = batch.rows
    assert [r["trajectory"] for r in rows] == [0, 1]
    row = rows[0]
    assert row["prompt_ids"].tolist() == [1, 2] and row["response_ids"].tolist() == [5, 6, 7, 8]
    assert row["parents"].tolist() == [-1, 0, 1, 2, 1, 4]
    assert row["loss_mask"].tolist() == [1, 0, 0, 1]  # the context token 7 is never trained on
    np.testing.assert_allclose(row["old_logprobs"], [-0.5, -0.6, 0.0, -0.8])
    batch.assign_advantages(np.array([0.5, -0.5]))
    np.testing.assert_allclose(rows[0]["advantages"], [0.5] * 4)
    np.testing.assert_allclose(rows[1]["advantages"], [-0.5] * 2)


@pytest.mark.parametrize("stitched", [False, True])
def test_per_call_advantages_land_on_each_calls_own_tokens(stitched):
    # Mem-alpha style: every call has its own reward. Same trajectories as above; the second call adds context [7].
    convs = [Conversation(prompt_ids=[1, 2], response_ids=[5, 6], logprobs=[-0.5, -0.6]),
             Conversation(prompt_ids=[1, 2, 7], response_ids=[8], logprobs=[-0.8])]
    trajs = [Trajectory(convs, reward=1.0, group_id="g"), _traj(0.0, [2, 3], "g")]
    batch = build_rows(trajs, stitched=stitched)
    batch.assign_advantages([np.array([0.25, -1.0]), np.array([0.5, 2.0])])
    got = [batch.rows[row]["advantages"][index].tolist() for where in batch.positions for row, index in where]
    assert got == [[0.25, 0.25], [-1.0], [0.5, 0.5], [2.0, 2.0, 2.0]]
    if stitched:  # the context token 7 belongs to no call: 0, and its loss mask is 0 too
        assert batch.rows[0]["advantages"].tolist() == [0.25, 0.25, 0.0, -1.0]
    with pytest.raises(ValueError, match="trajectory 1 has 2 conversations; got 1 advantages"):
        batch.assign_advantages([np.array([0.25, -1.0]), np.array([0.5])])
    with pytest.raises(ValueError, match=r"need one advantage per trajectory \(2\), got shape \(3,\)"):
        batch.assign_advantages(np.zeros(3))


def test_importance_figures_count_loss_tokens_only():
    rows = [{"loss_mask": np.array([1, 1, 0]), "old_logprobs": np.log([0.5, 0.3, 0.9])},
            {"loss_mask": np.array([1]), "old_logprobs": np.log([0.6])}]
    rollout = [np.log([0.25, 0.3, 0.1]), np.log([0.1])]  # weights 2, 1, (9: env token) | 6
    figures = importance_figures(rows, rollout, cap=2.0)
    assert figures["is_weight_mean"] == pytest.approx(3.0)
    assert figures["is_weight_max"] == pytest.approx(6.0)
    assert figures["is_capped_share"] == pytest.approx(1 / 3)


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
