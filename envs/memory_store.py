"""Mem-α's memory-tool store: core, semantic and episodic memory, the tools that edit it, and the parser that finds
tool calls in a model's reply.

- core: one paragraph, at most `core_max_tokens` tokens (512 in the paper), only ever replaced whole (update) or
  cleared (delete);
- semantic (facts) and episodic (timestamped events): ordered {id: content} items with short ids. An insert whose
  content equals one already in that list (exactly, whitespace included: "X" and "X \\n" are two items) is skipped,
  as in the authors' code; contents are stored as written, never stripped.

Tools: `new_memory_insert(memory_type, content)` (semantic, episodic), `memory_update(memory_type, new_content,
memory_id?)` (any type; the id is required for semantic and episodic) and `memory_delete(memory_type, memory_id?)`.
`memory_type` must be one of the schema's enum values, exactly: "core_memory", "semantic_memory", "episodic_memory"
(the paper's Appendix C.1 counts other values, "semantic" or "Semantic_memory", as malformed; the authors' code
asserts the same). A memory_id must be an id exactly as shown: "[ab12]" or a number is not an id.

Parsing follows the authors' agent (both reward variants; the paper does not describe it): the reply is cut at the
first of "</memory_insert>", "</memory_update>", "</memory_delete>", "</done>" (kept), then before the first
"✿RESULT✿:" (a result the model writes itself ends the reply, so calls after a forged result line never run); each
`✿FUNCTION✿: name` followed by `✿ARGS✿: ...` is one call, its arguments running to the next ✿FUNCTION✿, ✿RESULT✿,
✿RETURN✿ or the end, a call whose arguments hold a stray "✿" is not a call. Arguments starting with "{" are cut
after their last "}" and read with json_repair then json (the authors pin json_repair 0.51.0; memrl uses the
installed one, which reads the cases the tests name alike): two objects under one ✿ARGS✿ with the same keys give
the last one, with different keys a list, which is not an argument object, so the call fails. The Qwen2.5/3
`<tool_call>` format is not the authors' and is not read. Model text is only ever parsed as JSON: a call that cannot
be parsed or executed is a failed call with a message saying why, never an exception.

What executes differs by reward variant where the paper only says "executes successfully" (`execute(...,
variant)`):

| call                                          | paper (default)   | authors_code (their code)            |
|-----------------------------------------------|-------------------|--------------------------------------|
| delete of a missing id, without id, or twice  | fails             | executes (deletes nothing)           |
| delete with memory_type "semantic" (no suffix)| fails             | executes (their delete has no check) |
| empty content, or a number/null/list content  | fails             | executes (stored as its text)        |
| an argument the tool does not take            | fails             | executes (extra arguments ignored)   |
| `search_memory` in the write phase            | fails (not offered)| executes (their tool table holds it)|
| `✿FUNCTION✿: x ✿ARGS✿: {...}` on one line     | fails (malformed) | executes                             |
| content over MAX_CONTENT_CHARS                | fails             | executes                             |

Under authors_code a call also counts as successful exactly when their result text would say so: it says "executed
successfully" and not "'status': 'skipped'". So a failed call whose tool name (or, for a delete or search, whose
unknown memory_type) contains "executed successfully" counts, and an executed call whose result shows "'status':
'skipped'" (a skipped duplicate insert, a written content holding that text, or a search finding such an item)
counts as failed. Not emulated: a delete naming another attribute of their Memory object (memory_type
"semantic_embedding_ids") fails here; a null core update stores "" (theirs sets core to None, which fails every
later core call); list contents count tokens as str(list), theirs joined by spaces.
"""

from __future__ import annotations

import json
import math
import random
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

