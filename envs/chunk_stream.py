"""MemAgent's world: a long context streamed chunk by chunk, then one question answered in \\boxed{}."""

from __future__ import annotations

import bisect
import inspect
import re
from collections.abc import Callable
from dataclasses import fields
from typing import ClassVar

import gymnasium as gym
import numpy as np

from memrl_envs import multihop, niah
from memrl_envs.loaders import QATask, load_tasks
from memrl_envs.qa_metrics import em, f1, is_equiv, sub_em
from memrl_envs.text_space import clean, text_space
from memrl.text import extract_boxed
from memrl.tokenizer import load_tokenizer
from memrl.preflight import typed_config

TASKS = ("multihop", "niah", "file")
"""Task sources: the two-hop fact generator, RULER NIAH, or rows of a local data file."""
NO_MEMORY = "No relevant information."
REWARDS = ("is_equiv", "em")
"""The answer's reward kinds; see ChunkStreamEnv."""
"""The scripted expert's memory before it has read any relevant fact."""
EVIDENCE_LEAD = "Evidence:"
"""What the full-context expert writes before the sentences it quotes. A reply's first word is tokenized without the
space it has in the document (" Resis" becomes "R", "es", "is"), so a quote that opened the reply would have to be
spelled out rather than copied; after the lead-in every quoted token is the document's own."""


class TokenCounter:
    """Counts tokens with a Hugging Face tokenizer, or whitespace-separated words when there is none."""

    def __init__(self, tokenizer_path: str | None = None):
        self.tokenizer = None
        if tokenizer_path is not None:
            self.tokenizer = load_tokenizer(tokenizer_path)
            if not self.tokenizer.is_fast:
                raise ValueError(f"tokenizer at {tokenizer_path} is not a fast tokenizer; chunking needs its offsets")

    def count(self, text: str) -> int:
        """Tokens in `text`."""
        return self.counts([text])[0]

    def counts(self, texts: list[str]) -> list[int]:
        """Tokens in each of `texts`, in one tokenizer call (a fast tokenizer works through a batch in parallel, where
        one call per text would pay its overhead per text)."""
        if self.tokenizer is None:
            return [len(text.split()) for text in texts]
        if not texts:
            return []
        # The Rust tokenizer itself: the transformers wrapper builds a dict per text, which costs more than counting.
        return [len(e) for e in self.tokenizer.backend_tokenizer.encode_batch_fast(list(texts),
                                                                                  add_special_tokens=False)]

    def token_starts(self, texts: list[str]) -> list[list[int]]:
        """For each of `texts`, the character offset where each of its tokens starts, in order (several tokens of one
        character, as the bytes of a non-ASCII character, share its offset); one tokenizer call for all.

        A long text is tokenized in segments that end where a word starts, so the tokenizer's threads share it; the
        offsets are the places to plan cuts at, and every piece cut is counted again on its own (`_fit`)."""
        if self.tokenizer is None:
            return [[m.start() for m in re.finditer(r"\S+", text)] for text in texts]
        segments, owners = [], []
        for k, text in enumerate(texts):
            for start, end in _segments(text):
                segments.append(text[start:end])
                owners.append((k, start))
        backend = self.tokenizer.backend_tokenizer
        encodings = backend.encode_batch(segments, add_special_tokens=False) if segments else []
        out: list[list[int]] = [[] for _ in texts]
        for (k, base), encoding in zip(owners, encodings):
            out[k] += [base + start for start, _ in encoding.offsets]
        return out


_SEGMENT_CHARS = 1 << 16
"""Length of the segments a long text is tokenized in."""
_WORD_GAP = re.compile(r"(?<=\S)\s(?=\S)")
"""Whitespace between two words: where a segment may end."""


def _segments(text: str) -> list[tuple[int, int]]:
    """(start, end) of consecutive segments of about _SEGMENT_CHARS characters covering `text`, each after the first
    starting at the whitespace before a word; a text without such a place stays whole."""
    bounds, start = [], 0
    while len(text) - start > _SEGMENT_CHARS:
        match = _WORD_GAP.search(text, start + _SEGMENT_CHARS)
        if match is None:
            break
        bounds.append((start, match.start()))
        start = match.start()
    return [*bounds, (start, len(text))]


_WHITESPACE = np.array([c for c in range(0x3001) if chr(c).isspace()], dtype=np.uint32)
"""Every whitespace code point (none lies above U+3000)."""


