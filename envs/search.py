"""Multi-objective search QA (MEM1, MemSearcher, MemPO): N questions at once, answered by searching a corpus.

The model acts in text: `<search>query</search>` returns the top-k passages in an `<information>` block with
MEM1's "You have N turns left." hint; `<answer>a1; a2; ...</answer>` (one answer per question, in order,
separated by semicolons) ends the episode with the reward.

MEM1's paper gives a wrong answer count 0 and memrl's "em_sum" does so; MEM1's code scores answers by position
whatever their count, offered as reward="em_sum_authors_code" (tests/envs/test_search_fidelity.py checks both).
"""

from __future__ import annotations

import functools
import random
from dataclasses import dataclass, fields
from pathlib import Path
from typing import ClassVar

import gymnasium as gym

from memrl_envs import encyclopedia
from memrl_envs.encyclopedia import EncyclopediaConfig, SearchQuestion
from memrl_envs.loaders import questions_and_answers, read_rows
from memrl_envs.qa_metrics import em, f1
from memrl_envs.retrieval import (
    HTTP_APIS,
    ActorRetriever,
    BM25Retriever,
    HTTPRetriever,
    Retriever,
    format_information,
    load_corpus,
)
from memrl_envs.text_space import clean, text_space
from memrl.text import INVALID, find_action
from memrl.preflight import named_actor_missing, typed_config, unreachable

DATA = ("synthetic", "file")
"""Question sources: the fictional encyclopedia generator, or rows of a local QA file."""
REWARDS = ("em_sum", "f1", "answer_format", "em_sum_authors_code")
"""Reward kinds; see SearchConfig.reward."""
RESET_OPTIONS = ("num_objectives", "max_turns")
"""Per-episode reset options: smaller tasks than the config's (e.g. a warm-start mixing question counts)."""


