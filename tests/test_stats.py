import pytest

from memrl.stats import mean_interval, paired_interval, reward_interval, wilson_interval


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
