import numpy as np
import pytest

from memrl.algorithms import MemAlphaConfig
from memrl.episode import Conversation, Trajectory
from memrl.learner.advantages import row_advantages
from memrl.learner.rows import build_rows


def _trajectory(group: str, rewards: list[float]) -> Trajectory:
    conversations = [Conversation(prompt_ids=[1, 2], response_ids=[3, 4, 5], logprobs=[0.0] * 3, reward=r)
                     for r in rewards]
    return Trajectory(conversations, reward=sum(rewards), group_id=group, traj_id=f"{group}-{len(rewards)}")


def test_rows_are_normalised_against_every_row_of_their_tasks_rollouts():
    trajectories = [_trajectory("a", [1.0, 2.0]), _trajectory("a", [3.0]), _trajectory("b", [5.0, 5.0, 8.0])]
    advantages = row_advantages(trajectories)
    a = np.array([1.0, 2.0, 3.0])
    b = np.array([5.0, 5.0, 8.0])
    want_a = (a - a.mean()) / (a.std(ddof=1) + 1e-6)
    want_b = (b - b.mean()) / (b.std(ddof=1) + 1e-6)
    assert np.allclose(np.concatenate(advantages[:2]), want_a) and np.allclose(advantages[2], want_b)
    assert np.allclose(np.concatenate(row_advantages(trajectories, norm_std=False)[:2]), a - a.mean())
    halved = row_advantages(trajectories, norm_std=False, negative_weight=0.5)
    assert np.allclose(np.concatenate(halved[:2]), [-0.5, 0.0, 1.0])  # a - mean = -1, 0, +1: only -1 is halved


def test_each_rows_advantage_lands_on_its_own_tokens():
    trajectories = [_trajectory("a", [0.0, 1.0]), _trajectory("a", [2.0])]
    batch = build_rows(trajectories)
    advantages = row_advantages(trajectories)
    batch.assign_advantages(advantages)
    flat = np.concatenate(advantages)
    for row, value in zip(batch.rows, flat):
        assert np.allclose(row["advantages"], value) and len(row["advantages"]) == 3


def test_config_defaults_are_the_papers(tiny_checkpoint):
    config = MemAlphaConfig().learners(model_path=str(tiny_checkpoint))
    assert config.training_cfg.norm_adv_by_std and config.training_cfg.loss.aggregation == "token_mean"
    assert config.algo_class.__name__ == "MemAlpha"
    with pytest.raises(ValueError, match="group_size"):
        config.environment("memrl/MemoryStore-v0").training(group_size=1).validate()


@pytest.mark.slow
def test_a_memalpha_iteration_trains_every_chunk_row_with_its_own_reward(ray_session, tiny_checkpoint):
    """A real iteration: runners play the memory-store env under the memalpha workflow (runners and engine in this
    process), a chat actor answers, the learners train on one row per chunk."""
    from memrl.engines.chat import start_chat_server

    answerer = start_chat_server("memalpha-iteration-answerer", str(tiny_checkpoint), engine="torch", max_tokens=4)
    algo = (MemAlphaConfig()
            .environment("memrl/MemoryStore-v0", env_config={
                "num_chunks": 2, "num_questions": 2, "facts_per_chunk": 1, "small_talk_per_chunk": 0,
                "answerer": "actor:memalpha-iteration-answerer"})
            .env_runners(num_env_runners=0, num_engines=0, num_envs_per_env_runner=4, workflow="memalpha",
                         engine="torch", max_tokens=16)
            .learners(model_path=str(tiny_checkpoint), num_learners=0)
            .training(lr=1e-5, tasks_per_iteration=2, group_size=2)
            .debugging(seed=1)
            .build())
    result = algo.train()
    algo.stop()
    ray_session.kill(answerer)
    assert result["counters"]["conversations_trained"] == 2 * 2 * 2  # tasks x rollouts x chunks
    assert "row_reward_mean" in result["learners"] and np.isfinite(result["learners"]["loss"])
    runners = result["env_runners"]
    assert 0 <= runners["r_acc_mean"] <= 1 and 0 <= runners["tool_success_mean"] <= 1 and runners["num_failed"] == 0


def test_dynamic_sampling_compares_the_named_metric_and_names_what_the_env_has():
    from types import SimpleNamespace

    from memrl.algorithms.algorithm import Algorithm

    trajectory = _trajectory("a", [1.25])
    trajectory.metrics = {"r_acc": 0.5, "r_compress": 0.4}
    by_reward = SimpleNamespace(cfg=MemAlphaConfig().training(dynamic_sampling=True))
    by_acc = SimpleNamespace(cfg=MemAlphaConfig().training(dynamic_sampling=True, dynamic_sampling_metric="r_acc"))
    assert Algorithm._sampling_value(by_reward, trajectory) == 1.25
    assert Algorithm._sampling_value(by_acc, trajectory) == 0.5
    missing = SimpleNamespace(cfg=MemAlphaConfig().training(dynamic_sampling_metric="em"))
    with pytest.raises(ValueError, match=r"'em'.*\['r_acc', 'r_compress'\]"):
        Algorithm._sampling_value(missing, trajectory)
