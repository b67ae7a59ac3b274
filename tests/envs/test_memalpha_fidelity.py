"""Mem-α's write-phase rewards, answer scoring and BM25 against independent restatements of the authors' code
(wangyu-ustc/Mem-alpha), on that code's own edge cases.

Restated here (from reading their code, none of it copied):

- the rollout (memalpha/llm_agent/generation.py): the reply is cut after the first of "</memory_insert>",
  "</memory_update>", "</memory_delete>", "</done>" (tried in that order), then before "✿RESULT✿:";
- the parser (agent.py): each ✿FUNCTION✿/✿ARGS✿ match is a call, its arguments stripped, cut after the last "}",
  read with json_repair then json;
- the tools (functions.py, memory.py) on their Memory object, with Python raising where theirs raises; a call's
  result text is "[tool NAME executed successfully] → RESULT" or "[tool NAME error] ...", and r_tool counts the
  texts saying "executed successfully" and not "'status': 'skipped'";
- r_content (generation.py, memory_server.py): every parsed call is judged or scored 0; an insert or update with a
  non-empty arguments object, a memory_type that, with "_memory" removed, is core, semantic or episodic, and a
  non-blank string content gets the judge's verdict; the mean over the reply's calls;
- answer scoring (verl/workers/reward_manager/naive.py, evaluate_agent_results.py, memalpha/llm_agent/metrics.py);
- rank_bm25's BM25Okapi as their memory server ranks items with it.

memrl's `reward_variant="authors_code"` must equal the restatement; the paper variant's values are asserted where
the module docstrings say it departs. The json_repair cases named here read alike in json_repair 0.51.0 (the
authors' pin) and current releases; '{"a":1}\\n\\n{}' is left out, as those versions read it differently.
"""

import copy
import json
import math
import random
import re
import string
from collections import Counter

import pytest

from memrl_envs.memory_rewards import (
    content_reward,
    content_valid,
    judge_verdict,
    metric_for,
    normalize_answer,
    score_answer,
    tool_reward,
)
from memrl_envs.memory_store import MemoryStore, bm25_okapi_scores, bm25_top, cut_reply, execute, parse_tool_calls

ALL = ("core", "semantic", "episodic")
SEEDED = {"semantic": ["Kema works for Quovex.", "Dulia sings in Hulport."],
          "episodic": ["On Monday Kema moved to Colton."]}


def accept(kind, content):
    """A content judge that finds every judged write valid, so r_content is the share of calls judged."""
    return True


# -- the authors' write phase, restated --------------------------------------------------------------------------
def authors_cut(reply):
    for tag in ("</memory_insert>", "</memory_update>", "</memory_delete>", "</done>"):
        if tag in reply:
            return _cut_result(reply[: reply.index(tag)] + tag)
    return _cut_result(reply)


def _cut_result(reply):
    return reply[: reply.index("✿RESULT✿:")].strip() if "✿RESULT✿:" in reply else reply


_AUTHORS_CALL = re.compile("✿FUNCTION✿:" r"\s*([^\n]+)\s*" "✿ARGS✿:" r"\s*([^✿]+?)"
                           "(?=✿RESULT✿|✿RETURN✿|✿FUNCTION✿|$)", re.DOTALL)


def authors_parse(reply):
    """[(name, arguments or None when json could not read them)] in order."""
    import json_repair

    calls = []
    for m in _AUTHORS_CALL.finditer(authors_cut(reply)):
        text = m.group(2).strip()
        if text.startswith("{") and text.rfind("}") > 0:
            text = text[: text.rfind("}") + 1]
        if text.startswith("```") and text.rfind("\n```") > 0:
            text = text[: text.rfind("\n```") + 4]
        try:
            arguments = json.loads(json_repair.repair_json(text))
        except json.JSONDecodeError:
            arguments = None
        calls.append((m.group(1).strip(), arguments))
    return calls


class AuthorsMemory:
    """Their Memory: core None when not included, lists of one-item {id: content} dicts, and the id lists their
    embedding matrices keep in step."""

    def __init__(self, enabled=ALL):
        self.core = "" if "core" in enabled else None
        self.enabled = set(enabled)
        self.lists = {"semantic": [], "episodic": []}
        self.ids = {"semantic": [], "episodic": []}
        self.made = 0

    def seed(self, kind, memory_id, content):
        self.lists[kind].append({memory_id: content})
        self.ids[kind].append(memory_id)

    def check(self, kind):
        if kind in ("semantic", "episodic") and kind not in self.enabled:
            raise ValueError(f"{kind.capitalize()} memory is disabled for this run.")
        if kind == "core" and self.core is None:
            raise ValueError("Core memory is not available.")

    def part(self, kind):
        if kind not in self.lists:
            raise AttributeError(f"'Memory' object has no attribute '{kind}'")
        return self.lists[kind]


