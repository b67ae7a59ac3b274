"""Mem-α's memory-tool store: core, semantic and episodic memory, the three tools that edit it, and the parser that
finds tool calls in a model's reply.

- core: one paragraph, at most `core_max_tokens` tokens (512 in the paper), only ever replaced whole (update) or
  cleared (delete);
- semantic (facts) and episodic (timestamped events): ordered {id: content} items with short ids; inserting a
  content that is already there is skipped; BM25 ranks them against a query.

Tools: `new_memory_insert(memory_type, content)` (semantic, episodic), `memory_update(memory_type, new_content,
memory_id?)` (any type; the id is required for semantic and episodic) and `memory_delete(memory_type, memory_id?)`.
`memory_type` is "core_memory" / "semantic_memory" / "episodic_memory", or the same without "_memory".

A reply's calls are found in the Qwen-Agent format (lines `✿FUNCTION✿: name` then `✿ARGS✿: {json}`, several per
reply) and in the `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` format of the Qwen2.5 / Qwen3 chat
templates. Arguments are JSON, repaired (json_repair) when malformed. Model text is only ever parsed as JSON: a
call that cannot be parsed or executed is a failed call with a message saying why, never an exception.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field

MEMORY_TYPES = ("core", "semantic", "episodic")
"""The store's parts."""
TOOLS = ("new_memory_insert", "memory_update", "memory_delete")
"""The tools a reply may call."""
CORE_TRUNCATED = " [content exceeds {limit} tokens, truncated]"
"""Appended to a core memory cut to its token limit."""
MAX_CONTENT_CHARS = 20_000
"""Longest content one call may write; longer contents fail the call."""
_QWEN_AGENT = re.compile(r"✿FUNCTION✿:\s*(?P<name>[^\n]*)\n\s*✿ARGS✿:\s*(?P<args>.*?)"
                         r"(?=✿FUNCTION✿|✿RESULT✿|✿RETURN✿|<tool_call>|$)", re.S)
_TOOL_CALL = re.compile(r"<tool_call>(?P<body>.*?)</tool_call>", re.S)


class ToolError(ValueError):
    """A tool call that cannot be executed; its message says why."""


def _words(text: str) -> int:
    return len(text.split())


def bm25_rank(texts: list[str], query: str, top_k: int, stopwords: str | None = None) -> list[int]:
    """Indices of the (up to) `top_k` texts BM25 ranks highest against `query`, best first; texts sharing no term
    with it are left out. Every word counts, one-letter ones included (a memory item is short, and "Q3" or "at 9"
    matter); `stopwords="en"` drops English stopwords, for longer texts such as chunks."""
    import bm25s

    options = {"return_ids": False, "show_progress": False, "stopwords": stopwords, "token_pattern": r"(?u)\b\w+\b"}
    query_tokens = bm25s.tokenize([query], **options)
    if not texts or not query_tokens[0]:
        return []
    index = bm25s.BM25()
    index.index(bm25s.tokenize(list(texts), **options), show_progress=False)
    found, scores = index.retrieve(query_tokens, k=min(top_k, len(texts)), show_progress=False)
    return [i for i, score in zip(found[0].tolist(), scores[0].tolist()) if score > 0]


