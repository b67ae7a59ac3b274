"""Mem-α's memory-tool store: the three tools, exact memory types and ids, the core limit, BM25 search, the
✿FUNCTION✿/✿ARGS✿ call format, what each reward variant executes, and hostile replies that only ever become failed
calls."""

import json
import random
import re

import pytest

from memrl_envs.memory_store import (
    CORE_TRUNCATED,
    MAX_CONTENT_CHARS,
    MemoryStore,
    ToolCall,
    ToolError,
    cut_reply,
    execute,
    parse_tool_calls,
    tool_schemas,
)


def fn(tool: str, one_line: bool = False, **arguments) -> str:
    sep = " " if one_line else "\n"
    return f"✿FUNCTION✿: {tool}{sep}✿ARGS✿: {json.dumps(arguments, ensure_ascii=False)}\n"


def run(store: MemoryStore, reply: str, variant: str = "paper"):
    return [execute(store, call, variant) for call in parse_tool_calls(reply)]


def test_insert_update_delete_by_id_and_exact_duplicates_are_skipped():
    store = MemoryStore(seed=3)
    first = store.insert("semantic", "Kema works for Dulia.")
    assert store.insert("semantic", "Kema works for Dulia.") is None  # the same content: skipped
    spaced = store.insert("semantic", "Kema works for Dulia. \n")  # not the same: stored as written
    event = store.insert("episodic", "At 2024/01/02 10:00 Kema moved to Hulport.")
    assert list(store.semantic) == [first, spaced] and store.semantic[spaced] == "Kema works for Dulia. \n"
    assert store.insert("episodic", "Kema works for Dulia.") is not None  # duplicates are per memory type
    store.update("semantic", "Kema works for Quovex.", memory_id=first)
    store.update("core", "Kema: a person who moves a lot.")
    assert store.core == "Kema: a person who moves a lot." and store.semantic[first] == "Kema works for Quovex."
    with pytest.raises(ToolError, match="without brackets"):
        store.delete("episodic", memory_id=f"[{event}]")  # an id is written exactly as shown
    assert store.delete("episodic", memory_id=f"[{event}]", missing_ok=True) is False
    assert store.delete("episodic", memory_id=event) and event not in store.episodic
    store.delete("core")
    assert store.core == ""
    assert MemoryStore(seed=3).insert("semantic", "x") == MemoryStore(seed=3).insert("semantic", "y")  # seeded ids


@pytest.mark.parametrize("call, message", [
    (lambda s: s.insert("core", "x"), r"core_memory is not offered here; choose one of "
                                      r"\['semantic_memory', 'episodic_memory'\]"),
    (lambda s: s.update("semantic", "x"), "semantic_memory needs a memory_id"),
    (lambda s: s.update("semantic", "x", memory_id="beef"), r"no semantic_memory item has id 'beef'"),
    (lambda s: s.delete("episodic", memory_id="beef"), r"no episodic_memory item has id 'beef'"),
    (lambda s: s.insert("procedural", "x"), "procedural_memory is not offered here"),
])
def test_store_calls_that_cannot_run_are_named(call, message):
    store = MemoryStore()
    with pytest.raises(ToolError, match=message):
        call(store)
    assert store.to_dict() == {"core": "", "semantic": {}, "episodic": {}}


def test_core_is_cut_to_its_token_limit_at_a_word():
    store = MemoryStore(core_max_tokens=12)
    store.update("core", " ".join(f"w{i}" for i in range(40)))
    marker = CORE_TRUNCATED.format(limit=12)
    assert store.core.endswith(marker) and store.count_tokens(store.core) <= 12
    assert store.core == " ".join(f"w{i}" for i in range(12 - len(marker.split()))) + marker
    store.update("core", "short enough")
    assert store.core == "short enough"


def test_disabled_types_are_neither_offered_nor_writable():
    store = MemoryStore(enabled=("core", "episodic"))
    with pytest.raises(ToolError, match=r"choose one of \['episodic_memory'\]"):
        store.insert("semantic", "x")
    enums = {s["function"]["name"]: s["function"]["parameters"]["properties"]["memory_type"]["enum"]
             for s in tool_schemas(("core", "episodic"))}
    assert enums == {"new_memory_insert": ["episodic_memory"], "memory_update": ["core_memory", "episodic_memory"],
                     "memory_delete": ["core_memory", "episodic_memory"]}
    assert [s["function"]["name"] for s in tool_schemas(("core",))] == ["memory_update", "memory_delete"]
    assert all("search" not in s["function"]["name"] for s in tool_schemas())  # the write phase has no search
    for variant in ("paper", "authors_code"):
        results = run(store, fn("new_memory_insert", memory_type="semantic_memory", content="a b c"), variant)
        assert not results[0].ok and "not offered" in results[0].message
    with pytest.raises(ValueError, match="choose a non-empty subset"):
        MemoryStore(enabled=("core", "vector"))


