"""The released files of three memory benchmarks, read as released into one shape: an instance is a stream of chunks
(a session, or a piece of a long context, with its date where the benchmark gives one) and the questions asked after
the last chunk.

LongMemEval (github.com/xiaowu0162/LongMemEval, README.md "Dataset Format"; src/evaluation/evaluate_qa.py;
src/generation/run_generation.py): `longmemeval_s`, `longmemeval_m` and `longmemeval_oracle` are each one JSON list
(with or without a .json suffix) of 500 records, one question each:
- `question_id`; an abstention question (its premise is false or never said) has "_abs" in it, which is how the
  authors' evaluate_qa.py picks the abstention judge prompt;
- `question_type`: single-session-user, single-session-assistant, single-session-preference, temporal-reasoning,
  knowledge-update or multi-session; `question`, `answer` (for an abstention question, why it cannot be answered; for
  a preference question, a rubric), `question_date` ("2023/05/30 (Tue) 23:40");
- `haystack_session_ids`, `haystack_dates`, `haystack_sessions`: three parallel lists (by date in _s and _m, not in
  _oracle); a session is a list of turns {"role": "user" | "assistant", "content", "has_answer"?: true on evidence
  turns}; `answer_session_ids`: the evidence sessions.
Each session becomes one chunk, in the file's order, dated by its haystack date. Its text renders the turns the way
the authors' "nl" history format does: "role: content" per turn, content stripped, turns separated by a blank line
(the turn-level has_answer flags are not kept; the question's evidence is its answer_session_ids).

LoCoMo (github.com/snap-research/LoCoMo: README.MD "Data", data/locomo10.json itself, task_eval/gpt_utils.py,
task_eval/evaluation.py): `data/locomo10.json` is one JSON list of 10 samples, each {"sample_id", "conversation",
"qa", "observation", "session_summary", "event_summary"}; the last three (generated and annotated extras) are not read.
- `conversation`: `speaker_a`, `speaker_b`, and per session n (1, 2, ..., in chronological order) `session_<n>`, a list
  of turns {"speaker", "dia_id" ("D<n>:<k>"), "text", and on turns that share a photo "blip_caption" (with "img_url",
  "query", "re-download" on some)}, and `session_<n>_date_time` ("1:56 pm on 8 May, 2023").
- `qa`: {"question", "answer" (a string, or an integer such as a year), "evidence" (dia_ids), "category" (1-5)};
  category 5 is adversarial (the conversation never says it) and carries `adversarial_answer`, the wrong option the
  authors' evaluation offers beside "Not mentioned in the conversation" (two of its questions also have `answer`).
Each non-empty session becomes one chunk dated by its date_time, session_id "session_<n>", in session number order.
Its text renders the turns the way gpt_utils.py's get_input_context does: `Speaker said, "text"` and a line break,
then ` and shared <blip_caption>.` on a turn that shares a photo, then another line break (so turns stand a blank line
apart, a caption on the line under its turn); the session's last line breaks are dropped. A category-5 question is
an abstention question whose answers are its `adversarial_answer` (`answer` where that is missing); every other
question's answers are its `answer`, as text.

MemoryAgentBench (github.com/HUST-AI-HYZ/MemoryAgentBench: conversation_creator.py, utils/eval_data_utils.py,
utils/eval_other_utils.py, configs/data_conf/; data on Hugging Face as ai-hyz/MemoryAgentBench, its dataset card's
features and data/<split>-00000-of-00001.parquet, one file per split: Accurate_Retrieval, Test_Time_Learning,
Long_Range_Understanding, Conflict_Resolution): each row is {"context": string, "questions": list of strings,
"answers": a list of strings per question, "metadata": a struct of "source" (the sub-dataset the repo filters on, e.g.
"ruler_qa1_197K", "longmemeval_s*"), "demo", and the lists "question_ids", "question_types", "question_dates",
"qa_pair_ids", "previous_events", "keypoints", "haystack_sessions" (null where a sub-dataset has none)}. The repo reads
a lone question or answer as a list of one, and gives a row with one question the whole answers list as its golds;
question_ids, question_types and question_dates are indexed per question. A row becomes one instance, "<source>#<row>".
The repo cuts the context with `chunk_text_into_sentences`: NLTK sentences, each counted in tiktoken gpt-4o-mini
tokens, packed in order into a chunk while the sum stays within `chunk_size` (a sentence longer than that is a chunk of
its own, never split), no overlap. `chunk_size` is 4096 in all 23 data configs; the RAG chunk-size ablation runs 512,
and a memory agent's own agent_chunk_size overrides it (4096 in its configs, but for one letta config's 32768). Here
(`chunk_context`) chunks end at the same kind of boundary, a sentence end ([.!?], closing quotes or brackets, then
whitespace: a rule, not NLTK's trained splitter, so an abbreviation may end a sentence here), and each chunk is the
context's own text from its first sentence to its last (the repo joins the sentences with single spaces). Sizes are
counted in whitespace words by default, or in a Hugging Face tokenizer's tokens (`tokenizer_path`): gpt-4o-mini's BPE
table is a download that tiktoken fetches on first use, and an env's budget is its own model's tokens anyway. English
runs roughly 1.3 gpt-4o-mini tokens a word, so 4096 words make chunks about a third longer than the repo's.

Text stays Unicode: only control characters other than newline and tab are dropped (memrl_envs.text_space.printable).
A malformed record raises ValueError naming the file, the record (index and id) and the key, and what is allowed.
"""