@dataclass
class MemoryStore:
    """One episode's memory. `count_tokens` measures the core limit and memory sizes (whitespace words by default;
    the env passes its tokenizer's count)."""

    core_max_tokens: int = 512
    """Token limit of the core paragraph; a longer update is cut at a word boundary and marked."""
    enabled: tuple[str, ...] = MEMORY_TYPES
    """Memory types this store offers (a subset of MEMORY_TYPES)."""
    count_tokens: Callable[[str], int] = _words
    """Token counter for the core limit and `num_tokens`."""
    seed: int = 0
    """Seeds the short ids, so a replayed episode gets the same ids."""
    core: str = ""
    semantic: dict[str, str] = field(default_factory=dict)
    episodic: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        unknown = sorted(set(self.enabled) - set(MEMORY_TYPES))
        if unknown or not self.enabled:
            raise ValueError(f"MemoryStore enabled={self.enabled!r}: choose a non-empty subset of {MEMORY_TYPES}")
        self._ids = random.Random(f"memory-ids-{self.seed}")

    # -- the tools -------------------------------------------------------------------------
    def insert(self, memory_type: str, content: str) -> str | None:
        """Add `content` as a new semantic or episodic item; its id, or None when the same content is there."""
        kind = self._kind(memory_type, allowed=("semantic", "episodic"), tool="new_memory_insert")
        content = _content(content, "content")
        items = self._items(kind)
        if content in items.values():
            return None
        memory_id = self._new_id()
        items[memory_id] = content
        return memory_id

    def update(self, memory_type: str, new_content: str, memory_id: str | None = None) -> str:
        """Replace the core paragraph, or the item `memory_id`, with `new_content`; what is stored."""
        kind = self._kind(memory_type, allowed=MEMORY_TYPES, tool="memory_update")
        new_content = _content(new_content, "new_content")
        if kind == "core":
            self.core = self._fit_core(new_content)
            return self.core
        self._items(kind)[self._existing(kind, memory_id, "memory_update")] = new_content
        return new_content

    def delete(self, memory_type: str, memory_id: str | None = None) -> None:
        """Clear the core paragraph, or remove the item `memory_id`."""
        kind = self._kind(memory_type, allowed=MEMORY_TYPES, tool="memory_delete")
        if kind == "core":
            self.core = ""
            return
        del self._items(kind)[self._existing(kind, memory_id, "memory_delete")]

    # -- reading -----------------------------------------------------------------------------
    def search(self, memory_type: str, query: str, top_k: int) -> list[tuple[str, str]]:
        """Up to `top_k` (id, content) items of `memory_type` ranked by BM25 against `query`; items sharing no term
        with it are left out."""
        items = list(self._items(self._kind(memory_type, allowed=("semantic", "episodic"), tool="search")).items())
        return [items[i] for i in bm25_rank([content for _, content in items], query, top_k)]

    def num_tokens(self) -> int:
        """Tokens the whole memory holds (core plus every item): Mem-α's memory size."""
        return self.count_tokens(self.core) + sum(self.count_tokens(c) for kind in ("semantic", "episodic")
                                                  for c in self._items(kind).values())

    def to_dict(self) -> dict:
        """The store as JSON-ready data (for info and per-episode dumps)."""
        return {"core": self.core, "semantic": dict(self.semantic), "episodic": dict(self.episodic)}

    def kind(self, memory_type: str) -> str:
        """The store part a valid `memory_type` names ("semantic_memory" and "semantic" both give "semantic")."""
        return memory_type.strip().lower().removesuffix("_memory")

    def items(self, memory_type: str) -> dict[str, str]:
        """The {id: content} items of semantic or episodic memory (live, in insertion order)."""
        return self._items(self.kind(memory_type))

    # -- helpers -----------------------------------------------------------------------------
    def _kind(self, memory_type, allowed: tuple[str, ...], tool: str) -> str:
        if not isinstance(memory_type, str):
            raise ToolError(f"{tool}: memory_type must be a string, got {type(memory_type).__name__}")
        kind = self.kind(memory_type)
        offered = [k for k in allowed if k in self.enabled]
        if kind not in offered:
            raise ToolError(f"{tool}: memory_type {memory_type!r} is not allowed; choose one of "
                            f"{[k + '_memory' for k in offered]}")
        return kind

    def _items(self, kind: str) -> dict[str, str]:
        return self.semantic if kind == "semantic" else self.episodic

    def _existing(self, kind: str, memory_id, tool: str) -> str:
        if memory_id is None:
            raise ToolError(f"{tool}: {kind}_memory needs a memory_id")
        memory_id = str(memory_id).strip().strip("[]")
        if memory_id not in self._items(kind):
            known = list(self._items(kind))
            raise ToolError(f"{tool}: no {kind}_memory item has id {memory_id!r}; ids: {known[:20]}")
        return memory_id

    def _new_id(self) -> str:
        while True:
            memory_id = f"{self._ids.getrandbits(16):04x}"
            if memory_id not in self.semantic and memory_id not in self.episodic:
                return memory_id

    def _fit_core(self, text: str) -> str:
        if self.count_tokens(text) <= self.core_max_tokens:
            return text
        marker = CORE_TRUNCATED.format(limit=self.core_max_tokens)
        words, budget = text.split(), self.core_max_tokens - self.count_tokens(marker)
        lo, hi = 0, len(words)  # the most words that fit beside the marker
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.count_tokens(" ".join(words[:mid])) <= budget:
                lo = mid
            else:
                hi = mid - 1
        return " ".join(words[:lo]) + marker


def _content(value, name: str) -> str:
    if not isinstance(value, str):
        raise ToolError(f"{name} must be a string, got {type(value).__name__}")
    if not value.strip():
        raise ToolError(f"{name} is empty")
    if len(value) > MAX_CONTENT_CHARS:
        raise ToolError(f"{name} has {len(value)} characters, more than the {MAX_CONTENT_CHARS} allowed")
    return value.strip()


@dataclass(frozen=True)
class ToolCall:
    """One call found in a reply: its tool name and arguments, or why it could not be read."""

    name: str
    """The tool name as written."""
    arguments: dict | None
    """The parsed arguments; None when they could not be parsed."""
    error: str = ""
    """Why the call could not be parsed ("" when it could)."""


@dataclass(frozen=True)
class CallResult:
    """What executing one call did."""

    name: str
    """The tool name as written."""
    ok: bool
    """True when the call executed."""
    message: str
    """What happened, or why the call failed."""
    skipped: bool = False
    """An insert of content already stored: it ran, and changed nothing."""
    memory_type: str = ""
    """The memory type the call wrote (core, semantic or episodic; "" for a failed call or a delete)."""
    content: str = ""
    """The text the call wrote ("" for a failed call or a delete), for the content judge."""