def _insert(mem, args):
    assert args["memory_type"] in ["semantic_memory", "episodic_memory"]
    content = args["content"]
    kind = args["memory_type"].replace("_memory", "")
    mem.check(kind)
    if any(existing == content for item in mem.lists[kind] for existing in item.values()):
        return {"status": "skipped", "message": "Memory content already exists in the memory pool."}
    mem.made += 1
    memory_id = f"new{mem.made}"
    mem.seed(kind, memory_id, content)
    return {"status": "ok", "new_memory": {memory_id: content}}


def _update(mem, args):
    assert args["memory_type"] in ["core_memory", "semantic_memory", "episodic_memory"]
    new_content = args["new_content"]
    kind, memory_id = args["memory_type"].replace("_memory", ""), args.get("memory_id")
    mem.check(kind)
    if kind == "core":
        mem.core = new_content
        return {"status": "ok", "updated_memory": mem.core}
    items = mem.lists[kind]
    for i, item in enumerate(items):
        if memory_id in item:
            items[i] = {memory_id: new_content}
            break
    mem.ids[kind].index(memory_id)  # ValueError for an id it does not hold
    return {"status": "ok", "updated_memory": {memory_id: new_content}}


def _delete(mem, args):
    kind, memory_id = args["memory_type"].replace("_memory", ""), args.get("memory_id")
    mem.check(kind)
    if kind == "core":
        mem.core = ""
        return {"status": "ok"}
    items = mem.part(kind)
    for i, item in enumerate(items):
        if memory_id in item:
            items.pop(i)
            break
    if memory_id in mem.ids[kind]:
        mem.ids[kind].remove(memory_id)
    return {"status": "ok"}


def _search(mem, args):
    kind, query = args["memory_type"].replace("_memory", ""), args["query"]
    method = args.get("search_method", "bm25")
    if kind == "core":
        raise ValueError("Core memory doesn't support searching.")
    if kind not in ("semantic", "episodic"):
        raise ValueError(f"Invalid memory_type: {kind}. Only 'semantic' and 'episodic' are supported.")
    mem.check(kind)
    items = mem.lists[kind]
    results = []
    if items and query.strip() and ref_tokens(query):
        corpus = [ref_tokens(content) for item in items for content in item.values()]
        scores = ref_bm25_okapi(corpus, ref_tokens(query))
        results = sorted([(item, s) for item, s in zip(items, scores) if s >= 0.0], key=lambda r: r[1],
                         reverse=True)[:20]
    return {"status": "ok", "results": results, "search_method": method}


AUTHORS_TOOLS = {"new_memory_insert": _insert, "memory_update": _update, "memory_delete": _delete,
                 "search_memory": _search}


def authors_run(mem, name, arguments):
    """Their result text for one parsed call."""
    if arguments is None:
        return f"[tool {name} error] Invalid JSON arguments"
    try:
        return f"[tool {name} executed successfully] → {AUTHORS_TOOLS[name](mem, arguments)}"
    except Exception as e:  # noqa: BLE001 - their tool runner turns every exception into an error text
        return f"[tool {name} error] {type(e).__name__}: {e}"


def authors_r_tool(texts):
    ok = sum("executed successfully" in t and "'status': 'skipped'" not in t for t in texts)
    return ok / len(texts) if texts else 0.0


def authors_r_content(calls, judge):
    """Their r_content of one reply's parsed calls. Where their code would raise (arguments json could not read,
    or a non-string memory_type, met by their "_memory" removal) the call scores 0, as memrl scores it."""
    scores = []
    for name, arguments in calls:
        arguments = copy.deepcopy(arguments)
        try:
            if "memory_type" in arguments:
                arguments["memory_type"] = arguments["memory_type"].replace("_memory", "")
        except (TypeError, AttributeError):
            scores.append(0.0)
            continue
        scores.append(_server_score(name, arguments, judge))
    return sum(scores) / len(scores) if scores else 0.0


def _server_score(name, arguments, judge):
    if not name or not arguments or name not in ("new_memory_insert", "memory_update"):
        return 0.0
    try:
        memory_type = arguments.get("memory_type", "")
        content = arguments.get("content" if name == "new_memory_insert" else "new_content", "")
        if not memory_type or memory_type not in ["core", "semantic", "episodic"]:
            return 0.0
        if not content or not content.strip():
            return 0.0
    except AttributeError:
        return 0.0
    return float(bool(judge(memory_type, content)))


