"""memrl/MemoryStore-v0: Mem-α's memory-tool store fed by a stream of chunks, then questions answered from it.

reset -> the first chunk. Each step takes one reply: in memory="tools" mode its tool calls (memrl_envs.memory_store) run
against the episode's store; in memory="text" mode the whole reply becomes the one-paragraph memory (the flat memory
of the MemAgent and MEM1-style baselines). The step returns the next chunk. After the last chunk's step a frozen
answerer answers every question from the final memory (memory_answer) and the episode ends. In memory="context"
mode nothing is written (the long-context and RAG baselines): each question is answered from the task's chunks
themselves (the latest that fit in context_tokens, or the BM25 top context_top_k), so the episode starts at the
questions; the policy answers them (answerer="policy"), or with answerer=None a caller hands env.answer_chat(i) to a
frozen answerer itself. With expert_writes the scripted expert writes every chunk before the episode starts
(synthetic tasks, memory="tools" or "text"), so it too starts at the questions: answer rows over the expert's memory
(the answerer's SFT data, and its accuracy from a good memory). reset(options=...) changes any option but
FIXED_OPTIONS for one episode (SFT's task_options mix memory modes and categories that way).

With data="benchmark" the tasks are a released file of LongMemEval, LoCoMo or MemoryAgentBench: chunks and questions
are worded as the benchmark's own answer prompt words them (memory_benchmarks.chunk_text, question_text), the answer
prompt adds no Mem-α instruction, and each answer gets the score the benchmark reports
(memory_benchmark_scores.score_question; LongMemEval's judge is answer_judge, else the frozen answerer, asked as
LongMemEval asks it). The final info's "questions" lists each question's id, category, abstention flag and score;
its metrics hold the scores as question_score_<i>, in the order of the instance's questions.

Rewards (memrl_envs.memory_rewards, paper eq. 1): each step returns its row's r_tool + gamma * r_content; the last step
adds the trajectory's shared r_acc + beta * r_compress. The final info's "row_rewards" gives every row its full
reward r_acc + beta * r_compress + r_tool + gamma * r_content, which the episode loop puts on the conversations.
Without an answerer (answerer=None) nothing is answered: the episode ends after the last chunk with r_acc left out.
With answerer="policy" the policy answers instead: after the last chunk each step's observation is a question (phase
"answer", info["answer_chat"] the chat a frozen answerer would get) and its reply the answer; these answer rows share
the trajectory's r_acc + beta * r_compress.

info on reset and every step: phase ("memory" while chunks remain, "answer" while the policy answers, "done" at the
end), question (what the user asks the agent to memorise for, the task's prompt or PROMPT; in the answer phase the
question being asked), memory_mode (the episode's memory option), chunk (index of the chunk the observation is),
num_chunks, memory (the store as data: core, semantic, episodic); on reset also tools (the OpenAI function schemas
of the enabled memory types' tools, memory_store.tool_schemas). Each step adds calls
(one {"name", "ok", "success", "message"} per call found in the reply: ok, it executed; success, it counts in r_tool
under the reward variant), r_tool and r_content. The final step adds answers (the
answerer's reply per question), golds, row_rewards and metrics: r_acc, r_compress, memory_tokens, chunk_tokens,
tool_success (share of the episode's calls that executed, "ok"), calls_per_chunk, r_tool and r_content (means over
rows). With dump_dir set, each finished episode's store, answers and rewards are written there as JSON.
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import ClassVar

import gymnasium as gym

from memrl_envs.memory_answer import (
    LLMJudge,
    LMEJudge,
    answer_messages,
    context_chunks,
    context_memory,
    memory_for,
)
from memrl_envs.memory_benchmark_scores import (
    LOCOMO_JUDGE_SAMPLING,
    LONGMEMEVAL_JUDGE_SAMPLING,
    LONGMEMEVAL_TYPES,
    judge_locomo,
    locomo_reply,
    score_question,
)
from memrl_envs.memory_benchmarks import BENCHMARKS, BenchmarkInstance, chunk_text, load_benchmark, question_text
from memrl_envs.memory_generators import MemoryGeneratorConfig, expert_calls, format_calls, make_memory_task
from memrl_envs.memory_rewards import (
    compression_reward,
    content_reward,
    content_valid,
    expert_answer,
    metric_for,
    row_rewards,
    score_answer,
    tool_reward,
)
from memrl_envs.memory_store import MEMORY_TYPES, VARIANTS, MemoryStore, execute, parse_tool_calls, tool_schemas
from memrl_envs.memory_tasks import MemoryQuestion, MemoryTask, load_memory_tasks
from memrl_envs.text_space import printable, text_space
from memrl.engines.remote import chat_client
from memrl.preflight import service_missing, typed_config

PROMPT = "Remember the following content chunk by chunk; you will be asked questions about it later."
"""What the agent is told to memorise for when the task has no prompt of its own."""
MEMORY_MODES = ("tools", "text", "context", "none")
"""'tools': Mem-α's store edited by tool calls; 'text': the reply is the whole new memory paragraph; 'context': no
memory, each question is answered from the chunks themselves; 'none': nothing read, nothing written, each question
is answered over an empty store (the floor a written memory has to beat)."""
READ_ONLY_MODES = ("context", "none")
"""Modes without a writing phase: the episode starts at the questions."""
JUDGES = ("rules", "answerer")
"""Memory-content judges: deterministic rules, or the answerer asked with the judge prompts (memory_answer)."""
FIXED_OPTIONS = ("data", "data_path", "benchmark", "entity_ids_path", "chunk_tokens", "tokenizer_path", "answerer",
                 "answerer_model", "answerer_timeout_s", "answerer_retries", "judge", "answer_judge",
                 "answer_judge_model")
"""Options set once per env (they load files or reach the answerer): reset options may change any other."""


@dataclass(frozen=True)
class MemoryStoreConfig:
    """Knobs of the memory-store env (the generator's own knobs are MemoryGeneratorConfig's)."""

    data: str = "synthetic"
    """'synthetic' (memory_generators), 'file' (data_path: the Mem-α authors' rows or MemoryAgentBench's, scored by
    Mem-α's reward) or 'benchmark' (data_path: a released file of `benchmark`, shown and scored as that benchmark
    does: memrl_envs.memory_benchmarks, memrl_envs.memory_benchmark_scores)."""
    data_path: str | None = None
    """Task file for data='file' or 'benchmark' (.parquet, .jsonl, .json); reset seed i takes instance i modulo the
    file's instances."""
    benchmark: str | None = None
    """data='benchmark': which benchmark's file data_path is, one of memrl_envs.memory_benchmarks.BENCHMARKS."""
    entity_ids_path: str | None = None
    """data='benchmark': MemoryAgentBench's movie catalogue (processed_data/Recsys_Redial/entity2id.json), which
    scores its recommendation rows."""
    chunk_tokens: int = 2048
    """MemoryAgentBench rows: their context is cut into chunks of at most this many tokens."""
    tokenizer_path: str | None = None
    """Tokenizer that counts tokens (core limit, memory and chunk sizes); whitespace words without one."""
    memory: str = "tools"
    """One of MEMORY_MODES."""
    enabled: tuple[str, ...] = MEMORY_TYPES
    """Memory types the store offers (memory='tools')."""
    core_max_tokens: int = 512
    """Core memory limit in tokens; a longer update is cut at a word and marked."""
    context_tokens: int | None = None
    """memory='context': each question sees the latest chunks that fit in this many tokens (None: every chunk)."""
    context_top_k: int | None = None
    """memory='context': each question sees the chunks BM25 ranks highest against it, this many (RAG; None: off)."""
    answerer: str | None = None
    """Who answers the questions: an http(s):// OpenAI-compatible API base (".../v1"), "actor:NAME" for a running
    Ray actor with an answer() method (memrl.engines.chat.start_chat_server), "policy" (the policy answers each question
    itself after the last chunk, one call per question, seeing what a frozen answerer would), or None to end
    without answering."""
    answerer_model: str = "default"
    """Model name sent to an HTTP answerer."""
    answerer_timeout_s: float = 300.0
    """Deadline of one answerer call (one question over HTTP; one episode's questions through an actor)."""
    answerer_retries: int = 2
    """Times an HTTP answerer request is asked again when the server cannot be reached or answers 5xx."""
    answer_top_k: int | None = 20
    """Semantic and episodic items shown per question (BM25 against the question); None shows all of them."""
    judge: str = "rules"
    """One of JUDGES: how r_content is judged."""
    beta: float = 0.05
    """Weight of r_compress in every row's reward."""
    gamma: float = 0.1
    """Weight of r_content in every row's reward."""
    answer_judge: str | None = None
    """Who judges the answers of LongMemEval sources ("lme_train", "longmemeval_s*": a rubric, not an answer, as the
    Mem-α authors score them with an LLM): an http(s):// OpenAI-compatible API base or "actor:NAME"; None asks the
    frozen answerer. A file holding such rows needs one of them. It is asked for answer_judge_model (else
    answerer_model), with the answerer's deadline and retries (answerer_timeout_s, answerer_retries)."""
    answer_judge_model: str | None = None
    """Model name sent to an HTTP answer judge (None: answerer_model)."""
    reward_variant: str = "paper"
    """One of memrl_envs.memory_store.VARIANTS: "paper", or "authors_code", the Mem-α authors' code where the paper is
    silent or departs from it (what executes and counts in r_tool: memrl_envs.memory_store's table; answer scoring:
    memrl_envs.memory_rewards's)."""
    expert_writes: bool = False
    """The scripted expert writes every chunk before the episode starts, which begins at the questions (synthetic
    data, memory 'tools' or 'text', answerer 'policy' or None): answers over a memory written as it should be."""
    expert_recall: float = 1.0
    """Share of a synthetic task's facts the scripted expert (expert_action, expert_writes) keeps in full; below 1 it
    files small talk instead of some facts and only the place of some story events (memrl_envs.memory_generators.
    expert_calls), the same choices for the same task and chunk. An imperfect teacher leaves its SFT student a
    choice RL can improve: what to keep."""
    max_chunks: int | None = None
    """Stream at most this many chunks of a task (None: all)."""
    max_action_chars: int = 40_000
    """Replies are cut to this many printable characters before they are parsed."""
    dump_dir: str | None = None
    """If set, each finished episode is written there as <instance_id>-<seed>.json."""
    seed_offset: int = 0
    """Task seed = reset seed + seed_offset."""

    def __post_init__(self) -> None:
        if self.data not in ("synthetic", "file", "benchmark"):
            raise ValueError(f"MemoryStoreConfig.data must be 'synthetic', 'file' or 'benchmark', got {self.data!r}")
        if self.data != "synthetic" and not self.data_path:
            raise ValueError(f"MemoryStoreConfig: data={self.data!r} needs data_path")
        if (self.data == "benchmark") != (self.benchmark is not None) or (
                self.benchmark is not None and self.benchmark not in BENCHMARKS):
            raise ValueError(f"MemoryStoreConfig: data='benchmark' needs benchmark, one of {BENCHMARKS}, and other "
                             f"data none; got data={self.data!r}, benchmark={self.benchmark!r}")
        if self.memory not in MEMORY_MODES:
            raise ValueError(f"MemoryStoreConfig.memory must be one of {MEMORY_MODES}, got {self.memory!r}")
        if self.judge not in JUDGES:
            raise ValueError(f"MemoryStoreConfig.judge must be one of {JUDGES}, got {self.judge!r}")
        if self.judge == "answerer" and self.answerer is None:
            raise ValueError("MemoryStoreConfig: judge='answerer' needs an answerer")
        if self.reward_variant not in VARIANTS:
            raise ValueError(f"MemoryStoreConfig.reward_variant must be one of {VARIANTS}, got {self.reward_variant!r}")
        if self.answerer is not None and not (isinstance(self.answerer, str) and (
                self.answerer.startswith(("http://", "https://", "actor:")) or self.answerer == "policy")):
            raise ValueError(f"MemoryStoreConfig.answerer must be an http(s):// URL, 'actor:NAME', 'policy' or None, "
                             f"got {self.answerer!r}")
        if self.answer_judge is not None and not (isinstance(self.answer_judge, str)
                                                  and self.answer_judge.startswith(("http://", "https://", "actor:"))):
            raise ValueError(f"MemoryStoreConfig.answer_judge must be an http(s):// URL, 'actor:NAME' or None, got "
                             f"{self.answer_judge!r}")
        if self.judge == "answerer" and self.answerer == "policy":
            raise ValueError("MemoryStoreConfig: judge='answerer' needs a frozen answerer (a URL or an actor), not "
                             "the policy")
        for name, low in (("chunk_tokens", 1), ("core_max_tokens", 1), ("max_action_chars", 1),
                          ("answerer_retries", 0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"MemoryStoreConfig.{name} must be an int >= {low}, got {value!r}")
        if self.memory in READ_ONLY_MODES and self.answerer not in ("policy", None):
            raise ValueError(f"MemoryStoreConfig: memory={self.memory!r} has no writing phase to step through "
                             f"before a frozen answerer; use answerer='policy' or None (and hand env.answer_chat(i) "
                             f"to the answerer), got answerer={self.answerer!r}")
        if self.expert_writes and (self.data != "synthetic" or self.memory in READ_ONLY_MODES
                                   or self.answerer not in ("policy", None)):
            raise ValueError(f"MemoryStoreConfig: expert_writes needs data='synthetic' (the expert is scripted for "
                             f"the generators), memory 'tools' or 'text' and answerer 'policy' or None, got "
                             f"data={self.data!r}, memory={self.memory!r}, answerer={self.answerer!r}")
        if isinstance(self.expert_recall, bool) or not isinstance(self.expert_recall, (int, float)) or not (
                0 <= self.expert_recall <= 1):
            raise ValueError(f"MemoryStoreConfig.expert_recall must be a number in [0, 1], got {self.expert_recall!r}")
        for name in ("answer_top_k", "max_chunks", "context_tokens", "context_top_k"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"MemoryStoreConfig.{name} must be None or an int >= 1, got {value!r}")
        if not self.answerer_timeout_s > 0:
            raise ValueError(f"MemoryStoreConfig.answerer_timeout_s must be > 0, got {self.answerer_timeout_s!r}")
        if not (self.beta >= 0 and self.gamma >= 0):
            raise ValueError(f"MemoryStoreConfig.beta and gamma must be >= 0, got {self.beta!r} and {self.gamma!r}")
        MemoryStore(enabled=tuple(self.enabled))  # names bad memory types


class MemoryStoreEnv(gym.Env):
    """Mem-α's write phase over a chunk stream and its question-answering reward (see the module docstring)."""

    metadata: ClassVar[dict] = {"render_modes": []}

    def __init__(self, **kwargs):
        """`kwargs` are MemoryStoreConfig fields and, for data='synthetic', MemoryGeneratorConfig fields."""
        self._kwargs = dict(kwargs)
        self.config, self.generator = self._configs(kwargs)
        self._base = self.config, self.generator
        config = self.config
        if config.data == "file":
            self._file_tasks = load_memory_tasks(config.data_path, config.chunk_tokens, config.tokenizer_path)
        if config.data == "benchmark":
            self._instances = self._load_benchmark(config)
            self._entity_ids = (json.loads(Path(config.entity_ids_path).read_text(encoding="utf-8"))
                                if config.entity_ids_path else None)
            reader = "rag" if config.memory == "context" and config.context_top_k else "long_context"
            self._file_tasks = [benchmark_task(config.benchmark, instance, reader) for instance in self._instances]
            recsys = sorted({t.data_source for t in self._file_tasks if "recsys" in t.data_source})
            if recsys and self._entity_ids is None:
                raise ValueError(f"MemoryStoreEnv: {config.data_path} holds rows of {recsys}, scored against the "
                                 f"benchmark's movie catalogue; give entity_ids_path (its entity2id.json)")
        from memrl_envs.chunk_stream import TokenCounter

        self._counter = TokenCounter(config.tokenizer_path)
        self.answerer = self._make_answerer(config.answerer)
        self.answer_judge = self._judge_backend(config)
        if config.answerer is not None and config.benchmark is not None and self.answer_judge is None and any(
                q.category in LONGMEMEVAL_TYPES for i in self._instances for q in i.questions):
            raise ValueError(f"MemoryStoreEnv: {config.data_path} holds LongMemEval questions, which its judge "
                             f"scores; give answer_judge (an http(s) URL or actor:NAME) or a frozen answerer")
        if config.data == "file" and config.answerer is not None and self.answer_judge is None:
            judged = sorted({t.data_source for t in self._file_tasks if metric_for(t.data_source) == "judge"})
            if judged:
                raise ValueError(f"MemoryStoreEnv: {config.data_path} holds rows of {judged}, which are scored by an "
                                 f"LLM judge (a rubric, not an answer); give answer_judge (an http(s) URL or "
                                 f"actor:NAME) or a frozen answerer")
        # An answerer in another process is waited on: the runner steps this env off its event loop.
        self.metadata = {**type(self).metadata, "blocking_io": self.answerer is not None}
        self.observation_space = text_space(1 << 24)
        self.action_space = text_space(config.max_action_chars)
        self.task: MemoryTask | None = None
        self.store: MemoryStore | None = None
        self._chunk = 0
        self._rows: list[tuple[float, float]] = []
        self._calls: list[dict] = []
        self._seed = 0

    @staticmethod
    def _configs(options: dict) -> tuple[MemoryStoreConfig, MemoryGeneratorConfig | None]:
        own = {f.name for f in fields(MemoryStoreConfig)}
        options = {k: tuple(v) if k == "enabled" else v for k, v in options.items()}
        config = typed_config(MemoryStoreConfig, {k: v for k, v in options.items() if k in own}, "MemoryStoreEnv")
        allowed = own | ({f.name for f in fields(MemoryGeneratorConfig)} if config.data == "synthetic" else set())
        unknown = sorted(set(options) - allowed)
        if unknown:
            raise ValueError(f"MemoryStoreEnv(data={config.data!r}) has no option(s) {unknown}; allowed: "
                             f"{sorted(allowed)}")
        if config.data != "synthetic":
            return config, None
        return config, typed_config(MemoryGeneratorConfig, {k: v for k, v in options.items() if k not in own},
                                    "MemoryStoreEnv")

    @classmethod
    def check_options(cls, options: dict) -> None:
        """Raise ValueError naming an unknown or bad option, without reading files or reaching the answerer."""
        cls._configs(options)

    @classmethod
    def check_services(cls, options: dict) -> None:
        """Raise ValueError when the answerer or answer judge named (actor:NAME or a URL) is not there."""
        config, _ = cls._configs(options)
        for setting in ("answerer", "answer_judge"):
            where = getattr(config, setting)
            if where is None or where == "policy":
                continue
            if why := service_missing(where):
                raise ValueError(f"MemoryStoreEnv {setting}={where!r} is not there: {why}")

    def _make_answerer(self, where: str | None, model: str | None = None, sampling: dict | None = None):
        """The backend at `where` (an http(s) URL or "actor:NAME"); None for None or "policy". An HTTP backend is
        asked for `model` (None: answerer_model) with `sampling` (a judge's temperature and max_tokens; None: the
        answerer's defaults); an actor samples as it was started."""
        config = self.config
        if where is None or where == "policy":
            return None
        return chat_client(where, model or config.answerer_model, timeout_s=config.answerer_timeout_s,
                           retries=config.answerer_retries, **(sampling or {}))

    def _judge_backend(self, config: MemoryStoreConfig):
        """Who judges the answers. A benchmark's judge is asked with that benchmark's sampling: LoCoMo's LLM judge
        only when answer_judge is given (F1 scores LoCoMo), the LongMemEval judge is answer_judge, else the
        answerer. Other data: answer_judge, else the answerer itself."""
        if config.benchmark == "locomo":
            return self._make_answerer(config.answer_judge, config.answer_judge_model, LOCOMO_JUDGE_SAMPLING)
        if config.benchmark is not None:
            if config.answer_judge:
                return self._make_answerer(config.answer_judge, config.answer_judge_model, LONGMEMEVAL_JUDGE_SAMPLING)
            return self._make_answerer(config.answerer, sampling=LONGMEMEVAL_JUDGE_SAMPLING)
        return self._make_answerer(config.answer_judge, config.answer_judge_model) or self.answerer

    @staticmethod
    def _load_benchmark(config: MemoryStoreConfig):
        options = ({"chunk_tokens": config.chunk_tokens, "tokenizer_path": config.tokenizer_path}
                   if config.benchmark == "memoryagentbench" else {})
        return load_benchmark(config.benchmark, config.data_path, **options)

    def _judge_reply(self, prompt: str) -> str:
        """The answer judge's reply to one user message (data='benchmark')."""
        (reply,) = self.answer_judge.answer([[{"role": "user", "content": prompt}]])
        return reply if isinstance(reply, str) else ""

    # -- episode ---------------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        # Options change this episode only (e.g. SFT's task_options mixing memory modes or categories).
        fixed = sorted(set(options or ()) & set(FIXED_OPTIONS))
        if fixed:
            raise ValueError(f"MemoryStoreEnv.reset options {fixed} are set once per env; an episode may change "
                             f"any other option")
        self.config, self.generator = self._configs({**self._kwargs, **options}) if options else self._base
        self._seed = (seed or 0) + self.config.seed_offset
        if self.config.data != "synthetic":
            self.task = self._file_tasks[self._seed % len(self._file_tasks)]
        else:
            self.task = make_memory_task(self._seed, self.generator)
        chunks = self.task.chunks[: self.config.max_chunks] if self.config.max_chunks else self.task.chunks
        self._chunks = chunks
        self.store = MemoryStore(core_max_tokens=self.config.core_max_tokens, enabled=tuple(self.config.enabled),
                                 count_tokens=self._counter.count, seed=self._seed)
        self._chunk, self._rows, self._calls, self._answers = 0, [], [], []
        self._shown: dict[str, list[str]] = {}
        self._done = False
        if self.config.memory in READ_ONLY_MODES:  # nothing to write: straight to the questions
            self._chunk = len(chunks)
            return self._question(), self._reset_info("answer")
        if self.config.expert_writes:  # the expert's memory, not the policy's: no rows of its own
            while self._chunk < len(chunks):
                self._write(self.expert_action())
                self._chunk += 1
            return self._question(), self._reset_info("answer")
        return chunks[0], self._reset_info("memory")

    def _reset_info(self, phase: str) -> dict:
        """The first info, which also names the episode's tools (what a workflow shows the policy)."""
        return {**self._info(phase), "tools": tool_schemas(tuple(self.config.enabled))}

    def step(self, action: str):
        if self.task is None or self._done:
            raise RuntimeError("MemoryStoreEnv.step called after the episode ended; call reset() first")
        reply = printable(action)[: self.config.max_action_chars]
        if self._chunk >= len(self._chunks):  # the policy answers question len(self._answers)
            self._answers.append(reply)
            if len(self._answers) < len(self.task.questions):
                return self._question(), 0.0, False, False, self._info("answer")
            return self._finish(0.0, [], 0.0, 0.0)
        results, r_tool, r_content = self._write(reply)
        calls = [{"name": r.name, "ok": r.ok, "success": r.success, "message": r.message} for r in results]
        self._calls += calls
        self._rows.append((r_tool, r_content))
        self._chunk += 1
        reward = r_tool + self.config.gamma * r_content
        if self._chunk < len(self._chunks):
            info = {**self._info("memory"), "calls": calls, "r_tool": r_tool, "r_content": r_content}
            return self._chunks[self._chunk], reward, False, False, info
        if self.config.answerer == "policy":
            info = {**self._info("answer"), "calls": calls, "r_tool": r_tool, "r_content": r_content}
            return self._question(), reward, False, False, info
        return self._finish(reward, calls, r_tool, r_content)

    def _write(self, reply: str):
        """Apply one chunk's reply to the memory: its tool calls' results, r_tool and r_content."""
        if self.config.memory == "text":
            self.store.core = reply.strip()
            return [], 0.0, 0.0
        results = [execute(self.store, call, self.config.reward_variant) for call in parse_tool_calls(reply)]
        return results, tool_reward(results), content_reward(results, self._judge(results))

    def _question(self) -> str:
        return self.task.questions[len(self._answers)].question

    def _judge(self, results):
        """The content judge for this step's calls: the rules, or the answerer asked once for all its writes."""
        if self.config.judge == "rules":
            return content_valid
        writes = list(dict.fromkeys(r.judged for r in results if r.judged))
        verdicts = dict(zip(writes, LLMJudge(self.answerer).judge_all(writes)))
        return lambda kind, content: verdicts.get((kind, content), False)

    def _finish(self, reward: float, calls: list[dict], r_tool: float, r_content: float):
        config, task = self.config, self.task
        chunk_tokens = sum(self._counter.counts(list(self._chunks)))
        if config.memory == "context":  # what each question was shown, on average
            shown = [self._context(q.question) for q in task.questions]
            memory_tokens = sum(sum(self._counter.counts(c)) if c else 0 for c in shown) / len(shown)
        else:
            memory_tokens = self.store.num_tokens()
        r_compress = compression_reward(memory_tokens, chunk_tokens)
        metrics = {"r_compress": r_compress, "memory_tokens": float(memory_tokens), "chunk_tokens": float(chunk_tokens),
                   "tool_success": (sum(c["ok"] for c in self._calls) / len(self._calls)) if self._calls else 0.0,
                   "calls_per_chunk": len(self._calls) / len(self._chunks),
                   "r_tool": sum(t for t, _ in self._rows) / max(1, len(self._rows)),
                   "r_content": sum(c for _, c in self._rows) / max(1, len(self._rows))}
        info = {**self._info("done"), "calls": calls, "r_tool": r_tool, "r_content": r_content,
                "golds": [list(q.answers) for q in task.questions]}
        if self.config.answerer is not None:
            try:
                answers = self._answers if self.config.answerer == "policy" else self._answer()
                if config.data == "benchmark":
                    instance = self._instances[self._seed % len(self._instances)]
                    judge = self._judge_reply if self.answer_judge is not None else None
                    scores = [score_question(config.benchmark, q, a, task.data_source, judge, self._entity_ids)
                              for a, q in zip(answers, instance.questions)]
                    info["questions"] = [{"question_id": q.question_id, "category": q.category,
                                          "abstention": q.abstention, "score": score}
                                         for q, score in zip(instance.questions, scores)]
                    # Numbers travel back with the trajectory: a harness reads each question's score there.
                    metrics.update({f"question_score_{k}": score for k, score in enumerate(scores)})
                    if config.benchmark == "locomo" and judge is not None:
                        for k, (q, a) in enumerate(zip(instance.questions, answers)):
                            verdict = judge_locomo(q, locomo_reply(q, a), judge)
                            if verdict is not None:
                                info["questions"][k]["judge"] = metrics[f"question_judge_{k}"] = verdict
                else:
                    judge = LMEJudge(self.answer_judge) if self.answer_judge is not None else None
                    scores = [score_answer(a, q.answers, task.data_source, config.reward_variant, q.question, judge)
                              for a, q in zip(answers, task.questions)]
            except (ConnectionError, TimeoutError, RuntimeError, ValueError) as e:
                # The answerer failing is not the policy's doing: the episode is counted, never trained on.
                info["failure"] = f"answerer: {e}"
                self._done = True
                return "", 0.0, False, True, {**info, "metrics": metrics}
            metrics["r_acc"] = sum(scores) / len(scores)
            info["answers"] = answers
        accuracy = metrics.get("r_acc", 0.0)
        # The policy's answer calls, when it answers, share the trajectory's outcome and nothing else.
        info["row_rewards"] = row_rewards(accuracy, r_compress, [t for t, _ in self._rows] + [0.0] * len(self._answers),
                                          [c for _, c in self._rows] + [0.0] * len(self._answers),
                                          beta=config.beta, gamma=config.gamma)
        info["metrics"] = metrics
        self._done = True
        if config.dump_dir:
            self._dump(info)
        return "", reward + accuracy + config.beta * r_compress, True, False, info

    def answer_chat(self, index: int) -> list[dict[str, str]]:
        """The chat a frozen answerer gets for question `index` (and the policy, when it answers)."""
        question = self.task.questions[index].question
        if self.config.memory == "text":
            memory = f"<memory>\n{self.store.core}\n</memory>"
        elif self.config.memory == "context":
            memory = context_memory(self._context(question))
        else:
            memory = memory_for(self.store, question, self.config.answer_top_k)
        # A benchmark's question carries its own wording (memory_benchmarks.question_text): no Mem-α instruction.
        source = "" if self.config.data == "benchmark" else self.task.data_source
        return answer_messages(memory, question, source)

    def _answer(self) -> list[str]:
        chats = [self.answer_chat(i) for i in range(len(self.task.questions))]
        answers = self.answerer.answer(chats)
        if len(answers) != len(chats):
            raise ValueError(f"the answerer gave {len(answers)} replies for {len(chats)} questions")
        return [a if isinstance(a, str) else "" for a in answers]

    def _context(self, question: str) -> list[str]:
        """memory='context': the chunks question `question` is shown (picked once: its chat and memory_tokens agree)."""
        if question not in self._shown:
            config = self.config
            self._shown[question] = context_chunks(self._chunks, question, top_k=config.context_top_k,
                                                   max_tokens=config.context_tokens, count_tokens=self._counter.count)
        return self._shown[question]

    def expert_action(self) -> str:
        """What a scripted Mem-α agent writes for the current chunk of a synthetic task, as Qwen-Agent tool calls
        (memrl_envs.memory_generators.expert_calls); in memory="text" mode, the new paragraph instead."""
        if self.task is None or self._done:
            raise RuntimeError("MemoryStoreEnv.expert_action needs a running episode; call reset() first")
        if self._chunk >= len(self._chunks):  # answering: the first gold answer, as its metric wants it
            return expert_answer(self.task.questions[len(self._answers)].answers[0], self.task.data_source)
        if self.config.data != "synthetic":
            raise ValueError("MemoryStoreEnv.expert_action is scripted for the synthetic tasks only (data='synthetic')")
        rng = random.Random(f"expert-{self.task.instance_id}-{self._chunk}")
        calls = expert_calls(self.task.data_source, self._chunks[self._chunk], self.store.core, self._chunk,
                             recall=self.config.expert_recall, rng=rng)
        if self.config.memory == "text":
            core = [c["arguments"]["new_content"] for c in calls if c["name"] == "memory_update"]
            added = [c["arguments"]["content"] for c in calls if c["name"] == "new_memory_insert"]
            return " ".join((core[-1:] or [self.store.core]) + added).strip()
        return format_calls(calls, self.config.enabled)

    def _info(self, phase: str) -> dict:
        info = {"phase": phase, "question": self.task.prompt or PROMPT, "memory_mode": self.config.memory,
                "chunk": self._chunk, "num_chunks": len(self._chunks), "memory": self.store.to_dict()}
        if phase == "answer":
            # A workflow that asks "the problem" at the end (MemAgent's) finds the question where it looks.
            info["question"] = self._question()
            info["answer_chat"] = self.answer_chat(len(self._answers))
        return info

    def _dump(self, info: dict) -> None:
        path = Path(self.config.dump_dir)
        path.mkdir(parents=True, exist_ok=True)
        record = {"instance_id": self.task.instance_id, "seed": self._seed, "data_source": self.task.data_source,
                  "config": asdict(self.config), **{k: v for k, v in info.items() if k != "calls"},
                  "all_calls": self._calls}
        name = "".join(c if c.isalnum() or c in "-_" else "_" for c in self.task.instance_id)
        (path / f"{name}-{self._seed}.json").write_text(json.dumps(record, indent=1, ensure_ascii=False))


def benchmark_task(benchmark: str, instance: BenchmarkInstance, reader: str = "long_context") -> MemoryTask:
    """A benchmark instance as the env's task: its chunks and questions worded as the benchmark shows them (to a RAG
    `reader`, or one that reads its memory or the chunks in context), its data source the benchmark's name
    (MemoryAgentBench: the row's sub-dataset, which picks the metric and the question's template)."""
    source = instance.instance_id.rsplit("#", 1)[0] if benchmark == "memoryagentbench" else benchmark
    chunks = tuple(chunk_text(benchmark, c, i) for i, c in enumerate(instance.chunks))
    questions = tuple(MemoryQuestion(question_text(benchmark, q, source, reader), q.answers)
                      for q in instance.questions)
    return MemoryTask(instance_id=instance.instance_id, prompt="", chunks=chunks, questions=questions,
                      data_source=source)
