"""QA answer metrics: SQuAD normalisation, EM, token F1 (with the HotpotQA yes/no rule), MemAgent's sub_em in
the paper's definition and the authors' evaluation code's, and MemAgent's training reward is_equiv, which reads the
reply's \\boxed{} answer with memrl.text.extract_boxed (tests/envs/test_qa_metrics_fidelity.py restates the authors'
code and compares)."""

from __future__ import annotations

import re
import string
from collections import Counter

from memrl.text import extract_boxed

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = set(string.punctuation)
_CLOSED_CLASS = ("yes", "no", "noanswer")
"""Normalised answers that share no partial credit: HotpotQA's and FlashRAG's F1 is 0 when either side is one of
these and the two differ."""
SUB_EM_VARIANTS = ("paper", "authors_code")
"""How `sub_em` counts containment; see `sub_em`."""


def normalize_answer(text: str) -> str:
    """SQuAD normalisation: lowercase, drop punctuation, drop the articles a/an/the, collapse whitespace."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCT)
    return " ".join(_ARTICLES.sub(" ", text).split())


_MATH_STRIP = (("\n", ""), ("\\!", ""), ("\\\\", "\\"), ("tfrac", "frac"), ("dfrac", "frac"), ("\\left", ""),
               ("\\right", ""), ("^{\\circ}", ""), ("^\\circ", ""), ("\\$", ""), ("\\%", ""), (" .", " 0."),
               ("{.", "{0."), (" ", ""))
IS_EQUIV_TAIL = 300
"""MemAgent's training reward reads only the last this many characters of the answer."""


def _math_strip(text: str) -> str:
    for old, new in _MATH_STRIP:
        text = text.replace(old, new)
    return text


def is_equiv(response: str, answers: list[str]) -> float:
    """MemAgent's training reward (the paper's eq. 3, the authors' hotpotqa.compute_score): 1.0 if the last box
    in the lowercased last IS_EQUIV_TAIL characters of `response` equals a lowercased gold answer once both have
    the MATH-style strip (line breaks and spaces removed, LaTeX spacing and unit marks dropped); else 0.0.
    Unlike `em`, articles and punctuation count ("the beatles" is not "beatles") and spaces do not."""
    _check_answers(answers)
    box = extract_boxed(response[-IS_EQUIV_TAIL:].lower())
    if box is None:
        return 0.0
    pred = _math_strip(box)
    return float(any(pred == _math_strip(a.lower()) for a in answers))


def _check_answers(answers: list[str]) -> None:
    if isinstance(answers, str) or not answers:
        raise ValueError(f"gold answers must be a non-empty list of strings, got {answers!r}")


def em(prediction: str, answers: list[str]) -> float:
    """1.0 if the normalised prediction equals any normalised gold answer, else 0.0."""
    _check_answers(answers)
    pred = normalize_answer(prediction)
    return float(any(pred == normalize_answer(a) for a in answers))


def _f1(prediction: str, answer: str) -> float:
    pred, gold = normalize_answer(prediction), normalize_answer(answer)
    if pred != gold and (pred in _CLOSED_CLASS or gold in _CLOSED_CLASS):
        return 0.0
    pred, gold = pred.split(), gold.split()
    common = sum((Counter(pred) & Counter(gold)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred), common / len(gold)
    return 2 * precision * recall / (precision + recall)


def f1(prediction: str, answers: list[str]) -> float:
    """SQuAD token-level F1 between the normalised prediction and the best-matching gold answer, with the rule every
    HotpotQA / FlashRAG scorer applies: when the prediction or the gold answer is yes, no or noanswer (normalised)
    and they differ, F1 is 0 ("no way" against "no" scores 0, not 2/3)."""
    _check_answers(answers)
    return max(_f1(prediction, a) for a in answers)


def sub_em(prediction: str, answers: list[str], variant: str = "paper") -> float:
    """MemAgent's sub_em: containment of the normalised answer, 1.0 or 0.0.

    variant="paper" (A.4: "correct if it contains all the elements of the ground truth"): the normalised prediction
    contains a normalised gold answer, any of them; an empty normalised prediction never scores.
    variant="authors_code" (their RULER-HotpotQA evaluation, exactly): only the first gold answer counts, and
    containment either way does, the prediction inside the gold included; an empty prediction scores 0, but one
    that normalises to nothing ("the") is contained in every gold and scores 1.
    """
    _check_answers(answers)
    if variant not in SUB_EM_VARIANTS:
        raise ValueError(f"sub_em variant={variant!r} is not allowed; choose one of {SUB_EM_VARIANTS}")
    pred = normalize_answer(prediction)
    if variant == "authors_code":
        gold = normalize_answer(answers[0])
        return float(bool(prediction) and (gold in pred or pred in gold))
    if not pred:
        return 0.0
    return float(any(gold and gold in pred for gold in map(normalize_answer, answers)))