def authors_reply(reply, enabled=ALL, judge=accept):
    """(r_tool, r_content, memory) of one reply on a store holding SEEDED."""
    mem = AuthorsMemory(enabled)
    for kind, contents in SEEDED.items():
        for i, content in enumerate(contents):
            if kind in enabled:
                mem.seed(kind, _seed_ids(kind)[i], content)
    calls = authors_parse(reply)
    texts = [authors_run(mem, name, copy.deepcopy(arguments)) for name, arguments in calls]
    return authors_r_tool(texts), authors_r_content(calls, judge), mem


# -- memrl on the same reply ---------------------------------------------------------------------------------------
_IDS = {}


def _seed_ids(kind):
    if not _IDS:
        store = seeded_store(ALL)
        _IDS.update({k: list(store.items(k)) for k in ("semantic", "episodic")})
    return _IDS[kind]


def seeded_store(enabled=ALL):
    store = MemoryStore(enabled=enabled, seed=7)
    for kind, contents in SEEDED.items():
        if kind in enabled:
            for content in contents:
                store.insert(kind, content)
    return store


def memrl_reply(reply, variant="authors_code", enabled=ALL, judge=accept):
    store = seeded_store(enabled)
    store.seeded = {i for kind in ("semantic", "episodic") for i in store.items(kind)}
    results = [execute(store, call, variant) for call in parse_tool_calls(reply)]
    return tool_reward(results), content_reward(results, judge), store


def same_memory(store, mem):
    for kind in ("semantic", "episodic"):
        ours = [(i if i in store.seeded else "new", store.raw(i)) for i in store.items(kind)]
        theirs = [(i if not i.startswith("new") else "new", c) for item in mem.lists[kind] for i, c in item.items()]
        assert ours == theirs, kind
    if mem.core is not None:
        assert store.core == (mem.core if isinstance(mem.core, str) else str(mem.core))


def fn(name, arguments, one_line=False):
    text = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
    return f"✿FUNCTION✿: {name}{' ' if one_line else chr(10)}✿ARGS✿: {text}\n"


def ins(kind, content, **extra):
    return fn("new_memory_insert", {"memory_type": kind, "content": content, **extra})


def upd(kind, content, memory_id=None):
    args = {"memory_type": kind, "new_content": content}
    return fn("memory_update", args if memory_id is None else {**args, "memory_id": memory_id})


def dele(kind, memory_id=None):
    return fn("memory_delete", {"memory_type": kind} if memory_id is None else {"memory_type": kind,
                                                                                 "memory_id": memory_id})


S1, S2 = "<s1>", "<s2>"  # stand for the seeded semantic ids


def with_ids(reply):
    return reply.replace(S1, _seed_ids("semantic")[0]).replace(S2, _seed_ids("semantic")[1])


