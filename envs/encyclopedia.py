"""A fictional encyclopedia for search QA: wiki-style passages about people, companies and cities, and one- or
two-hop questions whose answers only the passages hold."""

from __future__ import annotations

import functools
import itertools
import random
from collections.abc import Iterator
from dataclasses import dataclass

from memrl_envs.multihop import CITIES, CITY_SUFFIXES, COMPANIES, COMPANY_SUFFIXES, PEOPLE, SURNAMES
from memrl_envs.retrieval import Passage

REGIONS = (
    "Amberlund", "Brightmoor", "Coldmarsh", "Dunhollow", "Eastreach", "Fairholt", "Greywater", "Highcombe",
    "Ironvale", "Larkspire", "Mistfen", "Northwold",
)
"""Region names (one word each); every city lies in one region."""
NAME_LENGTHS = ("short", "long")
"""'short': one-word names from memrl_envs.multihop's pools. 'long': two-word names (a pool name and a second word)."""
BIRTH_YEARS = (1900, 1999)
"""Range of people's birth years (inclusive)."""
COMPANY_YEARS = (1850, 2015)
"""Range of companies' founding years (inclusive)."""
CITY_YEARS = (1100, 1800)
"""Range of cities' founding years (inclusive)."""

QUESTIONS = (
    ("person", ("born_in",), "In which city was {e} born?"),
    ("person", ("born_year",), "In what year was {e} born?"),
    ("person", ("works_for",), "Which company does {e} work for?"),
    ("company", ("founded_in",), "In which city was the company {e} founded?"),
    ("company", ("founded_year",), "In what year was the company {e} founded?"),
    ("company", ("founder",), "Who founded the company {e}?"),
    ("city", ("region",), "In which region is the city of {e}?"),
    ("city", ("founded_year",), "In what year was the city of {e} founded?"),
    ("person", ("works_for", "founded_in"), "In which city was the employer of {e} founded?"),
    ("person", ("works_for", "founded_year"), "In what year was the employer of {e} founded?"),
    ("person", ("works_for", "founder"), "Who founded the company that {e} works for?"),
    ("person", ("born_in", "region"), "In which region was {e} born?"),
    ("company", ("founder", "born_in"), "In which city was the founder of {e} born?"),
    ("company", ("founder", "born_year"), "In what year was the founder of {e} born?"),
    ("company", ("founded_in", "region"), "In which region was the company {e} founded?"),
)
"""Question kinds: (kind of the entity asked about, attributes followed from it, template). Each attribute is one
retrieval hop: hop 1 reads the entity's passage, hop 2 the passage of the entity that hop 1 found."""


