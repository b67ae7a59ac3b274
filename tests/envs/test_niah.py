import re
import uuid

import pytest

from memrl_envs.niah import REPEAT_HAYSTACK, NiahConfig, make_task


@pytest.mark.parametrize("level", [1, 2, 3])
def test_needle_present_once_and_answers_the_question(level):
    values = set()
    for seed in range(30):
        for num_docs in (1, 10, 80):
            task = make_task(seed, NiahConfig(level=level, num_docs=num_docs))
            assert len(task.documents) == num_docs
            assert task.context.count("special magic") == 1
            key = re.fullmatch(r"What is the special magic (number|uuid) for (\w+) mentioned in the provided text\?",
                               task.question).group(2)
            found = re.findall(rf"One of the special magic \w+ for {key} is: (\S+)\.", task.context)
            assert found == list(task.answers) and task.gold_facts[0] in task.documents
        values.add(task.answers[0])
        if level == 3:
            assert str(uuid.UUID(task.answers[0])) == task.answers[0] and "uuid" in task.question
        else:
            assert re.fullmatch(r"[1-9]\d{6}", task.answers[0]) and "number" in task.question
    assert len(values) == 30


def test_haystacks_by_level():
    repeat = make_task(0, NiahConfig(level=1, num_docs=5))
    assert [d for d in repeat.documents if d not in repeat.gold_facts] == [REPEAT_HAYSTACK] * 4
    essay = make_task(0, NiahConfig(level=2, num_docs=20))
    paragraphs = [d for d in essay.documents if d not in essay.gold_facts]
    assert len(set(paragraphs)) == len(paragraphs) == 19
    assert not any(ch.isdigit() for ch in "".join(paragraphs))
    assert all(p.count(".") == 4 for p in paragraphs)


def test_same_needle_at_every_length_and_depth_knob():
    for seed in range(10):
        base = make_task(seed, NiahConfig(level=2, num_docs=10))
        for scale in (2, 4, 8, 16):
            longer = make_task(seed, NiahConfig(level=2, num_docs=10 * scale))
            assert (longer.question, longer.answers) == (base.question, base.answers)
            assert longer.gold_facts == base.gold_facts
            # same relative depth
            assert base.documents.index(base.gold_facts[0]) == longer.documents.index(longer.gold_facts[0]) // scale
        for depth, index in ((0.0, 0), (1.0, 19), (0.5, 10)):
            task = make_task(seed, NiahConfig(num_docs=20, needle_position=depth))
            assert task.documents.index(task.gold_facts[0]) == index
    assert make_task(3, NiahConfig(level=3)) == make_task(3, NiahConfig(level=3))


def test_bad_config_and_bounds():
    with pytest.raises(ValueError, match="level=4 is not allowed"):
        NiahConfig(level=4)
    with pytest.raises(ValueError, match="num_docs must be an int >= 1"):
        NiahConfig(num_docs=0)
    with pytest.raises(ValueError, match="needle_position must be in"):
        NiahConfig(needle_position=1.5)
    for level in (1, 2, 3):
        config = NiahConfig(level=level, num_docs=30)
        assert max(len(make_task(s, config).context) for s in range(10)) <= config.max_context_chars()