MEMORY_TYPES = ("core", "semantic", "episodic")
"""The store's parts."""
TOOLS = ("new_memory_insert", "memory_update", "memory_delete")
"""The tools a write-phase reply may call."""
SEARCH_TOOL = "search_memory"
"""The authors' search tool: not offered in the write phase, yet executed there by their code (authors_code)."""
VARIANTS = ("paper", "authors_code")
"""Reward variants: the paper's, or the Mem-α authors' code where it differs (see the module docstrings)."""
CORE_TRUNCATED = " [content exceeds {limit} tokens, truncated]"
"""Appended to a core memory cut to its token limit."""
MAX_CONTENT_CHARS = 20_000
"""Longest content one call may write under the paper variant; longer contents fail the call."""
TYPE_NAMES = {f"{kind}_memory": kind for kind in MEMORY_TYPES}
"""The memory_type values the schemas allow, and the store part each names."""
_CALL = re.compile(r"✿FUNCTION✿:\s*([^\n]+)\s*✿ARGS✿:\s*([^✿]+?)(?=✿RESULT✿|✿RETURN✿|✿FUNCTION✿|$)", re.S)
_CUT_TAGS = ("</memory_insert>", "</memory_update>", "</memory_delete>", "</done>")
_FORGED_RESULT = "✿RESULT✿:"
_WORD = re.compile(r"\b\w+\b")


class ToolError(ValueError):
    """A tool call that cannot be executed; its message says why."""


def _words(text: str) -> int:
    return len(text.split())


def bm25_rank(texts: list[str], query: str, top_k: int, stopwords: str | None = None) -> list[int]:
    """Indices of the (up to) `top_k` texts bm25s ranks highest against `query`, best first; texts sharing no term
    with it are left out. Every word counts, one-letter ones included; `stopwords="en"` drops English stopwords, for
    longer texts such as chunks (the RAG baseline's chunk retrieval; memory items rank by `bm25_okapi_scores`)."""
    import bm25s

    options = {"return_ids": False, "show_progress": False, "stopwords": stopwords, "token_pattern": r"(?u)\b\w+\b"}
    query_tokens = bm25s.tokenize([query], **options)
    if not texts or not query_tokens[0]:
        return []
    index = bm25s.BM25()
    index.index(bm25s.tokenize(list(texts), **options), show_progress=False)
    found, scores = index.retrieve(query_tokens, k=min(top_k, len(texts)), show_progress=False)
    return [i for i, score in zip(found[0].tolist(), scores[0].tolist()) if score > 0]


def bm25_tokens(text: str) -> list[str]:
    """The words BM25 compares: lower-cased runs of word characters."""
    return _WORD.findall(text.lower())


def bm25_okapi_scores(texts: list[str], query: str, k1: float = 1.5, b: float = 0.75,
                      epsilon: float = 0.25) -> list[float] | None:
    """Okapi BM25 score of each text against `query` (rank_bm25 0.2.2's BM25Okapi, the authors' retriever: idf =
    ln(N - n + 0.5) - ln(n + 0.5), a negative idf replaced by epsilon x the mean idf, a query word counted once per
    occurrence), in the same order of float operations; None when no text holds a word (their BM25 cannot be built
    then)."""
    docs = [bm25_tokens(t) for t in texts]
    if not docs:
        return None
    freqs = [Counter(d) for d in docs]
    seen: Counter = Counter()
    for f in freqs:
        seen.update(f.keys())
    n, avgdl = len(docs), sum(len(d) for d in docs) / len(docs)
    idf, idf_sum, negative = {}, 0.0, []
    for word, count in seen.items():
        idf[word] = math.log(n - count + 0.5) - math.log(count + 0.5)
        idf_sum += idf[word]
        if idf[word] < 0:
            negative.append(word)
    if not idf:
        return None
    eps = epsilon * (idf_sum / len(idf))
    for word in negative:
        idf[word] = eps
    scores = [0.0] * n
    for word in bm25_tokens(query):
        weight = idf.get(word) or 0
        for i, f in enumerate(freqs):
            q = f.get(word, 0)
            scores[i] += weight * (q * (k1 + 1) / (q + k1 * (1 - b + b * len(docs[i]) / avgdl)))
    return scores


