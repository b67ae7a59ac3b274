"""Answering from a Mem-α memory: what the frozen answerer is shown, and the answerer and judge backends.

For each question the answerer sees the core paragraph plus the `top_k` semantic and `top_k` episodic items that
BM25 ranks highest against the question, best first (the paper's 20; Okapi BM25 as the batch endpoint of the
authors' server ranks them, so items that share no word with the question fill the list when fewer match, ties in
stored order; top_k=None shows every item in stored order, as their single-request endpoint does while the prompt
stays short), in a system prompt, and the question as the user message. Two things differ from their server: the
system prompt is memrl's own (ANSWER_SYSTEM, with one instruction line per answer metric where they put a
per-source query prompt before each question), and the list is never shortened for length (they drop one item per
list while their prompt exceeds 30,000 tokens). Backends, all behind `Answerer.answer(conversations) -> replies`:

- `HTTPAnswerer`: an OpenAI-compatible chat endpoint (`/v1/chat/completions`; vLLM's server, or any service users
  put Qwen3-32B behind) through the `openai` client, one request per question, each with its own deadline and
  retries;
- `ActorAnswerer`: a named Ray actor with an `answer` method (memrl.engines.chat.ChatServer serves any memrl
  inference engine that way).

The content judge defaults to rules (memrl_envs.memory_rewards.content_valid); `LLMJudge` asks an answerer instead, with
a prompt per memory type, and reads its {"VALID": true/false} verdict. `LMEJudge` scores LongMemEval answers, whose
gold is a rubric: an answerer is asked the LongMemEval judge's yes/no question, as the Mem-α authors score them.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Protocol

from memrl_envs.http_json import preview
from memrl_envs.memory_rewards import judge_verdict, metric_for
from memrl_envs.memory_store import MemoryStore, bm25_rank

_BACKOFF_S = 8.0
"""The longest pause the openai client takes between two tries of a request (its MAX_RETRY_DELAY)."""
ANSWER_SYSTEM = (
    "You answer questions using only the memory below.\n\n"
    "MEMORY:\n{memory}\n\n"
    "If the memory does not hold the answer, say so. Answer briefly.{instruction}"
)
"""The answerer's system prompt; {memory} is the rendered memory, {instruction} the data source's extra line."""
INSTRUCTIONS = {
    "label": ("\nThe core memory keeps the rules of a classification task and the semantic memory labelled samples. "
              "Give the label of the sample in the question as \\boxed{n}, n a single number."),
    "keywords": ("\nThe core memory keeps a summary of what was read. Name the people, places and things that "
                 "matter."),
}
"""Extra instruction by answer metric (memrl_envs.memory_rewards.METRICS); other metrics need none."""
JUDGE_PROMPTS = {
    "core": ("You check a memory system's core memory. It is not valid when it names itself (\"this is the core "
             "memory\", \"the core memory was updated\") or is a placeholder that announces content without "
             "giving it (\"here we keep the summary\" and no summary). Otherwise it is valid."),
    "semantic": ("You check a memory system's semantic memory item. It is valid when it states knowledge: facts "
                 "about someone or something, definitions, explanations, how-to knowledge or findings, including "
                 "anything that fits neither the core memory (who the user is) nor episodic memory (dated events)."),
    "episodic": ("You check a memory system's episodic memory item. It is valid when it records an experience or "
                 "event with when it happened and what happened."),
}
"""The LLM judge's system prompt per memory type; every one asks for the same JSON verdict (JUDGE_FORMAT)."""
JUDGE_FORMAT = ('\n\nReply with JSON only: {"VALID": true or false, "ISSUES": [problems found], '
                '"EXPLANATION": "one sentence"}')
_VERDICT = re.compile(r'"VALID"\s*:\s*(true|false)', re.I)
LME_JUDGE_PROMPT = (
    "I will give you a question, a rubric for desired personalized response, and a response from a model. Please "
    "answer yes if the response satisfies the desired response. Otherwise, answer no. The model does not need to "
    "reflect all the points in the rubric. The response is correct as long as it recalls and utilizes the user's "
    "personal information correctly.\n\nQuestion: {question}\n\nRubric: {rubric}\n\nModel Response: {response}\n\n"
    "Is the model response correct? Answer yes or no only."
)
"""LongMemEval's judge question (the one user message the Mem-α authors' evaluation sends), word for word: the
judge's verdict is what the score is, so its wording is part of the metric."""


def render_memory(core: str, semantic: Sequence[str], episodic: Sequence[str]) -> str:
    """The memory as the answerer reads it: the core paragraph, then numbered semantic and episodic items."""

    def block(name: str, items: Sequence[str]) -> str:
        body = "\n".join(f"{i}. {item}" for i, item in enumerate(items, 1)) if items else "(empty)"
        return f"<{name}>\n{body}\n</{name}>"

    core_block = f"<core_memory>\n{core}\n</core_memory>" if core.strip() else "<core_memory>\n(empty)\n</core_memory>"
    return "\n\n".join([core_block, block("semantic_memory", semantic), block("episodic_memory", episodic)])


