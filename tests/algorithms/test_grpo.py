"""Multi-conversation DAPO/GRPO: trajectory advantages broadcast to conversations, token mean over all of them."""

import numpy as np
import pytest
import torch

from memrl.algorithms import DAPO, DAPOConfig, GRPOConfig
from memrl.episode import Conversation, Trajectory
from memrl.learner.advantages import group_advantages
from memrl.learner.batching import pad_rows
from memrl.learner.losses import compute_loss
from memrl.learner.rows import build_rows


def _trajectory(response_lengths: list[int], reward: float, group: str) -> Trajectory:
    convs = [Conversation(prompt_ids=np.arange(1, 4), response_ids=np.arange(5, 5 + n),
                          logprobs=np.full(n, -1.0, np.float32)) for n in response_lengths]
    return Trajectory(convs, reward=reward, group_id=group)


def test_dapo_advantage_reaches_every_token_of_every_conversation_and_token_mean_weighs_tokens_equally():
    # One group of three trajectories with 1, 3 and 2 conversations (MemAgent: one per chunk plus the answer).
    trajectories = [_trajectory([2], 1.0, "g"), _trajectory([1, 4, 2], 0.0, "g"), _trajectory([3, 1], 1.0, "g")]
    cfg = DAPOConfig()
    advantages = group_advantages([t.reward for t in trajectories], [t.group_id for t in trajectories],
                                  norm_std=cfg.training_cfg.norm_adv_by_std)
    np.testing.assert_allclose(advantages, [1 / 3, -2 / 3, 1 / 3])  # R - group mean, no std (DAPO)

    batch = build_rows(trajectories)
    batch.assign_advantages(advantages)
    rows = batch.rows
    assert len(rows) == 6
    expected = [[1 / 3] * 2, [-2 / 3], [-2 / 3] * 4, [-2 / 3] * 2, [1 / 3] * 3, [1 / 3]]
    for row, exp in zip(rows, expected, strict=True):
        np.testing.assert_allclose(row["advantages"], exp, rtol=1e-6)

    # token_mean over all conversations at ratio 1: loss = -sum(A over tokens) / tokens, each token weighted 1/13.
    batch = pad_rows(rows)
    logprobs = batch.response_values(rows, "old_logprobs").requires_grad_(True)
    old = batch.response_values(rows, "old_logprobs")
    adv = batch.response_values(rows, "advantages")
    num_tokens = float(batch.response_mask.sum())
    assert num_tokens == 13
    loss, _ = compute_loss(cfg.training_cfg.loss, logprobs, old, adv, batch.response_mask, num_tokens, len(rows))
    assert loss.item() == pytest.approx(-(2 / 3 - 7 * 2 / 3 + 4 / 3) / 13, abs=1e-6)
    loss.backward()
    torch.testing.assert_close(logprobs.grad, -adv / 13)


def test_grpo_normalises_by_the_group_std():
    rewards = [1.0, 0.0, 1.0, 0.0]
    adv = group_advantages(rewards, ["g"] * 4, norm_std=GRPOConfig().training_cfg.norm_adv_by_std)
    np.testing.assert_allclose(adv, np.array([0.5, -0.5, 0.5, -0.5]) / np.std(rewards, ddof=1), rtol=1e-5)


@pytest.mark.parametrize("weight", [1.0, 0.25, 0.0])
def test_negative_advantage_weight_scales_only_below_mean_trajectories(weight):
    # Rewards 1, 0, 0, 1 | 1, 1 in two groups: means 0.5 and 1, so advantages +0.5, -0.5, -0.5, +0.5 | 0, 0.
    trajectories = [_trajectory([1], r, g) for r, g in ((1.0, "a"), (0.0, "a"), (0.0, "a"), (1.0, "a"),
                                                        (1.0, "b"), (1.0, "b"))]
    algo = DAPO.__new__(DAPO)  # compute_advantages reads only the config here
    algo.cfg = DAPOConfig().training(negative_advantage_weight=weight)
    batch = build_rows(trajectories)
    assert algo.compute_advantages(trajectories, batch) == {}
    advantages = [float(row["advantages"][0]) for row in batch.rows]
    np.testing.assert_allclose(advantages, [0.5, -0.5 * weight, -0.5 * weight, 0.5, 0.0, 0.0])


def test_call_by_position_advantages_give_each_conversation_its_own_reward_against_its_position():
    # MemAgent with ChunkStream's score_memories: two memory calls and the answer, each with its own reward.
    def scored(rewards):
        t = _trajectory([2, 1, 3], rewards[-1], "g")
        for c, r in zip(t.conversations, rewards):
            c.reward = r
        return t

    trajectories = [scored([1.0, 1.0, 1.0]), scored([1.0, 0.0, 0.0])]
    algo = DAPO.__new__(DAPO)  # compute_advantages reads only the config here
    algo.cfg = DAPOConfig().training(advantage_estimator="call_by_position")
    batch = build_rows(trajectories)
    figures = algo.compute_advantages(trajectories, batch)
    per_row = [float(row["advantages"][0]) for row in batch.rows]
    assert per_row == [0.0, 0.5, 0.5, 0.0, -0.5, -0.5]  # the trajectory's outcome would give +-0.5 on every call
    assert figures["call_reward_mean"] == pytest.approx(4 / 6)
