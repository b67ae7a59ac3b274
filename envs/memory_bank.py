"""memrl/MemoryBank-v0: Memory-R1's memory bank, written by its Memory Manager and read by its Answer Agent.

Memory-R1 (arXiv 2508.19828) splits a memory agent in two, each trained with an outcome reward while the other is
fixed. The env plays either part, by its `role` option:

- role="manager" (paper section 3.1, Alg. 5). A conversation arrives turn by turn. Each turn's facts (given with a
  synthetic task) are held against the speaker's bank: the entries BM25 ranks highest for each fact
  (`manager_top_k`, pooled without repeats) are shown under temporary ids "0", "1", ... (mem0 shows them so, as no
  model copies real ids faithfully), with the facts, in Memory-R1's manager prompt wrapped as mem0 wraps it
  (`manager_prompt`). The reply is mem0's JSON {"memory": [{"id", "text", "event", "old_memory"}]}; its events are
  applied as mem0 applies them (`apply_events`): ADD a new entry, UPDATE or DELETE the entry of a shown id, NONE (or
  anything else) nothing; an item without text, an unknown id or a reply that is not that JSON changes nothing. A
  turn without facts asks nothing. After the last turn the frozen Answer Agent (`answerer`) answers each question
  from the bank, and every manager call shares the episode's reward: the mean exact match of those answers (eq. 2).
- role="answer" (section 3.2, Alg. 2). One question per episode (reset seed i: one of task i's questions, drawn
  from i). The bank is written first, by the scripted expert manager or, with `banks_dir`, loaded from
  the banks a manager run wrote with `dump_dir`; the observation is Memory-R1's answer prompt with the top
  `answer_top_k` entries of each speaker's bank for the question, the reply's text after its last "**Answer:**" is
  the answer, and its reward is that answer's exact match (eq. 7).

The synthetic task (`make_bank_task`) is a conversation about fictional friends whose homes and employers change
between sessions: a bank that keeps the old fact beside the new one, rather than updating it, holds both, and the
questions ask for the current one. Exact match is SQuAD's (memrl_envs.qa_metrics.em).

info on reset and every step: phase ("manage", "answer" or "done"), role, turn (index of the turn the observation
is about), num_turns, speaker, facts (the turn's), shown (the temporary ids' entry ids), banks (every bank as data);
each manager step adds events (counts of the reply's applied ADD, UPDATE, DELETE and NONE items, and of items that
changed nothing: "skipped") and parsed (whether the reply was the JSON). The final info adds answers, golds,
row_rewards (each call's reward) and metrics: em, entries, adds, updates, deletes, nones, skipped, parse_failures,
stale_entries (entries that state a value the conversation later changed). With dump_dir set, each finished manager
episode's banks are written there as JSON.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import asdict, dataclass, fields
from datetime import datetime
from pathlib import Path
from typing import ClassVar

import gymnasium as gym

from memrl.engines.remote import chat_client
from memrl.preflight import service_missing, typed_config
from memrl_envs.memory_store import bm25_top
from memrl_envs.multihop import CITIES, COMPANIES, PEOPLE
from memrl_envs.qa_metrics import em
from memrl_envs.text_space import printable, text_space

ROLES = ("manager", "answer")
"""Which of Memory-R1's two agents the policy is."""
EXPERT_REPLIES = ("full", "changes")
"""How the scripted expert manager writes its JSON: every shown entry with its event, as the paper's examples do, or
its changes alone (ADD and UPDATE items; mem0 leaves an entry no item names as it is)."""
PROMPTS = ("paper", "brief")
"""The prompts either role can see: the paper's, or its data alone (the entries, facts or memories, and question)."""

