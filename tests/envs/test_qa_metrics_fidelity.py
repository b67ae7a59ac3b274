"""MemAgent's answer scoring in memrl (memrl_envs.qa_metrics, used by memrl_envs.chunk_stream) against an independent
restatement of the authors' code, BytedTsinghua-SIA/MemAgent:

- evaluation (taskutils/memory_eval/utils/__init__.py, ruler_hqa.py): SQuAD normalisation; EM and F1 against the
  first gold answer only, F1 with the yes/no/noanswer rule; sub_em is containment either way; an empty
  prediction scores 0 on every metric; the answer is the content of the last \\boxed{...} (brace-matched).
- training reward (verl/utils/reward_score/hotpotqa.py, the paper's eq. 3 "is_equiv"): lowercase the last 300
  characters, take the last box, compare after the MATH-style strip (spaces removed, not SQuAD normalisation).

The restatement is written here from reading that code; none of it is copied. memrl's extract_boxed and is_equiv
(ChunkStream-v0's default reward; reward="em" is the SQuAD-EM variant memrl used before) follow it. Not restated:
the "\\fbox" fallback, and the per-item rounding of F1 to 2 decimals in the evaluation (F1 compared to 0.005).
"""

import re
import string
from collections import Counter

import pytest

from memrl.text import extract_boxed
from memrl_envs.qa_metrics import em, f1, is_equiv, normalize_answer, sub_em


# --- restatement of the authors' evaluation -------------------------------------------------------------------
def ref_norm(s):
    s = s.lower()
    s = "".join(c for c in s if c not in set(string.punctuation))
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    return " ".join(s.split())


def ref_f1(pred, gold):
    p, g = ref_norm(pred), ref_norm(gold)
    closed = {"yes", "no", "noanswer"}
    if (p in closed or g in closed) and p != g:
        return 0.0
    same = sum((Counter(p.split()) & Counter(g.split())).values())
    if not same:
        return 0.0
    prec, rec = same / len(p.split()), same / len(g.split())
    return 2 * prec * rec / (prec + rec)


def ref_eval(pred, golds):
    """(em, f1, sub_em) as the evaluation scores one item: first gold only, empty prediction -> all 0."""
    if not pred:
        return 0.0, 0.0, 0.0
    g = golds[0]
    p_n, g_n = ref_norm(pred), ref_norm(g)
    return float(p_n == g_n), ref_f1(pred, g), float(g_n in p_n or p_n in g_n)


def ref_last_box(text):
    """Content of the box starting at the last "\\boxed" (None when that one is not closed)."""
    if "\\boxed " in text:
        return text.split("\\boxed ")[-1].split("$")[0]
    i = text.rfind("\\boxed")
    if i < 0:
        return None
    depth = 0
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                body = text[i:j + 1]
                return body[len("\\boxed{"):-1] if body.startswith("\\boxed{") else None
    return None


def ref_strip(s):
    for a, b in [("\n", ""), ("\\!", ""), ("\\\\", "\\"), ("tfrac", "frac"), ("dfrac", "frac"), ("\\left", ""),
                 ("\\right", ""), ("^{\\circ}", ""), ("^\\circ", ""), ("\\$", ""), ("\\%", ""), (" .", " 0."),
                 ("{.", "{0.")]:
        s = s.replace(a, b)
    return s.replace(" ", "")


def ref_train_reward(response, golds):
    tail = response[-300:].lower()
    box = ref_last_box(tail)
    if box is None:
        return 0.0
    return max(float(ref_strip(box) == ref_strip(g.lower())) for g in golds)


# --- cases built from the original's edge cases ---------------------------------------------------------------
EVAL_CASES = [
    ("Paris", ["Paris"]), ("paris", ["Paris"]), ("PARIS!", ["Paris"]), ("The Beatles", ["Beatles"]),
    ("beatles", ["The Beatles"]), ("an apple", ["apple"]), ("a", ["a"]), ("the", ["The Who"]),
    ("Théâtre", ["theatre"]), ("Zürich", ["Zürich"]), ("São Paulo", ["Sao Paulo"]), ("東京", ["東京"]),
    ("New York City", ["New York"]), ("New York", ["New York City"]), ("York New", ["New York"]),
    ("yes", ["yes"]), ("yes", ["no"]), ("no way", ["no"]), ("no", ["no way"]), ("noanswer", ["noanswer"]),
    ("Yes.", ["yes"]), ("1,000", ["1000"]), ("3.14", ["3.14"]), ("U.S.A.", ["USA"]),
    ("  spaced   out ", ["spaced out"]),
    ("Barack Obama", ["Obama", "Barack Obama"]), ("Obama", ["Barack Obama", "Obama"]), ("x", ["y", "x"]),
    ("the the the", ["the"]), ("a b a b", ["a b"]), ("b a", ["a b a"]), ("Mr. Smith", ["mr smith"]),
    ("rock-and-roll", ["rock and roll"]), ("rock and roll", ["rockandroll"]), ("", ["Paris"]),
    ("...", ["Paris"]), ("O'Neil", ["ONeil"]), ("1990s", ["1990"]), ("1990", ["the 1990s"]), ("tie tie", ["tie"]),
    ("Los Angeles, California", ["Los Angeles"]), ("apple banana", ["banana apple cherry"]),
]


