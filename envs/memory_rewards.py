"""Mem-α's reward pieces: answer scoring by data source, tool-call success, the memory-content judge's rules, memory
compression, and their sum for each chunk's reply.

    r_row = r_acc + beta * r_compress + r_tool_row + gamma * r_content_row       (paper, eq. 1; beta 0.05, gamma 0.1)

r_acc (mean score over the instance's questions) and r_compress = 1 - memory_tokens / chunk_tokens are computed once
from the final memory and shared by every row of the trajectory; r_tool (share of a reply's calls that executed)
and r_content (share of a reply's calls whose written content is valid for its memory type) belong to each row.
A reply with no call gets r_tool = r_content = 0, as in the authors' code.

Two switches follow the authors' code where it departs from the paper (variant="authors_code"): an insert of
content already stored counts as a failed call in r_tool (the paper counts every call that executed), and for
SQuAD/HotpotQA sources only the first gold answer is matched (the paper: any gold answer).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from envs.memory_store import CallResult

VARIANTS = ("paper", "authors_code")
"""Reward variants: the paper's, or the Mem-α authors' code where it differs (see the module docstring)."""

METRICS = ("substring", "label", "keywords", "ratio")
"""How an answer is scored: a gold answer within the prediction; the \\boxed{} label equal to the gold digit(s); the
share of the gold's comma-separated keywords the prediction holds; the share of the gold's ";"-separated parts it
holds (PerLTQA)."""

_SOURCE_METRICS = (
    ("label", ("pubmed-rct", "ttl", "icl", "test_time_learning", "trec", "nlu", "clinic", "banking")),
    ("keywords", ("booksum", "long_range_understanding")),
    ("ratio", ("perltqa",)),
)
"""Data-source name fragments and the metric they pick (first match wins; anything else scores by substring)."""

_BOXED = re.compile(r"\\boxed\{([^}]*)\}")
_DIGITS = re.compile(r"^\d+$")
_TIME = re.compile(
    r"\b(\d{1,2}:\d{2}|\d{4}-\d{1,2}-\d{1,2}|\d{1,2}/\d{1,2}(/\d{2,4})?|(19|20)\d{2}|"
    r"jan(uary)?|feb(ruary)?|mar(ch)?|apr(il)?|may|june?|july?|aug(ust)?|sep(tember)?|oct(ober)?|nov(ember)?|"
    r"dec(ember)?|monday|tuesday|wednesday|thursday|friday|saturday|sunday|yesterday|today|tonight|tomorrow|"
    r"morning|afternoon|evening|night|day \d+|week \d+|timestamp)\b", re.I)
"""Signs of when something happened, which an episodic item must carry."""
_PLACEHOLDER = re.compile(
    r"^\W*(here (we|i) (save|store|keep)|here (are|is) (some|the)|this is (the |a )?summary|summary:?\W*$|"
    r"to be (filled|updated|determined)|tbd|n/?a|none|empty|placeholder|no information)\b", re.I)
"""Core contents that only announce information instead of holding it."""


def metric_for(data_source: str) -> str:
    """The metric (one of METRICS) a data source is scored with."""
    source = data_source.lower()
    for metric, fragments in _SOURCE_METRICS:
        if any(fragment in source for fragment in fragments):
            return metric
    return "substring"


def strip_thinking(prediction: str) -> str:
    """The answer after a closed <think> block; an unclosed block leaves nothing (the answer never came)."""
    if "</think>" in prediction:
        return prediction.rsplit("</think>", 1)[1].strip()
    return "" if "<think>" in prediction else prediction.strip()


def score_answer(prediction: str, answers: Sequence[str], data_source: str, variant: str = "paper") -> float:
    """One answer's score in [0, 1] by its data source's metric (see METRICS)."""
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
    if not answers:
        raise ValueError("score_answer needs at least one gold answer")
    prediction = strip_thinking(prediction)
    metric = metric_for(data_source)
    if metric == "label":
        boxed = _BOXED.search(prediction)
        label = (boxed.group(1) if boxed else prediction).strip().strip("\"'").strip()
        return float(bool(_DIGITS.match(label)) and any(label == str(a).strip().strip("\"'") for a in answers))
    lowered = prediction.lower()
    if metric == "keywords":
        return max(_share(lowered, str(a).split(",")) for a in answers)
    if metric == "ratio":
        return max(_share(lowered, str(a).split(";")) for a in answers)
    golds = answers[:1] if variant == "authors_code" else answers
    return float(any(str(a).strip().lower() in lowered for a in golds if str(a).strip()))


def expert_answer(gold: str, data_source: str) -> str:
    """A reply that `score_answer` gives full marks for `gold`: \\boxed{gold} for labels, the gold itself otherwise."""
    return f"\\boxed{{{gold}}}" if metric_for(data_source) == "label" else gold


def _share(lowered: str, parts: Sequence[str]) -> float:
    parts = [p.strip().lower() for p in parts if p.strip()]
    return sum(p in lowered for p in parts) / len(parts) if parts else 0.0


def tool_reward(results: Sequence[CallResult], variant: str = "paper") -> float:
    """r_tool of one reply: the share of its calls that executed (with variant "authors_code", a skipped duplicate
    insert counts as failed); 0 for a reply without calls."""
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
    if not results:
        return 0.0
    return sum(r.ok and not (variant == "authors_code" and r.skipped) for r in results) / len(results)


def content_valid(memory_type: str, content: str) -> bool:
    """The rules judge: is `content` what `memory_type` should hold?

    core: a real paragraph, neither naming itself ("core memory ...") nor a placeholder ("Here we save the summary");
    semantic: a statement of at least three words that is not a dated event (that belongs to episodic memory);
    episodic: an event of at least three words that says when it happened (a date, time, weekday or part of day).
    """
    text = " ".join(content.split())
    words = len(text.split())
    if memory_type == "core":
        return words >= 3 and "core memory" not in text.lower() and not _PLACEHOLDER.match(text)
    if memory_type == "semantic":
        opening = " ".join(text.split()[:6])
        dated_event = opening.lower().startswith(("at ", "on ")) and bool(_TIME.search(opening))
        return words >= 3 and not dated_event
    if memory_type == "episodic":
        return words >= 3 and bool(_TIME.search(text))
    return False


def content_reward(results: Sequence[CallResult], judge=None) -> float:
    """r_content of one reply: the share of its calls that wrote valid content; deletes, skipped inserts and failed
    calls count as not valid, as in the authors' code. `judge(memory_type, content) -> bool` defaults to the rules
    (`content_valid`); an LLM judge plugs in here. 0 for a reply without calls."""
    if not results:
        return 0.0
    judge = judge or content_valid
    return sum(bool(r.ok and r.content and judge(r.memory_type, r.content)) for r in results) / len(results)


def compression_reward(memory_tokens: int, chunk_tokens: int) -> float:
    """r_compress = 1 - memory_tokens / chunk_tokens (negative when the memory outgrows what it read)."""
    if chunk_tokens <= 0:
        raise ValueError(f"chunk_tokens must be > 0, got {chunk_tokens}")
    return 1.0 - memory_tokens / chunk_tokens


def row_rewards(accuracy: float, compression: float, tool: Sequence[float], content: Sequence[float],
                beta: float = 0.05, gamma: float = 0.1) -> list[float]:
    """Each chunk row's reward: the shared r_acc + beta * r_compress plus that row's r_tool + gamma * r_content."""
    if len(tool) != len(content):
        raise ValueError(f"one r_tool and one r_content per row: got {len(tool)} and {len(content)}")
    shared = accuracy + beta * compression
    return [shared + t + gamma * c for t, c in zip(tool, content)]
