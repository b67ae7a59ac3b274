"""MemAgent's overwrite-memory workflow and the full-context baseline that answers from the whole document."""

from __future__ import annotations

from typing import TYPE_CHECKING

from memrl.workflows.base import WORKFLOWS, Workflow

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

MEMORY_TEMPLATE = (
    "You are presented with a problem, a section of an article that may contain the answer to the problem, "
    "and a previous memory. Please read the section carefully and update the memory with the new information "
    "that helps to answer the problem, while retaining all relevant details from the previous memory.\n\n"
    "<problem> {problem} </problem>\n"
    "<memory> {memory} </memory>\n"
    "<section> {chunk} </section>\n\n"
    "Updated memory:\n"
)
"""MemAgent's context-processing prompt (paper, appendix A.1, Table 5 top): problem, memory, section."""

ANSWER_TEMPLATE = (
    "You are presented with a problem and a previous memory. Please answer the problem based on the previous "
    "memory and put the answer in \\boxed{{}}.\n\n"
    "<problem> {problem} </problem>\n"
    "<memory> {memory} </memory>\n\n"
    "Your answer:\n"
)
"""MemAgent's answer-generation prompt (paper, appendix A.1, Table 5 bottom): problem and memory only."""

FULL_CONTEXT_TEMPLATE = (
    "You are presented with a problem and a section of an article that may contain the answer to the problem. "
    "Please quote the sentences of the section that the answer rests on, then answer the problem and put the "
    "answer in \\boxed{{}}.\n\n"
    "<problem> {problem} </problem>\n"
    "<section> {document} </section>\n\n"
    "Your answer:\n"
)
"""The full-context baseline's single prompt: MemAgent's answer template with the document in place of memory, and
the evidence quoted before the answer, as the reasoning models the paper compares with do."""

NO_MEMORY = "No previous memory"
"""Memory shown on the first chunk, as in the authors' code."""

PHASES = ("memory", "answer")
"""Values of the env's info["phase"]: reading chunks into memory, or answering."""


def _question_and_phase(workflow: str, info: dict) -> tuple[str, str]:
    """The env's question and phase from an info dict, with a clear error when the env breaks the protocol."""
    missing = [k for k in ("question", "phase") if k not in info]
    if missing:
        raise ValueError(f"{workflow}: the env's info lacks {missing}; it must carry 'question' and 'phase' "
                         f"(got keys {sorted(info)})")
    if info["phase"] not in PHASES:
        raise ValueError(f"{workflow}: info['phase'] is {info['phase']!r}; allowed: {list(PHASES)}")
    return str(info["question"]), info["phase"]


class _AnswerParsing(Workflow):
    """Shared reply handling: the response text without its stop token, and the span it covers."""

    def _content(self, response_ids: list[int]) -> list[int]:
        # The engine includes the stop token in the response; spans cover only what the model wrote before it.
        ids = list(response_ids)
        if ids and ids[-1] == self.tokenizer.eos_token_id:
            ids = ids[:-1]
        return ids

    def _answer(self, response_ids: list[int]) -> tuple[str, dict[str, list[tuple[int, int]]]]:
        content = self._content(response_ids)
        return self.decode(content), {"answer": [(0, len(content))]}

    def expert_response(self, action: str) -> str:
        """The expert memory or boxed answer is exactly what the model should write."""
        return action


