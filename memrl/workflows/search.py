"""Context policies for multi-objective search QA (memrl/Search-v0): MEM1, MemSearcher, MemPO and two ReAct baselines.

The env speaks `<search>query</search>` / `<answer>a1; a2</answer>` and returns `<information>...</information>`
blocks. Each workflow decides what one LLM call sees and turns the reply into such an action; a reply that holds
no well-formed action reaches the env as written (or, for MemSearcher, as an empty action), and the env rejects
it with its "Invalid action" observation and info["format_ok"] = 0.0. The action grammar is shared with the env
(memrl.text.find_action); the prompts are in memrl.workflows.search_prompts.

MemSearcher's answer is the content of the reply's last \\boxed{...} with its braces matched, as the authors'
reward (re_call.py) reads it, so two boxes, or a "}" after the box, still give the last box's text alone
(tests/workflows/test_search_fidelity.py). As that reward's format check does, the answer reply must hold a
<think> block with its tags paired, or it is no action.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING

from memrl.text import extract_boxed, find_action, read_block
from memrl.workflows.base import WORKFLOWS, Workflow, positive_int
from memrl.workflows.search_prompts import (
    MEM1_TEMPLATE,
    MEMORY_PROBE,
    MEMPO_TEMPLATE,
    MEMSEARCHER_SYSTEM,
    MEMSEARCHER_USER,
    REACT_TEMPLATE,
    SEARCH_TOOL,
    TOOL_RESPONSE,
)

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

PASSAGE = re.compile(r"^Doc \d+\(Title: [^)]*\) (.+?)(?:</information>)?$", re.MULTILINE)
"""One hit line of an `<information>` block (memrl_envs.retrieval.format_information); group 1 is the passage."""

BOXED = "\\boxed{"
"""Where MemSearcher's final answer starts."""


def _action(text: str) -> str:
    """The env action in `text`: its one well-formed `<search>` or `<answer>` block, normalised; otherwise the text
    itself, which the env rejects with its reason (no action, both actions, unbalanced tags)."""
    kind, content = find_action(text)
    return text if kind == "invalid" else f"<{kind}>{content}</{kind}>"


def _parse_action(action: str) -> tuple[str, str]:
    """(tag, content) of a well-formed env action such as the env's expert_action()."""
    kind, content = find_action(action)
    if kind == "invalid":
        raise ValueError(f"expected an env action <search>query</search> or <answer>...</answer>; got {action!r}")
    return kind, content


def _reasoning(action: str) -> str:
    """The scripted expert's one-line reasoning before `action`."""
    tag, content = _parse_action(action)
    return f"I still need to search for {content}." if tag == "search" else "I have found every answer."


class _SearchWorkflow(Workflow):
    """Shared state (the questions, the latest observation) and reply handling of the search workflows.

    Every search workflow takes `template`: its task prompt, with a {questions} field (literal braces doubled).
    None keeps the paper's; a short one suits a tiny model trained on CPU, whose tokenizer splits long
    instructions into many tokens.
    """

    default_template = ""
    """The paper's task prompt, with a {questions} field (each workflow's own)."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, memory_tokens: int | None = None,
                 template: str | None = None):
        super().__init__(tokenizer)
        self.memory_tokens = memory_tokens
        self.template = self.default_template if template is None else template
        if "{questions}" not in self.template:
            raise ValueError(f"{type(self).__name__}: template must contain the field {{questions}}; got "
                             f"{self.template[:80]!r}")
        self.questions = ""
        self.observation: str | None = None
        self.memory = ""

    def reset(self, observation: str, info: dict) -> None:
        self.questions = observation
        self.observation = None
        self.memory = ""

    def observe(self, observation: str, info: dict) -> None:
        self.observation = observation

    def task_prompt(self) -> str:
        """The first user message: the template with the env's questions."""
        return self.template.format(questions=self.questions)

    def _prefix_tokens(self, ids: list[int], chars: int) -> int:
        """Fewest leading tokens whose decoded text has at least `chars` characters (binary search over prefixes)."""
        low, high = 0, len(ids)
        while low < high:
            mid = (low + high) // 2
            if len(self.decode(ids[:mid])) >= chars:
                high = mid
            else:
                low = mid + 1
        return low

    def _read_memory(self, ids: list[int], tag: str) -> tuple[str, tuple[int, int] | None, str]:
        """(memory, its token span, text after the block) for the reply's one `<tag>` block, kept to memory_tokens.

        The span holds the tokens wholly inside the block's content, found on the response's own ids (never
        re-tokenized), so per-token losses and advantages land on exactly what the model wrote. A reply without
        one well-formed block gives ("", None, whole text).
        """
        text = self.decode(ids)
        where = read_block(text, tag)
        if where is None:
            return "", None, text
        start, end = where
        first = self._prefix_tokens(ids, start)
        last = max(first, self._prefix_tokens(ids, end + 1) - 1)
        if self.memory_tokens is not None:
            last = min(last, first + self.memory_tokens)
        return self.decode(ids[first:last]).strip(), (first, last), text[end + len(f"</{tag}>"):]

    def _expert_memory(self, notes: str | None = None) -> str:
        """The scripted expert's memory: the env's `notes` when it gives them (the search env's expert_notes option),
        else the previous memory's lines plus the top passage of the latest search (the passage about the entity
        searched for); either way dropping the oldest lines to fit memory_tokens."""
        if notes is not None:
            lines = notes.splitlines()
        else:
            lines = [line for line in self.memory.splitlines() if line.strip()]
            hit = PASSAGE.search(self.observation or "")
            if hit and hit.group(1) not in lines:
                lines.append(hit.group(1))
        if self.memory_tokens is not None:
            while lines and len(self.text_ids("\n".join(lines))) > self.memory_tokens:
                lines.pop(0)
        return "\n".join(lines)


