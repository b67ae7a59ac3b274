"""QA data in the files users already have: the task record every chunk-stream generator returns, and readers of
the row shapes the seed authors' code writes.

Row shapes read (JSON list, JSONL or parquet, one shape per row, recognised by its keys):
- plain: {"question" | "query", "context", "answers" | "answer" | "golden_answers"}; Search-R1 / FlashRAG QA rows
  ({"question", "golden_answers"}) are this shape without a context.
- MemAgent evaluation (`eval_{num_docs}.json`): {"input": question, "context": "Document 1:\\n...", "answers": [...],
  "num_docs", "index"}.
- MemAgent / MEM1 / Search-R1 training rows (verl parquet): {"prompt": [{"role": "user", "content": text}],
  "reward_model": {"ground_truth": answers}, "context"?, "extra_info"?, "data_source"?, "ability"?}. MemAgent's
  ground truth is the answer list and the prompt the bare question (also in extra_info.question); MEM1's is
  {"target": [answers of question 1, answers of question 2, ...]} with the N questions joined by "; " on the
  prompt's last line, after its instructions.
- MemAgent's hotpotqa_*_process rows: {"question", "solution": [...], "context"}.
Text stays Unicode: only control characters other than newline and tab are dropped (memrl_envs.text_space.printable).
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from pathlib import Path

from memrl_envs.text_space import printable

QUESTION_KEYS = ("question", "query", "input")
"""Row keys read as the question, first match wins ("input" is the question in MemAgent's evaluation files)."""
CONTEXT_KEYS = ("context",)
"""Row keys read as the long context."""
ANSWER_KEYS = ("answers", "answer", "golden_answers", "solution")
"""Row keys read as the gold answers (a string or a list of strings), first match wins."""
SUFFIXES = (".json", ".jsonl", ".parquet")
"""File types `read_rows` reads."""
_QUESTIONS_LABEL = re.compile(r"^\s*(?:answer\b[^:\n]*\bquestions?|questions?)\s*:\s*", re.IGNORECASE)
"""The label before the questions on a verl prompt's last line: MEM1's "Answer the following questions:",
Search-R1's "Question:"."""


@dataclass(frozen=True)
class QATask:
    """One question over a context made of documents."""

    question: str
    """The question the agent must answer after reading every document."""
    documents: tuple[str, ...]
    """The context's units in reading order; the context is them joined by "\\n"."""
    answers: tuple[str, ...]
    """Gold answers; any one of them is correct."""
    gold_facts: tuple[str, ...] = ()
    """Sentences of the context a perfect memory keeps (empty when unknown, as for files)."""

    @property
    def context(self) -> str:
        """The documents joined by newlines."""
        return "\n".join(self.documents)


def read_rows(path: str | Path) -> list[tuple[object, str]]:
    """The rows of a .json (a list of rows), .jsonl (one row a line) or .parquet file, each with a "where" label
    ("file line n" / "file row i") for error messages."""
    path = Path(path)
    if path.suffix not in SUFFIXES:
        raise ValueError(f"{path}: unsupported file type {path.suffix!r}; allowed: {', '.join(SUFFIXES)}")
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such data file")
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        rows = [(row, f"{path} row {i}") for i, row in enumerate(pq.read_table(path).to_pylist())]
    elif path.suffix == ".json":
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}: not valid JSON ({e})") from e
        if not isinstance(data, list):
            raise ValueError(f"{path}: a .json data file must hold a list of rows, got {type(data).__name__}")
        rows = [(row, f"{path} row {i}") for i, row in enumerate(data)]
    else:
        rows = []
        with path.open(encoding="utf-8") as lines:
            for n, line in enumerate(lines, start=1):
                if not line.strip():
                    continue
                try:
                    rows.append((json.loads(line), f"{path} line {n}"))
                except json.JSONDecodeError as e:
                    raise ValueError(f"{path} line {n}: not valid JSON ({e})") from e
    if not rows:
        raise ValueError(f"{path}: holds no rows")
    return rows


def _pick(row: dict, keys: tuple[str, ...], where: str, what: str):
    for key in keys:
        if key in row:
            return row[key]
    raise ValueError(f"{where}: no {what} key; allowed keys are {', '.join(map(repr, keys))}, found {sorted(row)}")


def _answer_list(answers, where: str) -> tuple[str, ...]:
    """Gold answers (a string or a list of non-empty strings), control characters dropped."""
    if isinstance(answers, str):
        answers = [answers]
    good = isinstance(answers, (list, tuple)) and answers and all(isinstance(a, str) and a.strip() for a in answers)
    if not good:
        raise ValueError(f"{where}: answers must be a non-empty string or list of non-empty strings, got {answers!r}")
    return tuple(printable(a) for a in answers)


def _question(text, where: str) -> str:
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"{where}: the question must be a non-empty string, got {text!r}")
    return printable(text.strip())