@pytest.mark.parametrize("pred,golds", [c for c in EVAL_CASES if c[1][0] == c[1][-1] or len(c[1]) == 1])
def test_eval_metrics_match_the_authors_evaluation_single_gold(pred, golds):
    want_em, want_f1, want_sub = ref_eval(pred, golds)
    assert em(pred, golds) == want_em
    assert sub_em(pred, golds, variant="authors_code") == want_sub
    # The authors round each item's F1 to 2 decimals; memrl keeps it exact.
    assert f1(pred, golds) == pytest.approx(want_f1, abs=0.005)
    assert normalize_answer(pred) == ref_norm(pred)


@pytest.mark.parametrize("pred,golds", [c for c in EVAL_CASES if len(c[1]) > 1])
def test_sub_em_authors_code_reads_only_the_first_gold(pred, golds):
    assert sub_em(pred, golds, variant="authors_code") == ref_eval(pred, golds)[2]


BOX_CASES = [
    "The answer is \\boxed{Paris}.", "\\boxed{a} then \\boxed{b}", "\\boxed{x^{2}}", "\\boxed{}", "no box here",
    "\\boxed{Paris", "text \\boxed{{nested}} end", "\\boxed{A} and \\boxed{B} and \\boxed{C}", "\\boxed{ spaced }",
    "\\boxed{Zürich}", "\\boxed{a}}", "{\\boxed{a}}", "\\boxed{The Beatles}",
]


@pytest.mark.parametrize("text", BOX_CASES)
def test_extract_boxed_matches_the_authors_last_box(text):
    assert extract_boxed(text) == ref_last_box(text)


def test_unclosed_last_box_gives_no_answer():
    assert extract_boxed("\\boxed{a} and then \\boxed{b") == ref_last_box("\\boxed{a} and then \\boxed{b") is None


@pytest.mark.parametrize("text", ["so \\boxed Paris$", "\\boxed x", "\\boxed{a} \\boxed b", "$\\boxed 42$ done"])
def test_boxed_with_a_space(text):
    assert extract_boxed(text) == ref_last_box(text)


TRAIN_CASES = [
    ("\\boxed{Paris}", ["Paris"]), ("\\boxed{paris}", ["Paris"]), ("\\boxed{PARIS}", ["paris"]),
    ("\\boxed{Zürich}", ["zürich"]), ("\\boxed{Paris}", ["London", "Paris"]), ("\\boxed{Rome}", ["London", "Paris"]),
    ("no box", ["Paris"]), ("\\boxed{a} \\boxed{b}", ["b"]), ("\\boxed{a} \\boxed{b}", ["a"]),
    ("\\boxed{yes}", ["yes"]), ("\\boxed{yes}", ["no"]),
]


TRAIN_CASES += [
    ("\\boxed{The Beatles}", ["Beatles"]), ("\\boxed{NewYork}", ["New York"]), ("\\boxed{Paris.}", ["Paris"]),
    ("\\boxed{new york}", ["New York"]), ("\\boxed{a}" + "x" * 300, ["a"]), ("x" * 400 + "\\boxed{a}", ["a"]),
    ("\\boxed{\\frac{1}{2}}", ["\\dfrac{1}{2}"]), ("\\boxed{50\\%}", ["50"]), ("\\boxed{Zürich}", ["Zurich"]),
    ("\\boxed{an apple}", ["apple"]), ("\\boxed{}", [""]), ("\\boxed Paris", ["paris"]),
    ("\\boxed{a} \\boxed{b", ["a"]), ("\\boxed{x\ny}", ["xy"]),
]


@pytest.mark.parametrize("response,golds", TRAIN_CASES)
def test_training_reward_is_the_authors_is_equiv(response, golds):
    assert is_equiv(response, golds) == ref_train_reward(response, golds)


@pytest.mark.parametrize("response,golds", TRAIN_CASES[:11])
def test_chunk_stream_em_variant_is_squad_em_on_the_box(response, golds):
    box = extract_boxed(response)
    # The training variant takes any gold answer; the evaluation's EM (ref_eval) only the first.
    assert (0.0 if box is None else em(box, golds)) == max(ref_eval(box or "", [g])[0] for g in golds)
