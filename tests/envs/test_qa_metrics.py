import pytest

from envs.qa_metrics import em, extract_boxed, f1, normalize_answer, sub_em


def test_normalize_answer_is_squad_normalisation():
    assert normalize_answer("  The Eiffel-Tower, in PARIS!  ") == "eiffeltower in paris"
    assert normalize_answer("An apple a day") == "apple day"
    assert normalize_answer("theatre") == "theatre"  # articles only as whole words
    assert normalize_answer("...") == ""


def test_extract_boxed_takes_the_last_box_and_balances_braces():
    assert extract_boxed("so \\boxed{Paris}") == "Paris"
    assert extract_boxed("\\boxed{a} then \\boxed{b}") == "b"
    assert extract_boxed("\\boxed{\\frac{1}{2}} done") == "\\frac{1}{2}"
    assert extract_boxed("\\boxed{}") == ""
    assert extract_boxed("no box here") is None
    assert extract_boxed("\\boxed{open") is None
    assert extract_boxed("\\boxed{x} and \\boxed{unclosed") == "x"  # an unclosed last box is not an answer


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
    assert sub_em("Greenwich Village", ["Greenwich Village, New York City"], either_way=True) == 1.0  # authors' code
    assert sub_em("Lyon", ["Paris", "lyon"]) == 1.0  # max over gold answers
    assert sub_em("", ["Paris"]) == 0.0
    assert sub_em("the", ["Paris"], either_way=True) == 0.0  # empty after normalisation never scores


def test_bad_gold_answers_are_named():
    for metric in (em, f1, sub_em):
        with pytest.raises(ValueError, match="non-empty list of strings"):
            metric("x", "Paris")
        with pytest.raises(ValueError, match="non-empty list of strings"):
            metric("x", [])
