"""Mem-α's tasks: a stream of chunks to memorise, then questions answered from the memory alone; and readers of the
files the Mem-α authors and MemoryAgentBench publish.

- Mem-α parquet / JSONL rows: {"instance_id", "prompt" (what the user asks the agent to memorise for), "chunks" (a
  JSON list of strings, or the list itself), "questions_and_answers" (a JSON list of {"question", "answer"
  [, "evidence_idx"]}), "data_source", "metadata", "num_chunks", "num_questions"}.
- MemoryAgentBench rows: {"context" (one long text), "questions" [...], "answers" [[...] per question],
  "metadata": {"source", ...}}, read by the benchmark harness's reader (memory_benchmarks.mab_instance), its context
  packed by sentences into chunks of `chunk_tokens` tokens.
Errors name the file, the row and the key. A question whose gold answers are all empty (or missing) cannot be scored:
it is left out with a warning naming the row and the question, and so is a row left without questions; other empty
golds beside a real one are dropped. A file without one scorable row is an error.
"""

from __future__ import annotations

import functools
import json
import warnings
from dataclasses import dataclass
from pathlib import Path

from memrl_envs.loaders import read_rows
from memrl_envs.text_space import printable


@dataclass(frozen=True)
class MemoryQuestion:
    """One question asked after the last chunk."""

    question: str
    """The question, answered from the memory alone."""
    answers: tuple[str, ...]
    """Gold answers; any one of them counts."""
    evidence: tuple[int, ...] = ()
    """Indices of the chunks that hold the answer, when the data says (for analysis only)."""


@dataclass(frozen=True)
class MemoryTask:
    """One instance: the chunks to memorise in order, then its questions."""

    instance_id: str
    """The data's id of the instance."""
    prompt: str
    """What the user asks the agent to memorise the chunks for (may be empty)."""
    chunks: tuple[str, ...]
    """The stream, one chunk per reply."""
    questions: tuple[MemoryQuestion, ...]
    """Asked after the last chunk."""
    data_source: str
    """Where the instance comes from (it picks how answers are scored, e.g. "squad", "pubmed-rct", "booksum")."""


def _decoded(value, where: str, key: str):
    """A field that the authors' files store either as JSON text or as the value itself."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError as e:
            raise ValueError(f"{where}: {key!r} is a string but not JSON ({e})") from e
    return value


def _strings(value, where: str, key: str) -> tuple[str, ...]:
    """A string or a list of them, non-empty; numbers (class labels such as 3) become their text."""
    if isinstance(value, (str, int, float)) and not isinstance(value, bool):
        value = [value]
    if isinstance(value, (list, tuple)):
        value = [str(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v for v in value]
    if not isinstance(value, (list, tuple)) or not value or not all(isinstance(v, str) and v.strip() for v in value):
        raise ValueError(f"{where}: {key!r} must be a non-empty list of non-empty strings, got {value!r}")
    return tuple(printable(v) for v in value)


def _golds(value, where: str, key: str) -> tuple[str, ...]:
    """The non-empty gold answers of `value` (a string, a number or a list of them); () when none is left."""
    if value is None:
        return ()
    if isinstance(value, (str, int, float)) and not isinstance(value, bool):
        value = [value]
    if not isinstance(value, (list, tuple)) or not all(
            isinstance(v, (str, int, float)) and not isinstance(v, bool) for v in value):
        raise ValueError(f"{where}: {key!r} must be a string, a number or a list of them, got {value!r}")
    return tuple(printable(str(v)) for v in value if str(v).strip())


def _scorable(questions: list[MemoryQuestion], at: list[str]) -> tuple[MemoryQuestion, ...]:
    """The questions that have a gold answer; a warning names each one left out."""
    for question, where in zip(questions, at):
        if not question.answers:
            warnings.warn(f"{where}: no non-empty gold answer, so it cannot be scored; it is left out", stacklevel=3)
    return tuple(q for q in questions if q.answers)


def _need(row: dict, key: str, where: str):
    if key not in row:
        raise ValueError(f"{where}: no {key!r} key; found {sorted(row)}")
    return row[key]


def task_from_memalpha_row(row, where: str) -> MemoryTask:
    """A task from one of the Mem-α authors' rows (see the module docstring)."""
    if not isinstance(row, dict):
        raise TypeError(f"{where}: a row must be an object, got {type(row).__name__}")
    chunks = _strings(_decoded(_need(row, "chunks", where), where, "chunks"), where, "chunks")
    pairs = _decoded(_need(row, "questions_and_answers", where), where, "questions_and_answers")
    if not isinstance(pairs, list) or not pairs:
        raise ValueError(f"{where}: 'questions_and_answers' must be a non-empty list, got {pairs!r}")
    questions, at = [], []
    for i, pair in enumerate(pairs):
        at.append(f"{where} question {i}")
        if not isinstance(pair, dict):
            raise ValueError(f"{at[-1]}: must be an object with 'question' and 'answer', got {pair!r}")
        question = _strings(_need(pair, "question", at[-1]), at[-1], "question")[0]
        answers = _golds(pair.get("answer", pair.get("answers")), at[-1], "answer")
        evidence = pair.get("evidence_idx", ())
        evidence = (evidence,) if isinstance(evidence, int) else tuple(e for e in evidence if isinstance(e, int))
        questions.append(MemoryQuestion(question, answers, evidence))
    prompt = row.get("prompt") or ""
    if not isinstance(prompt, str):
        raise ValueError(f"{where}: 'prompt' must be a string, got {type(prompt).__name__}")
    return MemoryTask(instance_id=str(row.get("instance_id", where)), prompt=printable(prompt), chunks=chunks,
                      questions=_scorable(questions, at), data_source=str(row.get("data_source", "")))