# (case, reply, authors (r_tool, r_content), paper r_tool); r_content with the accept-all judge
REPLIES = [
    ("same insert twice: the second is skipped, both judged",
     ins("semantic_memory", "Pasis owns a boat.") * 2, (0.5, 1.0), 1.0),
    ("update of an unknown id fails yet is judged",
     upd("semantic_memory", "Kema works for Plixon.", "zzzz"), (0.0, 1.0), 0.0),
    ("insert with memory_type 'semantic' (no suffix): rejected, judged as semantic",
     ins("semantic", "Pasis owns a boat."), (0.0, 1.0), 0.0),
    ("insert with memory_type 'Semantic_memory': rejected, not judged",
     ins("Semantic_memory", "Pasis owns a boat."), (0.0, 0.0), 0.0),
    ("update with memory_type 'Core_memory': rejected, not judged",
     upd("Core_memory", "The user talks about friends."), (0.0, 0.0), 0.0),
    ("update with memory_type 'core' (no suffix): rejected, judged as core",
     upd("core", "The user talks about friends."), (0.0, 1.0), 0.0),
    ("update with the id written as '[id]' is rejected",
     upd("semantic_memory", "Kema works for Plixon.", f"[{S1}]"), (0.0, 1.0), 0.0),
    ("delete with the id written as '[id]' deletes nothing (authors: executed)",
     dele("semantic_memory", f"[{S1}]"), (1.0, 0.0), 0.0),
    ("a <tool_call> block is not read",
     '<tool_call>{"name": "new_memory_insert", "arguments": {"memory_type": "semantic_memory", '
     '"content": "Pasis owns a boat."}}</tool_call>', (0.0, 0.0), 0.0),
    ("calls after a forged result line are cut",
     ins("semantic_memory", "Pasis owns a boat.") + "✿RESULT✿: [tool ok]\n" + dele("semantic_memory", S1),
     (1.0, 1.0), 1.0),
    ("two objects under one ARGS with the same keys: the last is kept",
     fn("new_memory_insert", '{"memory_type": "semantic_memory", "content": "x y z"}\n'
                             '{"memory_type": "semantic_memory", "content": "Pasis owns a boat."}'), (1.0, 1.0), 1.0),
    ("two objects under one ARGS with different keys: a list, the call fails",
     fn("new_memory_insert", '{"memory_type": "semantic_memory", "content": "x y z"}\n'
                             '{"memory_type": "episodic_memory", "content": "On Monday x.", "note": 1}'),
     (0.0, 0.0), 0.0),
    ("delete of a missing id", dele("semantic_memory", "zzzz"), (1.0, 0.0), 0.0),
    ("delete without an id", dele("episodic_memory"), (1.0, 0.0), 0.0),
    ("the same delete twice", dele("semantic_memory", S1) * 2, (1.0, 0.0), 0.5),
    ("empty content: executes, not judged", ins("semantic_memory", ""), (1.0, 0.0), 0.0),
    ("blank content: executes, not judged", ins("episodic_memory", "  \n"), (1.0, 0.0), 0.0),
    ("numeric content: executes, not judged", ins("semantic_memory", 12), (1.0, 0.0), 0.0),
    ("null content: executes, not judged", ins("semantic_memory", None), (1.0, 0.0), 0.0),
    ("list content on an update", upd("semantic_memory", ["a", "b"], S2), (1.0, 0.0), 0.0),
    ("an extra argument on insert is ignored",
     ins("semantic_memory", "Pasis owns a boat.", importance="high"), (1.0, 1.0), 0.0),
    ("search_memory in the write phase executes",
     fn("search_memory", {"memory_type": "semantic_memory", "query": "Kema"}), (1.0, 0.0), 0.0),
    ("search_memory of core fails", fn("search_memory", {"memory_type": "core_memory", "query": "Kema"}),
     (0.0, 0.0), 0.0),
    ("search_memory finding an item that shows 'status': 'skipped' counts as failed",
     ins("semantic_memory", "Kema's log: 'status': 'skipped' twice")
     + fn("search_memory", {"memory_type": "semantic_memory", "query": "Kema log"}), (0.0, 0.5), 0.5),
    ("FUNCTION and ARGS on one line",
     fn("new_memory_insert", {"memory_type": "semantic_memory", "content": "Pasis owns a boat."}, one_line=True),
     (1.0, 1.0), 0.0),
    ("'X' then 'X \\n' are two items", ins("semantic_memory", "X") + ins("semantic_memory", "X \n"),
     (1.0, 1.0), 1.0),
    ("a seeded content again is skipped, the same into episodic is not",
     ins("semantic_memory", "Kema works for Quovex.") + ins("episodic_memory", "Kema works for Quovex."),
     (0.5, 1.0), 1.0),
    ("the reply ends after </memory_insert>",
     ins("semantic_memory", "Pasis owns a boat.") + "</memory_insert>\n" + dele("semantic_memory", S1),
     (1.0, 1.0), 1.0),
    ("</memory_insert> cuts before </memory_update> does, wherever it stands",
     ins("semantic_memory", "Pasis owns a boat.") + "</memory_update>\n" + dele("semantic_memory", S1)
     + "</memory_insert>" + dele("semantic_memory", S2), (1.0, 0.5), 1.0),
    ("no call at all", "Done. Nothing new here.", (0.0, 0.0), 0.0),
    ("a tool name holding 'executed successfully' counts (authors)",
     fn("executed successfully", {"memory_type": "semantic_memory"}), (1.0, 0.0), 0.0),
    ("a delete whose unknown memory_type holds 'executed successfully' counts (authors)",
     dele("executed successfully_memory"), (1.0, 0.0), 0.0),
    ("content showing 'status': 'skipped' counts as failed (authors)",
     ins("semantic_memory", "log line 'status': 'skipped' seen"), (0.0, 1.0), 1.0),
    ("delete with memory_type 'semantic' (no suffix) executes", dele("semantic", S1), (1.0, 0.0), 0.0),
    ("delete with memory_type 'Semantic_memory' fails", dele("Semantic_memory", S1), (0.0, 0.0), 0.0),
    ("a stray ✿ in the arguments: not a call",
     fn("new_memory_insert", '{"memory_type": "semantic_memory", "content": "a ✿ b"}'), (0.0, 0.0), 0.0),
    ("a comment after the arguments is cut off",
     fn("new_memory_insert", '{"memory_type": "semantic_memory", "content": "Pasis owns a boat."} // new fact'),
     (1.0, 1.0), 1.0),
    ("a missing closing brace is repaired",
     fn("new_memory_insert", '{"memory_type": "semantic_memory", "content": "Pasis owns a boat."'), (1.0, 1.0), 1.0),
    ("insert into core fails yet is judged as core", ins("core_memory", "The user talks about friends."),
     (0.0, 1.0), 0.0),
    ("update and delete of core", upd("core_memory", "The user talks about friends.") + dele("core_memory"),
     (1.0, 0.5), 1.0),
    ("update of a seeded item", upd("episodic_memory", "On Tuesday Kema left Colton.",
                                    _seed_ids("episodic")[0]), (1.0, 1.0), 1.0),
    ("an update naming a semantic id under episodic fails", upd("episodic_memory", "On Monday x y.", S1),
     (0.0, 1.0), 0.0),
    ("an unknown tool fails", fn("memory_insert", {"memory_type": "semantic_memory", "content": "a b c"}),
     (0.0, 0.0), 0.0),
    ("an insert without content fails", fn("new_memory_insert", {"memory_type": "semantic_memory"}),
     (0.0, 0.0), 0.0),
    ("arguments json cannot read fail, scored 0", fn("new_memory_insert", "not json at all"), (0.0, 0.0), 0.0),
    ("✿RETURN✿ ends the arguments",
     fn("new_memory_insert", '{"memory_type": "semantic_memory", "content": "Pasis owns a boat."}')
     + "✿RETURN✿: stored", (1.0, 1.0), 1.0),
]