@dataclass(frozen=True)
class EncyclopediaConfig:
    """Knobs of the fictional encyclopedia and its questions."""

    num_people: int = 60
    """People in the world (one passage each); at most 80 with short names."""
    num_companies: int = 30
    """Companies (one passage each), each founded by a different person, so at most num_people."""
    num_cities: int = 30
    """Cities (one passage each); at most 60 with short names."""
    num_regions: int = 6
    """Regions the cities lie in; at most len(REGIONS). Regions have no passage of their own."""
    two_hop_fraction: float = 0.5
    """Share of questions that need two retrieval hops (the rest need one), in [0, 1]."""
    name_length: str = "short"
    """Names of people, companies and cities; one of NAME_LENGTHS. 'long' names raise the size limits above."""
    world_seed: int = 0
    """Seed of the world (entities, their attributes and the passages); question seeds pick questions in it."""

    def __post_init__(self) -> None:
        if self.name_length not in NAME_LENGTHS:
            raise ValueError(
                f"EncyclopediaConfig.name_length={self.name_length!r} is not allowed; choose one of {NAME_LENGTHS}"
            )
        for field, pool in (("num_people", "people"), ("num_cities", "cities"), ("num_companies", "companies")):
            value, cap = getattr(self, field), len(_name_pool(pool, self.name_length))
            if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= cap:
                raise ValueError(
                    f"EncyclopediaConfig.{field}={value!r} is not allowed; give an int in [1, {cap}] "
                    f"(name_length={self.name_length!r})"
                )
        if self.num_companies > self.num_people:
            raise ValueError(
                f"EncyclopediaConfig.num_companies={self.num_companies} is not allowed; every company has its own "
                f"founder, so give at most num_people={self.num_people}"
            )
        regions = self.num_regions
        if not isinstance(regions, int) or isinstance(regions, bool) or not 1 <= regions <= len(REGIONS):
            raise ValueError(
                f"EncyclopediaConfig.num_regions={self.num_regions!r} is not allowed; give an int in "
                f"[1, {len(REGIONS)}]"
            )
        fraction = self.two_hop_fraction
        if not isinstance(fraction, (int, float)) or isinstance(fraction, bool) or not 0 <= fraction <= 1:
            raise ValueError(
                f"EncyclopediaConfig.two_hop_fraction={fraction!r} is not allowed; give a number in [0, 1]"
            )
        if not isinstance(self.world_seed, int):
            raise TypeError(f"EncyclopediaConfig.world_seed must be an int, got {self.world_seed!r}")

    def max_question_chars(self) -> int:
        """An upper bound on the length of any question this config generates."""
        longest = max(
            len(name) for pool in ("people", "companies", "cities") for name in _name_pool(pool, self.name_length)
        )
        return max(len(template) - len("{e}") for _, _, template in QUESTIONS) + longest


@dataclass(frozen=True)
class SearchQuestion:
    """One question over a corpus, answered by searching it."""

    question: str
    """The question shown to the agent."""
    answers: tuple[str, ...]
    """Gold answers; any one of them is correct."""
    gold_ids: tuple[str, ...] = ()
    """Ids of the passages holding each hop's fact, in hop order (empty when unknown, as for files)."""
    queries: tuple[str, ...] = ()
    """One search query per hop that retrieves that hop's passage: the scripted expert's searches."""


@dataclass(frozen=True)
class World:
    """Every entity of one seed's encyclopedia, its attributes and its passages."""

    passages: tuple[Passage, ...]
    """One passage per person, company and city."""
    entities: dict[str, tuple[str, ...]]
    """Names by kind ('person', 'company', 'city')."""
    facts: dict[str, dict[str, str]]
    """Attributes by entity name: attribute -> value (a name, a region or a year)."""
    passage_ids: dict[str, str]
    """Id of each entity's passage, by name."""


def _name_pool(kind: str, name_length: str) -> tuple[str, ...]:
    first, second = {
        "people": (PEOPLE, SURNAMES),
        "companies": (COMPANIES, COMPANY_SUFFIXES),
        "cities": (CITIES, CITY_SUFFIXES),
    }[kind]
    if name_length == "short":
        return first
    # First words are unique across the pools, so every combination is a distinct name.
    return tuple(f"{a} {b}" for a, b in itertools.product(first, second))


def _draw_names(rng: random.Random, kind: str, n: int, name_length: str) -> list[str]:
    pool = list(_name_pool(kind, name_length))
    rng.shuffle(pool)
    return pool[:n]