def task_from_benchmark_row(row, where: str, index: int, chunk_tokens: int, tokenizer_path: str | None = None
                            ) -> MemoryTask:
    """A task from MemoryAgentBench row `index`, read as the benchmark harness reads it (`memory_benchmarks.
    mab_instance`: its context packed by sentences into chunks of at most `chunk_tokens` tokens, whitespace words
    without a tokenizer); empty golds are dropped as for the authors' rows."""
    from memrl_envs.memory_benchmarks import mab_instance

    instance = mab_instance(row, where, index, chunk_tokens, tokenizer_path)
    source = instance.instance_id.rpartition("#")[0]
    questions = [MemoryQuestion(q.question, tuple(a for a in q.answers if a.strip())) for q in instance.questions]
    return MemoryTask(instance_id=instance.instance_id, prompt="", chunks=tuple(c.text for c in instance.chunks),
                      questions=_scorable(questions, [f"{where} question {i}" for i in range(len(questions))]),
                      data_source=source)


def load_memory_tasks(path: str | Path, chunk_tokens: int = 2048, tokenizer_path: str | None = None
                      ) -> tuple[MemoryTask, ...]:
    """Tasks of a Mem-α or MemoryAgentBench file (.parquet, .jsonl or .json), each row read by its keys: rows with
    "chunks" are the authors', rows with "context" MemoryAgentBench's (chunked to `chunk_tokens`). A file is read
    once per process, file version and chunking: every env over it shares the same task objects."""
    path = Path(path)
    mtime = path.stat().st_mtime_ns if path.is_file() else 0
    return _load_memory_tasks(str(path), mtime, chunk_tokens, None if tokenizer_path is None else str(tokenizer_path))


@functools.lru_cache(maxsize=4)
def _load_memory_tasks(path: str, mtime_ns: int, chunk_tokens: int, tokenizer_path: str | None
                       ) -> tuple[MemoryTask, ...]:
    tasks, rows = [], 0
    for index, (row, where) in enumerate(read_rows(path)):
        rows += 1
        if isinstance(row, dict) and "chunks" not in row and "context" in row:
            task = task_from_benchmark_row(row, where, index, chunk_tokens, tokenizer_path)
        else:
            task = task_from_memalpha_row(row, where)
        if task.questions:
            tasks.append(task)
        else:
            warnings.warn(f"{where}: no question can be scored, so the row is left out", stacklevel=2)
    if not tasks:
        raise ValueError(f"{path}: none of its {rows} rows has a question with a gold answer, so nothing can be scored")
    return tuple(tasks)
