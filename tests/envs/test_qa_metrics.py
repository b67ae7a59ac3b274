import pytest

from memrl_envs.qa_metrics import em, f1, normalize_answer, sub_em


def test_normalize_answer_is_squad_normalisation():
    assert normalize_answer("  The Eiffel-Tower, in PARIS!  ") == "eiffeltower in paris"
    assert normalize_answer("An apple a day") == "apple day"
    assert normalize_answer("theatre") == "theatre"  # articles only as whole words
    assert normalize_answer("...") == ""


def test_em():
    assert em("the Calton.", ["Calton"]) == 1.0
    assert em("Calton Bay", ["Calton"]) == 0.0
    assert em("lyon", ["Paris", "Lyon"]) == 1.0
    assert em("", ["Paris"]) == 0.0


def test_f1_hand_computed():
    # "big red barn" vs "red barn door": 2 common tokens, precision 2/3, recall 2/3.
    assert f1("the big red barn", ["red barn door"]) == pytest.approx(2 / 3)
    # "paris france" vs "paris": precision 1/2, recall 1 -> 2/3; the best gold answer counts.
    assert f1("Paris, France", ["lyon", "paris"]) == pytest.approx(2 / 3)
    # repeated tokens count with multiplicity: pred "a b b" vs gold "b": precision 1/2 (a is an article), recall 1
    assert f1("a b b", ["b"]) == pytest.approx(2 / 3)
    assert f1("x y z", ["x y z"]) == 1.0
    assert f1("nothing", ["other"]) == 0.0
    assert f1("", ["other"]) == 0.0


def test_sub_em_containment_direction():
    assert sub_em("It was Greenwich Village, New York City", ["Greenwich Village New York City"]) == 1.0
    assert sub_em("the answer is Calton", ["calton"]) == 1.0
    assert sub_em("Greenwich Village", ["Greenwich Village, New York City"]) == 0.0  # paper: must contain the gold
    assert sub_em("Lyon", ["Paris", "lyon"]) == 1.0  # max over gold answers
    assert sub_em("", ["Paris"]) == 0.0
    assert sub_em("the", ["Paris"]) == 0.0  # empty after normalisation never scores


def _authors_normalize(s):
    """The MemAgent authors' normalize_answer, restated: lower, drop punctuation, drop articles, fix whitespace."""
    import re
    import string

    s = "".join(ch for ch in s.lower() if ch not in set(string.punctuation))
    return " ".join(re.sub(r"\b(a|an|the)\b", " ", s).split())


def _authors_sub_em(pred, answers):
    """Their evaluation: `judge_sub_em` is 0 for an empty prediction, else containment either way with answers[0]."""
    if not pred:
        return 0.0
    gold, p = _authors_normalize(answers[0]), _authors_normalize(pred)
    return float(gold in p or p in gold)


@pytest.mark.parametrize("pred,answers", [
    ("Greenwich Village", ["Greenwich Village, New York City"]),  # prediction inside the gold: counts
    ("It was Greenwich Village, New York City", ["Greenwich Village New York City"]),
    ("Lyon", ["Paris", "lyon"]),  # only the first gold counts
    ("Paris", ["Paris", "lyon"]),
    ("", ["Paris"]),
    ("the", ["Paris"]),  # normalises to "", which every gold contains
    ("yes", ["no"]),
    ("no", ["no way"]),
])
def test_sub_em_authors_code_variant_matches_their_scorer(pred, answers):
    assert sub_em(pred, answers, variant="authors_code") == _authors_sub_em(pred, answers)


def test_sub_em_variants_differ_where_the_definitions_do():
    assert sub_em("Greenwich Village", ["Greenwich Village, New York City"]) == 0.0  # paper: must contain the gold
    assert sub_em("Greenwich Village", ["Greenwich Village, New York City"], variant="authors_code") == 1.0
    assert sub_em("Lyon", ["Paris", "lyon"]) == 1.0
    assert sub_em("Lyon", ["Paris", "lyon"], variant="authors_code") == 0.0
    with pytest.raises(ValueError, match="variant='either' is not allowed; choose one of"):
        sub_em("x", ["x"], variant="either")


@pytest.mark.parametrize("pred,gold,expected", [
    ("no way", "no", 0.0),  # 2/3 without the rule
    ("no", "no", 1.0),
    ("yes", "yes indeed", 0.0),
    ("Yes.", "yes", 1.0),  # equal after normalisation
    ("noanswer", "no answer", 0.0),
    ("the big red barn", "red barn door", 2 / 3),  # ordinary answers keep partial credit
])
def test_f1_yes_no_rule_of_hotpotqa_and_flashrag_scorers(pred, gold, expected):
    assert f1(pred, [gold]) == pytest.approx(expected)


def test_f1_takes_the_best_gold_under_the_yes_no_rule():
    assert f1("no", ["yes", "no"]) == 1.0
    assert f1("no way", ["no", "way out"]) == pytest.approx(1 / 2)  # "way out" still gives partial credit


def test_bad_gold_answers_are_named():
    for metric in (em, f1, sub_em):
        with pytest.raises(ValueError, match="non-empty list of strings"):
            metric("x", "Paris")
        with pytest.raises(ValueError, match="non-empty list of strings"):
            metric("x", [])
