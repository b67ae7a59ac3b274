"""A checkpoint's tokenizer, loaded once per process exactly as `AutoTokenizer.from_pretrained` loads it, and
ChatCodec, which turns chat messages into prompt ids with every message content kept as text.

Finding the class AutoTokenizer picks imports transformers' auto classes, and with them torch and its modelling code
(about 2 s of CPU per process on a small machine), while the tokenizer classes themselves need neither. So the class
found for a local checkpoint is remembered in memrl's cache directory (`cache_dir`), keyed by everything
AutoTokenizer reads to choose it: the checkpoint's configuration files, the names of its files and the versions of
the tokenizer libraries. Later loads, in any process, import that class directly; a changed checkpoint or library
is looked up anew.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import threading
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

_LOADED: dict[str, object] = {}
CACHE_ENV = "MEMRL_CACHE_DIR"
"""Environment variable naming memrl's cache directory (default: $XDG_CACHE_HOME/memrl, else ~/.cache/memrl)."""
CACHE_ENTRIES = 1000
"""Checkpoints the tokenizer-class cache remembers; the oldest entries make way (each is found again if needed)."""
_CLASS_FILES = ("config.json", "tokenizer_config.json", "special_tokens_map.json")
"""The small files AutoTokenizer reads to choose a class (the model type, the named tokenizer class, auto_map)."""


def cache_dir() -> Path:
    """memrl's cache directory (it holds only what can be found again: deleting it is safe)."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "memrl"


def _key(path: str | Path) -> str:
    local = Path(path)
    return str(local.resolve()) if local.exists() else str(path)


def load_tokenizer(path: str | Path, class_path: str = ""):
    """The tokenizer at `path`, shared by everything in this process that asks for the same path. `class_path`
    ("module:Class", from `tokenizer_class_path`) is the class AutoTokenizer picks for `path`; empty: find it here."""
    key = _key(path)
    if key not in _LOADED:
        _LOADED[key] = new_tokenizer(path, class_path)
    return _LOADED[key]


def new_tokenizer(path: str | Path, class_path: str = ""):
    """The tokenizer at `path` loaded anew (not shared with the rest of the process), as AutoTokenizer loads it;
    `class_path` as for `load_tokenizer`."""
    return tokenizer_class(class_path or tokenizer_class_path(path)).from_pretrained(str(path))


def tokenizer_class(class_path: str) -> type:
    """The tokenizer class named "module:Class" (as `tokenizer_class_path` returns)."""
    module, _, name = class_path.partition(":")
    cls = getattr(importlib.import_module(module), name, None) if module else None
    if cls is None or not hasattr(cls, "from_pretrained"):
        raise ValueError(f"tokenizer class {class_path!r} is not an importable tokenizer class "
                         "(expected 'module:Class', as tokenizer_class_path returns)")
    return cls


def tokenizer_class_path(path: str | Path) -> str:
    """The class AutoTokenizer picks for the tokenizer at `path`, as "module:Class" for `load_tokenizer`: from the
    cache when the checkpoint and the libraries are as they were, else found with AutoTokenizer (and remembered).
    Errors are AutoTokenizer's (a directory it cannot read, a hub name while offline)."""
    key = _class_key(path)
    cache = cache_dir() / "tokenizer_classes.json"
    known = _read_json(cache).get(key) if key else None
    if isinstance(known, str):
        return known
    from transformers import AutoTokenizer

    cls = type(AutoTokenizer.from_pretrained(str(path)))
    found = f"{cls.__module__}:{cls.__qualname__}"
    if key:  # read again: another process may have added entries while AutoTokenizer loaded
        entries = {k: v for k, v in _read_json(cache).items() if k != key}
        entries[key] = found
        _write_json(cache, dict(list(entries.items())[-CACHE_ENTRIES:]))
    return found


def _class_key(path: str | Path) -> str | None:
    """What AutoTokenizer's choice of class depends on, hashed; None for what is not a local directory (a hub name,
    whose files may change without notice)."""
    local = Path(path)
    if not local.is_dir():
        return None
    digest = hashlib.sha256()
    for dist in ("transformers", "tokenizers", "sentencepiece"):
        try:
            digest.update(f"{dist} {version(dist)}\n".encode())
        except PackageNotFoundError:
            digest.update(f"{dist} -\n".encode())
    digest.update(json.dumps(sorted(p.name for p in local.iterdir())).encode())
    for name in _CLASS_FILES:
        file = local / name
        digest.update(name.encode() + b"\0" + (file.read_bytes() if file.is_file() else b"-") + b"\0")
    return digest.hexdigest()


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}  # none yet, or unreadable: found again
    return data if isinstance(data, dict) else {}


def _write_json(path: Path, data: dict) -> None:
    """Write `data` whole or not at all (a reader never sees half a file); a cache that cannot be written is skipped."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_text(json.dumps(data, indent=1))
        os.replace(tmp, path)
    except OSError:
        pass


class ChatCodec:
    """Prompt ids from chat messages and reply text from ids, with message contents always tokenized as text.

    Env text and model replies are data: a passage or a reply that spells a control token such as `<|im_start|>`
    gets ordinary tokens, never that token. Workflows build their prompts with it; so does the chat server."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self._control_texts = tuple(token.content for token in tokenizer.added_tokens_decoder.values()
                                    if token.special)

    def chat_ids(self, messages: list[dict[str, str]]) -> list[int]:
        """Chat-templated token ids ending with the assistant generation prompt; message contents are text only."""
        if not any(control in message["content"] for message in messages for control in self._control_texts):
            return list(self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                                           return_dict=False))
        # Some content spells a control token: render the template around private-use marker characters, tokenize
        # the template's own text as usual and each content as plain text.
        marks = [f"\ue000{i}\ue001" for i in range(len(messages))]
        rendered = self.tokenizer.apply_chat_template(
            [{**message, "content": mark} for message, mark in zip(messages, marks)],
            add_generation_prompt=True, tokenize=False)
        ids, done = [], 0
        for message, mark in zip(messages, marks):
            at = rendered.find(mark, done)
            if at < 0:  # the template leaves this message out
                continue
            ids += self.tokenizer.encode(rendered[done:at], add_special_tokens=False)
            ids += self.text_ids(message["content"])
            done = at + len(mark)
        return ids + self.tokenizer.encode(rendered[done:], add_special_tokens=False)

    def text_ids(self, text: str) -> list[int]:
        """Token ids of `text` as plain text: a control token's spelling gives ordinary tokens."""
        return list(self.tokenizer.encode(text, add_special_tokens=False, split_special_tokens=True))

    def decode(self, ids: list[int]) -> str:
        """Response text without special tokens (the stop token included in `ids` is dropped)."""
        return self.tokenizer.decode(ids, skip_special_tokens=True)