MANAGER_PROMPT = """You are a smart memory manager which controls the memory of a system.
You can perform four operations: (1) add into the memory, (2) update the
memory, (3) delete from the memory, and (4) no change.

Based on the above four operations, the memory will change.

Compare newly retrieved facts with the existing memory. For each new fact,
decide whether to:
- ADD: Add it to the memory as a new element
- UPDATE: Update an existing memory element
- DELETE: Delete an existing memory element
- NONE: Make no change (if the fact is already present or irrelevant)

1. **Add**: If the retrieved facts contain new information not present
in the memory, then you have to add it by generating a new ID in the id field.

- Example:
    Old Memory:
        [
            {"id" : "0", "text" : "User is a software engineer"}
        ]
    Retrieved facts: ["Name is John"]

    New Memory:
        {
            "memory" : [
                {"id" : "0", "text" : "User is a software engineer", "event" : "NONE"},
                {"id" : "1", "text" : "Name is John", "event" : "ADD"}
            ]
        }
2. **Update**: If the retrieved facts contain information that is already
present in the memory but the information is totally different, then
you have to update it.

If the retrieved fact contains information that conveys the same thing as
the memory, keep the version with more detail.

Example (a) \u2013 if the memory contains "User likes to play cricket" and the
retrieved fact is "Loves to play cricket with friends", then update the
memory with the retrieved fact.

Example (b) \u2013 if the memory contains "Likes cheese pizza" and the
retrieved fact is "Loves cheese pizza", then do NOT update it because they
convey the same information.

Important: When updating, keep the same ID and preserve old_memory.

- Example:
    Old Memory:
        [
            {"id" : "0", "text" : "I really like cheese pizza"},
            {"id" : "2", "text" : "User likes to play cricket"}
        ]
    Retrieved facts: ["Loves chicken pizza", "Loves to play cricket with friends"]

    New Memory:
        {
        "memory" : [
            {"id" : "0", "text" : "Loves cheese and chicken pizza", "event" : "UPDATE",
             "old_memory" : "I really like cheese pizza"},
            {"id" : "2", "text" : "Loves to play cricket with friends", "event" : "UPDATE",
             "old_memory" : "User likes to play cricket"}
        ]
        }

3. **Delete**: If the retrieved facts contain information that contradicts
the memory, delete it. When deleting, return the same IDs \u2014 do not generate new IDs.

- Example:
    Old Memory:
        [
            {"id" : "1", "text" : "Loves cheese pizza"}
        ]
    Retrieved facts: ["Dislikes cheese pizza"]

    New Memory:
        {
        "memory" : [
            {"id" : "1", "text" : "Loves cheese pizza", "event" : "DELETE"}
        ]
        }

4. **No Change**: If the retrieved facts are already present, make no change.

- Example:
    Old Memory:
        [
            {"id" : "0", "text" : "Name is John"}
        ]
    Retrieved facts: ["Name is John"]

    New Memory:
        {
        "memory" : [
            {"id" : "0", "text" : "Name is John", "event" : "NONE"}
        ]
        }"""
"""Memory-R1's Memory Manager prompt (paper figures 9 and 10), mem0's update prompt condensed."""

MANAGER_CURRENT = ("Below is the current content of my memory which I have collected till now. You have to update it "
                   "in the following format only:\n\n```\n{memories}\n```")
MANAGER_EMPTY = "Current memory is empty."
MANAGER_FACTS = ("The new retrieved facts are mentioned in the triple backticks. You have to analyze the new retrieved "
                 "facts and determine whether these facts should be added, updated, or deleted in the memory.\n\n"
                 "```\n{facts}\n```")
MANAGER_SCHEMA = """You must return your response in the following JSON structure only:

{
    "memory" : [
        {
            "id" : "<ID of the memory>",                # Use existing ID for updates/deletes, or new ID for additions
            "text" : "<Content of the memory>",         # Content of the memory
            "event" : "<Operation to be performed>",    # Must be "ADD", "UPDATE", "DELETE", or "NONE"
            "old_memory" : "<Old memory content>"       # Required only if the event is "UPDATE"
        },
        ...
    ]
}

Follow the instruction mentioned below:
- Do not return anything from the custom few shot prompts provided above.
- If the current memory is empty, then you have to add the new retrieved facts to the memory.
- You should return the updated memory in only JSON format as shown below. The memory key should be the same if no \
changes are made.
- If there is an addition, generate a new key and add the new memory corresponding to it.
- If there is a deletion, the memory key-value pair should be removed from the memory.
- If there is an update, the ID key should remain the same and only the value needs to be updated.

Do not return anything except the JSON format."""
"""mem0's wrapper around the update prompt (mem0/configs/prompts.py, get_update_memory_messages): the shown entries,
the facts, the JSON schema and its rules."""

ANSWER_PROMPT = """You are an intelligent memory assistant tasked with retrieving accurate information from \
conversation memories.

# CONTEXT:
You have access to memories from two speakers in a conversation. These memories contain timestamped information \
that may be relevant to answering the question.

# INSTRUCTIONS:
1. Carefully analyze all provided memories from both speakers
2. Pay special attention to the timestamps to determine the answer
3. If the question asks about a specific event or fact, look for direct evidence
4. If the memories contain contradictory information, prioritize the most recent memory
5. If there is a question about time references (like "last year", "two months ago"), calculate the actual date \
based on the memory timestamp.
6. Always convert relative time references to specific dates, months, or years.
7. Focus only on the content of the memories. Do not confuse character names
8. The answer should be less than 5-6 words.
9. IMPORTANT: Select memories you found that are useful for answering the questions, and output it before you answer \
questions.
10. IMPORTANT: Output the final answer after **Answer:**

# APPROACH (Think step by step):
1. Examine all relevant memories
2. Examine the timestamps carefully
3. Look for explicit mentions that answer the question
4. Convert relative references if needed
5. Formulate a concise answer
6. Double-check the answer correctness
7. Ensure the final answer is specific
8. First output the memories that you found are important before you answer questions

{memories}

Question: {question}"""
"""Memory-R1's Answer Agent prompt (paper figure 11): mem0's answer prompt with the memory distillation steps."""
BRIEF_ANSWER_PROMPT = "{memories}\n\nQuestion:\n\u2022 {question}"
"""The answer prompt with prompt="brief": the memories and the question, without the instructions. The question is
the asked fact's opening in the entries' own words (BRIEF_QUESTIONS) after the bullet the selected memory starts
with, so the expert's reply is a copy of the question, completed by a copy of an entry."""
ANSWER_MARK = "**Answer:**"
"""The answer is the text after the last of these (the prompt's instruction 10)."""
SELECTED_MARK = "**Memories selected as relevant:**"
"""What the paper's case study writes before the memories it keeps (the expert writes it too)."""