@WORKFLOWS.register("mem1")
class MEM1Workflow(_SearchWorkflow):
    """MEM1: the internal state in <think> replaces the whole history each turn.

    Each call sees MEM1's prompt with the questions and, after the first turn, exactly the previous turn: the
    model's previous reply as `<think>state</think>` followed by what it wrote after the think block (its action),
    and the env's latest observation (the last `<information>` block, or an invalid-action message). Nothing older
    is kept; the context is rebuilt from scratch each call. The reply's <search> or <answer> block is the env
    action. The state is the <think> content, cut to `memory_tokens` tokens if set (the paper sets no cap).
    """

    default_template = MEM1_TEMPLATE

    def __init__(self, tokenizer: PreTrainedTokenizerBase, memory_tokens: int | None = None,
                 template: str | None = None):
        super().__init__(tokenizer, positive_int("MEM1Workflow", "memory_tokens", memory_tokens, optional=True),
                         template)
        self.last_action_text = ""

    def prompt_ids(self) -> list[int]:
        messages = [{"role": "user", "content": self.task_prompt()}]
        if self.observation is not None:
            messages += [
                {"role": "assistant", "content": f"<think>{self.memory}</think>{self.last_action_text}"},
                {"role": "user", "content": self.observation},
            ]
        return self.chat_ids(messages)

    def on_response(self, response_ids: list[int]) -> tuple[str, dict[str, list[tuple[int, int]]]]:
        self.memory, _, self.last_action_text = self._read_memory(response_ids, "think")
        return _action(self.last_action_text), {}

    def expert_response(self, action: str, memory: str | None = None) -> str:
        """The state is the cumulative summary (the env's notes, else the top passage of every search; within
        memory_tokens), then the action."""
        _parse_action(action)
        return f"<think>{self._expert_memory(memory)}</think>{action}"