@functools.lru_cache(maxsize=8)
def make_world(config: EncyclopediaConfig) -> World:
    """The world of `config` (cached: every env of a process shares it); it depends on config.world_seed only,
    besides the sizes."""
    rng = random.Random(f"encyclopedia-world-{config.world_seed}")
    people = _draw_names(rng, "people", config.num_people, config.name_length)
    companies = _draw_names(rng, "companies", config.num_companies, config.name_length)
    cities = _draw_names(rng, "cities", config.num_cities, config.name_length)
    regions = list(REGIONS[: config.num_regions])
    founders = rng.sample(people, len(companies))
    facts: dict[str, dict[str, str]] = {}
    for z in cities:
        facts[z] = {"region": rng.choice(regions), "founded_year": str(rng.randint(*CITY_YEARS))}
    for c, founder in zip(companies, founders):
        facts[c] = {
            "founded_in": rng.choice(cities),
            "founded_year": str(rng.randint(*COMPANY_YEARS)),
            "founder": founder,
        }
    for p in people:
        facts[p] = {
            "born_in": rng.choice(cities),
            "born_year": str(rng.randint(*BIRTH_YEARS)),
            "works_for": rng.choice(companies),
        }
    passages, passage_ids = [], {}
    for kind, names in (("person", people), ("company", companies), ("city", cities)):
        for i, name in enumerate(names):
            f = facts[name]
            if kind == "person":
                text = f"{name} was born in {f['born_in']} in {f['born_year']}. {name} works for {f['works_for']}."
            elif kind == "company":
                text = f"{name} is a company founded in {f['founded_in']} in {f['founded_year']} by {f['founder']}."
            else:
                text = f"{name} is a city in the {f['region']} region, founded in {f['founded_year']}."
            passage_ids[name] = f"{kind}-{i}"
            passages.append(Passage(id=f"{kind}-{i}", title=name, text=text))
    entities = {"person": tuple(people), "company": tuple(companies), "city": tuple(cities)}
    return World(passages=tuple(passages), entities=entities, facts=facts, passage_ids=passage_ids)


def _question(world: World, template_index: int, name: str) -> SearchQuestion:
    _, path, template = QUESTIONS[template_index]
    value, gold_ids, queries = name, [], []
    for attribute in path:
        gold_ids.append(world.passage_ids[value])
        queries.append(value)
        value = world.facts[value][attribute]
    return SearchQuestion(
        question=template.format(e=name), answers=(value,), gold_ids=tuple(gold_ids), queries=tuple(queries)
    )


def make_questions(seed: int, n: int, config: EncyclopediaConfig | None = None) -> tuple[SearchQuestion, ...]:
    """`n` distinct questions about config's world, fixed by the seed; a larger n extends a smaller one's list."""
    config = config or EncyclopediaConfig()
    world = make_world(config)
    one = [i for i, (_, path, _) in enumerate(QUESTIONS) if len(path) == 1]
    two = [i for i, (_, path, _) in enumerate(QUESTIONS) if len(path) == 2]
    usable = (one if config.two_hop_fraction < 1 else []) + (two if config.two_hop_fraction > 0 else [])
    capacity = sum(len(world.entities[QUESTIONS[i][0]]) for i in usable)
    if not isinstance(n, int) or not 1 <= n <= capacity:
        raise ValueError(f"make_questions n={n!r} is not allowed; this world has {capacity} distinct questions")
    rng = random.Random(f"encyclopedia-questions-{config.world_seed}-{seed}")
    chosen: list[tuple[int, str]] = []
    while len(chosen) < n:
        index = rng.choice(two if rng.random() < config.two_hop_fraction else one)
        pick = (index, rng.choice(world.entities[QUESTIONS[index][0]]))
        if pick not in chosen:
            chosen.append(pick)
    return tuple(_question(world, index, name) for index, name in chosen)


def corpus(n: int, seed: int = 0) -> Iterator[str]:
    """`n` questions' worth of representative text (gold passages, question, searches, answer) for tokenizer
    training. Alternates short and long names so every name pool appears."""
    variants = [EncyclopediaConfig(name_length=nl, world_seed=seed) for nl in NAME_LENGTHS]
    for i in range(n):
        config = variants[i % len(variants)]
        by_id = {p.id: p for p in make_world(config).passages}
        (question,) = make_questions(seed + i, 1, config)
        yield from (by_id[gold].contents for gold in question.gold_ids)
        yield question.question
        yield from (f"<search>{q}</search>" for q in question.queries)
        yield f"<answer>{question.answers[0]}</answer>"
