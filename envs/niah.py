"""RULER needle-in-a-haystack, single needle, levels 1-3 (niah_single_1/2/3) as MemAgent evaluates them."""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass

from memrl_envs.loaders import QATask

REPEAT_HAYSTACK = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."
"""RULER's level-1 haystack unit, repeated."""

KEYS = (
    "amber", "anchor", "badge", "basket", "beacon", "blanket", "bottle", "breeze", "bridge", "button", "cabin",
    "canvas", "castle", "cedar", "chalk", "cherry", "circle", "copper", "cotton", "crystal", "desert", "dolphin",
    "eagle", "ember", "falcon", "feather", "garden", "glacier", "granite", "harbor", "hazel", "island", "jacket",
    "jungle", "kettle", "ladder", "lantern", "maple", "marble", "meadow", "mirror", "needle", "orchid", "oyster",
    "pebble", "pepper", "pillow", "planet", "pocket", "puzzle", "quartz", "ribbon", "saddle", "shadow", "silver",
    "spider", "summit", "thunder", "timber", "velvet", "walnut", "willow",
)
"""Needle keys (RULER draws a random English word)."""

_SUBJECTS = (
    "A good teacher", "The old town", "Every careful writer", "A patient gardener", "The morning train",
    "A young founder", "The quiet library", "A small bakery", "The river valley", "Every long winter",
    "A curious student", "The local council", "An honest trader", "The first settler", "A busy workshop",
)
_VERBS = (
    "learns", "remembers", "changes", "builds", "questions", "shapes", "values", "forgets", "explains",
    "protects", "discovers", "measures", "shares", "ignores", "prepares",
)
_OBJECTS = (
    "the value of slow work", "what the maps leave out", "a habit of asking why", "the cost of haste",
    "the shape of a good plan", "how trust is earned", "the limits of a budget", "the rhythm of the seasons",
    "why simple tools last", "the weight of old promises", "how small wins add up", "the meaning of a fair price",
)
_TAILS = (
    "over many years", "before anyone notices", "when the weather turns", "with little help",
    "in its own way", "after a hard season", "without much fuss", "long after the work is done",
    "as the town grows", "when money is short",
)
"""Word lists of the essay haystack: plain declarative sentences, no numbers, nothing about magic numbers."""


@dataclass(frozen=True)
class NiahConfig:
    """Knobs of the needle-in-a-haystack generator."""

    level: int = 1
    """1: repeated-sentence haystack, 7-digit number. 2: essay haystack, 7-digit number. 3: essay haystack, UUID."""
    num_docs: int = 10
    """Haystack paragraphs plus the needle's own line: the context-length knob."""
    needle_position: float | None = None
    """Relative depth of the needle in [0, 1] (0 = first line); None draws it from the seed, the same at every
    num_docs."""
    sentences_per_doc: int = 4
    """Sentences in one essay paragraph (levels 2 and 3)."""

    def __post_init__(self) -> None:
        if self.level not in (1, 2, 3):
            raise ValueError(f"NiahConfig.level={self.level!r} is not allowed; choose 1, 2 or 3")
        if not isinstance(self.num_docs, int) or self.num_docs < 1:
            raise ValueError(f"NiahConfig.num_docs must be an int >= 1, got {self.num_docs!r}")
        if self.needle_position is not None and not 0 <= self.needle_position <= 1:
            raise ValueError(f"NiahConfig.needle_position must be in [0, 1] or None, got {self.needle_position!r}")
        if not isinstance(self.sentences_per_doc, int) or self.sentences_per_doc < 1:
            raise ValueError(f"NiahConfig.sentences_per_doc must be an int >= 1, got {self.sentences_per_doc!r}")

    @property
    def value_kind(self) -> str:
        """What the needle's value is, in RULER's words: 'numbers' or 'uuids'."""
        return "uuids" if self.level == 3 else "numbers"

    def max_context_chars(self) -> int:
        """An upper bound on the length of any context this config generates."""
        sentence = max(map(len, _SUBJECTS)) + max(map(len, _VERBS)) + max(map(len, _OBJECTS)) + max(map(len, _TAILS))
        paragraph = max(len(REPEAT_HAYSTACK), self.sentences_per_doc * (sentence + 5))
        needle = len(needle_text(max(KEYS, key=len), "x" * 36, "uuids"))
        return self.num_docs * (max(paragraph, needle) + 1)


def needle_text(key: str, value: str, value_kind: str = "numbers") -> str:
    """RULER's needle sentence."""
    return f"One of the special magic {value_kind} for {key} is: {value}."


def _essay_paragraph(rng: random.Random, sentences: int) -> str:
    return " ".join(
        f"{rng.choice(_SUBJECTS)} {rng.choice(_VERBS)} {rng.choice(_OBJECTS)} {rng.choice(_TAILS)}."
        for _ in range(sentences)
    )


def make_task(seed: int, config: NiahConfig | None = None) -> QATask:
    """The seed's task: key, value and needle depth depend on the seed only; num_docs adds haystack."""
    config = config or NiahConfig()
    rng = random.Random(f"niah-needle-{seed}")
    key = rng.choice(KEYS)
    if config.level == 3:
        value = str(uuid.UUID(int=rng.getrandbits(128), version=4))
    else:
        value = str(rng.randint(1_000_000, 9_999_999))
    depth = rng.random() if config.needle_position is None else config.needle_position
    needle = needle_text(key, value, config.value_kind)
    hay_rng = random.Random(f"niah-haystack-{seed}")
    haystack = [
        REPEAT_HAYSTACK if config.level == 1 else _essay_paragraph(hay_rng, config.sentences_per_doc)
        for _ in range(config.num_docs - 1)
    ]
    haystack.insert(min(int(depth * config.num_docs), config.num_docs - 1), needle)
    question = f"What is the special magic {config.value_kind[:-1]} for {key} mentioned in the provided text?"
    return QATask(question=question, documents=tuple(haystack), answers=(value,), gold_facts=(needle,))