def bm25_top(texts: list[str], query: str, top_k: int) -> list[int]:
    """Indices of the `top_k` texts with the highest `bm25_okapi_scores`, best first, ties in stored order, items
    sharing no word with the query included (score 0), as the authors' memory server retrieves; nothing for a query
    without words; the first `top_k` when no text holds a word."""
    if not texts or not query.strip() or not bm25_tokens(query):
        return []
    scores = bm25_okapi_scores(texts, query)
    order = range(len(texts)) if scores is None else sorted(range(len(texts)), key=lambda i: scores[i], reverse=True)
    return list(order)[:top_k]


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
        self._raw: dict[str, object] = {}  # an item written as a JSON number, list ... (authors_code): its value

    # -- the tools (arguments already checked by `execute`) ----------------------------------
    def insert(self, kind: str, content) -> str | None:
        """Add `content` as a new item of `kind` ("semantic" or "episodic"); its id, or None when an item of that
        kind equals it already. A non-string content is stored as its text."""
        items = self._items(self._offered(kind, ("semantic", "episodic")))
        if any(self._raw.get(i, text) == content for i, text in items.items()):
            return None
        memory_id = self._new_id()
        items[memory_id] = content if isinstance(content, str) else str(content)
        if not isinstance(content, str):
            self._raw[memory_id] = content
        return memory_id

    def update(self, kind: str, new_content, memory_id: str | None = None) -> str:
        """Replace the core paragraph, or the item `memory_id` of `kind`, with `new_content`; what is stored."""
        kind = self._offered(kind, MEMORY_TYPES)
        text = new_content if isinstance(new_content, str) else "" if new_content is None else str(new_content)
        if kind == "core":
            self.core = self._fit_core(text)
            return self.core
        items = self._items(kind)
        if not isinstance(memory_id, str) or memory_id not in items:
            raise ToolError(self._no_item(kind, memory_id, "memory_update"))
        items[memory_id] = text
        self._raw.pop(memory_id, None)
        if not isinstance(new_content, str):
            self._raw[memory_id] = new_content
        return text

    def delete(self, kind: str, memory_id: str | None = None, missing_ok: bool = False) -> bool:
        """Clear the core paragraph, or remove the item `memory_id` of `kind`; whether something was removed. A
        missing id fails unless `missing_ok`."""
        kind = self._offered(kind, MEMORY_TYPES)
        if kind == "core":
            self.core = ""
            return True
        items = self._items(kind)
        if isinstance(memory_id, str) and memory_id in items:
            del items[memory_id]
            self._raw.pop(memory_id, None)
            return True
        if not missing_ok:
            raise ToolError(self._no_item(kind, memory_id, "memory_delete"))
        return False

    # -- reading -----------------------------------------------------------------------------
    def search(self, memory_type: str, query: str, top_k: int) -> list[tuple[str, str]]:
        """Up to `top_k` (id, content) items of `memory_type` ranked by BM25 against `query` (`bm25_top`: zero-score
        items included, as the authors' server retrieves)."""
        items = list(self._items(self._offered(self.kind(memory_type), ("semantic", "episodic"))).items())
        return [items[i] for i in bm25_top([content for _, content in items], query, top_k)]

    def num_tokens(self) -> int:
        """Tokens the whole memory holds (core plus every item): Mem-α's memory size."""
        return self.count_tokens(self.core) + sum(self.count_tokens(c) for kind in ("semantic", "episodic")
                                                  for c in self._items(kind).values())

    def to_dict(self) -> dict:
        """The store as JSON-ready data (for info and per-episode dumps)."""
        return {"core": self.core, "semantic": dict(self.semantic), "episodic": dict(self.episodic)}

    def kind(self, memory_type: str) -> str:
        """The store part a memory type names: "semantic_memory" and "semantic" both give "semantic"."""
        return memory_type.removesuffix("_memory")

    def items(self, memory_type: str) -> dict[str, str]:
        """The {id: content} items of semantic or episodic memory (live, in insertion order)."""
        return self._items(self.kind(memory_type))

    def raw(self, memory_id: str):
        """The value an item was written with (its stored text, unless it was written as a JSON number, list ...)."""
        for kind in ("semantic", "episodic"):
            if memory_id in self._items(kind):
                return self._raw.get(memory_id, self._items(kind)[memory_id])
        raise KeyError(memory_id)

    # -- helpers -----------------------------------------------------------------------------
    def _offered(self, kind: str, allowed: tuple[str, ...]) -> str:
        offered = [k for k in allowed if k in self.enabled]
        if kind not in offered:
            raise ToolError(f"{kind}_memory is not offered here; choose one of {[k + '_memory' for k in offered]}")
        return kind

    def _items(self, kind: str) -> dict[str, str]:
        return self.semantic if kind == "semantic" else self.episodic

    def _no_item(self, kind: str, memory_id, tool: str) -> str:
        if memory_id is None:
            shown = list(self._items(kind))[:3]
            return f"{tool}: {kind}_memory needs a memory_id (one of the ids shown, such as {shown})"
        return (f"{tool}: no {kind}_memory item has id {memory_id!r} (ids are written exactly as shown, without "
                f"brackets); ids: {list(self._items(kind))[:20]}")

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