from __future__ import annotations

import json
import re
import zlib
from dataclasses import dataclass
from pathlib import Path

from memrl_envs.loaders import read_rows
from memrl_envs.text_space import printable

BENCHMARKS = ("longmemeval", "locomo", "memoryagentbench")
"""The benchmark names `load_benchmark` takes."""
MAB_CHUNK_TOKENS = 4096
"""MemoryAgentBench's `chunk_size` in its data configs: the most tokens (words by default) a context chunk holds."""
_SESSION_KEY = re.compile(r"session_(\d+)")
_SENTENCE_END = re.compile(r"[.!?][\"'\u201d\u2019)\]]*\s+")


@dataclass(frozen=True)
class BenchmarkChunk:
    """One piece of the stream: a whole session, or a piece of a long context."""

    text: str
    """What the agent reads (sessions rendered as the module docstring says)."""
    date: str | None = None
    """The session's date as the file writes it; None where the benchmark has none."""
    session_id: str | None = None
    """The session's id in the file (LongMemEval's haystack id, LoCoMo's "session_<n>"); None for context pieces."""


@dataclass(frozen=True)
class BenchmarkQuestion:
    """One question asked after the instance's last chunk."""

    question_id: str
    """The file's id of the question, or "<instance_id>#<index>" where the file has none."""
    question: str
    answers: tuple[str, ...]
    """Reference answers as released (for abstention questions, what the benchmark gives instead of a true answer)."""
    category: str | int | None = None
    """The file's label: LongMemEval's question_type, LoCoMo's category (1-5), MemoryAgentBench's question type."""
    date: str | None = None
    """When the question is asked, where the benchmark says."""
    evidence: tuple[str, ...] = ()
    """Where the answer is: LongMemEval's answer_session_ids, LoCoMo's dia_ids ("D<session>:<turn>")."""
    abstention: bool = False
    """True when the right reply is that the history does not say: "_abs" in a LongMemEval question id (also in
    MemoryAgentBench's LongMemEval rows), LoCoMo category 5."""


@dataclass(frozen=True)
class BenchmarkInstance:
    """The chunks to read in order, then the questions."""

    benchmark: str
    """One of BENCHMARKS."""
    instance_id: str
    """LongMemEval's question_id, LoCoMo's sample_id, MemoryAgentBench's "<source>#<row>"."""
    chunks: tuple[BenchmarkChunk, ...]
    questions: tuple[BenchmarkQuestion, ...]


def _need(record, key: str, where: str, allowed: str):
    if not isinstance(record, dict):
        raise ValueError(f"{where}: must be an object holding {key!r}, got {type(record).__name__}")
    if key not in record:
        raise ValueError(f"{where}: no {key!r} key ({allowed}); found {sorted(record)}")
    if record[key] is None:
        raise ValueError(f"{where}: {key!r} is null ({allowed})")
    return record[key]


def _text(value, where: str, key: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{where}: {key!r} must be a string, got {value!r}")
    return printable(value)


def _answer(value, where: str, key: str) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ValueError(f"{where}: {key!r} must be a string or a number, got {value!r}")
    return printable(str(value))


def _list(value, where: str, key: str) -> list:
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"{where}: {key!r} must be a list, got {type(value).__name__}")
    return list(value)