@dataclass(frozen=True)
class SearchConfig:
    """Knobs of the search env (the generator's own knobs are EncyclopediaConfig's)."""

    num_objectives: int = 1
    """Questions per task, answered together as "a1; a2; ...". MEM1 trains with 2 and evaluates 1 to 16."""
    max_turns: int = 6
    """Actions per episode (searches, invalid actions and the answer); MEM1 trains with 6. An episode that has not
    answered by then is truncated with reward 0."""
    top_k: int = 3
    """Passages returned per search (MEM1 and Search-R1 use 3)."""
    reward: str = "em_sum"
    """'em_sum' (MEM1): sum over questions of normalised exact match, 0 when the answer count is wrong.
    'f1' (MemSearcher): mean token F1 over questions; 0.1 when the format is right but F1 is 0; 0 for a bad format;
    with one question its answer is the whole block, not split at semicolons (the authors' re_call.py).
    'answer_format' (MemPO): 1 when the format is right and every answer exactly matches, else 0.
    'em_sum_authors_code' (MEM1's code, qa_multiple.compute_score_em): the sum of exact matches by position whatever
    the answer count (an answer past the last question adds 0, a question left unanswered is not scored); the
    paper's 'em_sum' gives 0 to a wrong count.
    The format is right when every action of the episode was understood and the answer count is right."""
    data: str = "synthetic"
    """Where questions come from; one of DATA. 'file' reads qa_path."""
    qa_path: str | None = None
    """QA file (.jsonl/.json/.parquet) for data='file'; see load_questions. Single-question rows are drawn
    num_objectives at a time; MEM1's multi-objective rows are fixed tasks, and num_objectives must equal their count."""
    corpus_path: str | None = None
    """Wiki-style corpus file for retriever='bm25' with data='file'; see memrl_envs.retrieval.load_corpus."""
    retriever: str = "bm25"
    """'bm25': an in-process BM25 index over the generator's passages (or corpus_path), built once per process.
    An http(s):// URL: a retrieval server spoken to in the http_api shape."""
    http_api: str = "search_r1"
    """Request shape of an HTTP retriever; one of memrl_envs.retrieval.HTTP_APIS."""
    http_timeout_s: float = 30.0
    """Deadline of one search at an HTTP retriever, the whole answer and any retries included."""
    http_retries: int = 2
    """Times an HTTP search is asked again when the server cannot be reached, breaks off or answers 5xx."""
    retrieval_actor: str | None = None
    """Name of a running memrl_envs.retrieval.RetrievalServer Ray actor to search through; overrides `retriever`."""
    actor_timeout_s: float = 60.0
    """Deadline of one search through retrieval_actor, a restart of the actor included."""
    max_query_chars: int = 256
    """Longest search query accepted; longer ones are invalid actions."""
    max_doc_chars: int = 1000
    """Each retrieved passage's line in the `<information>` block is cut to this many characters."""
    max_action_chars: int = 4096
    """Actions are cut to this many printable characters before they are parsed."""
    seed_offset: int = 0
    """Task seed = reset seed + seed_offset."""
    expert_notes: bool = False
    """The scripted expert's memory (`expert_memory`): one short note per question answered so far, `Q3 Kolm`,
    then the question it works on, `Q4: Who founded the company Drexex?`; a 64-token memory holds eight questions'
    answers. False: the env offers none, and a memory workflow's expert keeps the passages it read (about two
    questions' worth in 64 tokens). Only SFT warm-starts read it."""

    def __post_init__(self) -> None:
        for name, low in (("num_objectives", 1), ("max_turns", 1), ("top_k", 1), ("max_query_chars", 1),
                          ("max_doc_chars", 32), ("max_action_chars", 16)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise ValueError(f"SearchConfig.{name} must be an int >= {low}, got {value!r}")
        for name in ("http_timeout_s", "actor_timeout_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"SearchConfig.{name} must be a number > 0, got {value!r}")
        if isinstance(self.http_retries, bool) or not isinstance(self.http_retries, int) or self.http_retries < 0:
            raise ValueError(f"SearchConfig.http_retries must be an int >= 0, got {self.http_retries!r}")
        if not isinstance(self.expert_notes, bool):
            raise TypeError(f"SearchConfig.expert_notes must be a bool, got {self.expert_notes!r}")
        if not isinstance(self.seed_offset, int):
            raise TypeError(f"SearchConfig.seed_offset must be an int, got {self.seed_offset!r}")
        if self.reward not in REWARDS:
            raise ValueError(f"SearchConfig.reward={self.reward!r} is not allowed; choose one of {REWARDS}")
        if self.data not in DATA:
            raise ValueError(f"SearchConfig.data={self.data!r} is not allowed; choose one of {DATA}")
        if self.data == "file" and self.qa_path is None:
            raise ValueError("SearchConfig.data='file' needs qa_path, the QA file to read questions from")
        if self.http_api not in HTTP_APIS:
            raise ValueError(f"SearchConfig.http_api={self.http_api!r} is not allowed; choose one of {HTTP_APIS}")
        if self.expert_notes and self.data != "synthetic":
            raise ValueError("SearchConfig.expert_notes needs data='synthetic': the notes are the generator's gold "
                             "answers")
        if self.data == "synthetic" and self.corpus_path is not None:
            raise ValueError("SearchConfig.corpus_path is only for data='file'; the synthetic data brings its corpus")
        if not isinstance(self.retriever, str) or (
            self.retriever != "bm25" and not self.retriever.startswith(("http://", "https://"))
        ):
            raise ValueError(
                f"SearchConfig.retriever={self.retriever!r} is not allowed; give 'bm25' or an http(s):// URL"
            )


@functools.lru_cache(maxsize=4)
def load_questions(path: str | Path) -> tuple[tuple[SearchQuestion, ...], ...]:
    """The questions of each row of a QA file (cached per process), in any shape memrl_envs.loaders reads: Search-R1 /
    FlashRAG rows ({"question", "golden_answers"}), HotpotQA ({"question", "answer"}), NQ-style ({"question",
    "answers"}), verl training rows, and MEM1's multi-objective rows (N questions each), in .jsonl, .json or .parquet.

    A question's whitespace is collapsed to single spaces; text stays Unicode.
    """
    return tuple(
        tuple(SearchQuestion(question=" ".join(q.split()), answers=a) for q, a in questions_and_answers(row, where))
        for row, where in read_rows(path)
    )


@functools.lru_cache(maxsize=4)
def _bm25_over_world(config: EncyclopediaConfig) -> BM25Retriever:
    # One index per process: a runner holds many envs over the same world.
    return BM25Retriever(encyclopedia.make_world(config).passages)


@functools.lru_cache(maxsize=4)
def _bm25_over_file(path: str) -> BM25Retriever:
    return BM25Retriever(load_corpus(path))


def _check_file_tasks(rows: tuple[tuple[SearchQuestion, ...], ...], config: SearchConfig) -> bool:
    """True when the file's rows are fixed multi-question tasks (MEM1), False when they are single questions to draw
    from; raises when the file and num_objectives do not fit together."""
    counts = sorted({len(row) for row in rows})
    if counts == [1]:
        if config.num_objectives > len(rows):
            raise ValueError(f"SearchEnv num_objectives={config.num_objectives} is more than the {len(rows)} questions "
                             f"in {config.qa_path}")
        return False
    if len(counts) > 1:
        raise ValueError(f"{config.qa_path}: rows hold different numbers of questions ({counts}); a file of "
                         "multi-objective tasks holds one count")
    if config.num_objectives != counts[0]:
        raise ValueError(f"{config.qa_path} holds {counts[0]}-question tasks (MEM1 multi-objective rows); set "
                         f"num_objectives={counts[0]} (reset options may ask for fewer of each task's questions)")
    return True


def turns_hint(turns_left: int) -> str:
    """MEM1's hint, e.g. "You have 3 turns left."."""
    return f"You have {turns_left} turn{'' if turns_left == 1 else 's'} left."


def parse_action(text: str, max_query_chars: int) -> tuple[str, str]:
    """find_action, with the search query checked: an empty query or one over `max_query_chars` is invalid."""
    kind, content = find_action(text)
    if kind != "search":
        return kind, content
    if not content:
        return "invalid", INVALID["empty"]
    if len(content) > max_query_chars:
        return "invalid", INVALID["long"].format(chars=len(content), limit=max_query_chars)
    return "search", content


def split_answers(text: str) -> list[str]:
    """An `<answer>` block's answers: split at semicolons, each stripped ("" stays one empty answer)."""
    return [part.strip() for part in text.split(";")]


def _invalid_observation(reason: str, num_objectives: int, turns_left: int) -> str:
    return (
        f"Invalid action: {reason}. Write exactly one <search>query</search>, or "
        f"<answer>...</answer> with {num_objectives} answer(s) separated by semicolons. {turns_hint(turns_left)}"
    )


def _prompt(questions: tuple[SearchQuestion, ...]) -> str:
    if len(questions) == 1:
        return questions[0].question
    return "\n".join(f"Question {i}: {q.question}" for i, q in enumerate(questions, start=1))


class SearchEnv(gym.Env):
    """N questions over a searchable corpus (MEM1's multi-objective QA; N = 1 is Search-R1 / MemSearcher QA).

    reset shows the questions (one question as is; several as "Question i: ..." lines). Each step is one turn:
    a search returns `format_information(top-k hits, turns_hint)`; an answer ends the episode (terminated) with
    the reward of SearchConfig.reward; an action that is not understood returns a message saying what is allowed
    and info["format_ok"] = 0.0. When max_turns actions pass without an answer the episode is truncated with
    reward 0 and info["out_of_turns"] = True; a search on the last turn therefore returns nothing. A search that
    a remote retriever (HTTP server, retrieval actor) fails after its retries ends the episode the same way, with
    info["failure"] naming the error: the runtime counts such an episode and neither trains on nor scores it.

    info on every reset/step: question (the reset observation), questions, turn (actions taken), turns_left;
    each step adds action ("search" | "answer" | "invalid") and format_ok (this action's), a search adds query
    and retrieved_ids. The final step adds out_of_turns, answers (gold, per question) and metrics: em and f1 (means
    over questions, 0 when the answer count is wrong), format_ok (the episode's), answer_count_ok, num_searches,
    num_invalid and num_turns.
    """

    metadata: ClassVar[dict] = {"render_modes": []}

    def __init__(self, backend: Retriever | None = None, **kwargs):
        """`kwargs` are SearchConfig fields and, for data='synthetic', EncyclopediaConfig fields. `backend`, if
        given, is searched instead of the retriever the config names (any object with search(queries, top_k)),
        e.g. an memrl_envs.retrieval.ActorRetriever from start_retrieval_server."""
        self.config, self.world_config = config, world = self._configs(kwargs)
        if world is not None:
            max_question = world.max_question_chars()
        else:
            self._file_rows = load_questions(str(config.qa_path))
            self._fixed_tasks = _check_file_tasks(self._file_rows, config)
            max_question = max(len(q.question) for row in self._file_rows for q in row)
        self.retriever = backend if backend is not None else self._make_retriever()
        # A search that waits on another process steps off the runner's event loop, and its failure ends only its
        # own episode (flagged); an in-process index failing is a bug and raises.
        self._remote = isinstance(self.retriever, (HTTPRetriever, ActorRetriever))
        self.metadata = {**type(self).metadata, "blocking_io": self._remote}
        self.observation_space = text_space(self._max_observation_chars(max_question))
        self.action_space = text_space(config.max_action_chars)
        self.questions: tuple[SearchQuestion, ...] = ()
        self._turn = 0
        self._num_searches = 0
        self._num_invalid = 0
        self._searched: list[str] = []
        self._max_turns = config.max_turns
        self._done = True

    @staticmethod
    def _configs(options: dict) -> tuple[SearchConfig, EncyclopediaConfig | None]:
        """The env's config and, for data='synthetic', the generator's; unknown or bad options are named."""
        own = {f.name for f in fields(SearchConfig)}
        config = typed_config(SearchConfig, {k: v for k, v in options.items() if k in own}, "SearchEnv")
        allowed = own | ({f.name for f in fields(EncyclopediaConfig)} if config.data == "synthetic" else set())
        unknown = sorted(set(options) - allowed)
        if unknown:
            raise ValueError(f"SearchEnv(data={config.data!r}) has no option(s) {unknown}; allowed: {sorted(allowed)}")
        if config.data != "synthetic":
            return config, None
        world = typed_config(EncyclopediaConfig, {k: v for k, v in options.items() if k not in own}, "SearchEnv")
        encyclopedia.make_questions(0, config.num_objectives, world)  # fails early if N is too large
        return config, world

    @classmethod
    def check_options(cls, options: dict) -> None:
        """Raise ValueError naming an unknown or bad option, without reading files or building an index."""
        cls._configs({k: v for k, v in options.items() if k != "backend"})

    @classmethod
    def check_services(cls, options: dict) -> None:
        """Raise ValueError when the retrieval actor named is not running or the retriever URL accepts no
        connection (a backend object, or the in-process BM25, needs nothing)."""
        if options.get("backend") is not None:
            return
        config, _ = cls._configs(options)
        if config.retrieval_actor is not None:
            missing = named_actor_missing(config.retrieval_actor)
            if missing:
                raise ValueError(f"SearchEnv retrieval_actor: {missing}")
        elif config.retriever != "bm25":
            why = unreachable(config.retriever)
            if why:
                raise ValueError(f"SearchEnv retriever={config.retriever!r} cannot be reached: {why}")

    def _make_retriever(self) -> Retriever:
        config = self.config
        if config.retrieval_actor is not None:
            return ActorRetriever.by_name(config.retrieval_actor, timeout_s=config.actor_timeout_s)
        if config.retriever != "bm25":
            return HTTPRetriever(config.retriever, api=config.http_api, timeout_s=config.http_timeout_s,
                                 retries=config.http_retries)
        if config.data == "synthetic":
            return _bm25_over_world(self.world_config)
        if config.corpus_path is None:
            raise ValueError(
                "SearchEnv with data='file' and retriever='bm25' needs corpus_path (a wiki-style corpus file), "
                "or a retriever URL, a retrieval_actor or a backend object"
            )
        return _bm25_over_file(str(config.corpus_path))

    def _max_observation_chars(self, max_question: int) -> int:
        config = self.config
        hint = len(turns_hint(config.max_turns))
        prompt = max_question if config.num_objectives == 1 else (
            config.num_objectives * (len(f"Question {config.num_objectives}: ") + max_question + 1)
        )
        hits = len("<information>\n</information>") + hint + config.top_k * (config.max_doc_chars + 1)
        information = max(hits, len(format_information([], turns_hint(config.max_turns))))
        reasons = [r.format(tag="search", chars=config.max_action_chars, limit=config.max_query_chars)
                   for r in INVALID.values()]
        invalid = max(len(_invalid_observation(r, config.num_objectives, config.max_turns)) for r in reasons)
        return max(prompt, information, invalid)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        """A new task. `options` may give this episode fewer questions ("num_objectives") and fewer turns
        ("max_turns") than the config, which sets the largest task the env serves."""
        super().reset(seed=seed)
        task_seed = seed + self.config.seed_offset if seed is not None else int(self.np_random.integers(0, 2**31 - 1))
        n, self._max_turns = self._episode_size(options or {})
        if self.config.data == "synthetic":
            self.questions = encyclopedia.make_questions(task_seed, n, self.world_config)
        elif self._fixed_tasks:
            row = random.Random(f"search-task-{task_seed}").randrange(len(self._file_rows))
            self.questions = self._file_rows[row][:n]
        else:
            rows = random.Random(f"search-task-{task_seed}").sample(range(len(self._file_rows)), n)
            self.questions = tuple(self._file_rows[i][0] for i in rows)
        self._turn = 0
        self._num_searches = 0
        self._num_invalid = 0
        self._searched = []
        self._done = False
        return _prompt(self.questions), self._info()

    def _episode_size(self, options: dict) -> tuple[int, int]:
        unknown = sorted(set(options) - set(RESET_OPTIONS))
        if unknown:
            raise ValueError(f"SearchEnv.reset has no option(s) {unknown}; allowed: {list(RESET_OPTIONS)}")
        size = []
        for name in RESET_OPTIONS:
            cap = getattr(self.config, name)
            value = options.get(name, cap)
            if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= cap:
                raise ValueError(f"SearchEnv.reset option {name}={value!r} is not allowed; give an int in [1, {cap}] "
                                 f"(the env's {name})")
            size.append(value)
        return size[0], size[1]

    @property
    def turns_left(self) -> int:
        """Actions the agent may still take."""
        return self._max_turns - self._turn

    def step(self, action):
        if self._done:
            raise RuntimeError("SearchEnv.step called after the episode ended; call reset() first")
        config = self.config
        text = clean("" if action is None else str(action), config.max_action_chars)
        self._turn += 1
        kind, content = parse_action(text, config.max_query_chars)
        if kind == "answer":
            # MemSearcher's reward scores one question's answer whole, semicolons included, as its authors' code does.
            single = config.reward == "f1" and len(self.questions) == 1
            return self._finish([content.strip()] if single else split_answers(content), {"action": kind})
        step_info = {"action": kind, "format_ok": float(kind == "search")}
        if kind == "search":
            self._num_searches += 1
            self._searched.append(content)
            step_info["query"] = content
        else:
            self._num_invalid += 1
        if self.turns_left == 0:
            return self._finish(None, step_info)
        if kind == "invalid":
            obs = _invalid_observation(content, len(self.questions), self.turns_left)
            return obs, 0.0, False, False, {**self._info(), **step_info}
        try:
            hits = self.retriever.search([content], config.top_k)[0]
        except Exception as exc:
            if not self._remote:
                raise
            return self._finish(None, step_info, failure=f"retrieval failed: {type(exc).__name__}: {exc}")
        step_info["retrieved_ids"] = [hit["id"] for hit in hits]
        obs = format_information(hits, turns_hint(self.turns_left), config.max_doc_chars)
        return obs, 0.0, False, False, {**self._info(), **step_info}

    def _finish(self, predictions: list[str] | None, step_info: dict, failure: str = ""):
        """Ends the episode: `predictions` are the answers given, None when the turns ran out or the episode failed
        (`failure` says why)."""
        self._done = True
        n = len(self.questions)
        count_ok = predictions is not None and len(predictions) == n
        if count_ok:
            ems = [em(p, list(q.answers)) for p, q in zip(predictions, self.questions)]
            f1s = [f1(p, list(q.answers)) for p, q in zip(predictions, self.questions)]
        else:
            ems = f1s = [0.0] * n
        format_ok = count_ok and self._num_invalid == 0
        metrics = {
            "em": sum(ems) / n,
            "f1": sum(f1s) / n,
            "format_ok": float(format_ok),
            "answer_count_ok": float(count_ok),
            "num_searches": self._num_searches,
            "num_invalid": self._num_invalid,
            "num_turns": self._turn,
        }
        if self.config.reward == "em_sum":
            reward = sum(ems)
        elif self.config.reward == "em_sum_authors_code":
            reward = 0.0 if predictions is None else float(
                sum(em(p, list(q.answers)) for p, q in zip(predictions, self.questions)))
        elif self.config.reward == "f1":
            reward = 0.0 if not format_ok else (metrics["f1"] if metrics["f1"] > 0 else 0.1)
        else:
            reward = float(format_ok and all(e == 1.0 for e in ems))
        if predictions is not None:
            step_info["format_ok"] = float(count_ok)
        info = {
            **self._info(),
            **step_info,
            "out_of_turns": predictions is None and not failure,
            **({"failure": failure} if failure else {}),
            "answers": [list(q.answers) for q in self.questions],
            "metrics": metrics,
        }
        return "", reward, predictions is not None, predictions is None, info

    def expert_action(self) -> str:
        """What a scripted expert does now: the next gold hop query (in question order) it has not searched yet,
        then `<answer>` with the first gold answer of every question. Needs the synthetic generator's labels."""
        if not self.questions or self._done:
            raise RuntimeError("SearchEnv.expert_action needs a running episode; call reset() first")
        if self.config.data != "synthetic":
            raise RuntimeError("SearchEnv.expert_action needs gold hop queries, which only data='synthetic' has")
        for question in self.questions:
            for query in question.queries:
                if query not in self._searched:
                    return f"<search>{query}</search>"
        return "<answer>" + "; ".join(q.answers[0] for q in self.questions) + "</answer>"

    def expert_memory(self) -> str | None:
        """With `expert_notes`: what the expert's memory holds now, a line `Q<i> <answer>` for every question whose
        hops have all been searched (its answer was in a passage read), in question order, then `Q<k>: <question>`
        for the question it works on next, if any; None without it. The question is copied whole so that the next
        search and the note it leads to read it from the memory, not from a list of N questions."""
        if not self.config.expert_notes:
            return None
        if not self.questions or self._done:
            raise RuntimeError("SearchEnv.expert_memory needs a running episode; call reset() first")
        lines = []
        for i, question in enumerate(self.questions, start=1):
            if not all(query in self._searched for query in question.queries):
                return "\n".join([*lines, f"Q{i}: {question.question}"])
            lines.append(f"Q{i} {question.answers[0]}")
        return "\n".join(lines)

    def _info(self) -> dict:
        return {
            "question": _prompt(self.questions),
            "questions": [q.question for q in self.questions],
            "turn": self._turn,
            "turns_left": self.turns_left,
        }
