"""What memrl prints: its own progress and warnings by default, every library's log when the user asks for it.

Kept free of Ray and torch so that any module (the torch engine, which also runs outside Ray) can ask."""

from __future__ import annotations

import os

VERBOSE_ENV = "MEMRL_VERBOSE"
"""Set to 1 (the tuned examples' --verbose does) to see every library's log: actors' output on the console, vLLM
at INFO. Unset, the console shows memrl's own progress and warnings only; actors' logs stay in Ray's log files."""


def verbose() -> bool:
    """Whether the user asked for every library's log (MEMRL_VERBOSE=1)."""
    return os.environ.get(VERBOSE_ENV, "").lower() in ("1", "true", "yes")