# -- the bank ------------------------------------------------------------------------------------


@dataclass
class Entry:
    """One memory: its text and the time of the turn that wrote it last."""

    text: str
    timestamp: str


class MemoryBank:
    """One speaker's memories by id (a counter: "m0", "m1", ...), in the order they were first added."""

    def __init__(self, entries: dict[str, Entry] | None = None, next_id: int = 0):
        self.entries: dict[str, Entry] = dict(entries or {})
        self._next = next_id

    def add(self, text: str, timestamp: str) -> str:
        memory_id = f"m{self._next}"
        self._next += 1
        self.entries[memory_id] = Entry(text, timestamp)
        return memory_id

    def search(self, query: str, top_k: int) -> list[str]:
        """Ids of the `top_k` entries with the highest Okapi BM25 score for `query`, ties in the order the entries
        were added (memrl_envs.memory_store.bm25_top; like an embedding search, it fills `top_k` with the entries
        nearest, however far)."""
        ids = list(self.entries)
        return [ids[i] for i in bm25_top([self.entries[i].text for i in ids], query, top_k)]

    def to_dict(self) -> dict:
        return {"next_id": self._next, "entries": {k: asdict(v) for k, v in self.entries.items()}}

    @classmethod
    def from_dict(cls, data: dict) -> MemoryBank:
        return cls({k: Entry(**v) for k, v in data["entries"].items()}, data["next_id"])


def shown_entries(bank: MemoryBank, facts: list[str], top_k: int) -> list[str]:
    """The entry ids the manager is shown for a turn's facts: each fact's BM25 top `top_k`, pooled in order without
    repeats (mem0 searches once per fact and merges the hits by id)."""
    shown: list[str] = []
    for fact in facts:
        shown += [i for i in bank.search(fact, top_k) if i not in shown]
    return shown


def manager_prompt(bank: MemoryBank, shown: list[str], facts: list[str], prompt: str = "paper") -> str:
    """The manager's one user message: Memory-R1's prompt, then (as mem0 writes them, Python reprs) the shown entries
    under temporary ids "0", "1", ... and the facts, then mem0's JSON schema. prompt="brief" keeps the facts and the
    entries only, facts first (a model that learned the reply by SFT needs no instructions, and a small one copies a
    value from the first place a person and relation appear: the new fact's, not the stale entry's)."""
    old = [{"id": str(k), "text": bank.entries[i].text} for k, i in enumerate(shown)]
    current = MANAGER_CURRENT.format(memories=old) if old else MANAGER_EMPTY
    parts = [current, MANAGER_FACTS.format(facts=list(facts))]
    return "\n\n".join([MANAGER_PROMPT, *parts, MANAGER_SCHEMA] if prompt == "paper" else parts[::-1])


_FENCE = re.compile(r"^```[a-zA-Z0-9]*\n([\s\S]*?)\n```$")


def strip_fence(text: str) -> str:
    """The reply without a code fence around all of it (mem0's remove_code_blocks), stripped."""
    match = _FENCE.match(text.strip())
    return match.group(1).strip() if match else text.strip()


def parse_events(reply: str) -> list | None:
    """The items of the reply's {"memory": [...]} (None when the reply is not a JSON object, as mem0 then applies
    nothing); a "memory" that is missing gives no items."""
    try:
        parsed = json.loads(strip_fence(reply))
    except ValueError:
        return None
    if not isinstance(parsed, dict):
        return None
    items = parsed.get("memory", [])
    return items if isinstance(items, list) else None


def apply_events(bank: MemoryBank, items: list, shown: list[str], timestamp: str) -> dict[str, int]:
    """Apply the manager's items to `bank` as mem0's add() does, each on its own: an item without text is skipped;
    ADD inserts its text; UPDATE replaces the text of the entry shown under its id; DELETE removes that entry; NONE
    and other events change nothing. An UPDATE or DELETE whose id was not shown (or whose entry an earlier item of
    the reply removed) changes nothing. Returns the counts of applied adds, updates, deletes and nones, and of
    skipped items."""
    counts = {"adds": 0, "updates": 0, "deletes": 0, "nones": 0, "skipped": 0}
    temp = {str(k): memory_id for k, memory_id in enumerate(shown)}
    for item in items:
        text = item.get("text") if isinstance(item, dict) else None
        if not text or not isinstance(text, str):
            counts["skipped"] += 1
            continue
        event = item.get("event")
        if event == "ADD":
            bank.add(text, timestamp)
            counts["adds"] += 1
        elif event in ("UPDATE", "DELETE"):
            memory_id = temp.get(item.get("id")) if isinstance(item.get("id"), str) else None
            if memory_id not in bank.entries:
                counts["skipped"] += 1
            elif event == "UPDATE":
                bank.entries[memory_id] = Entry(text, timestamp)
                counts["updates"] += 1
            else:
                del bank.entries[memory_id]
                counts["deletes"] += 1
        else:
            counts["nones"] += 1
    return counts