@WORKFLOWS.register("memsearcher")
class MemSearcherWorkflow(_SearchWorkflow):
    """MemSearcher: the model reasons from the question and a compact memory, and rewrites the memory after each
    tool response.

    The Workflow interface makes one env step per LLM call, so the memory update is folded into the next call:
    after a search the model's next reply is `<memory>updated memory</memory>` + <think> + a tool call or the
    answer. The first call sees the system prompt (tool, formats) and the user message
    `<question>questions</question>\\n\\n<memory></memory>` (the memory starts empty). Every later call sees the
    system prompt, that user message with the current memory, the previous reply without its memory block, and
    the env's latest observation as a user message in <tool_response> asking for the updated memory. The reply's
    <memory> (cut to `memory_tokens` tokens) replaces the memory; a reply without one leaves it empty. The action
    is translated for the env: a `wikipedia_search` <tool_call> becomes `<search>query</search>` and
    `\\boxed{a1; a2}` becomes `<answer>a1; a2</answer>`; anything else becomes the empty action, which the env
    rejects. The env's own observation (an `<information>` block or an invalid-action message) goes back as is.
    """

    default_template = "{questions}"

    def __init__(self, tokenizer: PreTrainedTokenizerBase, memory_tokens: int = 1024, template: str | None = None,
                 system_prompt: str | None = None):
        super().__init__(tokenizer, positive_int("MemSearcherWorkflow", "memory_tokens", memory_tokens), template)
        # Fields {tool} and {memory_tokens} are filled in where the text has them.
        self.system_prompt = (MEMSEARCHER_SYSTEM if system_prompt is None else system_prompt).format(
            tool=json.dumps(SEARCH_TOOL), memory_tokens=memory_tokens)
        self.last_reply = ""

    def prompt_ids(self) -> list[int]:
        messages = [
            {"role": "system", "content": self.system_prompt},
            {"role": "user", "content": MEMSEARCHER_USER.format(question=self.task_prompt(), memory=self.memory)},
        ]
        if self.observation is not None:
            messages += [
                {"role": "assistant", "content": self.last_reply},
                {"role": "user", "content": TOOL_RESPONSE.format(observation=self.observation)},
            ]
        return self.chat_ids(messages)

    def on_response(self, response_ids: list[int]) -> tuple[str, dict[str, list[tuple[int, int]]]]:
        self.memory, _, self.last_reply = self._read_memory(response_ids, "memory")
        return self._env_action(self.last_reply), {}

    @staticmethod
    def _env_action(text: str) -> str:
        """The env action for a reply's act part: its one tool call or its \\boxed{} answer, else ""."""
        call = read_block(text, "tool_call")
        boxed = text.find(BOXED)
        if call is not None and boxed < 0:
            try:
                request = json.loads(text[call[0]:call[1]])
                query = request["arguments"]["query"] if request["name"] == SEARCH_TOOL["function"]["name"] else None
            except (ValueError, TypeError, KeyError, RecursionError):  # RecursionError: brackets nested too deep
                return ""
            return f"<search>{query.strip()}</search>" if isinstance(query, str) else ""
        thought = "<think>" in text and text.count("<think>") == text.count("</think>")
        if call is None and boxed >= 0 and "<tool_call>" not in text and thought:
            # As MemSearcher's reward reads it: the last box, its braces matched; an unclosed last box is no answer.
            answer = extract_boxed(text[text.rfind(BOXED):])
            if answer is not None:
                return f"<answer>{answer.strip()}</answer>"
        return ""

    def expert_response(self, action: str, memory: str | None = None) -> str:
        """Updated memory (after a search), one line of reasoning, then the tool call or the boxed answer."""
        tag, content = _parse_action(action)
        memory = f"<memory>{self._expert_memory(memory)}</memory>\n" if self.observation is not None else ""
        if tag == "search":
            call = json.dumps({"name": SEARCH_TOOL["function"]["name"], "arguments": {"query": content}})
            act = f"<tool_call>{call}</tool_call>"
        else:
            act = f"The answer is {BOXED}{content}}}."
        return f"{memory}<think>{_reasoning(action)}</think>\n{act}"


@WORKFLOWS.register("mempo")
class MemPOWorkflow(_SearchWorkflow):
    """MemPO: each reply starts with a <mem> summary of everything useful so far; the next call sees only that.

    Each call sees MemPO's prompt with the questions and, after the first turn, the previous reply's memory as an
    assistant message `<mem>\\nmemory\\n</mem>` and the env's latest observation (the new `<information>` block or
    an invalid-action message). The previous reply's <think> and action are dropped. A reply is
    `<mem>...</mem><think>...</think>` and one <search> or <answer> block, which is the env action. The <mem>
    content (cut to `memory_tokens` tokens if set; the paper sets no cap) becomes the memory, and its response
    tokens are returned as span "mem", where MemPO's memory advantage lands.
    """

    default_template = MEMPO_TEMPLATE

    def __init__(self, tokenizer: PreTrainedTokenizerBase, memory_tokens: int | None = None,
                 template: str | None = None):
        super().__init__(tokenizer, positive_int("MemPOWorkflow", "memory_tokens", memory_tokens, optional=True),
                         template)
        self._calls: list[tuple[list[int], str | None]] = []  # per call: its prompt, and the memory it wrote
        self._prompt: list[int] = []

    def reset(self, observation: str, info: dict) -> None:
        super().reset(observation, info)
        self._calls = []

    def _context_ids(self, memory: str | None, observation: str | None) -> list[int]:
        messages = [{"role": "user", "content": self.task_prompt()}]
        if observation is not None:
            messages += [
                {"role": "assistant", "content": f"<mem>\n{memory}\n</mem>"},
                {"role": "user", "content": observation},
            ]
        return self.chat_ids(messages)

    def prompt_ids(self) -> list[int]:
        self._prompt = self._context_ids(self.memory, self.observation)
        return self._prompt

    def on_response(self, response_ids: list[int]) -> tuple[str, dict[str, list[tuple[int, int]]]]:
        self.memory, span, rest = self._read_memory(response_ids, "mem")
        self._calls.append((self._prompt, self.memory if span is not None else None))
        return _action(rest), ({"mem": [span]} if span is not None else {})

    def probes(self, info: dict) -> list[dict[str, list[int]]]:
        """MemPO's memory-reward probes, from the gold answers in the env's final info (none without them).

        For each call that wrote a <mem> block: "memory" is a context holding only the questions and that memory
        (the next call's prompt, with MEMORY_PROBE as its observation), "prefix" is the call's own prompt (what the
        memory was written from), each followed by the opening `<answer>` line; "answer" is the gold answers in
        the env's format. The learner scores "answer" after each context.
        """
        if "answers" not in info:
            return []
        lead = self.text_ids("<answer>\n")
        gold = "; ".join(answers[0] if answers else "" for answers in info["answers"])
        answer = self.text_ids(gold)
        if not answer:
            return []
        return [
            {} if memory is None else
            {"memory": self._context_ids(memory, MEMORY_PROBE) + lead, "prefix": prompt + lead, "answer": answer}
            for prompt, memory in self._calls
        ]

    def expert_response(self, action: str, memory: str | None = None) -> str:
        """MemPO's layout, one part per line: the cumulative memory, one line of reasoning, the action."""
        tag, content = _parse_action(action)
        return (f"<mem>\n{self._expert_memory(memory)}\n</mem>\n<think>\n{_reasoning(action)}\n</think>\n"
                f"<{tag}>\n{content}\n</{tag}>")


