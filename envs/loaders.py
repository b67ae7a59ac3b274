"""QA tasks: the task record every chunk-stream generator returns, and loaders for real data in local files."""

from __future__ import annotations

import json
import unicodedata
from dataclasses import dataclass
from pathlib import Path

from envs.text_space import CHARSET

QUESTION_KEYS = ("question", "query")
"""Row keys accepted for the question, first match wins."""
CONTEXT_KEYS = ("context", "input")
"""Row keys accepted for the long context, first match wins."""
ANSWER_KEYS = ("answers", "answer")
"""Row keys accepted for the gold answers (a string or a list of strings), first match wins."""
SUFFIXES = (".json", ".jsonl", ".parquet")
"""File types `load_tasks` reads."""


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


def fold_to_ascii(text: str) -> str:
    """Text in the env's printable-ASCII charset: accents folded ("ö" -> "o"), anything else dropped."""
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    return "".join(ch for ch in text if ch in CHARSET)


def _pick(row: dict, keys: tuple[str, ...], where: str, what: str):
    for key in keys:
        if key in row:
            return row[key]
    raise ValueError(f"{where}: no {what} key; allowed keys are {', '.join(map(repr, keys))}, found {sorted(row)}")


def _task_from_row(row, where: str) -> QATask:
    if not isinstance(row, dict):
        raise TypeError(
            f"{where}: a row must be an object with question, context and answers, got {type(row).__name__}"
        )
    question = _pick(row, QUESTION_KEYS, where, "question")
    context = _pick(row, CONTEXT_KEYS, where, "context")
    answers = _pick(row, ANSWER_KEYS, where, "answers")
    if not isinstance(question, str) or not question.strip():
        raise ValueError(f"{where}: the question must be a non-empty string, got {question!r}")
    if not isinstance(context, str):
        raise TypeError(f"{where}: the context must be a string, got {type(context).__name__}")
    if isinstance(answers, str):
        answers = [answers]
    good = isinstance(answers, (list, tuple)) and answers and all(isinstance(a, str) and a.strip() for a in answers)
    if not good:
        raise ValueError(f"{where}: answers must be a non-empty string or list of non-empty strings, got {answers!r}")
    # Observations are printable ASCII; fold question, context and answers alike so answers still match.
    folded = tuple(fold_to_ascii(a) for a in answers)
    if not all(a.strip() for a in folded):
        raise ValueError(f"{where}: answers {answers!r} have no printable-ASCII text left after folding accents")
    return QATask(question=fold_to_ascii(question), documents=tuple(fold_to_ascii(context).split("\n")), answers=folded)


def load_tasks(path: str | Path) -> list[QATask]:
    """Tasks from a .json (list of rows), .jsonl (one row a line) or .parquet file.

    Each row holds a question ("question" or "query"), a long context ("context" or "input": the MemAgent
    authors' RULER-HotpotQA files use "input") and gold answers ("answers" or "answer", a string or a list).
    The context is split into documents at newlines, so chunking never cuts a line it can keep whole.
    All text is folded to printable ASCII (`fold_to_ascii`), the charset of the env's spaces.
    """
    path = Path(path)
    if path.suffix not in SUFFIXES:
        raise ValueError(f"{path}: unsupported file type {path.suffix!r}; allowed: {', '.join(SUFFIXES)}")
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such data file")
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        rows = pq.read_table(path).to_pylist()
        tasks = [_task_from_row(row, f"{path} row {i}") for i, row in enumerate(rows)]
    elif path.suffix == ".json":
        try:
            rows = json.loads(path.read_text())
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}: not valid JSON ({e})") from e
        if not isinstance(rows, list):
            raise ValueError(f"{path}: a .json data file must hold a list of rows, got {type(rows).__name__}")
        tasks = [_task_from_row(row, f"{path} row {i}") for i, row in enumerate(rows)]
    else:
        tasks = []
        for n, line in enumerate(path.read_text().splitlines(), start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path} line {n}: not valid JSON ({e})") from e
            tasks.append(_task_from_row(row, f"{path} line {n}"))
    if not tasks:
        raise ValueError(f"{path}: holds no rows")
    return tasks