@dataclass(frozen=True)
class ToolCall:
    """One call found in a reply: its tool name and arguments, or why they could not be read."""

    name: str
    """The tool name as written (stripped)."""
    arguments: object
    """The parsed arguments (a dict when well formed; any JSON value json_repair makes of them); None when they could
    not be parsed."""
    error: str = ""
    """Why the arguments could not be parsed ("" when they could)."""
    one_line: bool = False
    """✿ARGS✿ stood on the ✿FUNCTION✿ line."""


@dataclass(frozen=True)
class CallResult:
    """What executing one call did, and what the rewards read from it."""

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
    """The text the call wrote ("" for a failed call or a delete)."""
    success: bool = False
    """What r_tool counts: `ok` under the paper; under authors_code their result-text test (module docstring)."""
    judged: tuple[str, str] | None = None
    """(memory type, content) the content judge rates: every insert or update whose memory_type, with "_memory"
    removed, is core, semantic or episodic and whose content is a non-blank string, executed or not (as the authors'
    server judges them); None for any other call, which counts as not valid."""


def cut_reply(reply: str) -> str:
    """The part of a reply the authors' agent parses (see the module docstring)."""
    for tag in _CUT_TAGS:
        if tag in reply:
            reply = reply.split(tag)[0] + tag
            break
    if _FORGED_RESULT in reply:
        reply = reply.split(_FORGED_RESULT)[0].strip()
    return reply


def _arguments_text(text: str) -> str:
    text = text.strip()
    if text.startswith("{"):
        end = text.rfind("}")
        if end > 0:
            text = text[: end + 1]
    if text.startswith("```"):
        end = text.rfind("\n```")
        if end > 0:
            text = text[: end + 4]
    return text


def _parse_arguments(text: str) -> tuple[object, str]:
    import json_repair

    try:
        return json.loads(json_repair.repair_json(text)), ""
    except Exception as e:  # noqa: BLE001 - json_repair may raise anything on model text; the call fails
        return None, f"arguments are not JSON ({type(e).__name__})"


def parse_tool_calls(reply: str) -> list[ToolCall]:
    """Every `✿FUNCTION✿ / ✿ARGS✿` call of `reply`, in order, read as the authors' agent reads them (module
    docstring)."""
    reply = cut_reply(reply)
    calls = []
    for match in _CALL.finditer(reply):
        between = reply[match.end(1): reply.index("✿ARGS✿", match.end(1))]
        arguments, error = _parse_arguments(_arguments_text(match.group(2)))
        calls.append(ToolCall(match.group(1).strip(), arguments, error, one_line="\n" not in between))
    return calls


_PARAMETERS = {
    "new_memory_insert": ("memory_type", "content"),
    "memory_update": ("memory_type", "new_content", "memory_id"),
    "memory_delete": ("memory_type", "memory_id"),
    SEARCH_TOOL: ("memory_type", "query", "search_method"),
}
_CONTENT_KEY = {"new_memory_insert": "content", "memory_update": "new_content"}


def judged_write(call: ToolCall) -> tuple[str, str] | None:
    """The (memory type, content) the content judge rates for `call` (see CallResult.judged)."""
    args = call.arguments
    if call.name not in _CONTENT_KEY or not isinstance(args, dict) or not args:
        return None
    memory_type, content = args.get("memory_type", ""), args.get(_CONTENT_KEY[call.name], "")
    if not isinstance(memory_type, str) or not isinstance(content, str) or not content.strip():
        return None
    kind = memory_type.replace("_memory", "")
    return (kind, content) if kind in MEMORY_TYPES else None


def execute(store: MemoryStore, call: ToolCall, variant: str = "paper") -> CallResult:
    """Run one parsed call against `store` under reward `variant` (see the module docstring's table); a call that
    cannot run fails with a message and leaves the store as it was."""
    if variant not in VARIANTS:
        raise ValueError(f"execute: variant must be one of {VARIANTS}, got {variant!r}")
    result = _execute(store, call, variant == "authors_code")
    success = _authors_success(store, call, result) if variant == "authors_code" else result.ok
    return CallResult(result.name, result.ok, result.message, result.skipped, result.memory_type, result.content,
                      success, judged_write(call))