def _records(path: str | Path) -> list[tuple[object, str]]:
    """The records of a .json / .jsonl / .parquet file, or of a suffix-less JSON list (LongMemEval's Hugging Face
    copies), each with its "file row i" label."""
    path = Path(path)
    if path.suffix:
        return read_rows(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such data file")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not valid JSON ({e})") from e
    if not isinstance(data, list) or not data:
        raise ValueError(f"{path}: must hold a non-empty JSON list of records")
    return [(record, f"{path} row {i}") for i, record in enumerate(data)]


def load_longmemeval(path: str | Path) -> tuple[BenchmarkInstance, ...]:
    """LongMemEval's longmemeval_s / _m / _oracle file: one instance per question, one chunk per haystack session."""
    instances = []
    for record, where in _records(path):
        qid = _text(_need(record, "question_id", where, "the question's id"), where, "question_id")
        where = f"{where} (question_id {qid!r})"
        ids, dates, sessions = (_list(_need(record, key, where, "one entry per haystack session"), where, key)
                                for key in ("haystack_session_ids", "haystack_dates", "haystack_sessions"))
        if not len(ids) == len(dates) == len(sessions):
            raise ValueError(f"{where}: 'haystack_session_ids', 'haystack_dates' and 'haystack_sessions' must be "
                             f"parallel lists, got lengths {len(ids)}, {len(dates)}, {len(sessions)}")
        chunks = []
        for k, (sid, date, turns) in enumerate(zip(ids, dates, sessions)):
            at = f"{where} haystack_sessions[{k}]"
            lines = []
            for t, turn in enumerate(_list(turns, at, "haystack_sessions")):
                on = f"{at} turn {t}"
                role = _text(_need(turn, "role", on, "'user' or 'assistant'"), on, "role")
                lines.append(f"{role}: {_text(_need(turn, 'content', on, 'the message text'), on, 'content').strip()}")
            chunks.append(BenchmarkChunk(text="\n\n".join(lines), date=_text(date, at, "haystack_dates"),
                                         session_id=_text(sid, at, "haystack_session_ids")))
        evidence = _list(record.get("answer_session_ids") or [], where, "answer_session_ids")
        question = BenchmarkQuestion(
            question_id=qid, question=_text(_need(record, "question", where, "the question"), where, "question"),
            answers=(_answer(_need(record, "answer", where, "the reference answer"), where, "answer"),),
            category=_text(_need(record, "question_type", where, "the question's type"), where, "question_type"),
            date=_text(_need(record, "question_date", where, "when it is asked"), where, "question_date"),
            evidence=tuple(_text(e, where, "answer_session_ids") for e in evidence), abstention="_abs" in qid)
        instances.append(BenchmarkInstance("longmemeval", qid, tuple(chunks), (question,)))
    return tuple(instances)


def _locomo_turn(turn, where: str) -> str:
    speaker = _text(_need(turn, "speaker", where, "who speaks"), where, "speaker")
    line = f'{speaker} said, "{_text(_need(turn, "text", where, "what is said"), where, "text")}"\n'
    caption = turn.get("blip_caption")
    return line + (f" and shared {_text(caption, where, 'blip_caption')}." if caption else "") + "\n"


def load_locomo(path: str | Path) -> tuple[BenchmarkInstance, ...]:
    """LoCoMo's locomo10.json: one instance per conversation, one chunk per session, its qa list the questions."""
    instances = []
    for record, where in _records(path):
        sample_id = str(_need(record, "sample_id", where, "the conversation's id"))
        where = f"{where} (sample_id {sample_id!r})"
        conversation = _need(record, "conversation", where, "speaker_a, speaker_b, session_<n> and their date_time")
        if not isinstance(conversation, dict):
            raise ValueError(f"{where}: 'conversation' must be an object, got {type(conversation).__name__}")
        numbers = sorted(int(m.group(1)) for m in map(_SESSION_KEY.fullmatch, conversation) if m)
        chunks = []
        for n in numbers:
            at = f"{where} conversation session_{n}"
            turns = _list(conversation[f"session_{n}"], at, f"session_{n}")
            if not turns:
                continue  # the authors' evaluation skips empty sessions too
            date = _need(conversation, f"session_{n}_date_time", f"{where} conversation", f"session_{n}'s date")
            chunks.append(BenchmarkChunk(text="".join(_locomo_turn(t, f"{at} turn {k}") for k, t in enumerate(turns))
                                         .rstrip("\n"),
                                         date=_text(date, at, f"session_{n}_date_time"), session_id=f"session_{n}"))
        if not chunks:
            raise ValueError(f"{where}: 'conversation' holds no non-empty session_<n> list")
        questions = []
        for i, qa in enumerate(_list(_need(record, "qa", where, "the questions"), where, "qa")):
            at = f"{where} qa {i}"
            category = _need(qa, "category", at, "1-5")
            if isinstance(category, bool) or not isinstance(category, int):
                raise ValueError(f"{at}: 'category' must be an integer 1-5, got {category!r}")
            keys = ("adversarial_answer", "answer") if category == 5 else ("answer",)
            key = next((k for k in keys if qa.get(k) is not None), keys[-1])
            answer = _need(qa, key, at, "category 5: 'adversarial_answer' or 'answer'; else 'answer'")
            questions.append(BenchmarkQuestion(
                question_id=f"{sample_id}#{i}",
                question=_text(_need(qa, "question", at, "the question"), at, "question"),
                answers=(_answer(answer, at, key),), category=category,
                evidence=tuple(_text(e, at, "evidence") for e in _list(qa.get("evidence") or [], at, "evidence")),
                abstention=category == 5))
        instances.append(BenchmarkInstance("locomo", sample_id, tuple(chunks), tuple(questions)))
    return tuple(instances)