@pytest.mark.parametrize("case, reply, authors, paper", REPLIES, ids=[c[0] for c in REPLIES])
def test_write_phase_rewards_match_the_authors_code(case, reply, authors, paper):
    reply = with_ids(reply)
    r_tool, r_content, mem = authors_reply(reply)
    assert (r_tool, r_content) == pytest.approx(authors)  # the restatement gives the original's value
    ours_tool, ours_content, store = memrl_reply(reply)
    assert (ours_tool, ours_content) == pytest.approx(authors)
    same_memory(store, mem)
    paper_tool, paper_content, _ = memrl_reply(reply, variant="paper")
    assert paper_tool == pytest.approx(paper)
    assert paper_content == pytest.approx(authors[1])  # both variants judge every parsed write


def test_disabled_memory_types_fail_in_both():
    reply = ins("episodic_memory", "On Monday Kema met Dulia.") + upd("core_memory", "The user talks a lot.")
    for enabled in (("core", "semantic"), ("semantic", "episodic")):
        r_tool, r_content, mem = authors_reply(reply, enabled)
        ours = memrl_reply(reply, enabled=enabled)
        assert (ours[0], ours[1]) == (r_tool, r_content) == (0.5, 1.0)
        same_memory(ours[2], mem)


def test_the_cut_and_the_parse_agree_with_the_authors():
    for _, reply, _, _ in REPLIES:
        reply = with_ids(reply)
        assert cut_reply(reply) == authors_cut(reply)
        assert [(c.name, c.arguments) for c in parse_tool_calls(reply)] == authors_parse(reply)
    one_line = fn("memory_delete", {"memory_type": "core_memory"}, one_line=True)
    assert [c.one_line for c in parse_tool_calls(one_line + dele("core_memory"))] == [True, False]


def test_json_repair_reads_the_named_cases_as_both_versions_do():
    """Pinned readings of json_repair that 0.51.0 and current releases share."""
    cases = {'{"a":1}{"a":2}': {"a": 2}, '{"a":1}{"b":2}': [{"a": 1}, {"b": 2}], '{"a": "x", }': {"a": "x"},
             "{'a': 'x'}": {"a": "x"}, '{"a": "x"': {"a": "x"}, "[1, 2]": [1, 2]}
    for text, value in cases.items():
        assert authors_parse(fn("t", text)) == [("t", value)]
        assert parse_tool_calls(fn("t", text))[0].arguments == value
    assert authors_parse(fn("t", "not json at all")) == [("t", None)]
    assert parse_tool_calls(fn("t", "not json at all"))[0].arguments is None


def test_content_judged_with_the_rules_matches_the_restatement():
    reply = with_ids(ins("semantic_memory", "Pasis owns a boat.") + ins("episodic_memory", "Kema moved to Colton.")
                     + upd("core_memory", "Here we save the summary.") + dele("semantic_memory", S1))
    _, r_content, _ = authors_reply(reply, judge=content_valid)
    assert memrl_reply(reply, judge=content_valid)[1] == r_content == 0.25


# -- randomized replies ----------------------------------------------------------------------------------------------
TYPES = ["semantic_memory", "episodic_memory", "core_memory", "semantic", "episodic", "core", "Semantic_memory",
         "procedural_memory", 5, None]
CONTENTS = ["Kema works for Quovex.", "X", "X \n", "", "   ", 12, ["a", "b"], "'status': 'skipped' noted",
            "On Monday Kema met Dulia.", "Pasis owns a boat.", "Dulia sings in Hulport.", "a ✿ b"]
IDS = [S1, S2, f"[{S1}]", "zzzz", 7, None, "<e1>"]