def answer_prompt(banks: dict[str, MemoryBank], question: str, top_k: int, prompt: str = "paper") -> str:
    """The Answer Agent's one message: each speaker's `top_k` entries for the question (BM25 order), as
    "Memories for user NAME:" and "- TIMESTAMP: TEXT" lines, under Memory-R1's answer prompt (prompt="brief": the
    memories and the question alone)."""
    blocks = []
    for speaker, bank in banks.items():
        lines = [f"- {bank.entries[i].timestamp}: {bank.entries[i].text}" for i in bank.search(question, top_k)]
        blocks.append("\n".join([f"Memories for user {speaker}:", *lines]))
    template = ANSWER_PROMPT if prompt == "paper" else BRIEF_ANSWER_PROMPT
    return template.format(memories="\n\n".join(blocks), question=question)


def parse_answer(reply: str) -> str:
    """The text after the reply's last "**Answer:**", stripped (the whole reply when it has none)."""
    return reply.rsplit(ANSWER_MARK, 1)[-1].strip()


# -- the synthetic task ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Turn:
    """One turn of the conversation: who speaks, when, what is said and the facts worth keeping from it."""

    speaker: str
    timestamp: str
    text: str
    facts: tuple[str, ...]


@dataclass(frozen=True)
class BankTask:
    """A conversation, then questions about what holds at its end."""

    instance_id: str
    turns: tuple[Turn, ...]
    questions: tuple[tuple[str, tuple[str, ...]], ...]
    """(question, gold answers) pairs."""
    asked: tuple[tuple[str, str], ...] = ()
    """(kind, person) of the fact each question asks for ("lives" or "works")."""
    stale: tuple[str, ...] = ()
    """Facts the conversation states and later changes."""


@dataclass(frozen=True)
class BankGeneratorConfig:
    """Knobs of the synthetic conversations (`make_bank_task`)."""

    num_people: int = 3
    """Friends the user talks about; each has a home city and an employer."""
    num_turns: int = 6
    """Turns (sessions) of the conversation."""
    change_share: float = 0.5
    """Share of the friends' facts that change in a later turn (a move, a new job)."""
    small_talk_share: float = 0.2
    """Share of turns that are small talk only (no facts: the manager is not asked)."""
    num_questions: int = 2
    """Questions per task, on the facts that changed first."""

    def __post_init__(self) -> None:
        for name in ("num_people", "num_turns", "num_questions"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"BankGeneratorConfig.{name} must be an int >= 1, got {value!r}")
        for name in ("change_share", "small_talk_share"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
                raise ValueError(f"BankGeneratorConfig.{name} must be a number in [0, 1), got {value!r}")
        if self.num_questions > 2 * self.num_people:
            raise ValueError(f"BankGeneratorConfig.num_questions={self.num_questions} is more than the "
                             f"{2 * self.num_people} facts of {self.num_people} people")


SPEAKER = "User"
"""The speaker of the synthetic conversations (one bank)."""
_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
           "November", "December")
_SMALL_TALK = ("The weather has been lovely this week.", "I finally finished the book I was reading.",
               "Dinner last night was a bit too salty.", "Traffic was terrible this morning.")
_SAYS = {"lives": ("{p} lives in {v}.", "{p} just moved from {old} to {v}."),
         "works": ("{p} works for {v}.", "{p} left {old} and now works for {v}.")}
FACT = {"lives": "{p} lives in {v}", "works": "{p} works for {v}"}
"""The canonical text of each kind of fact (what the manager is given, and the scripted expert writes)."""
_FACT_RE = {kind: re.compile("^" + text.replace("{p}", "(?P<p>.+?)").replace("{v}", "(?P<v>.+)") + "$")
            for kind, text in FACT.items()}
QUESTIONS = {"lives": "In which city does {p} live?", "works": "Which company does {p} work for?"}
BRIEF_QUESTIONS = {kind: text.removesuffix(" {v}") for kind, text in FACT.items()}
"""The questions with prompt="brief": the fact's text up to its value ("Dulia lives in")."""


def _stamp(rng: random.Random, day: int) -> str:
    """A LoCoMo-style time ("7:20 pm on 16 June, 2023") on day `day` from the start of 2023 (months of 28 days)."""
    month, date = divmod(day, 28)
    hour, minute = rng.randrange(8, 22), rng.randrange(60)
    year = 2023 + month // 12
    return f"{(hour - 1) % 12 + 1}:{minute:02d} {'am' if hour < 12 else 'pm'} on {date + 1} {_MONTHS[month % 12]}, {year}"


def when(timestamp: str) -> datetime:
    """The time a LoCoMo-style timestamp ("7:20 pm on 16 June, 2023") names."""
    return datetime.strptime(timestamp, "%I:%M %p on %d %B, %Y")