def chunk_context(context: str, chunk_tokens: int = MAB_CHUNK_TOKENS, tokenizer_path: str | None = None
                  ) -> tuple[str, ...]:
    """`context` cut at sentence ends into consecutive chunks of at most `chunk_tokens` tokens each (whitespace words
    without a tokenizer), the way MemoryAgentBench packs sentences; a sentence longer than that is a chunk alone."""
    from memrl_envs.chunk_stream import TokenCounter

    if chunk_tokens < 1:
        raise ValueError(f"chunk_tokens must be at least 1, got {chunk_tokens}")
    text = context.strip()
    spans, start = [], 0
    for end in _SENTENCE_END.finditer(text):
        spans.append((start, end.start() + len(end.group().rstrip())))
        start = end.end()
    if start < len(text):
        spans.append((start, len(text)))
    counts = TokenCounter(tokenizer_path).counts([text[a:b] for a, b in spans])
    chunks, first, last, total = [], None, None, 0
    for (a, b), count in zip(spans, counts):
        if first is not None and total + count > chunk_tokens:
            chunks.append(text[first:last])
            first, total = None, 0
        first = a if first is None else first
        last, total = b, total + count
    if first is not None:
        chunks.append(text[first:last])
    return tuple(chunks)


def _mab_answers(questions: list, answers, where: str) -> list[tuple[str, ...]]:
    """One tuple of gold answers per question (see the module docstring for the repo's reading)."""
    answers = answers if isinstance(answers, (list, tuple)) else [answers]
    if len(questions) == 1 and len(answers) != 1:
        answers = [answers]
    if len(answers) != len(questions):
        raise ValueError(f"{where}: 'answers' must hold one entry per question ({len(questions)}), got {len(answers)}")
    golds = []
    for i, gold in enumerate(answers):
        gold = gold if isinstance(gold, (list, tuple)) else [gold]
        golds.append(tuple(_answer(g, f"{where} answers[{i}]", "answers") for g in gold))
    return golds


def _per_question(metadata: dict, key: str, n: int, where: str) -> list[str | None]:
    """metadata[key]'s entry for each of the n questions (None where absent), as text."""
    values = metadata.get(key)
    if values is None:
        return [None] * n
    values = [values] if isinstance(values, str) else _list(values, where, f"metadata.{key}")
    return [None if i >= len(values) or values[i] is None else printable(str(values[i])) for i in range(n)]


def load_memoryagentbench(path: str | Path, chunk_tokens: int = MAB_CHUNK_TOKENS, tokenizer_path: str | None = None
                          ) -> tuple[BenchmarkInstance, ...]:
    """A MemoryAgentBench split (.parquet as on Hugging Face, or .json / .jsonl rows): one instance per row
    (`mab_instance`)."""
    return tuple(mab_instance(record, where, index, chunk_tokens, tokenizer_path)
                 for index, (record, where) in enumerate(_records(path)))