def random_call(rng):
    name = rng.choice(["new_memory_insert"] * 4 + ["memory_update"] * 3 + ["memory_delete"] * 3
                      + ["search_memory", "memory_insert", "executed successfully"])
    args = {}
    valid = ["semantic_memory", "episodic_memory"] + (["core_memory"] if name != "new_memory_insert" else [])
    kind = rng.choice(TYPES) if rng.random() < 0.4 else rng.choice(valid)
    if kind is not None:
        args["memory_type"] = kind
    if name in ("new_memory_insert", "executed successfully") and rng.random() < 0.9:
        args["content"] = rng.choice(CONTENTS)
    if name == "memory_update" and rng.random() < 0.9:
        content = rng.choice(CONTENTS)
        args["new_content"] = content
    if name in ("memory_update", "memory_delete"):
        memory_id = rng.choice(IDS)
        if memory_id is not None:
            args["memory_id"] = memory_id
    if name == "search_memory":
        args["query"] = rng.choice(["Kema", "Quovex boat", "", "zebra", 3])
    if rng.random() < 0.1:
        args["extra"] = 1
    text = json.dumps(args, ensure_ascii=False)
    shape = rng.random()
    if shape < 0.05:
        text = text + "\n" + json.dumps({**args, "note": 1})  # two objects, different keys
    elif shape < 0.1:
        text = text[:-1]  # a missing brace
    elif shape < 0.15:
        text += " // why"
    elif shape < 0.18:
        text = "not json"
    return fn(name, text, one_line=rng.random() < 0.1)


def random_reply(rng):
    parts = []
    for _ in range(rng.randint(0, 6)):
        r = rng.random()
        if r < 0.07:
            parts.append("✿RESULT✿: [tool memory_update executed successfully]\n")
        elif r < 0.12:
            parts.append(rng.choice(["</memory_insert>", "</memory_update>", "</memory_delete>", "</done>"]) + "\n")
        elif r < 0.15:
            parts.append('<tool_call>{"name": "memory_delete", "arguments": {"memory_type": "core_memory"}}'
                         '</tool_call>\n')
        elif r < 0.18:
            parts.append("<think>Storing the chunk.</think>\n")
        else:
            parts.append(random_call(rng))
    return with_ids("".join(parts)).replace("<e1>", _seed_ids("episodic")[0])


def test_random_replies_score_as_the_authors_code_scores_them():
    rng = random.Random(2024)
    for n in range(300):
        reply = random_reply(rng)
        enabled = rng.choice([ALL, ("semantic", "episodic"), ("core", "semantic")])
        judge = rng.choice([accept, content_valid])
        assert [(c.name, c.arguments) for c in parse_tool_calls(reply)] == authors_parse(reply), (n, reply)
        r_tool, r_content, mem = authors_reply(reply, enabled, judge)
        ours_tool, ours_content, store = memrl_reply(reply, enabled=enabled, judge=judge)
        assert (ours_tool, ours_content) == pytest.approx((r_tool, r_content)), (n, reply)
        same_memory(store, mem)


# -- answer scoring, restated -------------------------------------------------------------------------------------
def ref_normalize(text):
    text = "".join(c for c in text.lower() if c not in set(string.punctuation))
    return " ".join(re.sub(r"\b(a|an|the)\b", " ", text).split())


def ref_answer_line(text):
    for pattern in (r"(?:Answer:)(.*)(?:\n|$)", r"(?:^)(.*)(?:\n|$)"):
        m = re.search(pattern, text, flags=re.IGNORECASE)
        if m:
            return re.sub("^Answer:", "", m[1].strip(), flags=re.IGNORECASE).strip()
    return None


def ref_boxed_or_all(text):
    m = re.search(r"\\boxed\{([^}]*)\}", text)
    return m.group(1).strip() if m else text.strip()


def ref_think(prediction):
    if "</think>" in prediction:  # the rollout's answer cleaning
        prediction = prediction.split("</think>")[1].strip()
    elif "<think>" in prediction:
        prediction = "Empty"
    if "<think>" in prediction and "</think>" in prediction:  # the reward's
        prediction = prediction.split("</think>")[1].strip()
    return "Empty" if "<think>" in prediction else prediction


