import numpy as np
import pytest

from memrl.episode import Conversation, Trajectory
from memrl.stats import (
    best_and_worst_of_k,
    mean_interval,
    paired_interval,
    reward_interval,
    task_rewards,
    wilson_interval,
)


def test_wilson_known_values():
    # 20/100 successes: Wilson 95% interval is [0.1333, 0.2888] (standard tables)
    low, high = wilson_interval(20, 100)
    assert low == pytest.approx(0.1333, abs=1e-4)
    assert high == pytest.approx(0.2888, abs=1e-4)
    assert wilson_interval(0, 10)[0] == 0.0
    assert wilson_interval(10, 10)[1] == pytest.approx(1.0)
    assert wilson_interval(0, 0) == (0.0, 1.0)


def test_mean_interval():
    mean, low, high = mean_interval([1.0, 2.0, 3.0, 4.0])
    # s = 1.29099, half width = 1.96 * 1.29099 / 2 = 1.26517
    assert mean == 2.5
    assert low == pytest.approx(2.5 - 1.26517, abs=1e-4)
    assert high == pytest.approx(2.5 + 1.26517, abs=1e-4)
    assert mean_interval([5.0]) == (5.0, 5.0, 5.0)


def test_reward_interval_picks_wilson_for_success_rates():
    # 3/200 successes: the normal interval would dip below 0, Wilson stays inside [0, 1]
    rewards = [1.0] * 3 + [0.0] * 197
    assert mean_interval(rewards)[1] < 0
    assert reward_interval(rewards) == pytest.approx((0.015, *wilson_interval(3, 200)))
    assert reward_interval([0.2, 0.5, 0.9]) == pytest.approx(mean_interval([0.2, 0.5, 0.9]))


def test_wilson_bounds_contain_the_proportion_exactly_at_0_and_1():
    for n in (1, 3, 7, 100, 1000):
        low, high = wilson_interval(0, n)
        assert low == 0.0 < high
        low, high = wilson_interval(n, n)
        assert low < high == 1.0


def test_paired_interval_is_the_interval_of_the_per_task_change():
    before, after = [0, 1, 1, 2, 0, 1], [1, 1, 2, 2, 0, 2]
    mean, low, high = paired_interval(before, after)
    assert mean == pytest.approx(0.5)
    assert (low, high) == pytest.approx(mean_interval([1, 0, 1, 0, 0, 1])[1:])
    # Much tighter than the two evaluations' own intervals when the tasks are the same.
    same = paired_interval([0, 1, 2] * 50, [0, 1, 2] * 50)
    assert same == (0.0, 0.0, 0.0)
    with pytest.raises(ValueError, match="one value per task"):
        paired_interval([1, 2], [1, 2, 3])


def test_best_and_worst_of_k_by_hand():
    # 3 samples of 4 tasks; the last task's second episode failed, so it is left out of every figure.
    rewards = np.array([[1.0, 0.0, 1.0, 1.0],
                        [1.0, 0.0, 0.0, np.nan],
                        [1.0, 1.0, 0.0, 1.0]])
    out = best_and_worst_of_k(rewards)
    assert out["num_tasks"] == 3 and out["samples"] == 3
    per_task = [1.0, 1 / 3, 1 / 3]
    assert (out["reward_mean"], out["reward_ci_low"], out["reward_ci_high"]) == pytest.approx(mean_interval(per_task))
    assert (out["pass_at_k_mean"], out["pass_at_k_ci_low"], out["pass_at_k_ci_high"]) == \
        pytest.approx((1.0, *wilson_interval(3, 3)))
    assert (out["all_k_mean"], out["all_k_ci_low"], out["all_k_ci_high"]) == \
        pytest.approx((1 / 3, *wilson_interval(1, 3)))
    with pytest.raises(ValueError, match=r"\[k, tasks\] array"):
        best_and_worst_of_k(np.zeros(3))


def test_task_rewards_mark_failed_episodes():
    conv = Conversation(prompt_ids=np.arange(1, 3), response_ids=np.arange(3, 5), logprobs=np.zeros(2, np.float32))
    rounds = [[Trajectory([conv], reward=1.0), Trajectory([conv], reward=0.0, failure="env raised")],
              [Trajectory([conv], reward=0.5), Trajectory([conv], reward=1.0)]]
    got = task_rewards(rounds)
    assert got.shape == (2, 2) and got[0, 0] == 1.0 and np.isnan(got[0, 1]) and got[1].tolist() == [0.5, 1.0]