def memory_for(store: MemoryStore, question: str, top_k: int | None) -> str:
    """The store as shown for one question: core plus the top_k BM25 items of each list (all items if None)."""

    def pick(kind: str) -> list[str]:
        if kind not in store.enabled:
            return []
        if top_k is None:
            return list(store.items(kind).values())
        return [content for _, content in store.search(kind, question, top_k)]

    return render_memory(store.core if "core" in store.enabled else "", pick("semantic"), pick("episodic"))


def context_chunks(chunks: Sequence[str], question: str, top_k: int | None = None, max_tokens: int | None = None,
                   count_tokens: Callable[[str], int] = lambda text: len(text.split())) -> list[str]:
    """The task's own chunks a baseline without a memory answers from: the `top_k` chunks BM25 ranks highest
    against the question, English stopwords left out (RAG-top2: top_k=2), or every chunk (long context); with
    `max_tokens`, only the latest of those that fit (by `count_tokens`). Chunks stay in reading order."""
    picked = sorted(bm25_rank(list(chunks), question, top_k, stopwords="en")) if top_k else list(range(len(chunks)))
    kept, used = [], 0
    for i in reversed(picked):
        size = count_tokens(chunks[i])
        if max_tokens is not None and used + size > max_tokens:
            break
        kept.append(i)
        used += size
    return [chunks[i] for i in sorted(kept)]


def context_memory(chunks: Sequence[str]) -> str:
    """Chunks shown in place of a memory (those context_chunks picks)."""
    body = "\n\n".join(chunks) or "(empty)"
    return f"<context>\n{body}\n</context>"


def answer_messages(memory: str, question: str, data_source: str) -> list[dict[str, str]]:
    """The chat the answerer gets for one question."""
    instruction = INSTRUCTIONS.get(metric_for(data_source), "")
    return [{"role": "system", "content": ANSWER_SYSTEM.format(memory=memory, instruction=instruction)},
            {"role": "user", "content": question}]


class Answerer(Protocol):
    def answer(self, conversations: Sequence[list[dict[str, str]]]) -> list[str]:
        """One reply per chat (a list of {"role", "content"} messages)."""


class HTTPAnswerer:
    """An OpenAI-compatible chat completions endpoint (vLLM's server, or any hosted model), through the `openai`
    client. `url` is the API base (".../v1"; a full ".../chat/completions" URL is cut back to it), `model` the served
    model's name, `api_key` the key (default: OPENAI_API_KEY, else none). Each chat is one request: connecting and
    each read wait at most `timeout_s`, and what cannot be reached, times out or answers 408, 429 or 5xx is asked
    again up to `retries` times with the client's backoff; whatever happens, a chat's answer comes within
    (retries + 1) x timeout_s plus the backoff, or the call raises. Up to `concurrency` requests run at once. Errors
    name the endpoint: ConnectionError (unreachable or late; the setting to raise is answerer_timeout_s),
    RuntimeError (an HTTP error status), ValueError (an answer without a message)."""

    def __init__(self, url: str, model: str, temperature: float = 0.7, max_tokens: int = 512,
                 timeout_s: float = 120.0, retries: int = 2, concurrency: int = 8, api_key: str | None = None):
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ValueError(f"HTTPAnswerer url must start with http:// or https://, got {url!r}")
        if not isinstance(model, str) or not model:
            raise ValueError("HTTPAnswerer model must name the served model (the name the server lists at /v1/models)")
        from openai import OpenAI

        self.base_url = url.rstrip("/").removesuffix("/chat/completions")
        self.client = OpenAI(base_url=self.base_url, api_key=api_key or os.environ.get("OPENAI_API_KEY") or "none",
                             timeout=timeout_s, max_retries=retries)
        self.model, self.temperature, self.max_tokens = model, temperature, max_tokens
        self.timeout_s, self.retries, self.concurrency = timeout_s, retries, concurrency

    def _one(self, messages: list[dict[str, str]]) -> str:
        import openai

        try:
            completion = self.client.chat.completions.create(model=self.model, messages=messages,
                                                             temperature=self.temperature, max_tokens=self.max_tokens)
        except (openai.APITimeoutError, openai.APIConnectionError) as e:
            raise ConnectionError(f"answerer {self.base_url} could not be reached or gave no answer within "
                                  f"{self.timeout_s:g} s, {self.retries + 1} tries (answerer_timeout_s, "
                                  f"answerer_retries): {e}") from None
        except openai.APIStatusError as e:
            raise RuntimeError(f"answerer {self.base_url} answered HTTP {e.status_code}: "
                               f"{preview(e.message)}") from None
        choices = getattr(completion, "choices", None)
        if not choices or getattr(choices[0], "message", None) is None:
            raise ValueError(f"answerer {self.base_url} should answer {{'choices': [{{'message': {{'content': "
                             f"...}}}}]}}, got {preview(completion)}")
        content = choices[0].message.content
        return content if isinstance(content, str) else ""

    def answer(self, conversations: Sequence[list[dict[str, str]]]) -> list[str]:
        if not conversations:
            return []
        # The client's own timeouts bound each wait; this bounds the whole answer, even one trickled in slowly.
        deadline = time.monotonic() + (self.retries + 1) * self.timeout_s + _BACKOFF_S * self.retries
        pool = ThreadPoolExecutor(max_workers=min(self.concurrency, len(conversations)))
        try:
            futures = [pool.submit(self._one, c) for c in conversations]
            try:
                return [f.result(timeout=max(0.0, deadline - time.monotonic())) for f in futures]
            except FutureTimeout:
                raise ConnectionError(f"answerer {self.base_url} gave no whole answer within "
                                      f"{(self.retries + 1) * self.timeout_s:g} s (answerer_timeout_s)") from None
        finally:
            pool.shutdown(wait=False, cancel_futures=True)


