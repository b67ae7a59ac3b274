"""PPO with a critic and GAE: token advantages on hand-built rows, and real iterations of MEM1 on the search env."""

import math

import numpy as np
import pytest

from memrl.algorithms import PPOConfig
from memrl.engines import stop_engine
from memrl.learner.advantages import token_advantages, whiten
from memrl.episode import Conversation, Trajectory
from memrl.learner.rows import build_rows


def _trajectory(reward: float) -> Trajectory:
    """Three calls sharing the task prompt [1, 2]; the later ones see new context first (information, a state)."""
    convs = [Conversation(prompt_ids=[1, 2], response_ids=[5, 6], logprobs=[-1.0, -1.0]),
             Conversation(prompt_ids=[1, 2, 9, 9], response_ids=[7, 3, 4], logprobs=[-1.0] * 3, loss_mask=[1, 0, 1]),
             Conversation(prompt_ids=[1, 2, 8], response_ids=[6], logprobs=[-1.0])]
    return Trajectory(convs, reward=reward, group_id="g")


def _with_values(rows, trajectories, stitched: bool):
    """Give rows critic values: 0.1 * (k + 1) on every response token of conversation k, 7 on other tokens."""
    per_conv = [[np.full(len(c.response_ids), 0.1 * (k + 1)) for k, c in enumerate(t.conversations)]
                for t in trajectories]
    if stitched:
        from memrl.learner.stitching import stitch

        for row, t, values in zip(rows, trajectories, per_conv):
            tree = stitch([(c.prompt_ids, c.response_ids) for c in t.conversations])
            owned = tree.scatter([np.ones(len(v)) for v in values]) > 0
            row["old_values"] = np.where(owned, tree.scatter(values), 7.0).astype(np.float32)
    else:
        flat = [v for values in per_conv for v in values]
        for row, values in zip(rows, flat, strict=True):
            row["old_values"] = values.astype(np.float32)
    return rows


def test_gae_puts_reward_minus_value_on_trained_tokens_and_zero_elsewhere():
    trajectories = [_trajectory(1.0), _trajectory(0.0)]
    rows = _with_values(build_rows(trajectories).rows, trajectories, stitched=False)
    token_advantages(rows, np.array([1.0, 0.0]), gamma=1.0, lam=1.0)
    # gamma = lam = 1: every trained token's advantage is R - V(token); the masked token (the 3) gets 0.
    np.testing.assert_allclose(rows[0]["advantages"], [0.9, 0.9], rtol=1e-6)
    np.testing.assert_allclose(rows[1]["advantages"], [0.8, 0.0, 0.8], rtol=1e-6)
    np.testing.assert_allclose(rows[2]["advantages"], [0.7], rtol=1e-6)
    np.testing.assert_allclose(rows[1]["returns"], [1.0, 0.0, 1.0], rtol=1e-6)
    np.testing.assert_allclose(rows[5]["advantages"], [-0.3], rtol=1e-6)
    # lam = 0: one-step TD errors; the second conversation's last token is followed by the third's (V = 0.3).
    token_advantages(rows, np.array([1.0, 0.0]), gamma=1.0, lam=0.0)
    np.testing.assert_allclose(rows[1]["advantages"], [0.0, 0.0, 0.3 - 0.2], atol=1e-6)
    np.testing.assert_allclose(rows[2]["advantages"], [1.0 - 0.3], rtol=1e-6)


@pytest.mark.parametrize("lam", [1.0, 0.9])
def test_stitched_rows_get_the_advantages_of_their_conversations(lam):
    trajectories = [_trajectory(1.0), _trajectory(0.0)]
    plain = _with_values(build_rows(trajectories).rows, trajectories, stitched=False)
    stitched = _with_values(build_rows(trajectories, stitched=True).rows, trajectories, stitched=True)
    rewards = np.array([1.0, 0.0])
    token_advantages(plain, rewards, gamma=0.95, lam=lam)
    token_advantages(stitched, rewards, gamma=0.95, lam=lam)
    for row in stitched:
        loss = row["loss_mask"] > 0
        own = [r for r in plain if r["trajectory"] == row["trajectory"]]
        want = np.concatenate([r["advantages"][r["loss_mask"] > 0] for r in own])
        np.testing.assert_allclose(row["advantages"][loss], want, rtol=1e-6)
        assert np.all(row["advantages"][~loss] == 0)  # context tokens (value 7) never leak into the recursion


