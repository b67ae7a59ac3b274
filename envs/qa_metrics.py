"""QA answer metrics: SQuAD normalisation, \\boxed{} extraction, EM, token F1 and MemAgent's sub_em."""

from __future__ import annotations

import re
import string
from collections import Counter

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = set(string.punctuation)
_BOXED = "\\boxed{"


def normalize_answer(text: str) -> str:
    """SQuAD normalisation: lowercase, drop punctuation, drop the articles a/an/the, collapse whitespace."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCT)
    return " ".join(_ARTICLES.sub(" ", text).split())


def extract_boxed(text: str) -> str | None:
    """Content of the last \\boxed{...} in `text` (nested braces kept balanced); None if there is none.

    An unclosed last box is not an answer, so the search falls back to the box before it.
    """
    start = text.rfind(_BOXED)
    while start != -1:
        depth, i = 1, start + len(_BOXED)
        while i < len(text):
            if text[i] == "{":
                depth += 1
            elif text[i] == "}":
                depth -= 1
                if depth == 0:
                    return text[start + len(_BOXED) : i]
            i += 1
        start = text.rfind(_BOXED, 0, start)
    return None


def _check_answers(answers: list[str]) -> None:
    if isinstance(answers, str) or not answers:
        raise ValueError(f"gold answers must be a non-empty list of strings, got {answers!r}")


def em(prediction: str, answers: list[str]) -> float:
    """1.0 if the normalised prediction equals any normalised gold answer, else 0.0."""
    _check_answers(answers)
    pred = normalize_answer(prediction)
    return float(any(pred == normalize_answer(a) for a in answers))


def _f1(prediction: str, answer: str) -> float:
    pred, gold = normalize_answer(prediction).split(), normalize_answer(answer).split()
    common = sum((Counter(pred) & Counter(gold)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred), common / len(gold)
    return 2 * precision * recall / (precision + recall)


def f1(prediction: str, answers: list[str]) -> float:
    """SQuAD token-level F1 between the normalised prediction and the best-matching gold answer."""
    _check_answers(answers)
    return max(_f1(prediction, a) for a in answers)


def sub_em(prediction: str, answers: list[str], either_way: bool = False) -> float:
    """MemAgent's sub_em: 1.0 if the normalised prediction contains a normalised gold answer (max over golds).

    This is the paper's definition (A.4: "correct if it contains all the elements of the ground truth").
    `either_way=True` is the authors' code variant, which also counts a prediction contained in a gold
    answer. An empty normalised prediction never scores: the empty string is contained in everything.
    """
    _check_answers(answers)
    pred = normalize_answer(prediction)
    if not pred:
        return 0.0
    for answer in answers:
        gold = normalize_answer(answer)
        if gold and (gold in pred or (either_way and pred in gold)):
            return 1.0
    return 0.0