def mab_instance(record, where: str, index: int, chunk_tokens: int = MAB_CHUNK_TOKENS,
                 tokenizer_path: str | None = None) -> BenchmarkInstance:
    """The instance of MemoryAgentBench row `index` (labelled `where` in errors): its context cut by `chunk_context`,
    its questions with their ids, types and dates from `metadata` where given."""
    context = _text(_need(record, "context", where, "the long text to memorise"), where, "context")
    if not context.strip():
        raise ValueError(f"{where}: 'context' is empty")
    metadata = record.get("metadata") or {}
    if not isinstance(metadata, dict):
        raise ValueError(f"{where}: 'metadata' must be an object, got {type(metadata).__name__}")
    source = metadata.get("source") or ""
    instance_id = f"{source}#{index}"
    where = f"{where} (source {source!r})"
    questions = _need(record, "questions", where, "a list of questions")
    questions = [questions] if isinstance(questions, str) else _list(questions, where, "questions")
    golds = _mab_answers(questions, _need(record, "answers", where, "one answer list per question"), where)
    ids, types, dates = (_per_question(metadata, key, len(questions), where)
                         for key in ("question_ids", "question_types", "question_dates"))
    return BenchmarkInstance(
        "memoryagentbench", instance_id,
        tuple(BenchmarkChunk(text) for text in chunk_context(context, chunk_tokens, tokenizer_path)),
        tuple(BenchmarkQuestion(question_id=ids[i] or f"{instance_id}#{i}",
                                question=_text(q, f"{where} questions[{i}]", "questions"), answers=gold,
                                category=types[i], date=dates[i], abstention="_abs" in (ids[i] or ""))
              for i, (q, gold) in enumerate(zip(questions, golds))))


def load_benchmark(name: str, path: str | Path, **kwargs) -> tuple[BenchmarkInstance, ...]:
    """The instances of benchmark `name` (one of BENCHMARKS) in the released file at `path`; `kwargs` go to the
    loader (MemoryAgentBench's chunk_tokens and tokenizer_path)."""
    loaders = {"longmemeval": load_longmemeval, "locomo": load_locomo, "memoryagentbench": load_memoryagentbench}
    if name not in loaders:
        raise ValueError(f"unknown benchmark {name!r}; allowed: {', '.join(BENCHMARKS)}")
    return loaders[name](path, **kwargs)


# -- what a reader is shown: each benchmark's own rendering ---------------------------------------------------------
LOCOMO_NOT_MENTIONED = "Not mentioned in the conversation"
"""The option LoCoMo's evaluation offers beside the adversarial answer of a category-5 question."""


MAB_QUERY_TEMPLATES = {
    "ruler_qa": (
        'Answer the question based on the memorized documents. Only give me the answer and do not output'
        ' any other words. \n\nQuestion: {question} \n\n Answer:',
        'Answer the question based on the memorized documents. Only give me the answer and do not output'
        ' any other words. \n\n Now Answer the Question: {question}'),
    "longmemeval": (
        'The history chats are between you and a user. Based on the relevant chat history, answer the'
        ' question as concisely as you can, using a single phrase if possible.\n\n {question} \n\n Answer:',),
    "eventqa": (
        'Based on the context you memorized, complete the task below:\n\n{question}\n\n The event that'
        ' happens next is:',),
    "in_context_learning": (
        'Use the provided mapping from the context to numerical label to assign a numerical label to the'
        ' context. Only output "label: {{label}}" and nothing else. \n\n{question} \n\n label:',
        'Use the provided mapping from the context to numerical label to assign a numerical label to the'
        ' context. Only output "label: {{label}}" and nothing else. \n\nQuestion:{question} \n\n label:'),
    "recsys_redial": (
        'Pretend you are a movie recommender system. You need to recommend movies based on the dialogues'
        ' you have memorized. Now I will give you a new conversation between a user and you (a recommender'
        ' system). Based on the conversation, you reply me with 20 recommendations without extra sentences.'
        ' \n\nFor Example:\n\n[Conversation]\n\nThe recommendations are: \n1.movie1\n2.movie2\n...\n\n Here'
        ' is the conversation: {question} \n\n The recommendations are: \n',),
    "infbench_sum": (
        'You are given a book above and you are tasked to summarize it. \n\n{question} \n\n Now summarize'
        ' the book.',),
    "detective_qa": (
        'Based on the context you memorized, answer the question below. You are required to answer the'
        ' question based on the strict output format.\n\n {question} \n\n',),
    "factconsolidation": (
        'Pretend you are a knowledge management system. Each fact in the knowledge pool is provided with a'
        ' serial number at the beginning, and the newer fact has larger serial number. \n You need to solve'
        ' the conflicts of facts in the knowledge pool by finding the newest fact with larger serial'
        ' number. You need to answer a question based on this rule. You should give a very concise answer'
        ' without saying other words for the question **only** from the knowledge pool you have memorized'
        ' rather than the real facts in real world. \n\nFor example:\n\n [Knowledge Pool] \n\n Question:'
        ' Based on the provided Knowledge Pool, what is the name of the current president of Russia?'
        ' \nAnswer: Donald Trump \n\n Now Answer the Question: Based on the provided Knowledge Pool,'
        ' {question} \nAnswer:',),
}
"""MemoryAgentBench's question templates (utils/templates.py, BASE_TEMPLATES[...]["query"]) by its dataset kind: the
long-context agent's wording, and the RAG agent's where it differs. `{question}` is the question."""
MAB_DATASET_KINDS = ((("ruler_", "qa"), "ruler_qa"), (("icl_",), "in_context_learning"),
                     (("infbench_", "sum"), "infbench_sum"), (("eventqa_",), "eventqa"),
                     (("recsys_", "redial"), "recsys_redial"), (("longmemeval_",), "longmemeval"),
                     (("factconsolidation_",), "factconsolidation"), (("detective_", "qa"), "detective_qa"))