def _authors_success(store: MemoryStore, call: ToolCall, result: CallResult) -> bool:
    """authors_code's r_tool test on the parts of their result text a reply can steer: it must say "executed
    successfully" and not "'status': 'skipped'". An executed call shows what it wrote (or, for a search, the items it
    found and its search_method); a failed one shows its tool name and, for delete and search, the memory_type it
    could not use."""
    args = call.arguments if isinstance(call.arguments, dict) else {}
    if result.ok:
        shown = "executed successfully "
        if result.skipped:
            shown += "'status': 'skipped'"
        elif call.name in _CONTENT_KEY:
            value = args[_CONTENT_KEY[call.name]]
            shown += repr(store.core if result.memory_type == "core" and isinstance(value, str) else value)
        elif call.name == SEARCH_TOOL:
            found = _found(store, args)
            shown += " ".join(repr(text) for text in found) + " " + repr(args.get("search_method", "bm25"))
    else:
        shown = call.name
        memory_type = args.get("memory_type")
        if isinstance(memory_type, str) and (call.name == "memory_delete" or call.name == SEARCH_TOOL
                                             and "query" in args):
            shown += " " + memory_type.replace("_memory", "")
    return "executed successfully" in shown and "'status': 'skipped'" not in shown


def _found(store: MemoryStore, args: dict) -> list[str]:
    """The contents an executed search_memory returns under authors_code: items scoring at least 0, best first (ties
    in stored order), at most 20."""
    items = list(store.items(args["memory_type"].replace("_memory", "")).values())
    query = args["query"]
    if not items or not query.strip() or not bm25_tokens(query):
        return []
    scores = bm25_okapi_scores(items, query)
    order = sorted(range(len(items)), key=lambda i: scores[i], reverse=True)
    return [items[i] for i in order if scores[i] >= 0][:20]


def _fail(call: ToolCall, why: str) -> CallResult:
    return CallResult(call.name, False, why)


def _execute(store: MemoryStore, call: ToolCall, authors: bool) -> CallResult:
    name, args = call.name, call.arguments
    tools = (*TOOLS, SEARCH_TOOL) if authors else TOOLS
    if args is None:
        return _fail(call, f"{name or 'tool call'}: {call.error or 'arguments must be one JSON object, got null'}")
    if name not in tools:
        return _fail(call, f"unknown tool {name!r}; the tools are {list(TOOLS)}")
    if call.one_line and not authors:
        return _fail(call, f"{name}: ✿ARGS✿ must start its own line, after the ✿FUNCTION✿ line")
    if not isinstance(args, dict):
        return _fail(call, f"{name}: arguments must be one JSON object, got {type(args).__name__} (one call per "
                           f"✿FUNCTION✿ / ✿ARGS✿ pair)")
    unknown = sorted(set(args) - set(_PARAMETERS[name]))
    if unknown and not authors:
        return _fail(call, f"{name}: unknown argument(s) {unknown}; it takes {list(_PARAMETERS[name])}")
    try:
        if name == "new_memory_insert":
            kind = _type_of(args, name, ("semantic", "episodic"))
            content = _content_of(args, "content", name, authors)
            memory_id = store.insert(kind, content)
            if memory_id is None:
                return CallResult(name, True, "skipped: the same content is stored already", skipped=True)
            return CallResult(name, True, f"inserted [{memory_id}]", memory_type=kind,
                              content=store.items(kind)[memory_id])
        if name == "memory_update":
            kind = _type_of(args, name, MEMORY_TYPES)
            content = _content_of(args, "new_content", name, authors)
            memory_id = args.get("memory_id")
            written = store.update(kind, content, memory_id)
            return CallResult(name, True, "updated", memory_type=kind, content=written)
        if name == "memory_delete":
            if authors:
                kind = _loose_type_of(args, name)
                memory_id = args.get("memory_id")
                if kind != "core" and store.items(kind):
                    hash(memory_id)  # an unhashable id (a list) fails where their lookup meets an item
            else:
                kind, memory_id = _type_of(args, name, MEMORY_TYPES), args.get("memory_id")
            removed = store.delete(kind, memory_id, missing_ok=authors)
            return CallResult(name, True, "deleted" if removed else "deleted nothing: no item had that id")
        return _search(store, args)
    except ToolError as e:
        return _fail(call, str(e))
    except TypeError as e:
        return _fail(call, f"{name}: {e}")