def _cut_points(text: str, starts: list[int], vectorized: bool | None = None) -> tuple[list[int], list[int], list[int]]:
    """Where `text` (whose tokens start at `starts`) may be cut: the cut offsets (0 and len(text) included), the
    tokens before each cut, and the indices of the cuts where a word starts (tokenizers attach a space to the word
    after it, so a word starts at whitespace that follows a non-space). Long texts go through numpy, short ones stay
    in Python, where numpy's per-call cost would dominate (`vectorized` forces one way)."""
    if not (len(text) >= 4096 if vectorized is None else vectorized):
        first_token: dict[int, int] = {}
        for index, start in enumerate(starts):
            if 0 < start < len(text):
                first_token.setdefault(start, index)
        cuts = [0, *first_token, len(text)]
        tokens_before = [0, *first_token.values(), len(starts)]
        word_starts = [i for i in range(1, len(cuts) - 1)
                       if text[cuts[i]].isspace() and not text[cuts[i] - 1].isspace()]
        return cuts, tokens_before, word_starts
    token_starts = np.asarray(starts, dtype=np.int64)
    inner = token_starts[(token_starts > 0) & (token_starts < len(text))]
    cuts = np.unique(np.concatenate([[0], inner, [len(text)]]))
    tokens_before = np.searchsorted(token_starts, cuts)
    tokens_before[-1] = len(starts)
    space = np.isin(np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32), _WHITESPACE)
    word_start = np.zeros(len(text) + 1, dtype=bool)
    word_start[1:-1] = space[1:] & ~space[:-1]
    return cuts.tolist(), tokens_before.tolist(), np.flatnonzero(word_start[cuts]).tolist()


def _plan(text: str, starts: list[int], budget: int) -> list[tuple[str, int]]:
    """`text` (whose tokens start at `starts`) planned as consecutive pieces of at most `budget` of its tokens, each
    ending where a word starts when one fits, with each piece's planned token count. A piece cut out of the whole
    may tokenize to a few more tokens; `_fit` checks."""
    cuts, tokens_before, word_starts = _cut_points(text, starts)
    end = len(cuts) - 1
    plan, first = [], 0
    while first < end:
        last = max(first + 1, bisect.bisect_right(tokens_before, tokens_before[first] + budget) - 1)
        if last < end:
            k = bisect.bisect_right(word_starts, last) - 1
            if k >= 0 and word_starts[k] > first:
                last = word_starts[k]
        plan.append((text[cuts[first] : cuts[last]], tokens_before[last] - tokens_before[first]))
        first = last
    return plan or [(text, len(starts))]


def _cut_exactly(text: str, budget: int, counter: TokenCounter) -> list[str]:
    """`text` cut at token starts into pieces that each tokenize, on their own, to at most `budget` tokens, each as
    long as fits (for the rare planned piece that does not fit once cut out: it is short, so counting is cheap)."""
    cuts = sorted({s for s in counter.token_starts([text])[0] if 0 < s < len(text)}) + [len(text)]
    pieces, start = [], 0
    while start < len(text):
        candidates = [c for c in cuts if c > start]
        lo, hi = 0, len(candidates) - 1  # largest cut whose piece fits; the first cut (one token) always does
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if counter.count(text[start : candidates[mid]]) <= budget:
                lo = mid
            else:
                hi = mid - 1
        pieces.append(text[start : candidates[lo]])
        start = candidates[lo]
    return pieces or [text]


def _fit(pieces: list[str], budget: int, counter: TokenCounter) -> list[str]:
    """`pieces` with each one that tokenizes to more than `budget` tokens cut exactly; counted in batches."""
    out = []
    for at in range(0, len(pieces), 4096):
        batch = pieces[at : at + 4096]
        for piece, count in zip(batch, counter.counts(batch)):
            out += [piece] if count <= budget else _cut_exactly(piece, budget, counter)
    return out