@WORKFLOWS.register("memagent")
class MemAgentWorkflow(_AnswerParsing):
    """MemAgent: read the document chunk by chunk, overwriting a bounded text memory, then answer from memory.

    Every call sees only the problem, the current memory and (in the memory phase) one chunk, so the
    context stays constant however long the document is. In the memory phase the whole reply, capped at
    `memory_tokens` tokens, becomes the new memory and is the env action (span "memory"); in the answer
    phase the reply is the action (span "answer") and the env scores its \\boxed{} answer.
    """

    def __init__(self, tokenizer: PreTrainedTokenizerBase, memory_tokens: int = 1024, system_prompt: str | None = None):
        super().__init__(tokenizer)
        if isinstance(memory_tokens, bool) or not isinstance(memory_tokens, int) or memory_tokens < 1:
            raise ValueError(f"MemAgentWorkflow: memory_tokens must be a positive int; got {memory_tokens!r}")
        self.memory_tokens = memory_tokens
        self.system_prompt = system_prompt
        self.problem = ""
        self.memory: str | None = None
        self.chunk = ""
        self.phase = "memory"

    def reset(self, observation: str, info: dict) -> None:
        self.problem, self.phase = _question_and_phase("MemAgentWorkflow", info)
        self.memory = None
        self.chunk = observation

    def prompt_ids(self) -> list[int]:
        memory = NO_MEMORY if self.memory is None else self.memory
        if self.phase == "memory":
            text = MEMORY_TEMPLATE.format(problem=self.problem, memory=memory, chunk=self.chunk)
        else:
            text = ANSWER_TEMPLATE.format(problem=self.problem, memory=memory)
        messages = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        return self.chat_ids(messages + [{"role": "user", "content": text}])

    def on_response(self, response_ids: list[int]) -> tuple[str, dict[str, list[tuple[int, int]]]]:
        if self.phase == "answer":
            return self._answer(response_ids)
        # Truncate ids, not text: the memory can never exceed its token budget, whatever the sampling cap.
        kept = self._content(response_ids)[: self.memory_tokens]
        self.memory = self.decode(kept)
        return self.memory, {"memory": [(0, len(kept))]}

    def observe(self, observation: str, info: dict) -> None:
        # The problem is read again: an env may ask its questions only once the chunks are read (MemoryStore-v0).
        self.problem, self.phase = _question_and_phase("MemAgentWorkflow", info)
        self.chunk = observation


@WORKFLOWS.register("full_context")
class FullContextWorkflow(_AnswerParsing):
    """The full-context baseline: one call sees the problem and the whole document, and answers in \\boxed{}.

    Runs on the non-streaming env, whose first observation (phase "answer") is the whole document. A document
    too long for `max_context_tokens` is cut at the end, keeping its start (as RULER-style baselines do), so
    the model simply never sees what lies past its window: the baseline collapses on long documents.
    """

    def __init__(self, tokenizer: PreTrainedTokenizerBase, max_context_tokens: int = 4096):
        super().__init__(tokenizer)
        if isinstance(max_context_tokens, bool) or not isinstance(max_context_tokens, int) or max_context_tokens < 1:
            raise ValueError(
                f"FullContextWorkflow: max_context_tokens must be a positive int; got {max_context_tokens!r}"
            )
        self.max_context_tokens = max_context_tokens
        self.problem = ""
        self.document = ""

    def reset(self, observation: str, info: dict) -> None:
        self.problem, phase = _question_and_phase("FullContextWorkflow", info)
        if phase != "answer":
            raise ValueError(
                "FullContextWorkflow answers in one call and needs the non-streaming env (phase 'answer' on reset, "
                f"the whole document as observation); got phase {phase!r}"
            )
        self.document = observation

    def _ids(self, document: str) -> list[int]:
        text = FULL_CONTEXT_TEMPLATE.format(problem=self.problem, document=document)
        return self.chat_ids([{"role": "user", "content": text}])

    def prompt_ids(self) -> list[int]:
        ids = self._ids(self.document)
        if len(ids) <= self.max_context_tokens:
            return ids
        overhead = len(self._ids(""))
        if overhead > self.max_context_tokens:
            raise ValueError(
                f"FullContextWorkflow: max_context_tokens={self.max_context_tokens} cannot hold even the prompt "
                f"without a document ({overhead} tokens: template and question); raise max_context_tokens"
            )
        doc_ids = self.text_ids(self.document)
        budget = self.max_context_tokens - overhead
        # Text re-tokenizes slightly differently at the cut (merges, a split UTF-8 character), so shrink the
        # budget by the overshoot until the prompt fits; each round removes at least one token.
        while True:
            ids = self._ids(self.decode(doc_ids[:budget]))
            if len(ids) <= self.max_context_tokens:
                return ids
            budget = max(0, budget - (len(ids) - self.max_context_tokens))

    def on_response(self, response_ids: list[int]) -> tuple[str, dict[str, list[tuple[int, int]]]]:
        return self._answer(response_ids)

    def observe(self, observation: str, info: dict) -> None:
        _, phase = _question_and_phase("FullContextWorkflow", info)
        if phase == "answer" and observation:
            self.document = observation
