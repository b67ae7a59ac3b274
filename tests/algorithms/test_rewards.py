"""Reward shaping and advantage rows of the Algorithm, on hand-built trajectories (no actors)."""

import numpy as np
import pytest

from memrl.algorithms.algorithm import Algorithm, shape_rewards
from memrl.config import TrainingConfig
from memrl.episode import Conversation, Trajectory
from memrl.learner.losses import LossConfig


def _traj(reward: float, response_lengths: list[int], group: str = "g") -> Trajectory:
    convs = [Conversation(prompt_ids=[1, 2], response_ids=[5] * n, logprobs=[-1.0] * n) for n in response_lengths]
    return Trajectory(convs, reward=reward, group_id=group)


def test_plain_rewards_pass_through():
    trajs = [_traj(1.0, [3, 2]), _traj(0.0, [4])]
    rows = Algorithm.build_rows(trajs)
    assert len(rows) == 3 and [len(r["response_ids"]) for r in rows] == [3, 2, 4]
    np.testing.assert_array_equal(shape_rewards(trajs, rows, TrainingConfig(), max_tokens=10), [1.0, 0.0])


def test_overlong_penalty_per_conversation():
    # max 10, buffer 4: length <= 6 free; 8 -> -(8-6)/4 = -0.5; 10 -> -1
    trajs = [_traj(1.0, [8, 10]), _traj(1.0, [6])]
    train = TrainingConfig(overlong_buffer_tokens=4, overlong_penalty=1.0)
    rewards = shape_rewards(trajs, Algorithm.build_rows(trajs), train, max_tokens=10)
    np.testing.assert_allclose(rewards, [1.0 - 0.5 - 1.0, 1.0])


def test_kl_in_reward_sums_over_loss_tokens():
    trajs = [_traj(1.0, [2, 1])]
    rows = Algorithm.build_rows(trajs)
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
    rows = Algorithm.build_rows(trajs, stitched=True)
    assert [r["trajectory"] for r in rows] == [0, 1]
    row = rows[0]
    assert row["prompt_ids"].tolist() == [1, 2] and row["response_ids"].tolist() == [5, 6, 7, 8]
    assert row["parents"].tolist() == [-1, 0, 1, 2, 1, 4]
    assert row["loss_mask"].tolist() == [1, 0, 0, 1]  # the context token 7 is never trained on
    np.testing.assert_allclose(row["old_logprobs"], [-0.5, -0.6, 0.0, -0.8])
    Algorithm.assign_advantages(rows, trajs, np.array([0.5, -0.5]))
    np.testing.assert_allclose(rows[0]["advantages"], [0.5] * 4)
    np.testing.assert_allclose(rows[1]["advantages"], [-0.5] * 2)