def authors_score(prediction, gold, source, question="", judge_reply=None):
    """The authors' training reward, with their evaluation script's branches for infbench_sum_eng_shots2 and
    longmemeval_s*; `judge_reply(question, gold, prediction)` is the LLM judge's reply text."""
    p = ref_think(prediction)
    if source == "booksum":
        keys = [k.strip() for k in gold.split(",")]
        return sum(k.lower() in p.lower() for k in keys) / len(keys)
    if source == "infbench_sum_eng_shots2":
        keys = gold if isinstance(gold, list) else gold.split(", ")
        return sum(k.lower() in p.lower() for k in keys) / len(keys)
    if source == "pubmed-rct" or "ttl_train" in source or "icl" in source:
        label = ref_boxed_or_all(p).strip("\"'").strip()
        want = str(gold[0] if isinstance(gold, list) else gold).strip("\"'").strip()
        return float(bool(re.match(r"^\d+$", label)) and label == want)
    if source in ("lme_train", "longmemeval_s*"):
        reply = judge_reply(question, gold, p).strip().lower()
        return float("yes" in reply and "no" not in reply)
    if source == "perltqa":
        if ";" in gold:
            return sum(part.lower().strip() in p for part in gold.split(";")) / len(gold.split(";"))
        return float(gold.lower() in p.lower())
    if source in ("squad", "hotpotqa"):
        return float(str(gold[0] if isinstance(gold, list) else gold).lower() in p.lower())
    if "eventqa" in source:
        return float(all(g.lower() in p.lower() for g in gold))
    if "detectiveqa" in source:
        return float(gold == ref_boxed_or_all(p))
    golds = [gold] if isinstance(gold, str) else gold  # MemoryAgentBench's substring EM, whole and parsed answer
    return float(max(ref_normalize(g) in ref_normalize(p) or ref_normalize(g) in ref_normalize(ref_answer_line(p))
                     for g in golds))


# (prediction, gold as the data holds it, data source, authors' value)
ANSWERS = [
    ("It was the Marsh Lights.", ["Marsh Lights"], "ruler_qa1_197K", 1.0),
    ("Answer: the marsh-lights!", ["Marsh Lights"], "ruler_qa2_421K", 0.0),  # "marshlights" is one word
    ("Answer: The Marsh, Lights", ["marsh lights"], "ruler_qa1_197K", 1.0),
    ("I think so.\nAnswer: Colton", ["Hulport", "colton"], "ruler_qa1_197K", 1.0),
    ("Kema", ["Kema Dulia"], "ruler_qa1_197K", 0.0),
    ("Kema met Pasis near the river.", ["Kema", "river", "boat", "Colton"], "infbench_sum_eng_shots2", 0.5),
    ("kema", ["Kema", "river"], "infbench_sum_eng_shots2", 0.5),
    ("Kema and the river.", "Kema, river, boat", "infbench_sum_eng_shots2", 2 / 3),
    ("Kema went to Colton and met Pasis.", "Kema, Colton,Pasis , Gorham", "booksum", 0.75),
    ("Tea and cake", "tea; cake; jam", "perltqa", 1 / 3),  # only the gold side is lower-cased
    ("tea and cake", "tea;jam;", "perltqa", 2 / 3),  # the empty part is found
    ("TEA", "tea", "perltqa", 1.0),
    ("The label is \\boxed{3}.", ["3"], "pubmed-rct", 1.0),
    ("\\boxed{ '3' }", ["3"], "icl_banking77_5900shot_balance", 1.0),
    ("\\boxed{3 or 4}", ["3"], "pubmed-rct", 0.0),
    ("3", ["4", "3"], "pubmed-rct", 0.0),  # the first gold only
    ("He works for Quovex.", ["Plixon", "Quovex"], "squad", 0.0),
    ("He works for QUOVEX.", ["quovex"], "hotpotqa", 1.0),
    ("<think>Quovex?</think>No idea.", ["Quovex"], "squad", 0.0),
    ("<think>Quovex is it", ["Quovex"], "squad", 0.0),  # "Empty"
    ("<think>a</think>Quovex</think>later", ["Quovex"], "squad", 1.0),
    ("Quovex</think>", ["Quovex"], "squad", 0.0),  # nothing after the closing tag
    ("Kema met Dulia in Colton", ["dulia", "colton"], "eventqa_full", 1.0),
    ("Kema met Dulia", ["dulia", "colton"], "eventqa_full", 0.0),
    ("The culprit is \\boxed{B}", "B", "detectiveqa", 1.0),
    ("The culprit is B", "B", "detectiveqa", 0.0),
]


@pytest.mark.parametrize("prediction, gold, source, value", ANSWERS)
def test_answers_score_as_the_authors_code_scores_them(prediction, gold, source, value):
    assert authors_score(prediction, gold, source) == pytest.approx(value)
    answers = gold if isinstance(gold, list) else [gold]
    assert score_answer(prediction, answers, source, variant="authors_code") == pytest.approx(value)


def test_answer_scoring_where_the_paper_variant_departs():
    assert score_answer("3", ["4", "3"], "pubmed-rct") == 1.0  # any gold
    assert score_answer("He works for Quovex.", ["Plixon", "Quovex"], "squad") == 1.0
    assert score_answer("Tea and cake", ["tea; cake; jam"], "perltqa") == pytest.approx(2 / 3)  # both lower-cased
    assert score_answer("tea and cake", ["tea;jam;"], "perltqa") == 0.5  # the empty part dropped
    assert score_answer("nothing", ["tea; cake", "nothing"], "perltqa") == 1.0  # best over the golds
    assert metric_for("ruler_qa1_197K") == "normalized" and normalize_answer("The Marsh, Lights!") == "marsh lights"


