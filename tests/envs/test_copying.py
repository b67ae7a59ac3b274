import gymnasium
import pytest

import memrl_envs  # noqa: F401  (registers memrl/Copy-v0)
from memrl_envs.copying import CopyEnv


def _env(**kwargs) -> CopyEnv:
    return gymnasium.make("memrl/Copy-v0", **kwargs).unwrapped


def test_the_answer_is_the_span_after_a_cue_that_occurs_once():
    env = _env(min_chars=20, max_chars=300)
    lengths = []
    for seed in range(200):
        obs, info = env.reset(seed=seed)
        text, cue = obs.split("\n")
        text, cue = text.removeprefix("Text: "), cue.removeprefix("After: ")
        assert text.count(cue) == 1 and text.split(cue)[1].startswith(env.expert_action())
        assert len(env.expert_action()) == info["answer_chars"] == 10 and len(cue) == 3
        lengths.append(len(text))
    assert 20 <= min(lengths) < 60 and 250 < max(lengths) <= 300
    assert _env().reset(seed=5)[0] == _env().reset(seed=5)[0] != _env().reset(seed=6)[0]


def test_exact_and_similarity_rewards():
    env = _env()
    env.reset(seed=0)
    answer = env.expert_action()
    assert env.step(answer)[1:3] == (1.0, True)
    env.reset(seed=0)
    assert env.step(answer[:-1] + ("x" if answer[-1] != "x" else "y"))[1] == 0.0
    env = _env(reward="similarity")
    env.reset(seed=0)
    assert env.step(answer + "zz")[1] == pytest.approx(2 * 10 / 22)
    with pytest.raises(RuntimeError, match="after the episode ended"):
        env.step(answer)


@pytest.mark.parametrize("reply", ["", "\u00e9\u4e2d\U0001f600", "x" * 10_000, "click[../../etc/passwd]",
                                   "\x00\x1b[2J"])
def test_any_reply_is_scored_never_raises(reply):
    env = _env()
    env.reset(seed=1)
    obs, reward, terminated, truncated, info = env.step(reply)
    assert reward == 0.0 and terminated and info["format_ok"] == bool(reply.strip() and reply.strip("\x00\x1b"))


@pytest.mark.parametrize("options, message", [
    ({"answer_chars": 0}, "answer_chars must be an int >= 1"),
    ({"min_chars": 5}, r"min_chars must be an int >= answer_chars \+ cue_chars \(13\)"),
    ({"min_chars": 50, "max_chars": 40}, r"max_chars must be an int >= min_chars \(50\)"),
    ({"word_share": 1.5}, r"word_share must be a number in \[0, 1\]"),
    ({"reward": "f1"}, "reward='f1' is not allowed"),
])
def test_bad_options_name_what_is_allowed(options, message):
    with pytest.raises(ValueError, match=message):
        CopyEnv.check_options(options)


def test_reset_options_set_one_episodes_text_lengths():
    env = _env()
    short = [len(env.reset(seed=s, options={"max_chars": 24})[0].split("\n")[0]) - len("Text: ") for s in range(50)]
    assert 16 <= min(short) and max(short) <= 24
    long = [len(env.reset(seed=s, options={"min_chars": 500})[0].split("\n")[0]) - len("Text: ") for s in range(50)]
    assert 500 <= min(long) and max(long) <= 600
    with pytest.raises(ValueError, match=r"options \['length'\] are not allowed; allowed: min_chars, max_chars"):
        env.reset(seed=0, options={"length": 5})
    with pytest.raises(ValueError, match=r"max_chars must be an int >= min_chars \(16\)"):
        env.reset(seed=0, options={"max_chars": 10})
