"""The gymnasium space every memrl text env uses for observations and actions: Unicode text without control
characters. The embedded tokenizer is byte-level, so any script, dash or accent reaches the model unchanged."""

import string
import unicodedata

from gymnasium.spaces import Text

KEPT_CONTROLS = "\n\t"
"""Control characters text keeps: line breaks and tabs lay out documents; every other control character is dropped."""


def _allowed(ch: str) -> bool:
    # Cc: control characters (NUL, ESC, ...); Cs: lone surrogates, which no UTF-8 text can hold.
    return ch in KEPT_CONTROLS or unicodedata.category(ch) not in ("Cc", "Cs")


class TextSpace(Text):
    """Strings of at most `max_length` characters, any character but the control characters `clean` drops.
    Samples (for tests that fuzz an env) are drawn from printable ASCII."""

    def __init__(self, max_length: int):
        super().__init__(max_length=max_length, min_length=0, charset=string.printable)

    def contains(self, x) -> bool:
        return isinstance(x, str) and len(x) <= self.max_length and all(map(_allowed, x))

    def __repr__(self) -> str:
        return f"TextSpace(max_length={self.max_length})"


def text_space(max_length: int) -> TextSpace:
    """The space of env text up to `max_length` characters."""
    return TextSpace(max_length)


def printable(text: str) -> str:
    """`text` with control characters other than newline and tab dropped; everything else (any script) kept."""
    return text if all(map(_allowed, text)) else "".join(filter(_allowed, text))


def clean(text: str, max_length: int) -> str:
    """Model output made safe for a text space: control characters dropped, length capped."""
    return printable(text)[:max_length]