@pytest.mark.parametrize("source", ["lme_train", "longmemeval_s*", "longmemeval_s"])
def test_longmemeval_is_judged_and_needs_a_judge(source):
    def judge_reply(question, gold, prediction):
        return "Yes." if gold.lower() in prediction.lower() else "No, it does not."

    def memrl_judge(question, gold, prediction):
        return judge_verdict(judge_reply(question, gold, prediction))

    for prediction, value in (("She likes hiking.", 1.0), ("<think>hiking</think>She likes chess.", 0.0)):
        if source != "longmemeval_s":
            assert authors_score(prediction, "hiking", source, "q", judge_reply) == value
        assert score_answer(prediction, ["hiking"], source, "authors_code", "q", memrl_judge) == value
    assert judge_verdict("Yes, but not entirely") == 0.0  # "no" within "not"
    with pytest.raises(ValueError, match="LLM judge"):
        score_answer("x", ["x"], source)


# -- BM25, restated -------------------------------------------------------------------------------------------------
def ref_tokens(text):
    return re.findall(r"\b\w+\b", text.lower())


def ref_bm25_okapi(corpus, query, k1=1.5, b=0.75, epsilon=0.25):
    """BM25Okapi's scores: idf ln(N - n + 0.5) - ln(n + 0.5), negative ones raised to epsilon x the mean idf."""
    n_docs = len(corpus)
    avgdl = sum(len(d) for d in corpus) / n_docs
    df = {}  # documents holding each word, words in order of first appearance
    for doc in corpus:
        for word in dict.fromkeys(doc):
            df[word] = df.get(word, 0) + 1
    idf = {w: math.log(n_docs - n + 0.5) - math.log(n + 0.5) for w, n in df.items()}
    floor = epsilon * (sum(idf.values()) / len(idf))  # ZeroDivisionError when no document holds a word, as theirs
    idf = {w: (floor if v < 0 else v) for w, v in idf.items()}
    scores = []
    for doc in corpus:
        tf = Counter(doc)
        scores.append(sum((idf.get(q) or 0) * (tf[q] * (k1 + 1) / (tf[q] + k1 * (1 - b + b * len(doc) / avgdl)))
                          for q in query))
    return scores


def authors_top(texts, query, top_k):
    if not texts or not query.strip() or not ref_tokens(query):
        return []
    scores = ref_bm25_okapi([ref_tokens(t) for t in texts], ref_tokens(query))
    return sorted(range(len(texts)), key=lambda i: scores[i], reverse=True)[:top_k]


BM25_CASES = [
    (["Kema works for Quovex.", "Dulia sings.", "Quovex makes rockets.", "Q3 revenue was 9 million."], "Kema Quovex"),
    (["alpha beta", "gamma delta", "epsilon"], "zebra"),  # nothing shared: all score 0, stored order
    (["same words", "same words", "other"], "same"),  # a tie keeps stored order
    (["a a a b", "a b", "b", "c"], "a b b"),  # repeated query words count each time
    (["x y", "x y", "x y"], "x"),  # every item holds it: negative idf raised to the (negative) floor
    (["one two three", "two three four", "three four five", "five"], "three five"),
]


@pytest.mark.parametrize("texts, query", BM25_CASES)
def test_bm25_top_matches_bm25okapi(texts, query):
    expected = ref_bm25_okapi([ref_tokens(t) for t in texts], ref_tokens(query))
    assert bm25_okapi_scores(texts, query) == pytest.approx(expected, abs=1e-12)
    assert bm25_top(texts, query, 3) == authors_top(texts, query, 3)
    try:
        from rank_bm25 import BM25Okapi
    except ImportError:
        return
    oracle = BM25Okapi([ref_tokens(t) for t in texts]).get_scores(ref_tokens(query))
    assert bm25_okapi_scores(texts, query) == pytest.approx(list(oracle), abs=1e-12)


def test_bm25_top_edges():
    assert bm25_top(["alpha beta", "gamma"], "zebra", 5) == [0, 1]  # zero-score items are returned
    assert bm25_top(["Kema", "Quovex"], "   ", 5) == [] and bm25_top(["Kema"], "?!", 5) == []
    assert bm25_top([], "Kema", 5) == []
    assert bm25_top(["...", "!!"], "Kema", 1) == [0]  # no word anywhere: stored order
    with pytest.raises(ZeroDivisionError):
        ref_bm25_okapi([[], []], ["kema"])  # where theirs cannot build an index