def _type_of(args: dict, tool: str, allowed: tuple[str, ...]) -> str:
    if "memory_type" not in args:
        raise ToolError(f"{tool}: missing argument 'memory_type'; choose one of {[k + '_memory' for k in allowed]}")
    memory_type = args["memory_type"]
    kind = TYPE_NAMES.get(memory_type) if isinstance(memory_type, str) else None
    if kind not in allowed:
        raise ToolError(f"{tool}: memory_type {memory_type!r} is not allowed; write exactly one of "
                        f"{[k + '_memory' for k in allowed]}")
    return kind


def _loose_type_of(args: dict, tool: str) -> str:
    """authors_code's delete and search: any string whose "_memory" parts removed name a store part."""
    if "memory_type" not in args:
        raise ToolError(f"{tool}: missing argument 'memory_type'")
    memory_type = args["memory_type"]
    kind = memory_type.replace("_memory", "") if isinstance(memory_type, str) else None
    if kind not in MEMORY_TYPES:
        raise ToolError(f"{tool}: memory_type {memory_type!r} is not allowed; write one of "
                        f"{[k + '_memory' for k in MEMORY_TYPES]}")
    return kind


def _content_of(args: dict, key: str, tool: str, authors: bool):
    if key not in args:
        raise ToolError(f"{tool}: missing argument {key!r}")
    value = args[key]
    if authors:
        return value
    if not isinstance(value, str):
        raise ToolError(f"{tool}: {key} must be a string, got {type(value).__name__}")
    if not value.strip():
        raise ToolError(f"{tool}: {key} is empty")
    if len(value) > MAX_CONTENT_CHARS:
        raise ToolError(f"{tool}: {key} has {len(value)} characters, more than the {MAX_CONTENT_CHARS} allowed")
    return value


def _search(store: MemoryStore, args: dict) -> CallResult:
    """authors_code only: their search tool, which changes nothing; whether it would have run."""
    kind = _loose_type_of(args, SEARCH_TOOL)
    if "query" not in args:
        raise ToolError(f"{SEARCH_TOOL}: missing argument 'query'")
    if kind == "core":
        raise ToolError(f"{SEARCH_TOOL}: core memory is always shown; search semantic_memory or episodic_memory")
    store._offered(kind, ("semantic", "episodic"))
    items, query = store.items(kind), args["query"]
    if not items:
        return CallResult(SEARCH_TOOL, True, "searched: nothing to find")
    if not isinstance(query, str):
        raise ToolError(f"{SEARCH_TOOL}: query must be a string, got {type(query).__name__}")
    if not query.strip() or not bm25_tokens(query):
        return CallResult(SEARCH_TOOL, True, "searched: nothing to find")
    if any(not isinstance(store.raw(i), str) for i in items):
        raise ToolError(f"{SEARCH_TOOL}: an item of {kind}_memory is not text, which BM25 cannot read")
    if bm25_okapi_scores(list(items.values()), query) is None:
        raise ToolError(f"{SEARCH_TOOL}: no {kind}_memory item holds a word, so no BM25 index can be built")
    return CallResult(SEARCH_TOOL, True, "searched")


def tool_schemas(enabled: tuple[str, ...] = MEMORY_TYPES) -> list[dict]:
    """The tools as OpenAI function schemas, `memory_type` enums limited to the `enabled` memory types (the write
    phase offers no search)."""
    writable = [f"{k}_memory" for k in ("semantic", "episodic") if k in enabled]
    any_type = [f"{k}_memory" for k in MEMORY_TYPES if k in enabled]

    def schema(name: str, description: str, properties: dict, required: list[str]) -> dict:
        return {"type": "function", "function": {"name": name, "description": description, "parameters": {
            "type": "object", "properties": properties, "required": required}}}

    memory_id = {"type": "string", "description": "Id of the item, exactly as shown (required for semantic and "
                                                  "episodic memory)."}
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
