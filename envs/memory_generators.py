"""Synthetic Mem-α tasks, one generator per category the paper trains on, each with its difficulty knobs.

- accurate retrieval ("accurate_retrieval"): dated user/assistant exchanges that state facts about fictional
  friends and companies among small talk; questions ask for one fact, or for two chained ("In which city is the
  company that Kema works for based?");
- test-time learning ("test_time_learning"): labelled samples of hidden classes (labels 0-4 stand for themes the
  data never names; each class's samples share its theme words); questions give new samples to label as \\boxed{n};
- long-range understanding ("long_range_understanding"): a story told across the chunks; the question asks for its
  key points and is scored by the share of key words (people, places, objects) the answer names.

Every task is a function of its seed and the config, so the same seed gives the same chunks and questions.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass

from memrl_envs.memory_tasks import MemoryQuestion, MemoryTask
from memrl_envs.multihop import CITIES, COMPANIES, PEOPLE

CATEGORIES = ("accurate_retrieval", "test_time_learning", "long_range_understanding")
"""Task categories (the data_source of the tasks they make)."""
MIXED = "mixed"
"""The category option that takes the categories in turn by seed (seed % 3), as the paper trains on all three."""

THEMES = (
    ("river", "boat", "water", "fish", "bridge", "rain"),
    ("book", "author", "page", "story", "library", "read"),
    ("price", "product", "market", "sale", "coin", "buy"),
    ("mountain", "snow", "climb", "peak", "cold", "rock"),
    ("university", "student", "lesson", "exam", "teacher", "class"),
    ("music", "song", "drum", "voice", "dance", "band"),
    ("garden", "flower", "tree", "seed", "leaf", "grass"),
)
"""Theme words of the hidden classes of test-time learning (a task draws num_classes of them)."""
FILLER = ("the", "a", "with", "and", "near", "of", "some", "new", "old", "big", "small", "one", "two")
"""Words that carry no class and pad samples."""
SMALL_TALK = (
    ("What a long week it has been.", "Rest well this weekend."),
    ("The weather is nice today.", "Enjoy the sun."),
    ("I could not sleep last night.", "Try a short walk before bed."),
    ("Any idea for dinner?", "A warm soup would be nice."),
    ("I finished my book.", "Great, what will you read next?"),
    ("Traffic was terrible this morning.", "That sounds tiring."),
)
"""Exchanges without facts, the distractors of accurate retrieval."""
OBJECTS = ("lamp", "map", "key", "ring", "letter", "compass", "coat", "drum", "seed", "coin", "boat", "book")
"""What the story's people give and find."""


@dataclass(frozen=True)
class MemoryGeneratorConfig:
    """Which category to generate and its difficulty knobs."""

    category: str = "accurate_retrieval"
    """One of CATEGORIES, or MIXED (task i is of category CATEGORIES[i % 3])."""
    num_chunks: int = 6
    """Chunks per task (each one reply of the memory agent)."""
    num_questions: int = 4
    """Questions per task (long-range understanding always asks one)."""
    facts_per_chunk: int = 2
    """Accurate retrieval: exchanges stating a fact in each chunk."""
    small_talk_per_chunk: int = 1
    """Accurate retrieval: exchanges without a fact in each chunk (distractors)."""
    two_fact_share: float = 0.25
    """Accurate retrieval: share of questions that chain two facts (a person's employer, then where it is based)."""
    num_classes: int = 3
    """Test-time learning: hidden classes (labels 0 .. num_classes - 1); at most 5."""
    samples_per_chunk: int = 4
    """Test-time learning: labelled samples in each chunk."""
    theme_words_per_sample: int = 2
    """Test-time learning: theme words in each sample (the rest is filler); fewer words are harder to classify."""
    keywords: int = 6
    """Long-range understanding: key words the summary question asks for (people, places, objects of the story)."""
    filler_per_chunk: int = 1
    """Long-range understanding: sentences without a key word in each chunk."""

    def __post_init__(self) -> None:
        if self.category not in (*CATEGORIES, MIXED):
            raise ValueError(f"MemoryGeneratorConfig.category must be one of {(*CATEGORIES, MIXED)}, got "
                             f"{self.category!r}")
        for name in ("num_chunks", "num_questions", "facts_per_chunk", "samples_per_chunk", "theme_words_per_sample",
                     "keywords"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"MemoryGeneratorConfig.{name} must be an int >= 1, got {value!r}")
        for name in ("small_talk_per_chunk", "filler_per_chunk"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"MemoryGeneratorConfig.{name} must be an int >= 0, got {value!r}")
        if not 0 <= self.two_fact_share <= 1:
            raise ValueError(f"MemoryGeneratorConfig.two_fact_share must be in [0, 1], got {self.two_fact_share!r}")
        if not 2 <= self.num_classes <= 5:
            raise ValueError(f"MemoryGeneratorConfig.num_classes must be 2 to 5, got {self.num_classes!r}")
        if self.theme_words_per_sample > len(THEMES[0]):
            raise ValueError(f"MemoryGeneratorConfig.theme_words_per_sample must be at most {len(THEMES[0])}")
        if self.category in ("accurate_retrieval", MIXED) and self.num_chunks * self.facts_per_chunk > 2 * len(PEOPLE):
            raise ValueError("MemoryGeneratorConfig: num_chunks * facts_per_chunk must be at most "
                             f"{2 * len(PEOPLE)} for accurate retrieval (two facts per person)")


