import re

import pytest

from memrl_envs.multihop import (
    CITIES,
    COMPANIES,
    FACT_RE,
    MAX_FIRST_DOC_NUMBER,
    PEOPLE,
    SURNAMES,
    MultiHopConfig,
    make_task,
)


def facts_of(task):
    """Every (subject, relation, object) fact stated anywhere in the task's context."""
    out = []
    for doc in task.documents:
        body = re.fullmatch(r"Document \d+: (.*)", doc).group(1)
        for sentence in re.split(r"(?<=\.) ", body):
            match = FACT_RE.fullmatch(sentence)
            assert match, sentence
            out.append(match.groups())
    return out


def resolve(task):
    """The answers the question's chain reaches using every fact in the context."""
    x = re.fullmatch(r"Where was the employer of (.+) (born|founded)\?", task.question).group(1)
    employers = {o for s, r, o in facts_of(task) if s == x and r == "works for"}
    return employers, {o for s, r, o in facts_of(task) if s in employers and r in ("was born in", "was founded in")}


def test_name_lists_are_distinct_one_word_names():
    all_names = PEOPLE + COMPANIES + CITIES + SURNAMES
    assert len(set(all_names)) == len(all_names)
    assert all(re.fullmatch(r"[A-Z][a-z]+", n) for n in all_names)
    assert min(len(PEOPLE), len(COMPANIES), len(CITIES)) >= 40


def test_deterministic_by_seed():
    config = MultiHopConfig(hardness="hard", facts_per_doc=2)
    assert make_task(7, config) == make_task(7, config)
    assert len({make_task(s, config).question for s in range(30)}) > 20


@pytest.mark.parametrize("hardness", ["easy", "hard"])
@pytest.mark.parametrize("chain", ["born", "founded", "mixed"])
@pytest.mark.parametrize("name_length", ["short", "long"])
def test_answer_is_unique_among_all_facts(hardness, chain, name_length):
    for facts_per_doc, num_docs in ((1, 10), (3, 40), (1, 200)):
        config = MultiHopConfig(num_docs, facts_per_doc, hardness, chain=chain, name_length=name_length)
        for seed in range(25):
            task = make_task(seed, config)
            employers, places = resolve(task)
            assert len(employers) == 1 and places == {task.answers[0]}, (seed, config)
            assert len(task.documents) == num_docs
            assert all(len(f) == facts_per_doc for f in [re.split(r"(?<=\.) ", d) for d in task.documents])


def test_name_length_knob():
    short, long = make_task(1), make_task(1, MultiHopConfig(name_length="long"))
    assert len(short.answers[0].split()) == 1 and len(long.answers[0].split()) == 2
    x = re.search(r"employer of (.+) born", long.question).group(1)
    assert len(x.split()) == 2


def test_hardness_knob():
    for seed in range(20):
        tasks = {h: make_task(seed, MultiHopConfig(num_docs=12, hardness=h)) for h in ("easy", "hard")}
        entities = {e for fact in tasks["easy"].gold_facts for e in FACT_RE.fullmatch(fact).group(1, 3)}
        for h, task in tasks.items():
            distractors = [f for f in facts_of(task) if f"{f[0]} {f[1]} {f[2]}." not in task.gold_facts]
            sharing = [f for f in distractors if {f[0], f[2]} & entities]
            # X's own birthplace and the employer's employer always exist, so hard mode has >= 2 such traps.
            assert (len(sharing) >= 2) if h == "hard" else not sharing, (seed, h, sharing)


def test_gold_facts_depend_on_the_seed_only():
    for seed in range(10):
        base = make_task(seed, MultiHopConfig(num_docs=10))
        for scale in (2, 4, 8, 16):
            longer = make_task(seed, MultiHopConfig(num_docs=10 * scale))
            assert (longer.question, longer.answers) == (base.question, base.answers)
            assert longer.gold_facts == base.gold_facts
            assert len(longer.documents) == 10 * scale
            assert resolve(longer)[1] == {base.answers[0]}


def gold_doc_indices(task):
    return [next(i for i, d in enumerate(task.documents) if f": {g}" in d or f". {g}" in d) for g in task.gold_facts]


def test_gold_positions_knob():
    for seed in range(10):
        assert gold_doc_indices(make_task(seed, MultiHopConfig(gold_positions=(0.0, 1.0)))) == [0, 9]
        assert gold_doc_indices(make_task(seed, MultiHopConfig(num_docs=20, gold_positions=(0.2, 0.8)))) == [4, 16]
        assert gold_doc_indices(make_task(seed, MultiHopConfig(gold_positions=(1.0, 1.0)))) == [8, 9]
        i1, i2 = gold_doc_indices(make_task(seed, MultiHopConfig(num_docs=20, gold_positions=(0.5, 0.5))))
        assert (i1, i2) == (10, 11)
        # Random by default, hop 1 first, at the same relative depth at every length.
        i1, i2 = gold_doc_indices(make_task(seed, MultiHopConfig(num_docs=100)))
        j1, j2 = gold_doc_indices(make_task(seed, MultiHopConfig(num_docs=1000)))
        assert i1 < i2 and j1 < j2 and i1 == j1 // 10
        assert i2 == j2 // 10 or i2 == i1 + 1  # unless both depths fell on one document at the shorter length
    depths = {tuple(gold_doc_indices(make_task(s, MultiHopConfig(num_docs=100)))) for s in range(30)}
    assert len(depths) > 20