"""Which template a sub-dataset takes: the first kind all of whose name parts its source contains (the repository's
DATASET_MAPPING)."""


def chunk_text(benchmark: str, chunk: BenchmarkChunk, index: int) -> str:
    """Chunk `index` of a stream as the benchmark's own answer prompt lays out its history: LongMemEval's
    "### Session <n>:" block with its date (run_generation.py, the "nl" format), LoCoMo's "DATE: ...\\nCONVERSATION:"
    block (gpt_utils.get_input_context); MemoryAgentBench's context pieces as they are."""
    if benchmark == "longmemeval":
        return f"### Session {index + 1}:\nSession Date: {chunk.date}\nSession Content:\n\n\n{chunk.text}"
    if benchmark == "locomo":
        return f"DATE: {chunk.date}\nCONVERSATION:\n{chunk.text}"
    if benchmark == "memoryagentbench":
        return chunk.text
    raise ValueError(f"unknown benchmark {benchmark!r}; allowed: {', '.join(BENCHMARKS)}")


def locomo_options(question: BenchmarkQuestion) -> dict[str, str]:
    """A category-5 question's two options, (a) and (b): the adversarial answer and LOCOMO_NOT_MENTIONED in an order
    LoCoMo's evaluation draws with a fair coin per question; here the coin is the question id's CRC32, the same on
    every run."""
    first = zlib.crc32(question.question_id.encode()) % 2 == 0
    wrong = question.answers[0]
    return {"a": LOCOMO_NOT_MENTIONED, "b": wrong} if first else {"a": wrong, "b": LOCOMO_NOT_MENTIONED}


def mab_dataset_kind(source: str) -> str:
    """The kind of MemoryAgentBench sub-dataset `source` is (MAB_DATASET_KINDS), which picks its question template."""
    for parts, kind in MAB_DATASET_KINDS:
        if all(part in source for part in parts):
            return kind
    raise ValueError(f"MemoryAgentBench has no question template for source {source!r}; known kinds: "
                     f"{', '.join(kind for _, kind in MAB_DATASET_KINDS)}")


def question_text(benchmark: str, question: BenchmarkQuestion, source: str = "", reader: str = "long_context") -> str:
    """The question as the benchmark's own pipeline asks it: LongMemEval's "Current Date: ...\nQuestion: ...";
    LoCoMo's temporal questions (category 2) ask for an approximate date from the conversations' dates, its
    adversarial ones (5) offer two options (`locomo_options`); MemoryAgentBench's in its template for sub-dataset
    `source`, the RAG agent's wording when `reader` is "rag" and the long-context agent's otherwise (a memory read
    in context)."""
    if benchmark == "longmemeval":
        return f"Current Date: {question.date}\nQuestion: {question.question}"
    if benchmark == "locomo":
        if question.category == 2:
            return question.question + " Use DATE of CONVERSATION to answer with an approximate date."
        if question.category == 5:
            options = locomo_options(question)
            return question.question + f" Select the correct answer: (a) {options['a']} (b) {options['b']}. "
        return question.question
    if benchmark == "memoryagentbench":
        templates = MAB_QUERY_TEMPLATES[mab_dataset_kind(source)]
        return (templates[-1] if reader == "rag" else templates[0]).format(question=question.question)
    raise ValueError(f"unknown benchmark {benchmark!r}; allowed: {', '.join(BENCHMARKS)}")