def make_memory_task(seed: int, config: MemoryGeneratorConfig | None = None) -> MemoryTask:
    """The task of `seed` in `config`'s category (with MIXED: in category CATEGORIES[seed % 3])."""
    config = config or MemoryGeneratorConfig()
    category = CATEGORIES[seed % len(CATEGORIES)] if config.category == MIXED else config.category
    rng = random.Random(f"memalpha-{category}-{seed}")
    make = {"accurate_retrieval": _accurate_retrieval, "test_time_learning": _test_time_learning,
            "long_range_understanding": _long_range}[category]
    chunks, questions = make(rng, config)
    return MemoryTask(instance_id=f"{category}-{seed}", prompt="", chunks=tuple(chunks),
                      questions=tuple(questions), data_source=category)


def _stamp(day: int, minute: int) -> str:
    return f"[Day {day}, {minute // 60:02d}:{minute % 60:02d}]"


def _accurate_retrieval(rng: random.Random, config: MemoryGeneratorConfig):
    num_facts = config.num_chunks * config.facts_per_chunk
    people = rng.sample(PEOPLE, (num_facts + 1) // 2 + 1)
    companies = rng.sample(COMPANIES, len(people))
    cities = rng.sample(CITIES, 2 * len(people))
    # Each person has an employer and a home; each employer a base. Facts are told in a random order.
    facts = []
    for i, person in enumerate(people):
        facts.append(("works", person, companies[i]))
        facts.append(("lives", person, cities[i]))
    rng.shuffle(facts)
    facts = facts[:num_facts]
    told = {(kind, person): value for kind, person, value in facts}
    bases = {}
    for kind, person, value in facts:
        if kind == "works":  # the company's base is told right after, in the same exchange
            bases[value] = cities[len(people) + people.index(person)]
    # The note puts a word before the name: a name that opens a text (or a JSON string) is cut into other tokens than
    # the same name after a space, and a small model cannot copy across the two spellings.
    lines = {
        "works": ("My friend {p} just started a job at {v}, which is based in {b}.",
                  "Noted: your friend {p} works for {v}, a company based in {b}."),
        "lives": ("{p} told me they moved to {v} last month.", "Noted: your friend {p} lives in {v} now."),
    }
    chunks, evidence, day = [], {}, 1
    for c in range(config.num_chunks):
        exchanges = [("fact", f) for f in facts[c * config.facts_per_chunk:(c + 1) * config.facts_per_chunk]]
        exchanges += [("talk", rng.choice(SMALL_TALK)) for _ in range(config.small_talk_per_chunk)]
        rng.shuffle(exchanges)
        minute, text = rng.randrange(8 * 60, 12 * 60), []
        for what, item in exchanges:
            if what == "fact":
                kind, person, value = item
                user, assistant = lines[kind]
                fill = {"p": person, "v": value, "b": bases.get(value, "")}
                user, assistant = user.format(**fill), assistant.format(**fill)
                evidence[(kind, person)] = c
            else:
                user, assistant = item
            text.append(f"{_stamp(day, minute)} User: {user}\nAssistant: {assistant}")
            minute += rng.randrange(5, 90)
        chunks.append("\n".join(text))
        day += rng.randrange(1, 4)
    questions = []
    keys = list(told)
    rng.shuffle(keys)
    for kind, person in keys[:config.num_questions]:
        value = told[(kind, person)]
        if kind == "works" and rng.random() < config.two_fact_share:
            questions.append(MemoryQuestion(f"In which city is the company that {person} works for based?",
                                            (bases[value],), (evidence[(kind, person)],)))
        elif kind == "works":
            questions.append(MemoryQuestion(f"Which company does {person} work for?", (value,),
                                            (evidence[(kind, person)],)))
        else:
            questions.append(MemoryQuestion(f"In which city does {person} live?", (value,),
                                            (evidence[(kind, person)],)))
    return chunks, questions


def _sample(rng: random.Random, theme: tuple[str, ...], config: MemoryGeneratorConfig) -> str:
    words = rng.sample(theme, config.theme_words_per_sample) + rng.sample(FILLER, 3)
    rng.shuffle(words)
    return " ".join(words)


def _test_time_learning(rng: random.Random, config: MemoryGeneratorConfig):
    themes = rng.sample(THEMES, config.num_classes)  # label i stands for themes[i]; the data never says which
    chunks, evidence = [], {}
    for c in range(config.num_chunks):
        lines = []
        for _ in range(config.samples_per_chunk):
            label = rng.randrange(config.num_classes)
            lines.append(f"Sample: {_sample(rng, themes[label], config)}; Label: {label}")
            evidence.setdefault(label, c)
        chunks.append("\n".join(lines))
    questions = []
    for _ in range(config.num_questions):
        label = rng.randrange(config.num_classes)
        questions.append(MemoryQuestion(
            f"Sample: {_sample(rng, themes[label], config)}\nWhat is the label of this sample? "
            "Answer with the label number in \\boxed{}.", (str(label),), (evidence.get(label, 0),)))
    return chunks, questions


def _long_range(rng: random.Random, config: MemoryGeneratorConfig):
    hero = rng.choice(PEOPLE)
    companions = rng.sample([p for p in PEOPLE if p != hero], config.num_chunks)
    places = rng.sample(CITIES, config.num_chunks)
    objects = [rng.choice(OBJECTS) for _ in range(config.num_chunks)]
    fillers = ("The road was long and quiet.", "It rained for most of the day.", "Nobody said much at dinner.",
               "The night was cold.", "A market was open in the square.", "The old bridge was closed.")
    chunks, keywords = [], [hero]
    for c in range(config.num_chunks):
        event = (f"In {places[c]}, {hero} met {companions[c]}, who gave {hero} a {objects[c]}."
                 if c else f"This is the story of {hero}, who set out from {places[0]} with a {objects[0]} "
                           f"and met {companions[0]} on the first day.")
        sentences = [event] + [rng.choice(fillers) for _ in range(config.filler_per_chunk)]
        rng.shuffle(sentences)
        chunks.append(" ".join(sentences))
        keywords += [places[c], companions[c]]
    # The key points: the hero first, then people and places spread over the whole story, in the story's order (so
    # a summary that follows the story names them in the gold's order).
    rest = rng.sample(range(1, len(keywords)), min(config.keywords, len(keywords)) - 1)
    picked = [keywords[0]] + [keywords[i] for i in sorted(rest)]
    question = MemoryQuestion("Summarize the story: who is it about, where did they go and whom did they meet?",
                              (", ".join(picked),), tuple(range(config.num_chunks)))
    return chunks, [question]


# -- the scripted expert -------------------------------------------------------------------------------------------
_EXCHANGE = re.compile(r"\[Day (\d+), (\d\d:\d\d)\] User: .*\nAssistant: Noted: (.*)")
_TALK = re.compile(r"\[Day (\d+), (\d\d:\d\d)\] User: (.*)\nAssistant: (?!Noted: )")
_SAMPLE = re.compile(r"Sample: (.*); Label: (\d+)")
_EVENT = re.compile(r"In (\w+), (\w+) met (\w+), who gave \2 an? (\w+)\.")
_START = re.compile(r"This is the story of (\w+), who set out from (\w+) with an? (\w+) and met (\w+) on the first "
                    r"day\.")
CORE_NOTES = {
    "accurate_retrieval": "The user tells me about friends: where they work and where they live.",
}
"""The expert's core paragraph where it does not change with the chunks."""


def expert_calls(category: str, chunk: str, core: str, index: int, recall: float = 1.0,
                 rng: random.Random | None = None) -> list[dict]:
    """The tool calls a scripted Mem-α agent makes for `chunk` (the `index`-th) of a generated task, given the core
    paragraph so far: {"name", "arguments"} dicts.

    accurate retrieval: each stated fact as a semantic item, and the core note on the first chunk; test-time
    learning: the first sample of each class as a semantic item, and the core rewritten as the rules seen so far
    (each label's theme words); long-range understanding: the core rewritten as the story so far, one clause per event.

    recall < 1 makes an imperfect expert: each fact of a conversation is kept with probability `recall`, else the
    chunk's small talk is filed instead as an episodic event (or nothing, in a chunk without small talk); each event
    of a story keeps its companion and gift with probability `recall`, else only the place. `rng` draws these
    choices (needed with recall < 1).
    """
    if not 0 <= recall <= 1:
        raise ValueError(f"expert_calls: recall must be in [0, 1], got {recall!r}")
    if recall < 1 and rng is None:
        raise ValueError("expert_calls: recall < 1 needs rng, which draws the facts the expert keeps")

    def keep() -> bool:
        return recall >= 1 or rng.random() < recall

    calls = []
    if category == "accurate_retrieval":
        if index == 0:
            calls.append(_update("core", CORE_NOTES[category]))
        talk = [f"Day {day}, {time}: the user said: {said}" for day, time, said in _TALK.findall(chunk)]
        for _, _, fact in _EXCHANGE.findall(chunk):
            if keep():
                calls.append(_insert("semantic", fact))
            elif talk:
                calls.append(_insert("episodic", talk.pop(0)))
    elif category == "test_time_learning":
        rules = {label: words.split(", ") for label, words in re.findall(r"Label (\d+): ([^;.]*)", core)}
        for sample, label in _SAMPLE.findall(chunk):
            if label not in rules:  # one example per class; the rules carry the rest
                calls.append(_insert("semantic", f"Sample: {sample}; Label: {label}"))
            words = rules.setdefault(label, [])
            words += [w for w in sample.split() if w not in FILLER and w not in words]
        text = "; ".join(f"Label {label}: {', '.join(rules[label])}" for label in sorted(rules))
        calls.append(_update("core", f"Classes by their words. {text}."))
    elif category == "long_range_understanding":
        clauses = []
        start = _START.search(chunk)
        if start:
            hero, place, thing, met = start.groups()
            clauses.append(f"The story of {hero}: set out from {place}" + (f" with a {thing} and met {met}"
                                                                            if keep() else ""))
        clauses += [f"in {place}" + (f" met {met}, who gave a {thing}" if keep() else "")
                    for place, _, met, thing in _EVENT.findall(chunk)]
        if clauses:
            calls.append(_update("core", "; ".join(filter(None, [core.rstrip("."), *clauses])) + "."))
    else:
        raise ValueError(f"no scripted expert for category {category!r}; categories: {CATEGORIES}")
    return calls


def _insert(kind: str, content: str) -> dict:
    return {"name": "new_memory_insert", "arguments": {"memory_type": f"{kind}_memory", "content": content}}


def _update(kind: str, content: str) -> dict:
    return {"name": "memory_update", "arguments": {"memory_type": f"{kind}_memory", "new_content": content}}


def format_calls(calls: list[dict], enabled: tuple[str, ...] = ("core", "semantic", "episodic")) -> str:
    """Calls written in the Qwen-Agent format, one ✿FUNCTION✿/✿ARGS✿ pair each, leaving out memory types that are not
    `enabled`."""
    kept = [c for c in calls if c["arguments"]["memory_type"].removesuffix("_memory") in enabled]
    return "\n".join(f"\u273fFUNCTION\u273f: {c['name']}\n\u273fARGS\u273f: "
                     f"{json.dumps(c['arguments'], ensure_ascii=False)}" for c in kept)
