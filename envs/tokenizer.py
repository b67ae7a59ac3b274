"""A checkpoint's tokenizer, loaded once per process, exactly as `AutoTokenizer.from_pretrained` loads it.

Processes that only tokenize (env runners and their envs) should not pay for torch: transformers' auto classes
import it (about 8 s of CPU per process on a small machine), while most tokenizer classes do not. So the process
that already has transformers loaded names the class AutoTokenizer picks (`tokenizer_class_path`), and the others
import that class directly (`load_tokenizer(path, class_path)`); without a name they fall back to AutoTokenizer.
"""

from __future__ import annotations

import importlib
from pathlib import Path

_LOADED: dict[str, object] = {}


def _key(path: str | Path) -> str:
    local = Path(path)
    return str(local.resolve()) if local.exists() else str(path)


def load_tokenizer(path: str | Path, class_path: str = ""):
    """The tokenizer at `path`, shared by everything in this process that asks for the same path. `class_path`
    ("module:Class", from `tokenizer_class_path`) is the class AutoTokenizer picks for `path`; empty: let
    AutoTokenizer pick it here."""
    key = _key(path)
    if key not in _LOADED:
        if class_path:
            module, _, name = class_path.partition(":")
            cls = getattr(importlib.import_module(module), name, None)
            if cls is None or not hasattr(cls, "from_pretrained"):
                raise ValueError(f"tokenizer class {class_path!r} for {path} is not an importable tokenizer class "
                                 "(expected 'module:Class', as tokenizer_class_path returns)")
        else:
            from transformers import AutoTokenizer as cls
        _LOADED[key] = cls.from_pretrained(str(path))
    return _LOADED[key]


def tokenizer_class_path(path: str | Path) -> str:
    """The class AutoTokenizer picks for the tokenizer at `path`, as "module:Class" for `load_tokenizer` (read
    anew each call: the caller may be a long-lived driver whose checkpoints change)."""
    from transformers import AutoTokenizer

    cls = type(AutoTokenizer.from_pretrained(str(path)))
    return f"{cls.__module__}:{cls.__qualname__}"