def make_bank_task(seed: int, config: BankGeneratorConfig | None = None) -> BankTask:
    """The conversation of `seed`: the friends' facts told over the turns, some of them changed in later turns (a
    move from one city to another, a new employer), small talk in between; questions ask for facts that changed (then
    for others), whose answer is the last value told. The same seed and config give the same task."""
    config = config or BankGeneratorConfig()
    rng = random.Random(f"memory-r1-{seed}")
    people = rng.sample(PEOPLE, config.num_people)
    values = {"lives": rng.sample(CITIES, 2 * config.num_people), "works": rng.sample(COMPANIES, 2 * config.num_people)}
    facts = [(kind, p, values[kind][i]) for i, p in enumerate(people) for kind in ("lives", "works")]
    rng.shuffle(facts)
    changes = facts[:round(config.change_share * len(facts))]
    talk = [rng.random() < config.small_talk_share for _ in range(config.num_turns)]
    fact_turns = [t for t in range(config.num_turns) if not talk[t]] or [config.num_turns - 1]
    first = fact_turns[: max(1, len(fact_turns) // 2)]
    # Each fact is told in a turn of the first half; each change in a later turn that tells facts.
    told = {t: [] for t in range(config.num_turns)}
    for k, fact in enumerate(facts):
        told[first[k % len(first)]].append(("told", fact, None))
    for k, (kind, p, old) in enumerate(changes):
        new = values[kind][config.num_people + people.index(p)]
        start = fact_turns.index(first[facts.index((kind, p, old)) % len(first)]) + 1
        later = fact_turns[start:]
        if not later:
            continue
        told[later[k % len(later)]].append(("changed", (kind, p, new), old))
    current = {(kind, p): v for kind, p, v in facts}
    turns, stale, day = [], [], rng.randrange(0, 300)
    for t in range(config.num_turns):
        said, kept = [], []
        for what, (kind, p, v), old in told[t]:
            said.append(_SAYS[kind][what == "changed"].format(p=p, v=v, old=old))
            kept.append(FACT[kind].format(p=p, v=v))
            if what == "changed":
                stale.append(FACT[kind].format(p=p, v=old))
                current[(kind, p)] = v
        if not said:
            said = [rng.choice(_SMALL_TALK)]
        turns.append(Turn(SPEAKER, _stamp(rng, day), " ".join(said), tuple(kept)))
        day += rng.randrange(1, 20)
    changed = [(kind, p) for t in range(config.num_turns) for what, (kind, p, _), _ in told[t] if what == "changed"]
    asked = list(dict.fromkeys(changed + [(kind, p) for kind, p, _ in facts]))[: config.num_questions]
    questions = tuple((QUESTIONS[kind].format(p=p), (current[(kind, p)],)) for kind, p in asked)
    return BankTask(f"memory-r1-{seed}", tuple(turns), questions, tuple(asked), tuple(stale))


def read_fact(text: str) -> tuple[str, str, str] | None:
    """(kind, person, value) of a fact written in the canonical form FACT, else None."""
    for kind, pattern in _FACT_RE.items():
        match = pattern.match(text.strip().rstrip("."))
        if match:
            return kind, match.group("p"), match.group("v")
    return None


def expert_events(bank: MemoryBank, shown: list[str], facts: list[str], update: bool = True) -> list[dict]:
    """The items a careful manager writes for a turn (over canonical facts): every shown entry NONE unless a fact
    changes it, then UPDATE (keeping its id, its old text as old_memory), a fact already held NONE, a new fact ADD
    under the next free id. With update=False an entry a fact changes stays (NONE) and the fact is added beside it:
    the stale fact is kept, as a manager that never updates keeps it."""
    items = [{"id": str(k), "text": bank.entries[i].text, "event": "NONE"} for k, i in enumerate(shown)]
    for fact in facts:
        said = read_fact(fact)
        same = [it for it in items if it["text"] == fact]
        if same:
            continue
        old = next((it for it in items if said and it["event"] == "NONE" and (read := read_fact(it["text"]))
                    and read[:2] == said[:2]), None)
        if old is not None and update:
            old.update(text=fact, event="UPDATE", old_memory=old["text"])
        else:
            items.append({"id": str(len(items)), "text": fact, "event": "ADD"})
    return items


def expert_answer(gold: str, selected: list[str]) -> str:
    """The Answer Agent's reply the expert writes, as the paper's case study shows one: the memories it selected
    ("TIMESTAMP: TEXT", or the text alone with prompt="brief"), then the answer after the mark."""
    return "\n".join([SELECTED_MARK, *(f"\u2022 {line}" for line in selected), f"{ANSWER_MARK} {gold}"])


# -- the env ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MemoryBankConfig:
    """Knobs of MemoryBank-v0 (the synthetic conversations' own are BankGeneratorConfig's)."""

    role: str = "manager"
    """One of ROLES: the policy is the Memory Manager (writes the bank turn by turn) or the Answer Agent (answers one
    question from a written bank)."""
    answerer: str | None = None
    """role="manager": the frozen Answer Agent that answers from the finished bank (its exact match is the reward):
    an http(s):// OpenAI-compatible API base (".../v1") or "actor:NAME" (a Ray actor with an answer() method,
    memrl.engines.chat.start_chat_server); None ends the episode after the last turn without answers or reward."""
    answerer_model: str = "default"
    """Model name sent to an HTTP answerer."""
    answerer_max_tokens: int = 2048
    """Reply tokens an HTTP answerer may write (Memory-R1's response length); it answers greedily, as Memory-R1
    evaluates."""
    answerer_timeout_s: float = 300.0
    """Deadline of one episode's answers (one question over HTTP; all of them through an actor)."""
    answerer_retries: int = 2
    """Times an HTTP request is asked again when the server cannot be reached or answers 5xx."""
    manager_top_k: int = 5
    """Entries shown to the manager per fact (mem0 searches 5 per fact)."""
    answer_top_k: int = 30
    """Entries of each speaker's bank shown to the Answer Agent (Memory-R1: 30 per speaker, 60 in all)."""
    banks_dir: str | None = None
    """role="answer": the banks a manager wrote (a dump_dir); a task without one there is an error. None: the
    scripted expert manager writes the bank."""
    expert_update_rate: float = 1.0
    """Chance that the scripted expert manager (expert_action, and role="answer" banks) updates the facts a turn
    changes; otherwise it adds them beside the old ones, as a manager that never updates does (the same choice for
    the same task and turn). Below 1, an imperfect teacher whose SFT student RL can improve."""
    expert_recency_rate: float = 1.0
    """Chance that the scripted Answer Agent (role="answer" expert_action) answers from the most recent entry that
    states the asked fact; otherwise from the first one shown (as an agent that ignores the timestamps does; the same
    choice for the same question). Below 1, with banks that keep stale facts, an imperfect teacher."""
    expert_reply: str = "full"
    """One of EXPERT_REPLIES: the scripted expert manager lists every shown entry ("full"), or its changes alone
    ("changes": a shorter reply with the same effect on the bank)."""
    prompt: str = "paper"
    """One of PROMPTS: Memory-R1's prompts ("paper"), or their data alone ("brief": the facts then the entries for
    the manager, the memories and question for the Answer Agent), for a small model that learned the replies by SFT.
    With "brief" the question is the fact's opening (BRIEF_QUESTIONS) and the expert's selected memory its text
    without the timestamp: both are then found by copying, what a small model learns first."""
    max_action_chars: int = 20_000
    """Replies are cut to this many printable characters before they are parsed."""
    dump_dir: str | None = None
    """role="manager": each finished episode's banks (and answers) are written there as <instance_id>.json."""
    seed_offset: int = 0
    """Task seed = reset seed + seed_offset."""

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"MemoryBankConfig.role must be one of {ROLES}, got {self.role!r}")
        if self.answerer is not None and not (isinstance(self.answerer, str)
                                              and self.answerer.startswith(("http://", "https://", "actor:"))):
            raise ValueError(f"MemoryBankConfig.answerer must be an http(s):// URL, 'actor:NAME' or None, got "
                             f"{self.answerer!r}")
        if self.role == "answer" and self.answerer is not None:
            raise ValueError("MemoryBankConfig: role='answer' makes the policy the Answer Agent; answerer must be None")
        if self.role == "manager" and self.banks_dir is not None:
            raise ValueError("MemoryBankConfig: banks_dir gives role='answer' its banks; the manager writes its own")
        for name, low in (("manager_top_k", 1), ("answer_top_k", 1), ("max_action_chars", 1),
                          ("answerer_max_tokens", 1), ("answerer_retries", 0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"MemoryBankConfig.{name} must be an int >= {low}, got {value!r}")
        if not self.answerer_timeout_s > 0:
            raise ValueError(f"MemoryBankConfig.answerer_timeout_s must be > 0, got {self.answerer_timeout_s!r}")
        for name in ("expert_update_rate", "expert_recency_rate"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
                raise ValueError(f"MemoryBankConfig.{name} must be a number in [0, 1], got {value!r}")
        if self.expert_reply not in EXPERT_REPLIES:
            raise ValueError(f"MemoryBankConfig.expert_reply must be one of {EXPERT_REPLIES}, got {self.expert_reply!r}")
        if self.prompt not in PROMPTS:
            raise ValueError(f"MemoryBankConfig.prompt must be one of {PROMPTS}, got {self.prompt!r}")


class MemoryBankEnv(gym.Env):
    """Memory-R1's manager or answer episodes over memory banks (see the module docstring)."""

    metadata: ClassVar[dict] = {"render_modes": []}

    def __init__(self, **kwargs):
        """`kwargs` are MemoryBankConfig and BankGeneratorConfig fields."""
        self.config, self.generator = self._configs(kwargs)
        config = self.config
        self.answerer = None if config.answerer is None else chat_client(
            config.answerer, config.answerer_model, timeout_s=config.answerer_timeout_s,
            retries=config.answerer_retries, temperature=0.0, max_tokens=config.answerer_max_tokens)
        # An answerer in another process is waited on: the runner steps this env off its event loop.
        self.metadata = {**type(self).metadata, "blocking_io": self.answerer is not None}
        self.observation_space = text_space(1 << 24)
        self.action_space = text_space(config.max_action_chars)
        self.task: BankTask | None = None
        self.banks: dict[str, MemoryBank] = {}
        self._done = True

    @staticmethod
    def _configs(options: dict) -> tuple[MemoryBankConfig, BankGeneratorConfig]:
        own, gen = {f.name for f in fields(MemoryBankConfig)}, {f.name for f in fields(BankGeneratorConfig)}
        unknown = sorted(set(options) - own - gen)
        if unknown:
            raise ValueError(f"MemoryBankEnv has no option(s) {unknown}; allowed: {sorted(own | gen)}")
        return (typed_config(MemoryBankConfig, {k: v for k, v in options.items() if k in own}, "MemoryBankEnv"),
                typed_config(BankGeneratorConfig, {k: v for k, v in options.items() if k in gen}, "MemoryBankEnv"))

    @classmethod
    def check_options(cls, options: dict) -> None:
        """Raise ValueError naming an unknown or bad option, without reaching the answerer."""
        cls._configs(options)

    @classmethod
    def check_services(cls, options: dict) -> None:
        """Raise ValueError when the answerer named (actor:NAME or a URL) is not there."""
        config, _ = cls._configs(options)
        if config.answerer is not None and (why := service_missing(config.answerer)):
            raise ValueError(f"MemoryBankEnv answerer={config.answerer!r} is not there: {why}")

    # -- episode ---------------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        if options:
            raise ValueError(f"MemoryBankEnv.reset takes no options, got {sorted(options)}")
        seed = (seed or 0) + self.config.seed_offset
        self.task = make_bank_task(seed, self.generator)
        # The question: drawn from the seed, so that even (training) and odd (held-out) seeds meet every question.
        self._question = (random.Random(f"memory-r1-question-{seed}").randrange(len(self.task.questions))
                          if self.config.role == "answer" else None)
        self.banks = {turn.speaker: MemoryBank() for turn in self.task.turns}
        self._turn, self._shown, self._done = -1, [], False
        self._counts = {"adds": 0, "updates": 0, "deletes": 0, "nones": 0, "skipped": 0, "parse_failures": 0}
        self._calls = 0
        if self.config.role == "answer":
            self._write_bank()
            return self._answer_chat(self._question)[0]["content"], self._info("answer")
        self._next_turn()
        if self._turn >= len(self.task.turns):  # no turn tells a fact: nothing to manage
            raise ValueError(f"MemoryBankEnv: task {self.task.instance_id} has no turn with facts; raise "
                             f"num_turns or lower small_talk_share")
        return self._manager_observation(), self._info("manage")

    def _next_turn(self) -> None:
        """Move to the next turn that tells facts, and pick the entries its prompt shows."""
        self._turn += 1
        while self._turn < len(self.task.turns) and not self.task.turns[self._turn].facts:
            self._turn += 1
        if self._turn < len(self.task.turns):
            turn = self.task.turns[self._turn]
            self._shown = shown_entries(self.banks[turn.speaker], list(turn.facts), self.config.manager_top_k)

    def _manager_observation(self) -> str:
        turn = self.task.turns[self._turn]
        return manager_prompt(self.banks[turn.speaker], self._shown, list(turn.facts), self.config.prompt)

    def _write_bank(self) -> None:
        """role="answer": the bank the question is answered from, loaded from banks_dir or written by the expert."""
        if self.config.banks_dir is not None:
            path = Path(self.config.banks_dir) / f"{self.task.instance_id}.json"
            if not path.is_file():
                raise ValueError(f"MemoryBankEnv: banks_dir={self.config.banks_dir!r} has no bank of task "
                                 f"{self.task.instance_id} ({path.name}); a manager run with dump_dir there writes "
                                 f"one per task it sees")
            saved = json.loads(path.read_text(encoding="utf-8"))["banks"]
            self.banks = {speaker: MemoryBank.from_dict(bank) for speaker, bank in saved.items()}
            return
        for turn in self.task.turns:
            if turn.facts:
                bank = self.banks[turn.speaker]
                shown = shown_entries(bank, list(turn.facts), self.config.manager_top_k)
                apply_events(bank, self._expert_events(bank, shown, turn), shown, turn.timestamp)

    def _question_text(self, index: int) -> str:
        """Question `index` as the Answer Agent reads it (and the bank is searched for): the task's, or with
        prompt="brief" the asked fact's opening (BRIEF_QUESTIONS)."""
        if self.config.prompt == "brief":
            kind, person = self.task.asked[index]
            return BRIEF_QUESTIONS[kind].format(p=person)
        return self.task.questions[index][0]

    def _answer_chat(self, index: int) -> list[dict[str, str]]:
        prompt = answer_prompt(self.banks, self._question_text(index), self.config.answer_top_k, self.config.prompt)
        return [{"role": "user", "content": prompt}]

    def step(self, action: str):
        if self.task is None or self._done:
            raise RuntimeError("MemoryBankEnv.step called after the episode ended; call reset() first")
        reply = printable(action)[: self.config.max_action_chars]
        self._calls += 1
        if self.config.role == "answer":
            _, golds = self.task.questions[self._question]
            answer = parse_answer(reply)
            score = em(answer, list(golds))
            return self._finish(score, [answer], [list(golds)], [score])
        turn = self.task.turns[self._turn]
        items = parse_events(reply)
        counts = apply_events(self.banks[turn.speaker], items or [], self._shown, turn.timestamp)
        self._counts["parse_failures"] += items is None
        for key, value in counts.items():
            self._counts[key] += value
        step_info = {"events": counts, "parsed": items is not None}
        self._next_turn()
        if self._turn < len(self.task.turns):
            return self._manager_observation(), 0.0, False, False, {**self._info("manage"), **step_info}
        golds = [list(g) for _, g in self.task.questions]
        if self.answerer is None:
            return self._finish(0.0, [], golds, None, step_info)
        chats = [self._answer_chat(i) for i in range(len(self.task.questions))]
        try:
            replies = self.answerer.answer(chats)
            if len(replies) != len(chats):
                raise ValueError(f"the answerer gave {len(replies)} replies for {len(chats)} questions")
        except (ConnectionError, TimeoutError, RuntimeError, ValueError) as e:
            # The answerer failing is not the policy's doing: the episode is counted, never trained on.
            info = {**self._info("done"), **step_info, "failure": f"answerer: {e}", "metrics": self._metrics()}
            self._done = True
            return "", 0.0, False, True, info
        answers = [parse_answer(r if isinstance(r, str) else "") for r in replies]
        scores = [em(a, g) for a, g in zip(answers, golds)]
        return self._finish(sum(scores) / len(scores), answers, golds, scores, step_info)

    def _finish(self, reward: float, answers: list[str], golds: list[list[str]], scores: list[float] | None,
                step_info: dict | None = None):
        metrics = self._metrics()
        if scores is not None:
            metrics["em"] = reward
        info = {**self._info("done"), **(step_info or {}), "answers": answers, "golds": golds,
                "row_rewards": [reward] * self._calls, "metrics": metrics}
        self._done = True
        if self.config.dump_dir and self.config.role == "manager":
            self._dump(info)
        return "", reward, True, False, info

    def _metrics(self) -> dict[str, float]:
        texts = [e.text for bank in self.banks.values() for e in bank.entries.values()]
        stale = {read_fact(text) for text in self.task.stale}
        held = [read_fact(text) for text in texts]
        return {"entries": float(len(texts)), "stale_entries": float(sum(f is not None and f in stale for f in held)),
                **{k: float(v) for k, v in self._counts.items()}}

    def expert_action(self) -> str:
        """What the scripted expert writes now: the manager's JSON for the turn (updating a changed fact unless
        expert_update_rate; every shown entry or its changes alone, by expert_reply), or the Answer Agent's reply (_expert_answer)."""
        if self.task is None or self._done:
            raise RuntimeError("MemoryBankEnv.expert_action needs a running episode; call reset() first")
        if self.config.role == "answer":
            return self._expert_answer()
        turn = self.task.turns[self._turn]
        items = self._expert_events(self.banks[turn.speaker], self._shown, turn)
        if self.config.expert_reply == "changes":
            items = [item for item in items if item["event"] != "NONE"]
        return json.dumps({"memory": items})

    def _expert_answer(self) -> str:
        """The scripted Answer Agent: of the shown entries that state the asked fact, the most recent (the prompt's
        instruction 4), or with chance 1 - expert_recency_rate the first shown; it answers with that entry's value
        (the gold when the bank holds no entry of the fact)."""
        question, golds = self._question_text(self._question), self.task.questions[self._question][1]
        asked = self.task.asked[self._question]
        about = [e for bank in self.banks.values() for e in (bank.entries[i] for i in
                                                             bank.search(question, self.config.answer_top_k))
                 if (fact := read_fact(e.text)) and fact[:2] == asked]
        if not about:
            return expert_answer(golds[0], [])
        rng = random.Random(f"expert-answer-{self.task.instance_id}-{self._question}")
        pick = max(about, key=lambda e: when(e.timestamp)) if rng.random() < self.config.expert_recency_rate \
            else about[0]
        selected = pick.text if self.config.prompt == "brief" else f"{pick.timestamp}: {pick.text}"
        return expert_answer(read_fact(pick.text)[2], [selected])

    def _expert_events(self, bank: MemoryBank, shown: list[str], turn: Turn) -> list[dict]:
        rng = random.Random(f"expert-{self.task.instance_id}-{turn.timestamp}")
        return expert_events(bank, shown, list(turn.facts), rng.random() < self.config.expert_update_rate)

    def _info(self, phase: str) -> dict:
        turn = self.task.turns[self._turn] if 0 <= self._turn < len(self.task.turns) else None
        return {"phase": phase, "role": self.config.role, "turn": self._turn, "num_turns": len(self.task.turns),
                "speaker": turn.speaker if turn else None, "facts": list(turn.facts) if turn else [],
                "shown": list(self._shown) if turn else [],
                "banks": {s: b.to_dict() for s, b in self.banks.items()}}

    def _dump(self, info: dict) -> None:
        path = Path(self.config.dump_dir)
        path.mkdir(parents=True, exist_ok=True)
        record = {"instance_id": self.task.instance_id, "config": asdict(self.config), "banks": info["banks"],
                  "answers": info["answers"], "golds": info["golds"], "metrics": info["metrics"]}
        (path / f"{self.task.instance_id}.json").write_text(json.dumps(record, indent=1, ensure_ascii=False))