def chunk_documents(documents: list[str] | tuple[str, ...], chunk_tokens: int, counter: TokenCounter) -> list[str]:
    """The context (documents joined by "\\n") cut into consecutive chunks of at most `chunk_tokens` tokens.

    Chunks are slices of the context, so "".join(chunks) == context; each "\\n" ends the chunk before it.
    A document goes whole into a chunk when it fits in one; only a document longer than a chunk is split, at word
    starts where a word fits (`_plan`, checked by `_fit`). The tokenizer sees every document a few times, in
    batched calls, so a 10 MB context takes seconds, on one line or many.
    """
    units = [doc + "\n" for doc in documents[:-1]] + [documents[-1]] if documents else []
    # Units far longer than a chunk in characters are not counted first: their token starts count them.
    sure = 16 * chunk_tokens
    counts = counter.counts([unit if len(unit) <= sure else "" for unit in units])
    long = [i for i, (unit, count) in enumerate(zip(units, counts)) if count > chunk_tokens or len(unit) > sure]
    plans = {i: _plan(units[i], starts, chunk_tokens)
             for i, starts in zip(long, counter.token_starts([units[i] for i in long]))}
    chunks, current, current_count = [], [], 0
    for i, unit in enumerate(units):
        pieces = plans.get(i, [(unit, counts[i])])
        # Every unit ends in "\n", where tokenizers cut, so unit counts add up within a chunk.
        if len(pieces) == 1 and current_count + pieces[0][1] <= chunk_tokens:
            current.append(unit)
            current_count += pieces[0][1]
            continue
        if current:
            chunks.append("".join(current))
        chunks += [piece for piece, _ in pieces[:-1]]
        current, current_count = [pieces[-1][0]], pieces[-1][1]
    if current or not chunks:
        chunks.append("".join(current))
    # Planned pieces, and any tokenizer whose counts do not add up across a newline, are checked here.
    return _fit(chunks, chunk_tokens, counter)


def _task_config(task: str, task_kwargs: dict):
    """The generator's config for `task` (checked: unknown options are named), or None for task='file'."""
    if task == "file":
        if set(task_kwargs) != {"data_path"}:
            raise ValueError(f"task='file' takes exactly one option, data_path; got {sorted(task_kwargs)}")
        return None
    config_cls = {"multihop": multihop.MultiHopConfig, "niah": niah.NiahConfig}[task]
    allowed = sorted(f.name for f in fields(config_cls))
    unknown = sorted(set(task_kwargs) - set(allowed))
    if unknown:
        raise ValueError(f"task={task!r} has no option(s) {unknown}; allowed: {allowed}")
    return typed_config(config_cls, task_kwargs, f"ChunkStreamEnv(task={task!r})")


def _task_maker(task: str, task_kwargs: dict) -> tuple[Callable[[int], QATask], int]:
    """A function from task seed to task, and a bound on its contexts' length in characters."""
    config = _task_config(task, task_kwargs)
    if config is None:
        tasks = load_tasks(task_kwargs["data_path"])  # one copy per process, shared by every env over the file
        longest = max(sum(map(len, t.documents)) + len(t.documents) - 1 for t in tasks)
        return (lambda seed: tasks[seed % len(tasks)]), longest
    module = {"multihop": multihop, "niah": niah}[task]
    return (lambda seed: module.make_task(seed, config)), config.max_context_chars()


def _find(text: str, sentence: str) -> re.Match | None:
    """The first place `sentence` starts `text` or follows a space there: never inside a longer name."""
    return re.search(r"(?:^|(?<=\s))" + re.escape(sentence), text)


def _holds(text: str, sentence: str) -> bool:
    """Whether `text` holds `sentence` (see _find)."""
    return _find(text, sentence) is not None


