"""Mem-α's reward pieces: answer scoring by data source, tool-call success, the memory-content judge's rules, memory
compression, and their sum for each chunk's reply.

    r_row = r_acc + beta * r_compress + r_tool_row + gamma * r_content_row       (paper, eq. 1; beta 0.05, gamma 0.1)

r_acc (mean score over the instance's questions) and r_compress = 1 - memory_tokens / chunk_tokens are computed once
from the final memory and shared by every row of the trajectory; r_tool and r_content belong to each row:

- r_tool: the share of the reply's parsed calls that executed (`CallResult.success`; what executes, and what
  authors_code counts, is memory_store's table: a skipped duplicate insert counts as executed under the paper,
  as failed under authors_code);
- r_content: the share of the reply's parsed calls whose write is valid for its memory type. Every insert and
  update with a known memory type and non-blank content is judged, whether it executed or not (the paper averages
  validity over all operations of the action; the authors' server judges every such call): the same insert twice
  gives 1.0, an update of an unknown id 1.0 when its content is valid; deletes and other calls count as not valid
  (so does a call whose arguments cannot be read or whose memory_type is not a string, where their code raises).

A reply with no call gets r_tool = r_content = 0, as in the authors' code.

Answers (`score_answer`). The answer text first loses its thinking as the authors' rollout and reward do: the text
after the first "</think>" (up to a second one, if any), or "Empty" when a "<think>" is never closed. Then, by data
source (the authors' training reward, and their evaluation script for the MemoryAgentBench sources only it names):

| data source                        | metric     | score                                                         |
|------------------------------------|------------|---------------------------------------------------------------|
| booksum, long_range_understanding* | keywords   | share of the gold's ","-separated keywords (stripped) found   |
| infbench_sum*                      | keywords   | share of the gold keywords found (a list as given; one string |
|                                    |            | split at ", "), case-insensitive                              |
| pubmed-rct, *ttl_train*, *icl*,    | label      | \\boxed{} (or the whole answer) is digits only and equals the |
| test_time_learning*                |            | gold                                                          |
| lme_train, longmemeval_s*          | judge      | an LLM judge (memory_answer.LMEJudge) says yes, never no      |
| perltqa                            | ratio      | gold with ";": share of its parts found; else the gold found  |
| squad, hotpotqa                    | substring  | the gold within the answer, case-insensitive                  |
| *eventqa*                          | all        | 1 when every gold element is within the answer                |
| *detectiveqa*                      | boxed      | the \\boxed{} text (or the answer) equals the gold            |
| anything else (ruler_qa*, ...)     | normalized | some gold within the answer, or within its "Answer:" line /   |
|                                    |            | first line, both lower-cased, without punctuation, articles   |
|                                    |            | and extra spaces                                              |

(* memrl's own synthetic sources; the authors' code scores these names otherwise.) Where the paper speaks and the
authors' code departs (variant="authors_code"): SQuAD/HotpotQA and label sources match only the first gold (paper:
any gold); a PerLTQA gold with ";" has only its parts lower-cased, not the answer, and empty parts count as found
(paper: both sides lower-cased, empty parts dropped, best over the golds). Not emulated: the authors score other
infbench sources by ROUGE-L and ruler_niah* sources by the share of gold elements found (here: normalized), and
their evaluation script splits booksum keywords at ", ".
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable, Sequence

from memrl_envs.memory_store import VARIANTS, CallResult

METRICS = ("substring", "label", "keywords", "ratio", "judge", "all", "boxed", "normalized")
"""How an answer is scored (see the module docstring's table)."""

_BOXED = re.compile(r"\\boxed\{([^}]*)\}")
_DIGITS = re.compile(r"^\d+$")
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_ANSWER_LINE = (re.compile(r"(?:Answer:)(.*)(?:\n|$)", re.I), re.compile(r"(?:^)(.*)(?:\n|$)"))
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
    """The metric (one of METRICS) a data source is scored with (the module docstring's table)."""
    source = data_source
    if source == "booksum" or source.startswith(("infbench_sum", "long_range_understanding")):
        return "keywords"
    if source == "pubmed-rct" or "ttl_train" in source or "icl" in source or source.startswith("test_time_learning"):
        return "label"
    if source == "lme_train" or source.startswith("longmemeval_s"):
        return "judge"
    if source == "perltqa":
        return "ratio"
    if source in ("squad", "hotpotqa"):
        return "substring"
    if "eventqa" in source:
        return "all"
    if "detectiveqa" in source:
        return "boxed"
    return "normalized"


def strip_thinking(prediction: str) -> str:
    """The answer as the authors' rollout and reward read it: the text after the first "</think>" up to a second
    one if any (stripped), or "Empty" when a "<think>" is left open."""
    if "</think>" in prediction:
        prediction = prediction.split("</think>")[1].strip()
    elif "<think>" in prediction:
        prediction = "Empty"
    if "<think>" in prediction and "</think>" in prediction:
        prediction = prediction.split("</think>")[1].strip()
    return "Empty" if "<think>" in prediction else prediction


def normalize_answer(text: str) -> str:
    """Lower-cased, without punctuation, articles and extra spaces (the SQuAD normalisation MemoryAgentBench uses)."""
    text = "".join(c for c in text.lower() if c not in string.punctuation)
    return " ".join(_ARTICLES.sub(" ", text).split())


def answer_line(prediction: str) -> str:
    """The text after "Answer:" on its line, else the first line (stripped)."""
    for pattern in _ANSWER_LINE:
        match = pattern.search(prediction)
        if match:
            return re.sub(r"^Answer:", "", match[1].strip(), flags=re.I).strip()
    return prediction


def judge_verdict(reply: str) -> float:
    """The LongMemEval judge's verdict: 1.0 when its reply holds "yes" and nowhere "no" (lower-cased), else 0.0."""
    reply = reply.strip().lower()
    return float("yes" in reply and "no" not in reply)


def _keywords(answers: Sequence[str], source: str) -> list[str]:
    if len(answers) > 1:  # a keyword list as the file gives it
        return [str(a) for a in answers]
    if source.startswith("infbench_sum"):
        return str(answers[0]).split(", ")
    return [k.strip() for k in str(answers[0]).split(",")]


def score_answer(prediction: str, answers: Sequence[str], data_source: str, variant: str = "paper",
                 question: str = "", judge: Callable[[str, str, str], float] | None = None) -> float:
    """One answer's score in [0, 1] by its data source's metric (module docstring). `judge(question, gold, answer)`
    scores the "judge" sources (an LLM's verdict); they cannot be scored without one."""
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
    if not answers:
        raise ValueError("score_answer needs at least one gold answer")
    authors = variant == "authors_code"
    prediction = strip_thinking(prediction)
    metric = metric_for(data_source)
    lowered = prediction.lower()
    if metric == "keywords":
        keywords = _keywords(answers, data_source)
        return sum(k.lower() in lowered for k in keywords) / len(keywords)
    if metric == "label":
        boxed = _BOXED.search(prediction)
        label = (boxed.group(1).strip() if boxed else prediction.strip()).strip("\"'").strip()
        golds = answers[:1] if authors else answers
        return float(bool(_DIGITS.match(label)) and any(label == str(g).strip("\"'").strip() for g in golds))
    if metric == "judge":
        if judge is None:
            raise ValueError(f"data source {data_source!r} is scored by an LLM judge (as the Mem-α authors do); "
                             "give the env an answerer or judge= (an http(s) URL or actor:NAME)")
        gold = answers[0] if len(answers) == 1 else str(list(answers))
        return float(judge(question, gold, prediction))
    if metric == "ratio":
        if authors:
            gold = answers[0]
            if ";" not in gold:
                return float(gold.lower() in lowered)
            parts = gold.split(";")
            return sum(p.lower().strip() in prediction for p in parts) / len(parts)
        return max(_share(lowered, a.split(";")) for a in answers)
    if metric == "substring":
        golds = answers[:1] if authors else answers
        return float(any(str(g).lower() in lowered for g in golds))
    if metric == "all":
        return float(all(str(g).lower() in lowered for g in answers))
    if metric == "boxed":
        boxed = _BOXED.search(prediction)
        return float((boxed.group(1).strip() if boxed else prediction.strip()) == answers[0])
    whole, line = normalize_answer(prediction), normalize_answer(answer_line(prediction))
    return float(any(normalize_answer(g) in whole or normalize_answer(g) in line for g in answers))


def expert_answer(gold: str, data_source: str) -> str:
    """A reply that `score_answer` gives full marks for `gold`: \\boxed{gold} for labels, the gold itself otherwise."""
    return f"\\boxed{{{gold}}}" if metric_for(data_source) == "label" else gold


def _share(lowered: str, parts: Sequence[str]) -> float:
    parts = [p.strip().lower() for p in parts if p.strip()]
    return sum(p in lowered for p in parts) / len(parts) if parts else 0.0


def tool_reward(results: Sequence[CallResult]) -> float:
    """r_tool of one reply: the share of its calls that count as executed (`CallResult.success`, set by
    memrl_envs.memory_store.execute for its variant); 0 for a reply without calls."""
    return sum(r.success for r in results) / len(results) if results else 0.0


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
    """r_content of one reply: the share of its calls whose write (`CallResult.judged`, executed or not) the judge
    finds valid; deletes and other calls count as not valid, as in the authors' code. `judge(memory_type, content)
    -> bool` defaults to the rules (`content_valid`); an LLM judge plugs in here. 0 for a reply without calls."""
    if not results:
        return 0.0
    judge = judge or content_valid
    return sum(bool(r.judged and judge(*r.judged)) for r in results) / len(results)


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
