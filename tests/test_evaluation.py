"""Held-out evaluation: disjoint task seeds, intervals, and greedy or sampled rollouts of a checkpoint on its own
engine."""

import numpy as np
import pytest

from memrl.episode import Conversation, Trajectory
from memrl.evaluation import evaluate_checkpoint, heldout_tasks
from memrl.stats import eval_summary, mean_interval, wilson_interval


def _trajectory(reward: float, calls: int = 1) -> Trajectory:
    conv = Conversation(prompt_ids=np.arange(1, 5), response_ids=np.arange(6, 8), logprobs=np.zeros(2, np.float32))
    return Trajectory([conv] * calls, reward=reward, metrics={"peak_context_tokens": 6.0, "num_calls": calls})


def test_heldout_tasks_are_distinct_odd_seeds_fixed_by_the_seed():
    tasks = heldout_tasks(3, 200)
    seeds = [t.seed for t in tasks]
    assert len(set(seeds)) == 200 and all(s % 2 == 1 for s in seeds)  # training draws even seeds
    assert [t.seed for t in heldout_tasks(3, 200)] == seeds
    assert set(seeds).isdisjoint(t.seed for t in heldout_tasks(4, 200))
    assert len({t.traj_id for t in tasks}) == len({t.group_id for t in tasks}) == 200


def test_eval_summary_uses_wilson_for_accuracy_and_normal_interval_otherwise():
    binary = [_trajectory(r) for r in [1.0] * 19 + [0.0]]
    s = eval_summary(binary)
    assert s["reward_mean"] == pytest.approx(0.95)
    assert (s["reward_ci_low"], s["reward_ci_high"]) == pytest.approx(wilson_interval(19, 20))
    assert s["reward_ci_high"] <= 1.0 and s["num_tasks"] == 20
    graded = [_trajectory(r, calls=2) for r in (0.2, 0.5, 0.9)]
    s = eval_summary(graded)
    assert (s["reward_mean"], s["reward_ci_low"], s["reward_ci_high"]) == pytest.approx(mean_interval([0.2, 0.5, 0.9]))
    assert s["num_calls_mean"] == 2.0 and s["peak_context_tokens_max"] == 6.0


@pytest.mark.slow
def test_evaluate_checkpoint_runs_each_env_config_on_one_engine(ray_session, tiny_checkpoint):
    results = evaluate_checkpoint(str(tiny_checkpoint), "memrl/Echo-v0",
                                  [{"num_turns": 1, "reward": "similarity"}, {"num_turns": 3, "reward": "similarity"}],
                                  "last_observation", {}, num_tasks=5, max_tokens=4, engine="torch")
    assert len(results) == 2
    (short, short_trajs), (long, long_trajs) = results
    assert short["num_tasks"] == long["num_tasks"] == 5
    assert short["sample_s"] > 0 and long["sample_s"] > 0  # each config's rollouts are timed on their own
    assert [len(t.conversations) for t in short_trajs] == [1] * 5
    assert [len(t.conversations) for t in long_trajs] == [3] * 5
    assert [t.traj_id for t in short_trajs] == [t.traj_id for t in heldout_tasks(0, 5)]
    # Greedy: the same checkpoint and tasks give the same answers again, also on a runner and an engine in this
    # process (num_env_runners=0, and so num_engines=0 for the torch engine) that ran another config (a count per
    # config) first.
    again = evaluate_checkpoint(str(tiny_checkpoint), "memrl/Echo-v0",
                                [{"num_turns": 3, "reward": "similarity"}, {"num_turns": 1, "reward": "similarity"}],
                                "last_observation", {}, num_tasks=[2, 5], max_tokens=4, engine="torch",
                                num_env_runners=0)
    assert [s["num_tasks"] for s, _ in again] == [2, 5]
    assert [t.conversations[0].response_ids.tolist() for t in again[1][1]] == \
        [t.conversations[0].response_ids.tolist() for t in short_trajs]
    with pytest.raises(ValueError, match="one positive count per env config"):
        evaluate_checkpoint(str(tiny_checkpoint), "memrl/Echo-v0", [{}, {}], "last_observation", {}, num_tasks=[5],
                            max_tokens=4)
    with pytest.raises(ValueError, match=r"num_engines=0 is not allowed with num_env_runners=2 and engine='torch'; "
                                         r"it must be 1 \(an engine actor\) or 0"):
        evaluate_checkpoint(str(tiny_checkpoint), "memrl/Echo-v0", [{}], "last_observation", {}, num_tasks=2,
                            max_tokens=4, engine="torch", num_engines=0)


@pytest.mark.slow
def test_evaluate_checkpoint_samples_each_task_k_times(ray_session, tiny_checkpoint):
    # Runners in this process (runner actors: test_evaluate_checkpoint_runs_each_env_config_on_one_engine).
    config = {"num_turns": 1, "reward": "similarity"}
    [(summary, trajs)] = evaluate_checkpoint(str(tiny_checkpoint), "memrl/Echo-v0", [config], "last_observation", {},
                                             num_tasks=6, max_tokens=6, engine="torch", temperature=1.0, samples=3,
                                             num_env_runners=0)
    # Three rounds of the same six tasks, each in task order, each round sampled anew.
    assert len(trajs) == 18
    assert [t.traj_id for t in trajs] == [t.traj_id for t in heldout_tasks(0, 6)] * 3
    responses = [[t.conversations[0].response_ids.tolist() for t in trajs[r * 6:(r + 1) * 6]] for r in range(3)]
    assert responses[0] != responses[1] and responses[1] != responses[2]
    rewards = np.array([[t.reward for t in trajs[r * 6:(r + 1) * 6]] for r in range(3)])
    assert summary["num_tasks"] == 6 and summary["samples"] == 3
    assert summary["reward_mean"] == pytest.approx(rewards.mean())
    assert summary["pass_at_k_mean"] == pytest.approx(rewards.max(axis=0).mean())
    assert summary["all_k_mean"] == pytest.approx(rewards.min(axis=0).mean())
    # The same seed samples the same answers again.
    [(_, again)] = evaluate_checkpoint(str(tiny_checkpoint), "memrl/Echo-v0", [config], "last_observation", {},
                                       num_tasks=6, max_tokens=6, engine="torch", temperature=1.0, samples=3,
                                       num_env_runners=0)
    assert [t.conversations[0].response_ids.tolist() for t in again] == [r for rs in responses for r in rs]
    for bad in ({"samples": 0}, {"samples": 2}, {"samples": 2, "temperature": -1.0}):
        with pytest.raises(ValueError, match="samples must be an integer >= 1"):
            evaluate_checkpoint(str(tiny_checkpoint), "memrl/Echo-v0", [config], "last_observation", {},
                                num_tasks=2, max_tokens=4, **bad)
