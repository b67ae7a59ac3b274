import re

import pytest

from memrl_envs.encyclopedia import (
    NAME_LENGTHS,
    QUESTIONS,
    REGIONS,
    EncyclopediaConfig,
    corpus,
    make_questions,
    make_world,
)
from memrl_envs.multihop import CITIES, COMPANIES, PEOPLE, SURNAMES
from memrl_envs.retrieval import BM25Retriever

FACT_PATTERNS = {
    "person": re.compile(r"(?P<e>.+) was born in (?P<born_in>.+) in (?P<born_year>\d{4})\. (?P=e) works for "
                         r"(?P<works_for>.+)\."),
    "company": re.compile(r"(?P<e>.+) is a company founded in (?P<founded_in>.+) in (?P<founded_year>\d{4}) by "
                          r"(?P<founder>.+)\."),
    "city": re.compile(r"(?P<e>.+) is a city in the (?P<region>.+) region, founded in (?P<founded_year>\d{4})\."),
}


def facts_from_passages(world):
    """Every entity's attributes, read back from the passage texts alone."""
    facts = {}
    for passage in world.passages:
        kind = passage.id.split("-")[0]
        match = FACT_PATTERNS[kind].fullmatch(passage.text)
        assert match and match["e"] == passage.title, passage
        facts[passage.title] = {k: v for k, v in match.groupdict().items() if k != "e"}
    return facts


def answer_from_passages(facts, question):
    """The question's answer, resolved hop by hop from the passages."""
    for _, path, template in QUESTIONS:
        match = re.fullmatch(re.escape(template).replace(re.escape("{e}"), "(.+)"), question)
        if match and match.group(1) in facts:
            value = match.group(1)
            for attribute in path:
                value = facts[value][attribute]
            return value, len(path)
    raise AssertionError(f"no template matches {question!r}")


def test_regions_are_new_distinct_names():
    assert len(set(REGIONS)) == len(REGIONS)
    assert not set(REGIONS) & set(PEOPLE + COMPANIES + CITIES + SURNAMES)


@pytest.mark.parametrize("name_length", NAME_LENGTHS)
def test_world_is_deterministic_and_passages_state_every_fact(name_length):
    config = EncyclopediaConfig(name_length=name_length, world_seed=3)
    world = make_world(config)
    assert world == make_world(EncyclopediaConfig(name_length=name_length, world_seed=3))
    assert world.passages != make_world(EncyclopediaConfig(name_length=name_length, world_seed=4)).passages
    assert len(world.passages) == config.num_people + config.num_companies + config.num_cities
    assert len({p.id for p in world.passages}) == len({p.title for p in world.passages}) == len(world.passages)
    assert facts_from_passages(world) == world.facts
    assert all(len(name.split()) == (1 if name_length == "short" else 2) for name in world.facts)
    founders = [world.facts[c]["founder"] for c in world.entities["company"]]
    assert len(set(founders)) == len(founders)


@pytest.mark.parametrize("two_hop_fraction", [0.0, 0.5, 1.0])
@pytest.mark.parametrize("name_length", NAME_LENGTHS)
def test_questions_are_answered_by_the_passages_only(name_length, two_hop_fraction):
    config = EncyclopediaConfig(name_length=name_length, two_hop_fraction=two_hop_fraction)
    facts = facts_from_passages(make_world(config))
    hops = []
    for seed in range(60):
        for q in make_questions(seed, 3, config):
            answer, n_hops = answer_from_passages(facts, q.question)
            assert q.answers == (answer,) and answer not in q.question
            assert len(q.gold_ids) == len(q.queries) == n_hops
            hops.append(n_hops)
    if two_hop_fraction in (0.0, 1.0):
        assert set(hops) == {1 + int(two_hop_fraction)}
    else:
        assert 0.35 < hops.count(2) / len(hops) < 0.65


