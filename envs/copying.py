"""memrl/Copy-v0: continue a text from a cue that occurs once in it, the in-context copying an agent needs to click a
product id or an option value it reads on a page.

The text is random characters (a-z, 0-9: how product ids and sizes are spelled) mixed with words; the cue is the
`cue_chars` characters that come right before a span of `answer_chars`, chosen so the cue occurs once; the agent
replies with that span. The embedded tiny model learns this from dense examples like these in minutes, and slowly
from the few id characters of WebShop's expert episodes, so the WebShop warm-starts begin here
(tuned_examples/warm_starts/webshop_sft.py). One turn; the reward is 1 for the exact span (reward="exact") or the
characters' similarity ratio (reward="similarity", difflib).
"""

from __future__ import annotations

import difflib
import string

import gymnasium as gym

from memrl_envs.text_space import clean, text_space

ALPHABET = string.ascii_lowercase + string.digits
WORDS = ("white", "black", "large", "small", "pack", "inch", "cotton", "wireless", "organic", "leather", "blue",
         "size", "color", "count", "ounce", "green", "cover", "cable", "chair", "shirt", "towel", "brush")
"""Words mixed into the text, so the copying covers multi-character tokens as well as single characters."""


class CopyEnv(gym.Env):
    """One turn: observation "Text: <text>\\nAfter: <cue>"; the reply is the `answer_chars` characters after the cue."""

    metadata = {"render_modes": []}

    def __init__(self, min_chars: int = 16, max_chars: int = 600, answer_chars: int = 10, cue_chars: int = 3,
                 word_share: float = 0.2, reward: str = "exact", max_action_chars: int = 256):
        """Text lengths are drawn uniformly from [min_chars, max_chars] per episode (reset options min_chars /
        max_chars override them for one episode); `word_share` is the share of pieces that are words (the rest single
        characters)."""
        for name, value, low in (("answer_chars", answer_chars, 1), ("cue_chars", cue_chars, 1),
                                 ("max_action_chars", max_action_chars, 1)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"CopyEnv {name} must be an int >= {low}, got {value!r}")
        if isinstance(min_chars, bool) or not isinstance(min_chars, int) or min_chars < answer_chars + cue_chars:
            raise ValueError(f"CopyEnv min_chars must be an int >= answer_chars + cue_chars "
                             f"({answer_chars + cue_chars}), got {min_chars!r}")
        if isinstance(max_chars, bool) or not isinstance(max_chars, int) or max_chars < min_chars:
            raise ValueError(f"CopyEnv max_chars must be an int >= min_chars ({min_chars}), got {max_chars!r}")
        if isinstance(word_share, bool) or not isinstance(word_share, (int, float)) or not 0 <= word_share <= 1:
            raise ValueError(f"CopyEnv word_share must be a number in [0, 1], got {word_share!r}")
        if reward not in ("exact", "similarity"):
            raise ValueError(f"CopyEnv reward={reward!r} is not allowed; choose 'exact' or 'similarity'")
        self.min_chars, self.max_chars = min_chars, max_chars
        self.answer_chars, self.cue_chars = answer_chars, cue_chars
        self.word_share, self.reward, self.max_action_chars = word_share, reward, max_action_chars
        self.observation_space = text_space(max_chars + cue_chars + 64)
        self.action_space = text_space(max_action_chars)
        self.text = self.cue = self.answer = ""
        self._done = True

    @classmethod
    def check_options(cls, options: dict) -> None:
        """Raise ValueError for a bad option (a copy env costs nothing to build)."""
        cls(**options)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        rng = self.np_random
        low, high = self._lengths(options or {})
        while True:
            length = int(rng.integers(low, high + 1))
            text = ""  # words stand between single spaces; no space leads
            while len(text.rstrip()) < length:
                if rng.random() < self.word_share:
                    text += f"{'' if not text or text.endswith(' ') else ' '}{WORDS[rng.integers(len(WORDS))]} "
                else:
                    text += ALPHABET[rng.integers(len(ALPHABET))]
            text = text[:length - 1] + ALPHABET[rng.integers(len(ALPHABET))]  # exactly `length`, no trailing space
            # A few tries at a span whose cue occurs once; a text with none (rare: short and repetitive) is redrawn.
            for _ in range(8):
                start = int(rng.integers(self.cue_chars, length - self.answer_chars + 1))
                cue, answer = text[start - self.cue_chars:start], text[start:start + self.answer_chars]
                if text.count(cue) == 1 and answer == answer.strip():  # replies are stripped
                    self.text, self.cue, self.answer = text, cue, answer
                    self._done = False
                    return self._observation(), {"answer_chars": self.answer_chars}

    def _lengths(self, options: dict) -> tuple[int, int]:
        """The episode's text-length range: the env's, narrowed or moved by reset options min_chars / max_chars
        (how one warm-start mixes short texts, where copying is learned fast, with long ones)."""
        unknown = sorted(set(options) - {"min_chars", "max_chars"})
        if unknown:
            raise ValueError(f"CopyEnv.reset options {unknown} are not allowed; allowed: min_chars, max_chars")
        low, high = options.get("min_chars", self.min_chars), options.get("max_chars", self.max_chars)
        # The constructor's checks name a bad range.
        type(self)(min_chars=low, max_chars=high, answer_chars=self.answer_chars, cue_chars=self.cue_chars)
        return low, high

    def step(self, action: str):
        if self._done:
            raise RuntimeError("CopyEnv.step called after the episode ended; call reset() first")
        self._done = True
        reply = clean(str(action), self.max_action_chars).strip()
        correct = reply == self.answer
        score = float(correct) if self.reward == "exact" else difflib.SequenceMatcher(None, reply, self.answer).ratio()
        return "", score, True, False, {"correct": correct, "format_ok": bool(reply)}

    def expert_action(self) -> str:
        """The span after the cue (the scripted expert of SFT warm-starts)."""
        if self._done:
            raise RuntimeError("CopyEnv.expert_action needs a running episode; call reset() first")
        return self.answer

    def _observation(self) -> str:
        return f"Text: {self.text}\nAfter: {self.cue}"