class ChunkStreamEnv(gym.Env):
    """One question over a long context, read chunk by chunk (MemAgent) or all at once (the full-context baseline).

    stream=True: reset shows chunk 0; each step's action (the agent's memory, not read by the env) is answered
    with the next chunk; after the last chunk the observation is "" and the phase becomes "answer"; the next
    action is the answer. stream=False: reset shows the whole context already in the answer phase.
    The answer's reward (1.0 or 0.0) is reward="is_equiv", MemAgent's (paper eq. 3 and the authors' code): the last
    box of the answer's last 300 characters equals a gold answer, both lowercased with spaces removed
    (memrl_envs.qa_metrics.is_equiv); or reward="em": its last \\boxed{...} equals one after SQuAD normalisation
    (articles and punctuation dropped), the reward the shipped MemAgent results were measured with.

    info on every reset/step: question, phase ("memory" | "answer"), chunk_index, num_chunks. In stream mode
    chunk_index is the index of the chunk just shown, and equals num_chunks in the answer phase; with
    stream=False it is 0 of 1 chunk. The final step's info adds "metrics" (em, f1, sub_em, sub_em_authors_code,
    is_equiv, format_ok; with gold-fact labels also facts_held, all_facts_held and distractors_held, read from the
    last memory in stream mode and from the answer's quotes without it) and "answers". Task seed = reset seed +
    seed_offset (a drawn seed when reset gets none).

    score_memories=True scores each memory the agent writes against what it was given (tasks with gold facts only):
    1.0 when it keeps every gold fact the previous memory held and every one the chunk just read completes, and
    adds no other document's text; else 0.0. Each call answers only for what it changed, so a fact lost or a
    distractor written is scored once, where it happened. The final info's "row_rewards" gives each memory its
    score and the answer its exact match (per-call rewards, for the "call_by_position" advantage estimator); its
    metrics add "memory_score", their mean.
    """

    metadata: ClassVar[dict] = {"render_modes": []}

    def __init__(
        self,
        task: str = "multihop",
        chunk_tokens: int = 24,
        stream: bool = True,
        tokenizer_path: str | None = None,
        seed_offset: int = 0,
        max_action_chars: int = 4096,
        score_memories: bool = False,
        reward: str = "is_equiv",
        **task_kwargs,
    ):
        """`task_kwargs` go to the task's config (multihop.MultiHopConfig, niah.NiahConfig) or, for
        task='file', are just data_path. The default chunk of 24 words holds three one-fact documents."""
        if score_memories and task == "file":
            raise ValueError("ChunkStreamEnv score_memories=True needs gold-fact labels, which task='file' lacks; "
                             "use task='multihop' or 'niah'")
        if task not in TASKS:
            raise ValueError(f"ChunkStreamEnv task={task!r} is not allowed; choose one of {TASKS}")
        if reward not in REWARDS:
            raise ValueError(f"ChunkStreamEnv reward={reward!r} is not allowed; choose one of {REWARDS}")
        self.reward = reward
        if not isinstance(chunk_tokens, int) or chunk_tokens < 1:
            raise ValueError(f"ChunkStreamEnv chunk_tokens must be an int >= 1, got {chunk_tokens!r}")
        if not isinstance(max_action_chars, int) or max_action_chars < 1:
            raise ValueError(f"ChunkStreamEnv max_action_chars must be an int >= 1, got {max_action_chars!r}")
        self.task_name = task
        self.chunk_tokens = chunk_tokens
        self.stream = stream
        self.seed_offset = seed_offset
        self.max_action_chars = max_action_chars
        self.score_memories = score_memories
        self.counter = TokenCounter(tokenizer_path)
        self._make_task, max_context_chars = _task_maker(task, task_kwargs)
        # Chunks are slices of the context, so the context bound covers every observation.
        self.observation_space = text_space(max_context_chars)
        self.action_space = text_space(max_action_chars)
        self.task: QATask | None = None
        self.chunks: list[str] = []
        self._chunk_index = 0
        self._done = True

    @classmethod
    def check_options(cls, options: dict) -> None:
        """Raise ValueError naming an unknown or bad option, without loading a tokenizer or a data file."""
        own = {name for name in inspect.signature(cls).parameters if name != "task_kwargs"}
        task = options.get("task", "multihop")
        if task not in TASKS:
            raise ValueError(f"ChunkStreamEnv task={task!r} is not allowed; choose one of {TASKS}")
        _task_config(task, {k: v for k, v in options.items() if k not in own})

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        task_seed = seed + self.seed_offset if seed is not None else int(self.np_random.integers(0, 2**31 - 1))
        self.task = self._make_task(task_seed)
        self.chunks = chunk_documents(self.task.documents, self.chunk_tokens, self.counter) if self.stream else []
        self._chunk_index = 0
        self._done = False
        self._gold_ends = self._find_gold_ends()
        # Where each chunk ends in the context: what has been read once it is shown.
        self._read_until = np.cumsum([len(c) for c in self.chunks]).tolist()
        self._memory = ""
        self._memory_scores: list[float] = []
        # A distractor document's text after its "Document N:" label, if it has one (read only for tasks with
        # gold facts: by the memory scores and the answer's figures).
        self._distractors = [d.split(": ", 1)[-1] for d in self.task.documents
                             if not any(f in d for f in self.task.gold_facts)] if self.task.gold_facts else []
        return (self.chunks[0] if self.stream else self.task.context), self._info()

    @property
    def phase(self) -> str:
        """'memory' while chunks remain to be read, then 'answer'."""
        return "memory" if self.stream and self._chunk_index < len(self.chunks) else "answer"

    def step(self, action):
        if self._done:
            raise RuntimeError("ChunkStreamEnv.step called after the episode ended; call reset() first")
        text = clean("" if action is None else str(action), self.max_action_chars)
        if self.phase == "memory":
            if self.score_memories:
                self._memory_scores.append(self._score_memory(text))
            self._memory = text
            self._chunk_index += 1
            obs = self.chunks[self._chunk_index] if self._chunk_index < len(self.chunks) else ""
            return obs, 0.0, False, False, self._info()
        self._done = True
        boxed = extract_boxed(text)
        prediction = "" if boxed is None else boxed
        answers = list(self.task.answers)
        metrics = {
            "em": em(prediction, answers),
            "f1": f1(prediction, answers),
            "sub_em": sub_em(prediction, answers),
            "sub_em_authors_code": sub_em(prediction, answers, variant="authors_code"),
            "format_ok": float(boxed is not None),
            "is_equiv": is_equiv(text, answers),
        }
        if self.task.gold_facts:
            # What the answer rests on: the last memory (MemAgent's answer call sees only it) or the answer's own
            # quotes (the full-context reader), to tell a lost fact from a wrong answer over the right ones.
            metrics.update(self._facts_in(self._memory if self.stream else text))
        info = {**self._info(), "metrics": metrics, "answers": answers}
        if self.score_memories and self.stream:
            metrics["memory_score"] = float(np.mean(self._memory_scores))
            info["row_rewards"] = [*self._memory_scores, metrics[self.reward]]
        return "", metrics[self.reward], True, False, info

    def _facts_in(self, text: str) -> dict[str, float]:
        """facts_held: the share of the task's gold facts `text` holds; all_facts_held: 1.0 when it holds every one;
        distractors_held: how many other documents' sentences it holds."""
        held = [_holds(text, f) for f in self.task.gold_facts]
        return {"facts_held": float(np.mean(held)), "all_facts_held": float(all(held)),
                "distractors_held": float(sum(_holds(text, o) for o in self._distractors))}

    def _score_memory(self, memory: str) -> float:
        """1.0 when `memory`, written on the current chunk, keeps the gold facts the previous memory held and those
        the chunk completes, and adds no other document's text; else 0.0."""
        read_until = self._read_until[self._chunk_index]
        read_before = read_until - len(self.chunks[self._chunk_index])
        needed = [f for f in self.task.gold_facts
                  if _holds(self._memory, f) or read_before < self._gold_ends[f] <= read_until]
        # A distractor the previous memory held already is not this memory's doing (it is scored where written).
        added = [o for o in self._distractors if _holds(memory, o) and not _holds(self._memory, o)]
        return float(all(_holds(memory, f) for f in needed) and not added)

    def _find_gold_ends(self) -> dict[str, int]:
        """Where each gold fact ends in the context (it counts as read once the chunks reach there); a fact the
        context lacks is never read."""
        ends = {}
        for fact in self.task.gold_facts:
            match = _find(self.task.context, fact)
            ends[fact] = match.end() if match else len(self.task.context) + 1
        return ends

    def expert_action(self) -> str:
        """What a perfect reader writes now, knowing only what it has read.

        Memory phase: the gold fact sentences read so far (through the current chunk), in reading order,
        joined by " ", or NO_MEMORY before the first. Multi-hop depths keep hop 1 before hop 2, so every gold
        fact is recognisably relevant when it is read. Answer phase: \\boxed{first gold answer}; with
        stream=False (the full-context reader) the gold facts, where the task labels them, come first, quoted as
        evidence after EVIDENCE_LEAD, as a reasoning model does before it answers from a whole document.
        """
        if self.task is None or self._done:
            raise RuntimeError("ChunkStreamEnv.expert_action needs a running episode; call reset() first")
        if self.phase == "answer":
            boxed = f"\\boxed{{{self.task.answers[0]}}}"
            evidence = "" if self.stream else self._facts_read(len(self.task.context))
            return f"{EVIDENCE_LEAD} {evidence} {boxed}" if evidence else boxed
        if not self.task.gold_facts:
            raise RuntimeError(
                f"ChunkStreamEnv task={self.task_name!r} has no gold-fact labels, so there is no scripted memory; "
                "only task='multihop' and task='niah' have one"
            )
        return self._facts_read(self._read_until[self._chunk_index]) or NO_MEMORY

    def _facts_read(self, read_until: int) -> str:
        """The gold facts that end within the first `read_until` characters of the context, in reading order."""
        ends = self._gold_ends
        return " ".join(sorted((f for f in self.task.gold_facts if ends[f] <= read_until), key=ends.get))

    def _info(self) -> dict:
        return {
            "question": self.task.question,
            "phase": self.phase,
            "chunk_index": self._chunk_index,
            "num_chunks": len(self.chunks) if self.stream else 1,
        }