@pytest.mark.parametrize("name_length", NAME_LENGTHS)
def test_every_hop_is_retrievable_by_bm25_top3(name_length):
    config = EncyclopediaConfig(name_length=name_length)
    passages = make_world(config).passages
    retriever = BM25Retriever(passages)
    questions = [q for seed in range(80) for q in make_questions(seed, 2, config)]
    for q in questions:
        found = retriever.search(list(q.queries), 3)
        assert all(gold in [h["id"] for h in hits] for gold, hits in zip(q.gold_ids, found)), q
        if len(q.gold_ids) == 1:  # a one-hop question is its own good query
            assert q.gold_ids[0] in [h["id"] for h in retriever.search([q.question], 3)[0]], q
        # The hop-2 entity is named in the hop-1 passage, so a reader can find what to search next.
        if len(q.gold_ids) == 2:
            hop1 = next(p for p in passages if p.id == q.gold_ids[0])
            assert q.queries[1] in hop1.text


def test_questions_are_distinct_fixed_by_seed_and_prefix_stable():
    config = EncyclopediaConfig()
    assert make_questions(5, 4, config) == make_questions(5, 4, config)
    assert make_questions(5, 16, config)[:4] == make_questions(5, 4, config)
    assert len({q.question for q in make_questions(5, 16, config)}) == 16
    assert len({make_questions(s, 1, config)[0].question for s in range(40)}) > 30
    other_world = EncyclopediaConfig(world_seed=1)
    assert make_questions(5, 4, other_world) != make_questions(5, 4, config)


def test_question_count_is_bounded_by_the_world():
    tiny = EncyclopediaConfig(num_people=1, num_companies=1, num_cities=1, num_regions=1, two_hop_fraction=0.0)
    assert len(make_questions(0, 8, tiny)) == 8  # eight one-hop kinds, one entity each
    with pytest.raises(ValueError, match="n=9 is not allowed; this world has 8 distinct questions"):
        make_questions(0, 9, tiny)


def test_question_length_bound():
    for config in (EncyclopediaConfig(), EncyclopediaConfig(name_length="long", two_hop_fraction=1.0)):
        longest = max(len(q.question) for s in range(50) for q in make_questions(s, 4, config))
        assert longest <= config.max_question_chars()


def test_long_names_allow_a_large_corpus():
    config = EncyclopediaConfig(name_length="long", num_people=1000, num_companies=400, num_cities=300)
    world = make_world(config)
    assert len(world.passages) == 1700 and len(set(world.facts)) == 1700


def test_bad_config_is_named():
    with pytest.raises(ValueError, match=r"num_people=0 is not allowed; give an int in \[1, 80\]"):
        EncyclopediaConfig(num_people=0)
    with pytest.raises(ValueError, match=r"num_cities=61 is not allowed; give an int in \[1, 60\]"):
        EncyclopediaConfig(num_cities=61)
    with pytest.raises(ValueError, match="num_companies=40 is not allowed; every company has its own founder"):
        EncyclopediaConfig(num_people=30, num_companies=40)
    with pytest.raises(ValueError, match="num_regions=13 is not allowed"):
        EncyclopediaConfig(num_regions=13)
    with pytest.raises(ValueError, match="two_hop_fraction=1.5 is not allowed"):
        EncyclopediaConfig(two_hop_fraction=1.5)
    with pytest.raises(ValueError, match="name_length='huge' is not allowed"):
        EncyclopediaConfig(name_length="huge")
    with pytest.raises(TypeError, match="world_seed must be an int"):
        EncyclopediaConfig(world_seed="0")


def test_corpus_has_passages_questions_and_tags():
    lines = list(corpus(10))
    assert any("\n" in line and "was born in" in line for line in lines)  # "Title\ntext" passages
    assert any(line.endswith("?") for line in lines)
    assert any(line.startswith("<search>") for line in lines) and any(line.startswith("<answer>") for line in lines)
    assert any(len(line.split("\n")[0].split()) == 2 for line in lines)  # long names appear
    assert lines == list(corpus(10))