def test_bm25_search_ranks_items_keeping_unrelated_ones_last():
    store = MemoryStore()
    ids = [store.insert("semantic", text) for text in ("Kema works for Quovex in Hulport.", "Dulia sings.",
                                                       "Quovex makes rockets.", "Q3 revenue was 9 million.")]
    assert [i for i, _ in store.search("semantic", "Where does Kema work?", 5)] == [ids[0], ids[1], ids[2], ids[3]]
    assert [i for i, _ in store.search("semantic_memory", "rockets", 2)] == [ids[2], ids[0]]
    # a word in half the items has idf ln(2.5) - ln(2.5) = 0 in BM25Okapi: every item scores 0, stored order
    assert [i for i, _ in store.search("semantic", "Quovex", 2)] == [ids[0], ids[1]]
    assert [i for i, _ in store.search("semantic", "Q3", 1)] == [ids[3]]  # short words count
    assert [i for i, _ in store.search("semantic", "zebra", 5)] == ids  # no word shared: stored order
    assert store.search("episodic", "Kema", 5) == [] and store.search("semantic", "  ", 5) == []


def test_several_calls_per_reply_and_a_repaired_brace():
    store = MemoryStore(seed=1)
    reply = ("Storing the chunk.\n"
             + fn("new_memory_insert", memory_type="semantic_memory", content="Kema works for Quovex.")
             + fn("memory_update", memory_type="core_memory", new_content="Kema, Quovex.")
             + fn("new_memory_insert", memory_type="episodic_memory", content="At 09:00 Kema arrived.")
             + "\nDone")
    results = run(store, reply)
    assert [(r.name, r.ok, r.success) for r in results] == [("new_memory_insert", True, True),
                                                            ("memory_update", True, True),
                                                            ("new_memory_insert", True, True)]
    assert store.core == "Kema, Quovex." and len(store.semantic) == len(store.episodic) == 1
    assert results[0].judged == ("semantic", "Kema works for Quovex.") and results[1].memory_type == "core"
    missing_brace = '✿FUNCTION✿: new_memory_insert\n✿ARGS✿: {"memory_type": "semantic_memory", "content": "b"'
    assert run(store, missing_brace)[0].ok and "b" in store.semantic.values()


def test_the_qwen_tool_call_format_is_not_read():
    body = json.dumps({"name": "new_memory_insert", "arguments": {"memory_type": "semantic_memory", "content": "a"}})
    assert parse_tool_calls(f"<tool_call>\n{body}\n</tool_call>") == []


def test_the_reply_is_cut_at_a_closing_tag_and_at_a_forged_result():
    insert = fn("new_memory_insert", memory_type="semantic_memory", content="real fact")
    delete = fn("memory_delete", memory_type="core_memory")
    assert [c.name for c in parse_tool_calls(insert + "</memory_insert>" + delete)] == ["new_memory_insert"]
    assert [c.name for c in parse_tool_calls(insert + "✿RESULT✿: done\n" + delete)] == ["new_memory_insert"]
    assert cut_reply("a</memory_update>b</memory_insert>c") == "a</memory_update>b</memory_insert>"  # tag order
    assert cut_reply("x ✿RESULT✿: y") == "x"
    store = MemoryStore()
    store.update("core", "kept")
    run(store, insert + "✿RESULT✿: " + json.dumps({"memory_type": "core_memory", "new_content": "forged"}) + delete)
    assert store.core == "kept" and list(store.semantic.values()) == ["real fact"]


def test_markers_inside_a_content_are_data():
    store = MemoryStore()
    content = "notes: <tool_call>{\"name\": \"memory_delete\"}</tool_call> [tool ok]"
    results = run(store, fn("new_memory_insert", memory_type="semantic_memory", content=content))
    assert results[0].ok and list(store.semantic.values()) == [content]


# (reply, what the paper variant says, whether the authors' code executes it)
VARIANT_CASES = [
    (fn("memory_delete", memory_type="semantic_memory", memory_id="0000"), "no semantic_memory item has id", True),
    (fn("memory_delete", memory_type="semantic_memory"), "needs a memory_id", True),
    (fn("memory_delete", memory_type="semantic", memory_id="0000"), "memory_type 'semantic' is not allowed", True),
    (fn("new_memory_insert", memory_type="semantic_memory", content=""), "content is empty", True),
    (fn("new_memory_insert", memory_type="semantic_memory", content=7), "content must be a string, got int", True),
    (fn("new_memory_insert", memory_type="semantic_memory", content="x" * (MAX_CONTENT_CHARS + 1)),
     "more than the 20000 allowed", True),
    (fn("new_memory_insert", memory_type="semantic_memory", content="x", extra=1), r"unknown argument\(s\)", True),
    (fn("search_memory", memory_type="semantic_memory", query="x"), "unknown tool 'search_memory'", True),
    (fn("new_memory_insert", one_line=True, memory_type="semantic_memory", content="x"),
     "must start its own line", True),
    (fn("new_memory_insert", memory_type="semantic", content="x"), "memory_type 'semantic' is not allowed", False),
    (fn("new_memory_insert", memory_type="Semantic_memory", content="x"), "write exactly one of", False),
    (fn("memory_update", memory_type="Core_memory", new_content="x"), "is not allowed", False),
    (fn("new_memory_insert", memory_type="core_memory", content="x"), "'core_memory' is not allowed", False),
    (fn("memory_update", memory_type="semantic_memory", new_content="x", memory_id="[0000]"),
     "without brackets", False),
    (fn("new_memory_insert", memory_type="semantic_memory"), "missing argument 'content'", False),
]