def test_drawn_gold_depths_are_independent():
    # Two independent uniform depths lie a third of the context apart on average; a task whose gold facts always
    # sit side by side would let a reader answer from one chunk without carrying anything in memory.
    pairs = [gold_doc_indices(make_task(s, MultiHopConfig(num_docs=10))) for s in range(400)]
    gaps = [i2 - i1 for i1, i2 in pairs]
    assert all(g >= 1 for g in gaps)
    assert 2.5 < sum(gaps) / len(gaps) < 4.2
    assert 0.18 < sum(g == 1 for g in gaps) / len(gaps) < 0.38  # 0.28 expected: same or neighbouring tenth
    assert max(gaps) == 9


def test_bad_config_is_named():
    with pytest.raises(ValueError, match="num_docs must be an int >= 2"):
        MultiHopConfig(num_docs=1)
    with pytest.raises(ValueError, match="facts_per_doc must be an int >= 1"):
        MultiHopConfig(facts_per_doc=0)
    with pytest.raises(ValueError, match="hardness='medium' is not allowed"):
        MultiHopConfig(hardness="medium")
    with pytest.raises(ValueError, match="name_length='huge' is not allowed"):
        MultiHopConfig(name_length="huge")
    with pytest.raises(ValueError, match="chain='lives' is not allowed"):
        MultiHopConfig(chain="lives")
    with pytest.raises(ValueError, match=r"gold_positions=\(0.9, 0.1\) is not allowed"):
        MultiHopConfig(gold_positions=(0.9, 0.1))
    with pytest.raises(ValueError, match="gold_positions"):
        MultiHopConfig(gold_positions=(0.0, 1.5))


def test_context_bound():
    for config in (MultiHopConfig(), MultiHopConfig(num_docs=50, facts_per_doc=3, name_length="long", chain="founded")):
        assert max(len(make_task(s, config).context) for s in range(20)) <= config.max_context_chars()


def test_drawn_first_doc_number_is_fixed_by_the_seed_and_hides_position():
    def numbers(task):
        return [int(re.match(r"Document (\d+):", d).group(1)) for d in task.documents]

    config = MultiHopConfig(first_doc_number=None)
    firsts = {numbers(make_task(s, config))[0] for s in range(50)}
    assert len(firsts) > 40 and min(firsts) >= 1 and max(firsts) <= MAX_FIRST_DOC_NUMBER
    for seed in range(5):
        short, long = make_task(seed, config), make_task(seed, MultiHopConfig(num_docs=80, first_doc_number=None))
        assert numbers(long)[:10] == numbers(short) == list(range(numbers(short)[0], numbers(short)[0] + 10))
        assert long.question == short.question and long.answers == short.answers
        # Only the labels differ from the RULER-style numbering from 1.
        plain = make_task(seed, MultiHopConfig())
        assert [d.split(": ", 1)[1] for d in plain.documents] == [d.split(": ", 1)[1] for d in short.documents]
    assert numbers(make_task(0, MultiHopConfig(first_doc_number=0)))[0] == 0
    assert len(make_task(3, MultiHopConfig(num_docs=160, first_doc_number=None)).context) <= MultiHopConfig(
        num_docs=160, first_doc_number=None).max_context_chars()
    with pytest.raises(ValueError, match="first_doc_number=-1 is not allowed"):
        MultiHopConfig(first_doc_number=-1)


def test_a_tuple_of_lengths_draws_one_per_task_from_the_seed():
    mixed = MultiHopConfig(num_docs=(10, 20, 40), first_doc_number=None)
    drawn = [len(make_task(s, mixed).documents) for s in range(60)]
    assert set(drawn) == {10, 20, 40} and min(drawn.count(n) for n in (10, 20, 40)) >= 10
    for seed in range(12):
        task = make_task(seed, mixed)
        n = mixed.num_docs_of(seed)
        # The same task as the fixed length the seed drew, and the same draw every time.
        assert task == make_task(seed, MultiHopConfig(num_docs=n, first_doc_number=None))
        assert make_task(seed, mixed) == task and len(task.context) <= mixed.max_context_chars()
    assert MultiHopConfig(num_docs=[10, 20]).num_docs == (10, 20)  # JSON configs carry lists
    assert MultiHopConfig(num_docs=(30,)).num_docs_of(5) == 30
    for bad in ((), (10, 1), (10, True), "10"):
        with pytest.raises(ValueError, match="num_docs must be an int >= 2 .* or a non-empty tuple"):
            MultiHopConfig(num_docs=bad)