@WORKFLOWS.register("react")
class ReActWorkflow(_SearchWorkflow):
    """ReAct with the full history: each call sees the prompt with the questions, then every previous reply (as
    an assistant message, verbatim) and every observation after it (as a user message), so the context grows
    linearly with the turns. The reply's <search> or <answer> block is the env action."""

    default_template = REACT_TEMPLATE

    def __init__(self, tokenizer: PreTrainedTokenizerBase, template: str | None = None):
        super().__init__(tokenizer, template=template)
        self.turns: list[tuple[str, str]] = []
        self.last_reply = ""

    def reset(self, observation: str, info: dict) -> None:
        super().reset(observation, info)
        self.turns = []

    def observe(self, observation: str, info: dict) -> None:
        super().observe(observation, info)
        self.turns.append((self.last_reply, observation))

    def first_message(self) -> str:
        """The first user message of each call: the task prompt (ReSum's carries its summary after it)."""
        return self.task_prompt()

    def _history_ids(self, turns: list[tuple[str, str]]) -> list[int]:
        messages = [{"role": "user", "content": self.first_message()}]
        for reply, observation in turns:
            messages += [{"role": "assistant", "content": reply}, {"role": "user", "content": observation}]
        return self.chat_ids(messages)

    def prompt_ids(self) -> list[int]:
        return self._history_ids(self.turns)

    def on_response(self, response_ids: list[int]) -> tuple[str, dict[str, list[tuple[int, int]]]]:
        self.last_reply = self.decode(response_ids)
        return _action(self.last_reply), {}

    def expert_response(self, action: str, memory: str | None = None) -> str:
        """One line of reasoning, then the action (the history itself is the memory: the env's notes are not
        used)."""
        return f"<think>{_reasoning(action)}</think>\n{action}"


@WORKFLOWS.register("react_truncated")
class TruncatedReActWorkflow(ReActWorkflow):
    """ReAct with a sliding window: each call sees the prompt with the questions, then the most recent whole turns
    (reply and observation) that fit in `max_context_tokens`, older turns dropped first. The task prompt is always
    kept; a window too small to hold it alone is an error."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, max_context_tokens: int = 4096,
                 template: str | None = None):
        super().__init__(tokenizer, template)
        self.max_context_tokens = positive_int("TruncatedReActWorkflow", "max_context_tokens", max_context_tokens)

    def prompt_ids(self) -> list[int]:
        prompt = self._history_ids([])
        if len(prompt) > self.max_context_tokens:
            raise ValueError(
                f"TruncatedReActWorkflow: max_context_tokens={self.max_context_tokens} cannot hold even the task "
                f"prompt ({len(prompt)} tokens); raise max_context_tokens"
            )
        # Dropping older turns only shortens the context, so the first kept turn is found by bisection: a few
        # chat-template renders per call instead of one per turn.
        low, high = 0, len(self.turns)  # turns[high:] (at worst none) always fits
        while low < high:
            mid = (low + high) // 2
            if len(self._history_ids(self.turns[mid:])) <= self.max_context_tokens:
                high = mid
            else:
                low = mid + 1
        return self._history_ids(self.turns[low:]) if low < len(self.turns) else prompt
