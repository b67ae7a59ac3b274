"""The gymnasium space every memrl text env uses for observations and actions."""

import string

from gymnasium.spaces import Text

CHARSET = string.printable
"""Printable ASCII; envs replace anything else the model writes before it reaches them."""


def text_space(max_length: int) -> Text:
    """A Text space of printable ASCII up to `max_length` characters."""
    return Text(max_length=max_length, min_length=0, charset=CHARSET)


def clean(text: str, max_length: int) -> str:
    """Model output made safe for a text space: non-printable characters dropped, length capped."""
    return "".join(ch for ch in text if ch in CHARSET)[:max_length]
