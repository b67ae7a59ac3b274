"""Learner rows: laid out once (plain or stitched), with advantages per trajectory or per call on their tokens."""

import numpy as np
import pytest

from memrl.episode import Conversation, Trajectory
from memrl.learner.rows import build_rows, importance_figures


def _traj(reward: float, response_lengths: list[int], group: str = "g") -> Trajectory:
    convs = [Conversation(prompt_ids=[1, 2], response_ids=[5] * n, logprobs=[-1.0] * n) for n in response_lengths]
    return Trajectory(convs, reward=reward, group_id=group)


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
