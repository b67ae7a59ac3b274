import random
import re

import pytest

from memrl_envs.memory_generators import CATEGORIES, MIXED, MemoryGeneratorConfig, expert_calls, make_memory_task
from memrl_envs.memory_rewards import score_answer


@pytest.mark.parametrize("category", CATEGORIES)
def test_tasks_are_a_function_of_seed_and_config(category):
    config = MemoryGeneratorConfig(category=category, num_chunks=5)
    a, b = make_memory_task(7, config), make_memory_task(7, config)
    assert a == b and a != make_memory_task(8, config)
    assert len(a.chunks) == 5 and a.data_source == category and a.questions


def test_accurate_retrieval_answers_are_stated_in_their_evidence_chunk():
    config = MemoryGeneratorConfig(num_chunks=6, facts_per_chunk=2, small_talk_per_chunk=2, num_questions=6,
                                   two_fact_share=0.5)
    two_fact = 0
    for seed in range(30):
        task = make_memory_task(seed, config)
        assert len(task.questions) == 6
        for chunk in task.chunks:
            assert chunk.count("User:") == 4 and re.match(r"\[Day \d+, \d\d:\d\d\] User:", chunk)
        for q in task.questions:
            (gold,), (where,) = q.answers, q.evidence
            assert gold in task.chunks[where]
            two_fact += "the company that" in q.question
    assert 0 < two_fact


def test_test_time_learning_labels_follow_hidden_themes():
    config = MemoryGeneratorConfig(category="test_time_learning", num_classes=4, samples_per_chunk=5,
                                   num_questions=8)
    task = make_memory_task(3, config)
    words_of = {}
    for chunk in task.chunks:
        for line in chunk.splitlines():
            sample, label = re.fullmatch(r"Sample: (.*); Label: (\d)", line).groups()
            words_of.setdefault(label, set()).update(sample.split())
    assert set(words_of) <= {"0", "1", "2", "3"}
    for q in task.questions:
        assert q.answers[0] in {"0", "1", "2", "3"} and "\\boxed{}" in q.question
        assert score_answer(f"\\boxed{{{q.answers[0]}}}", q.answers, task.data_source) == 1.0


def test_long_range_question_asks_for_key_words_spread_over_the_story():
    config = MemoryGeneratorConfig(category="long_range_understanding", num_chunks=8, keywords=6)
    task = make_memory_task(5, config)
    (question,) = task.questions
    keywords = [k.strip() for k in question.answers[0].split(",")]
    assert len(keywords) == 6
    story = " ".join(task.chunks)
    assert all(k in story for k in keywords)
    assert keywords == sorted(keywords, key=story.index)  # in the story's order, the hero first
    assert score_answer(story, question.answers, task.data_source) == 1.0
    assert score_answer(task.chunks[0], question.answers, task.data_source) < 1.0


def test_mixed_takes_the_categories_in_turn_by_seed():
    mixed = MemoryGeneratorConfig(category=MIXED, num_chunks=3)
    for seed in range(6):
        category = CATEGORIES[seed % 3]
        assert make_memory_task(seed, mixed) == make_memory_task(seed, MemoryGeneratorConfig(category=category,
                                                                                               num_chunks=3))


@pytest.mark.parametrize("bad", [{"category": "trivia"}, {"num_chunks": 0}, {"two_fact_share": 2.0},
                                 {"num_classes": 9}, {"small_talk_per_chunk": -1}, {"num_questions": True}])
def test_bad_knobs_are_named(bad):
    with pytest.raises(ValueError, match=next(iter(bad))):
        MemoryGeneratorConfig(**bad)


def _expert_run(seed: int, recall: float, rng_seed: int = 0, **knobs) -> list[list[dict]]:
    task = make_memory_task(seed, MemoryGeneratorConfig(num_chunks=4, **knobs))
    rng, core, replies = random.Random(rng_seed), "", []
    for i, chunk in enumerate(task.chunks):
        calls = expert_calls(task.data_source, chunk, core, i, recall=recall, rng=rng)
        core = next((c["arguments"]["new_content"] for c in reversed(calls) if c["name"] == "memory_update"), core)
        replies.append(calls)
    return replies


def test_an_expert_without_recall_files_the_small_talk_instead_of_each_fact():
    full = _expert_run(5, recall=1.0, category="accurate_retrieval", facts_per_chunk=1)
    none = _expert_run(5, recall=0.0, category="accurate_retrieval", facts_per_chunk=1)
    facts = [c["arguments"]["content"] for r in full for c in r if c["name"] == "new_memory_insert"]
    talk = [c["arguments"] for r in none for c in r if c["name"] == "new_memory_insert"]
    assert len(facts) == len(talk) == 4 and all(f.startswith("your friend") for f in facts)
    assert all(a["memory_type"] == "episodic_memory" and re.match(r"Day \d+, \d\d:\d\d: the user said: ", a["content"])
               for a in talk)
    assert not any(f.split()[2] in a["content"] for f in facts for a in talk)  # no friend's name in the small talk
    # Without small talk in a chunk there is nothing else to file: the fact is left out.
    assert _expert_run(5, recall=0.0, category="accurate_retrieval", small_talk_per_chunk=0)[1] == []


def test_an_expert_without_recall_tells_a_story_by_its_places_alone():
    task = make_memory_task(7, MemoryGeneratorConfig(category="long_range_understanding", num_chunks=4))
    full = _expert_run(7, recall=1.0, category="long_range_understanding")[-1][-1]["arguments"]["new_content"]
    bare = _expert_run(7, recall=0.0, category="long_range_understanding")[-1][-1]["arguments"]["new_content"]
    gold = task.questions[0].answers[0]
    assert score_answer(full, [gold], task.data_source) > score_answer(bare, [gold], task.data_source) > 0
    assert bare.count(";") == full.count(";") == 3  # one clause per event either way


def test_an_expert_with_partial_recall_keeps_about_that_share_and_repeats_itself_with_its_rng():
    runs = [_expert_run(s, recall=0.5, rng_seed=s, category="accurate_retrieval", facts_per_chunk=2) for s in range(40)]
    kept = [c["arguments"]["memory_type"] == "semantic_memory" for r in runs for calls in r for c in calls
            if c["name"] == "new_memory_insert"]
    assert 0.35 < sum(kept) / len(kept) < 0.65
    assert runs[3] == _expert_run(3, recall=0.5, rng_seed=3, category="accurate_retrieval", facts_per_chunk=2)
    # Test-time learning has no facts to leave out: its calls do not depend on recall.
    assert _expert_run(2, 0.0, category="test_time_learning") == _expert_run(2, 1.0, category="test_time_learning")


@pytest.mark.parametrize(("recall", "rng", "match"), [(1.5, random.Random(0), r"recall must be in \[0, 1\]"),
                                                      (0.5, None, "needs rng")])
def test_bad_recall_is_named(recall, rng, match):
    with pytest.raises(ValueError, match=match):
        expert_calls("accurate_retrieval", "", "", 0, recall=recall, rng=rng)