def _is_verl(row: dict) -> bool:
    return "prompt" in row and "reward_model" in row


def _prompt_text(row: dict, where: str) -> str:
    """The last user message of a verl row's chat `prompt`."""
    messages = row["prompt"]
    users = [m.get("content") for m in messages if isinstance(m, dict) and m.get("role") == "user"] if isinstance(
        messages, list) else []
    if not users or not isinstance(users[-1], str):
        raise ValueError(f"{where}: 'prompt' must be a chat message list with a user message, got {messages!r}")
    return users[-1]


def _ground_truth(row: dict, where: str):
    truth = row["reward_model"].get("ground_truth") if isinstance(row["reward_model"], dict) else None
    if isinstance(truth, dict):
        truth = truth.get("target")
    if truth is None:
        raise ValueError(f"{where}: 'reward_model' must hold ground_truth (answers, or {{'target': answers}}), got "
                         f"{row['reward_model']!r}")
    return truth


def _split_questions(line: str, n: int, where: str) -> list[str]:
    """The `n` questions MEM1 joins with "; " on one line (each made to end in "?"), found even when a question
    holds "; " itself."""
    for separator, keep in (("; ", ""), ("?; ", "?")):
        parts = line.split(separator)
        if len(parts) == n:
            return [part + keep if i < n - 1 else part for i, part in enumerate(parts)]
    raise ValueError(f"{where}: the ground truth has answers for {n} questions, but the prompt's questions line "
                     f"{line!r} does not split into {n} questions at '; '")


def questions_and_answers(row, where: str) -> list[tuple[str, tuple[str, ...]]]:
    """A QA row's questions, each with its gold answers: one pair for single-question rows, N for MEM1's
    multi-objective rows. See the module docstring for the shapes read; `where` names the row in errors."""
    if not isinstance(row, dict):
        raise TypeError(f"{where}: a row must be an object with a question and answers, got {type(row).__name__}")
    if not _is_verl(row):
        return [(_question(_pick(row, QUESTION_KEYS, where, "question"), where),
                 _answer_list(_pick(row, ANSWER_KEYS, where, "answers"), where))]
    truth = _ground_truth(row, where)
    text = _prompt_text(row, where)
    if isinstance(truth, (list, tuple)) and truth and all(isinstance(t, (list, tuple)) for t in truth):
        lines = [line for line in text.strip().splitlines() if line.strip()]
        line = _QUESTIONS_LABEL.sub("", lines[-1] if lines else "").strip()
        questions = _split_questions(line, len(truth), where) if len(truth) > 1 else [line]
        return [(_question(q, where), _answer_list(list(t), f"{where} question {i + 1}"))
                for i, (q, t) in enumerate(zip(questions, truth))]
    extra = row.get("extra_info") if isinstance(row.get("extra_info"), dict) else {}
    question = row.get("question") or extra.get("question")
    if not question:  # MemAgent's prompt is the bare question; Search-R1's ends in a "Question: ..." line
        lines = [line for line in text.strip().splitlines() if line.strip()]
        question = _QUESTIONS_LABEL.sub("", lines[-1]) if lines else text
    return [(_question(question, where), _answer_list(truth, where))]


def question_and_answers(row, where: str) -> tuple[str, tuple[str, ...]]:
    """A single-question row's question and gold answers (see `questions_and_answers`)."""
    pairs = questions_and_answers(row, where)
    if len(pairs) != 1:
        raise ValueError(f"{where}: holds {len(pairs)} questions where one is expected (a MEM1 multi-objective row "
                         "belongs to the search env, as one N-question task)")
    return pairs[0]


def _task_from_row(row, where: str) -> QATask:
    question, answers = question_and_answers(row, where)
    context = _pick(row, CONTEXT_KEYS, where, "context")
    if not isinstance(context, str):
        raise TypeError(f"{where}: the context must be a string, got {type(context).__name__}")
    # MemAgent's evaluation reads the stripped context; documents stay lines, so "".join of the chunks is it.
    return QATask(question=question, documents=tuple(printable(context.strip()).split("\n")), answers=answers)


@functools.lru_cache(maxsize=4)
def _load_tasks(path: str, mtime_ns: int) -> tuple[QATask, ...]:
    return tuple(_task_from_row(row, where) for row, where in read_rows(path))


def load_tasks(path: str | Path) -> tuple[QATask, ...]:
    """Tasks of a chunk-stream data file (.json list, .jsonl, .parquet): a question, a long context and gold answers
    per row, in any shape of the module docstring that has a context (MemAgent's evaluation and training files
    included). The context is split into documents at newlines, so chunking never cuts a line it can keep whole.

    Loaded once per process and file version: the envs of a runner share one copy (tasks are immutable)."""
    path = Path(path).absolute()
    return _load_tasks(str(path), path.stat().st_mtime_ns if path.is_file() else 0)
