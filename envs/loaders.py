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
"""File types `read_rows` reads."""


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
            data = json.loads(path.read_text())
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}: not valid JSON ({e})") from e
        if not isinstance(data, list):
            raise ValueError(f"{path}: a .json data file must hold a list of rows, got {type(data).__name__}")
        rows = [(row, f"{path} row {i}") for i, row in enumerate(data)]
    else:
        rows = []
        for n, line in enumerate(path.read_text().splitlines(), start=1):
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


def question_and_answers(row, where: str, answer_keys: tuple[str, ...] = ANSWER_KEYS) -> tuple[str, tuple[str, ...]]:
    """A QA row's question and gold answers (a string or a list in the row), checked and folded to printable
    ASCII; `where` names the row in errors."""
    if not isinstance(row, dict):
        raise TypeError(f"{where}: a row must be an object with a question and answers, got {type(row).__name__}")
    question = _pick(row, QUESTION_KEYS, where, "question")
    answers = _pick(row, answer_keys, where, "answers")
    if not isinstance(question, str) or not question.strip():
        raise ValueError(f"{where}: the question must be a non-empty string, got {question!r}")
    if isinstance(answers, str):
        answers = [answers]
    good = isinstance(answers, (list, tuple)) and answers and all(isinstance(a, str) and a.strip() for a in answers)
    if not good:
        raise ValueError(f"{where}: answers must be a non-empty string or list of non-empty strings, got {answers!r}")
    # Observations are printable ASCII; fold question, context and answers alike so answers still match.
    folded = tuple(fold_to_ascii(a) for a in answers)
    if not all(a.strip() for a in folded):
        raise ValueError(f"{where}: answers {answers!r} have no printable-ASCII text left after folding accents")
    return fold_to_ascii(question), folded


def _task_from_row(row, where: str) -> QATask:
    question, answers = question_and_answers(row, where)
    context = _pick(row, CONTEXT_KEYS, where, "context")
    if not isinstance(context, str):
        raise TypeError(f"{where}: the context must be a string, got {type(context).__name__}")
    return QATask(question=question, documents=tuple(fold_to_ascii(context).split("\n")), answers=answers)


def load_tasks(path: str | Path) -> list[QATask]:
    """Tasks from a .json (list of rows), .jsonl (one row a line) or .parquet file.

    Each row holds a question ("question" or "query"), a long context ("context" or "input": the MemAgent
    authors' RULER-HotpotQA files use "input") and gold answers ("answers" or "answer", a string or a list).
    The context is split into documents at newlines, so chunking never cuts a line it can keep whole.
    All text is folded to printable ASCII (`fold_to_ascii`), the charset of the env's spaces.
    """
    return [_task_from_row(row, where) for row, where in read_rows(path)]
