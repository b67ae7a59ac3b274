import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import memrl_envs  # noqa: F401  (registers memrl/ ids)
from memrl_envs.echo import WORDS, EchoEnv


def test_passes_gymnasium_env_checker():
    check_env(EchoEnv(num_turns=3), skip_render_check=True)
    check_env(EchoEnv(num_turns=1, reward="similarity"), skip_render_check=True)


def test_registered_and_seeded():
    a, b = gym.make("memrl/Echo-v0", num_turns=3), gym.make("memrl/Echo-v0", num_turns=3)
    assert a.reset(seed=5)[0] == b.reset(seed=5)[0]
    firsts = {a.reset(seed=s)[0] for s in range(40)}
    assert len(firsts) > 3  # different seeds, different words


def test_rewards():
    env = EchoEnv(num_turns=2)
    obs, _ = env.reset(seed=0)
    word = obs.removeprefix("Say: ")
    assert word in WORDS
    obs, reward, terminated, truncated, info = env.step(f"  {word.upper()} ")
    assert (reward, terminated, info["correct"]) == (0.5, False, True)
    obs, reward, terminated, _, info = env.step("wrong")
    assert (reward, terminated, info["correct"], obs) == (0.0, True, False, "")
    sim = EchoEnv(num_turns=1, reward="similarity")
    word = sim.reset(seed=0)[0].removeprefix("Say: ")
    assert sim.step(word[:-1])[1] == pytest.approx(2 * (len(word) - 1) / (2 * len(word) - 1))


@pytest.mark.parametrize("action", ["", "\x00\x01", "é" * 5000, "<think>", None, 42, "a" * 10**6])
def test_malformed_actions_never_crash(action):
    env = EchoEnv(num_turns=1, reward="similarity")
    env.reset(seed=1)
    obs, reward, terminated, _, info = env.step(action)
    assert terminated and 0.0 <= reward <= 1.0
    # str(action) has text once control characters are dropped (any script counts)
    assert info["format_ok"] is (action in ("é" * 5000, "<think>", None, 42, "a" * 10**6))


def test_bad_config_and_misuse_are_named():
    with pytest.raises(ValueError, match="num_turns must be >= 1"):
        EchoEnv(num_turns=0)
    with pytest.raises(ValueError, match="reward='f1' is not allowed"):
        EchoEnv(reward="f1")
    env = EchoEnv(num_turns=1)
    env.reset(seed=0)
    env.step("x")
    with pytest.raises(RuntimeError, match="after the episode ended"):
        env.step("x")


def test_a_simulated_outage_ends_the_episode_flagged():
    env = EchoEnv(num_turns=3, failure_rate=1.0)
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(env.expert_action())
    assert (obs, reward, terminated, truncated) == ("", 0.0, False, True) and "simulated outage" in info["failure"]
    sometimes = EchoEnv(failure_rate=0.5)
    fails = [sometimes.reset(seed=s) and sometimes._fails for s in range(40)]
    assert 0 < sum(fails) < 40 and fails == [sometimes.reset(seed=s) and sometimes._fails for s in range(40)]
    with pytest.raises(ValueError, match=r"failure_rate must be in \[0, 1\], got 2"):
        EchoEnv(failure_rate=2)