def _parse_arguments(text: str) -> tuple[dict | None, str]:
    text = text.strip()
    if len(text) > 2 * MAX_CONTENT_CHARS:
        return None, f"arguments have {len(text)} characters, more than the {2 * MAX_CONTENT_CHARS} read"
    try:
        value = json.JSONDecoder().raw_decode(text)[0]  # the first JSON value; text after it is not arguments
    except (json.JSONDecodeError, RecursionError):
        try:
            import json_repair

            value = json_repair.loads(text)
        except (ValueError, TypeError, RecursionError) as e:
            return None, f"arguments are not JSON ({type(e).__name__})"
    if not isinstance(value, dict):
        return None, f"arguments must be a JSON object, got {type(value).__name__}"
    return value, ""


def parse_tool_calls(reply: str) -> list[ToolCall]:
    """Every tool call of `reply`, in order, in either format (see the module docstring)."""
    calls = []
    for match in _QWEN_AGENT.finditer(reply):
        arguments, error = _parse_arguments(match.group("args"))
        calls.append(ToolCall(match.group("name").strip(), arguments, error))
    for match in _TOOL_CALL.finditer(reply):
        body, error = _parse_arguments(match.group("body"))
        if body is None:
            calls.append(ToolCall("", None, f"<tool_call> body: {error}"))
            continue
        name, arguments = body.get("name", ""), body.get("arguments", {})
        if isinstance(arguments, str):
            arguments, error = _parse_arguments(arguments)
        elif not isinstance(arguments, dict):
            arguments, error = None, f"arguments must be a JSON object, got {type(arguments).__name__}"
        calls.append(ToolCall(name if isinstance(name, str) else repr(name), arguments, error))
    return calls


_PARAMETERS = {
    "new_memory_insert": ("memory_type", "content"),
    "memory_update": ("memory_type", "new_content", "memory_id"),
    "memory_delete": ("memory_type", "memory_id"),
}


def execute(store: MemoryStore, call: ToolCall) -> CallResult:
    """Run one parsed call against `store`; a call that cannot run fails with a message and leaves the store as it
    was."""
    if call.arguments is None:
        return CallResult(call.name, False, f"{call.name or 'tool call'}: {call.error}")
    if call.name not in _PARAMETERS:
        return CallResult(call.name, False, f"unknown tool {call.name!r}; the tools are {list(TOOLS)}")
    unknown = sorted(set(call.arguments) - set(_PARAMETERS[call.name]))
    if unknown:
        return CallResult(call.name, False, f"{call.name}: unknown argument(s) {unknown}; it takes "
                                            f"{list(_PARAMETERS[call.name])}")
    try:
        if call.name == "new_memory_insert":
            args = _required(call, "memory_type", "content")
            memory_id = store.insert(**args)
            if memory_id is None:
                return CallResult(call.name, True, "skipped: the same content is stored already", skipped=True)
            return CallResult(call.name, True, f"inserted [{memory_id}]", memory_type=store.kind(args["memory_type"]),
                              content=store.items(args["memory_type"])[memory_id])
        if call.name == "memory_update":
            args = _required(call, "memory_type", "new_content")
            written = store.update(**args, memory_id=call.arguments.get("memory_id"))
            return CallResult(call.name, True, "updated", memory_type=store.kind(args["memory_type"]), content=written)
        store.delete(**_required(call, "memory_type"), memory_id=call.arguments.get("memory_id"))
        return CallResult(call.name, True, "deleted")
    except ToolError as e:
        return CallResult(call.name, False, str(e))


def _required(call: ToolCall, *names: str) -> dict:
    missing = [n for n in names if n not in call.arguments]
    if missing:
        raise ToolError(f"{call.name}: missing argument(s) {missing}")
    return {n: call.arguments[n] for n in names}


def tool_schemas(enabled: tuple[str, ...] = MEMORY_TYPES) -> list[dict]:
    """The tools as OpenAI function schemas, `memory_type` enums limited to the `enabled` memory types (the write
    phase offers no search)."""
    writable = [f"{k}_memory" for k in ("semantic", "episodic") if k in enabled]
    any_type = [f"{k}_memory" for k in MEMORY_TYPES if k in enabled]

    def schema(name: str, description: str, properties: dict, required: list[str]) -> dict:
        return {"type": "function", "function": {"name": name, "description": description, "parameters": {
            "type": "object", "properties": properties, "required": required}}}

    memory_id = {"type": "string", "description": "Id of the item (required for semantic and episodic memory)."}
    schemas = [
        schema("memory_update", "Replace the core memory paragraph, or one semantic or episodic item.",
               {"memory_type": {"type": "string", "enum": any_type},
                "new_content": {"type": "string", "description": "The new content."}, "memory_id": memory_id},
               ["memory_type", "new_content"]),
        schema("memory_delete", "Clear the core memory, or delete one semantic or episodic item.",
               {"memory_type": {"type": "string", "enum": any_type}, "memory_id": memory_id}, ["memory_type"]),
    ]
    if writable:
        schemas.insert(0, schema("new_memory_insert", "Store a new semantic fact or a new timestamped episodic event.",
                                 {"memory_type": {"type": "string", "enum": writable},
                                  "content": {"type": "string", "description": "What to remember."}},
                                 ["memory_type", "content"]))
    return schemas