def test_whiten_normalises_trained_tokens_only():
    advantages = [np.array([1.0, 5.0, 3.0], np.float32), np.array([2.0], np.float32)]
    whiten(advantages, [np.array([1, 0, 1]), np.array([1])])
    trained = np.array([advantages[0][0], advantages[0][2], advantages[1][0]])
    assert trained.mean() == pytest.approx(0, abs=1e-6) and trained.std() == pytest.approx(1, abs=1e-5)
    assert advantages[0][1] == 5.0


def test_config_names_bad_values(tiny_checkpoint):
    base = PPOConfig().environment("memrl/Search-v0").learners(model_path=str(tiny_checkpoint))
    base.validate()
    assert base.training_cfg.stitch_trajectories and base.training_cfg.group_size == 1
    with pytest.raises(ValueError, match="training.lam"):
        base.copy().training(lam=1.5).validate()
    with pytest.raises(ValueError, match="training.critic_lr"):
        base.copy().training(critic_lr=0.0).validate()
    with pytest.raises(ValueError, match="negative_advantage_weight=0.5 is not allowed for PPO"):
        base.copy().training(negative_advantage_weight=0.5).validate()
    with pytest.raises(ValueError, match="advantage_estimator='group' is not allowed for PPOConfig"):
        base.copy().training(advantage_estimator="group").validate()
    with pytest.raises(ValueError, match="DAPOConfig.training\(\) has no setting 'gamma'"):
        from memrl.algorithms import DAPOConfig

        DAPOConfig().training(gamma=0.9)
    restored = PPOConfig.from_dict(base.copy().training(gamma=0.9).to_dict())
    assert restored.training_cfg.gamma == 0.9


def _mem1_config(checkpoint) -> PPOConfig:
    return (PPOConfig()
            .environment("memrl/Search-v0", env_config={"num_objectives": 2, "max_turns": 3})
            .env_runners(num_env_runners=0, num_engines=0, num_envs_per_env_runner=4, workflow="mem1",
                         workflow_config={"memory_tokens": 24}, engine="torch", max_tokens=12)
            .learners(model_path=str(checkpoint), num_learners=0, token_budget=4096)  # policy and critic here too
            .training(lr=1e-3, critic_lr=1e-3, tasks_per_iteration=4, num_minibatches=2)
            .evaluation(evaluation_num_tasks=3)
            .debugging(seed=5))


@pytest.mark.slow
def test_mem1_ppo_iterations_train_critic_and_policy_and_resume(ray_session, tiny_checkpoint, tmp_path):
    algo = _mem1_config(tiny_checkpoint).build()
    straight = [algo.train() for _ in range(2)]
    path = algo.save_to_path(tmp_path / "ckpt")  # after iteration 2; the run goes on as if it had not saved
    straight.append(algo.train())
    stop_engine(algo.engines[0])  # in this process, as the learners are: all of them dropped
    algo.learner_group.shutdown()
    algo.critic_group.shutdown()
    first = straight[0]
    learners = first["learners"]
    assert first["counters"]["trajectories_trained"] == 4
    assert learners["rows"] == 4  # one stitched row per trajectory
    assert learners["tokens"] == first["env_runners"]["new_tokens"]  # every generated token, nothing else
    assert learners["critic_tokens"] == learners["tokens"] and learners["critic_optimizer_steps"] == 2
    assert math.isfinite(learners["critic_vf_loss"]) and learners["critic_grad_norm"] > 0
    assert math.isfinite(learners["pg_loss"]) and learners["grad_norm"] > 0
    assert straight[-1]["learners"]["critic_vf_loss"] != learners["critic_vf_loss"]

    # After all of it was dropped, a new algorithm restores policy, critic and the runners (in this process here;
    # learner and runner actors are restored in tests/algorithms/test_algorithm.py) and does the third iteration
    # exactly as the uninterrupted run did.
    algo = _mem1_config(tiny_checkpoint).build()
    algo.restore_from_path(path)
    resumed = algo.train()
    algo.stop()
    for key in ("loss", "critic_vf_loss", "critic_value_mean", "grad_norm", "critic_grad_norm"):
        assert resumed["learners"][key] == pytest.approx(straight[2]["learners"][key], rel=1e-5, abs=1e-6), key
