"""A toy multi-turn env: each turn names a word, the agent must say it back; the runtime's smoke test."""

from __future__ import annotations

import difflib
import random
import time

import gymnasium as gym

from memrl_envs.text_space import clean, text_space

WORDS = ("apple", "river", "stone", "cloud", "tiger", "piano", "lemon", "candle", "rocket", "forest")


class EchoEnv(gym.Env):
    """`num_turns` turns; observation "Say: <word>"; each turn earns up to 1/num_turns.

    reward="exact" pays only a reply equal to the word; reward="similarity" pays the character-level
    similarity ratio (difflib), a dense signal even an untrained model gets some of.
    """

    metadata = {"render_modes": []}

    def __init__(self, num_turns: int = 2, reward: str = "exact", max_action_chars: int = 256,
                 step_delay_s: float = 0.0, failure_rate: float = 0.0, io_jitter_s: float = 0.0):
        """`step_delay_s` simulates a slow world (a remote tool or search call) on every step; `failure_rate` is the
        share of episodes (drawn from the reset seed) that a simulated outage ends on their first step, flagged in
        info["failure"] as an env ends an episode it cannot finish. `io_jitter_s` > 0 makes every step also wait a
        random time up to that long, different on every run (a remote service's latency), and the env step in a
        thread as envs that wait on I/O do (metadata["blocking_io"])."""
        if num_turns < 1:
            raise ValueError(f"EchoEnv num_turns must be >= 1, got {num_turns}")
        if not 0.0 <= failure_rate <= 1.0:
            raise ValueError(f"EchoEnv failure_rate must be in [0, 1], got {failure_rate}")
        if reward not in ("exact", "similarity"):
            raise ValueError(f"EchoEnv reward={reward!r} is not allowed; choose 'exact' or 'similarity'")
        if not io_jitter_s >= 0:
            raise ValueError(f"EchoEnv io_jitter_s must be >= 0, got {io_jitter_s}")
        self.io_jitter_s = io_jitter_s
        self.metadata = {**type(self).metadata, "blocking_io": io_jitter_s > 0}
        self.reward = reward
        self.num_turns = num_turns
        self.step_delay_s = step_delay_s
        self.failure_rate = failure_rate
        self._fails = False
        self.max_action_chars = max_action_chars
        self.observation_space = text_space(64)
        self.action_space = text_space(max_action_chars)
        self._words: list[str] = []
        self._turn = 0

    @classmethod
    def check_options(cls, options: dict) -> None:
        """Raise ValueError for a bad option (an echo env costs nothing to build)."""
        cls(**options)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self._words = [WORDS[i] for i in self.np_random.integers(0, len(WORDS), self.num_turns)]
        self._fails = bool(self.np_random.random() < self.failure_rate) if self.failure_rate else False
        self._turn = 0
        return self._observation(), {"turn": 0}

    def step(self, action: str):
        if self._turn >= self.num_turns:
            raise RuntimeError("EchoEnv.step called after the episode ended; call reset() first")
        time.sleep(self.step_delay_s + (random.random() * self.io_jitter_s if self.io_jitter_s else 0.0))
        if self._fails:
            self._turn = self.num_turns
            return "", 0.0, False, True, {"turn": 1, "correct": False, "format_ok": False,
                                          "failure": "simulated outage (EchoEnv failure_rate)"}
        reply = clean(str(action), self.max_action_chars).strip().lower()
        word = self._words[self._turn]
        correct = reply == word
        score = float(correct) if self.reward == "exact" else difflib.SequenceMatcher(None, reply, word).ratio()
        self._turn += 1
        done = self._turn == self.num_turns
        obs = "" if done else self._observation()
        info = {"turn": self._turn, "correct": correct, "format_ok": bool(reply)}
        return obs, score / self.num_turns, done, False, info

    def expert_action(self) -> str:
        """The correct reply to the current turn (the scripted expert of SFT warm-starts)."""
        if not self._words or self._turn >= self.num_turns:
            raise RuntimeError("EchoEnv.expert_action needs a running episode; call reset() first")
        return self._words[self._turn]

    def _observation(self) -> str:
        return f"Say: {self._words[self._turn]}"