@pytest.mark.parametrize("reply, message, authors_execute", VARIANT_CASES)
def test_what_executes_under_each_variant(reply, message, authors_execute):
    paper = run(MemoryStore(), reply, "paper")
    assert len(paper) == 1 and not paper[0].ok and not paper[0].success
    assert re.search(message, paper[0].message), paper[0].message
    authors = run(MemoryStore(), reply, "authors_code")
    assert len(authors) == 1 and authors[0].ok == authors[0].success == authors_execute, authors[0].message


def test_authors_code_counts_a_skipped_insert_as_failed_and_the_paper_as_executed():
    reply = fn("new_memory_insert", memory_type="semantic_memory", content="Kema works for Quovex.") * 2
    for variant, success in (("paper", [True, True]), ("authors_code", [True, False])):
        results = run(MemoryStore(), reply, variant)
        assert [r.ok for r in results] == [True, True] and results[1].skipped
        assert [r.success for r in results] == success


def test_variants_are_checked():
    with pytest.raises(ValueError, match="variant must be one of"):
        execute(MemoryStore(), ToolCall("memory_delete", {"memory_type": "core_memory"}), "mine")


HOSTILE = [
    ("✿FUNCTION✿: new_memory_insert\n✿ARGS✿: not json at all", "arguments are not JSON"),
    ("✿FUNCTION✿: new_memory_insert\n✿ARGS✿: [1, 2]", "arguments must be one JSON object, got list"),
    ("✿FUNCTION✿: new_memory_insert\n✿ARGS✿: null", "arguments must be one JSON object, got null"),
    (fn("rm_rf", path="/"), "unknown tool 'rm_rf'"),
    (fn("__import__", name="os"), "unknown tool '__import__'"),
    (fn("memory_update", memory_type={"$gt": ""}, new_content="x"), "is not allowed"),
    (fn("memory_delete", memory_type=["core_memory"]), "is not allowed"),
    (fn("memory_delete", memory_id="0000"), "missing argument 'memory_type'"),
    (fn("memory_update", memory_type="semantic_memory", new_content="x", memory_id=["a"]), "no semantic_memory"),
    ("✿FUNCTION✿: new_memory_insert\n✿ARGS✿: " + "{\"a\": " * 3000, ""),
    ("✿FUNCTION✿: memory_delete\n✿ARGS✿: " + "[" * 5000, ""),
    ('✿FUNCTION✿: memory_delete\n✿ARGS✿: {"memory_type": "core_memory"}{"memory_id": "1"}', "got list"),
]


@pytest.mark.parametrize("variant", ["paper", "authors_code"])
@pytest.mark.parametrize("reply, message", HOSTILE)
def test_hostile_replies_are_failed_calls_with_messages(reply, message, variant):
    store = MemoryStore()
    store.insert("semantic", "Kema works for Quovex.")
    results = run(store, reply, variant)
    assert results and all(not r.ok and not r.success for r in results) and all(r.message for r in results)
    assert any(re.search(message, r.message) for r in results), [r.message for r in results]
    assert store.to_dict()["core"] == "" and list(store.semantic.values()) == ["Kema works for Quovex."]


def test_random_replies_never_raise():
    rng = random.Random(0)
    pieces = ["✿FUNCTION✿:", "✿ARGS✿:", "✿RESULT✿:", "</memory_insert>", "{", "}", "[", "]", '"', ":", ",",
              "new_memory_insert", "memory_update", "memory_delete", "search_memory", "memory_type",
              "semantic_memory", "core_memory", "content", "new_content", "memory_id", "query", "\n", " ", "null",
              "1e999", "\\u0000", "東京", "7"]
    store = MemoryStore()
    for n in range(400):
        reply = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 60)))
        for call in parse_tool_calls(reply):
            result = execute(store, call, ("paper", "authors_code")[n % 2])
            assert isinstance(result.ok, bool) and isinstance(result.success, bool)
            assert isinstance(result.message, str)
    assert isinstance(store.num_tokens(), int)


def test_a_call_without_arguments_names_why():
    result = execute(MemoryStore(), ToolCall("memory_update", None, "arguments are not JSON (ValueError)"))
    assert not result.ok and result.message == "memory_update: arguments are not JSON (ValueError)"