class ActorAnswerer:
    """The client of a running Ray actor named `name` whose `answer(conversations)` gives the replies (such as one
    memrl.engines.chat.start_chat_server starts); every call waits at most `timeout_s`. It pickles, so envs in
    runners can hold it."""

    def __init__(self, name: str, timeout_s: float = 300.0, namespace: str | None = None):
        self.name, self.timeout_s, self.namespace = name, timeout_s, namespace
        self._actor = None

    def answer(self, conversations: Sequence[list[dict[str, str]]]) -> list[str]:
        import ray

        if self._actor is None:
            try:
                self._actor = ray.get_actor(self.name, namespace=self.namespace)
            except ValueError as e:
                raise ValueError(f"no Ray actor named {self.name!r} is running ({e}); start the answerer first "
                                 "(memrl.engines.chat.start_chat_server)") from None
        ref = self._actor.answer.remote(list(conversations))
        try:
            return list(ray.get(ref, timeout=self.timeout_s))
        except ray.exceptions.GetTimeoutError:
            ray.cancel(ref)
            raise TimeoutError(f"the answerer actor {self.name!r} gave no answer within {self.timeout_s:g} s "
                               "(answerer_timeout_s)") from None

    def __getstate__(self):
        return {"name": self.name, "timeout_s": self.timeout_s, "namespace": self.namespace, "_actor": None}


class LLMJudge:
    """The memory-content judge as an LLM behind an Answerer: VALID when its reply's JSON says "VALID": true; a reply
    without a verdict counts as not valid, as in the authors' code."""

    def __init__(self, answerer: Answerer):
        self.answerer = answerer

    def judge_all(self, writes: Sequence[tuple[str, str]]) -> list[bool]:
        """A verdict for each (memory_type, content) write, asked in one batch."""
        chats = [[{"role": "system", "content": JUDGE_PROMPTS[kind] + JUDGE_FORMAT},
                  {"role": "user", "content": content}] for kind, content in writes]
        return [parse_verdict(reply) for reply in self.answerer.answer(chats)] if chats else []


class LMEJudge:
    """The LongMemEval answer judge behind an Answerer: `judge(question, rubric, response)` is 1.0 when the reply to
    LME_JUDGE_PROMPT holds "yes" and nowhere "no" (memory_rewards.judge_verdict), else 0.0. A thinking block is
left out of the verdict (the authors ask with thinking turned off)."""

    def __init__(self, answerer: Answerer):
        self.answerer = answerer

    def __call__(self, question: str, rubric: str, response: str) -> float:
        prompt = LME_JUDGE_PROMPT.format(question=question, rubric=rubric, response=response)
        replies = self.answerer.answer([[{"role": "user", "content": prompt}]])
        if len(replies) != 1:
            raise ValueError(f"the LongMemEval judge gave {len(replies)} replies for 1 question")
        reply = replies[0] if isinstance(replies[0], str) else ""
        return judge_verdict(reply.split("</think>")[-1])  # the authors ask with thinking off


def parse_verdict(reply: str) -> bool:
    """The judge's verdict: the JSON's boolean "VALID" (a fenced block or bare JSON), else the first "VALID": x."""
    text = reply.split("</think>")[-1]
    fenced = re.search(r"```(?:json)?\s*(\{.*?\})\s*```", text, re.S)
    try:
        value = json.loads(fenced.group(1) if fenced else text.strip())
        if isinstance(value, dict) and isinstance(value.get("VALID"), bool):
            return value["VALID"]
    except (json.JSONDecodeError, RecursionError):
        pass
    match = _VERDICT.search(text)
    return bool(match) and match.group(1).lower() == "true"
