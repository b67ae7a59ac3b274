"""ReSum (Wu et al., 2025, arXiv 2509.13313): ReAct whose history is condensed into a summary when the context fills,
so an agent can search past its context window.

Each call sees what ReAct sees: the task prompt, then every reply and observation since the last summary. After an
observation, when that context holds at least `trigger` x `max_context_tokens` tokens (ReSum's agent: 0.9 of its
budget), or every `summary_every` turns when that is set, the next call is a summary call: the policy reads the
summary prompt (the questions, the turns since the last summary rendered as ReSum renders them, and the last summary
if there is one) and writes `<summary>...</summary>`. That call steps no env. The context then starts again from the
resumed prompt: the task prompt, a note that a summary of the earlier conversation follows, and the summary.

ReSum-GRPO is GRPO over these calls: a resumed prompt does not extend the calls before it, so each segment between
summaries is its own learner row, and every row of a trajectory, summary calls included, takes the trajectory's
group advantage (the "group" estimator broadcasts it; memrl.algorithms.grpo).

As ReSum's code reads a summary: any `<think>...</think>` is dropped, the text between `<summary>` and `</summary>` is
kept (the whole reply when it has no `<summary>`), and it is shown wrapped in `<summary>` tags; an empty reply
changes nothing (the context goes on growing). When a context still exceeds `max_context_tokens` after its summary,
its last observation is replaced by the note that the context is full and an answer is due, as ReSum's agent does.
The prompts are ours, with ReSum's parts and order; `summary_prompt`, `summary_prompt_last` and `resume_prompt` take
other wording (for instance the authors' own, which their summary model was trained on).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from memrl.workflows.base import WORKFLOWS, positive_int
from memrl.workflows.search import PASSAGE, ReActWorkflow

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

SUMMARY_PROMPT = (
    "You read an agent's conversation and keep what helps answer its question. Go through the conversation and "
    "note only what it states plainly and what bears on the question; leave out guesses, inferences and anything "
    "uncertain or unconfirmed, and combine what several turns found.\n\n"
    "Write your summary in this form:\n<summary>\n- Essential Information: [the relevant, certain information from "
    "the conversation]\n</summary>\n\n"
    "Question\n{{{question}}}\n\n"
    "Conversation History\n{{{recent_history_messages}}}\n\n"
    "Write the summary now; do not call any tool."
)
"""The first summary's prompt, in ReSum's parts and order (question, then history); ReSum's placeholders."""

SUMMARY_PROMPT_LAST = (
    "You read an agent's conversation and keep what helps answer its question. The last summary holds what was "
    "found before; start from it, add what the conversation since then found, note what is still missing, and "
    "rely on the last summary where the recent conversation says little. Note only what is stated plainly and "
    "bears on the question; leave out guesses, inferences and anything uncertain or unconfirmed.\n\n"
    "Write your summary in this form:\n<summary>\n- Essential Information: [the relevant, certain information from "
    "the last summary and the conversation]\n</summary>\n\n"
    "Question\n{{{question}}}\n\n"
    "Last Summary\n{{{last_summary}}}\n\n"
    "Conversation History\n{{{recent_history_messages}}}\n\n"
    "Write the summary now; do not call any tool."
)
"""Every later summary's prompt: ReSum's parts and order (question, last summary, history)."""

RESUME_PROMPT = (
    "{question}\nA summary of the conversation so far follows. It keeps the key information of the earlier steps: "
    "read it carefully, judge whether it already answers the question, and build on it for any further reasoning "
    "and searching.\nSummary: {summary}\n"
)
"""The first user message after a summary; {question} is the task prompt, {summary} the wrapped summary."""

FULL_CONTEXT = ("Your context is full. Stop searching and, from everything above, give the answer you think most "
                "likely, as <think> your final reasoning </think>\n<answer> your answer </answer>")
"""Shown instead of the last observation when a context exceeds the budget even after its summary."""

_THINK = re.compile(r"<think>.*?</think>", re.DOTALL)


def read_summary(reply: str) -> str:
    """The summary in a reply, as ReSum's code reads it: `<think>` blocks dropped, the text between the first
    `<summary>` and the next `</summary>` (everything after `<summary>` when it is not closed, the whole reply when
    there is no `<summary>`), wrapped in `<summary>` tags; "" (no summary) only for an empty reply."""
    if not reply:
        return ""
    text = _THINK.sub("", reply).strip()
    if "<summary>" in text:
        text = text.split("<summary>")[1].split("</summary>")[0]
    return f"<summary>{text}</summary>"


def _fill(template: str, values: dict[str, str]) -> str:
    """`template` with each placeholder (a key of `values`) replaced in one pass, so a question, summary or history
    that spells a placeholder is not filled in again."""
    return re.sub("|".join(re.escape(k) for k in values), lambda m: values[m.group(0)], template)


def render_history(turns: list[tuple[str, str]]) -> str:
    """The turns since the last summary as ReSum's summarizer receives them: each message as Python writes the
    dict {'role': ..., 'content': ...}, one per line (replies stripped, as its agent stores them)."""
    lines = []
    for reply, observation in turns:
        lines.append(str({"role": "assistant", "content": reply.strip()}))
        lines.append(str({"role": "user", "content": observation}))
    return "\n".join(lines)


@WORKFLOWS.register("resum")
class ReSumWorkflow(ReActWorkflow):
    """ReSum: ReAct that summarizes its history with the policy when the context nears `max_context_tokens`.

    Options: `max_context_tokens` (the context budget, ReSum's 32K - 1000 on its agent), `trigger` (the fraction of it
    that starts a summary; 0.9), `summary_every` (also summarize every this many turns; None: only by size),
    `memory_tokens` (the scripted expert's summary is cut to this many tokens), `template` (the task prompt, with
    {questions}), `summary_prompt` / `summary_prompt_last` (with ReSum's placeholders {{{question}}},
    {{{recent_history_messages}}} and {{{last_summary}}}) and `resume_prompt` (with {question} and {summary}).
    """

    def __init__(self, tokenizer: PreTrainedTokenizerBase, max_context_tokens: int = 4096, trigger: float = 0.9,
                 summary_every: int | None = None, memory_tokens: int | None = None, template: str | None = None,
                 summary_prompt: str | None = None, summary_prompt_last: str | None = None,
                 resume_prompt: str | None = None):
        super().__init__(tokenizer, template)
        self.max_context_tokens = positive_int("ReSumWorkflow", "max_context_tokens", max_context_tokens)
        if isinstance(trigger, bool) or not isinstance(trigger, (int, float)) or not 0 < trigger <= 1:
            raise ValueError(f"ReSumWorkflow: trigger must be a number in (0, 1], the fraction of max_context_tokens "
                             f"that starts a summary; got {trigger!r}")
        self.trigger = float(trigger)
        self.summary_every = positive_int("ReSumWorkflow", "summary_every", summary_every, optional=True)
        self.memory_tokens = positive_int("ReSumWorkflow", "memory_tokens", memory_tokens, optional=True)
        self.summary_prompt = SUMMARY_PROMPT if summary_prompt is None else summary_prompt
        self.summary_prompt_last = SUMMARY_PROMPT_LAST if summary_prompt_last is None else summary_prompt_last
        self.resume_prompt = RESUME_PROMPT if resume_prompt is None else resume_prompt
        for name, text, fields in (("summary_prompt", self.summary_prompt,
                                    ("{{{question}}}", "{{{recent_history_messages}}}")),
                                   ("summary_prompt_last", self.summary_prompt_last,
                                    ("{{{question}}}", "{{{recent_history_messages}}}", "{{{last_summary}}}")),
                                   ("resume_prompt", self.resume_prompt, ("{question}", "{summary}"))):
            if missing := [f for f in fields if f not in text]:
                raise ValueError(f"ReSumWorkflow: {name} must contain {', '.join(fields)}; it lacks {missing[0]}")
        self.summary = ""  # the last summary, wrapped in <summary> tags ("" before the first)
        self._context: list[int] | None = None  # the context observe measured, until the turns or summary change
        self.summarizing = False
        self.turn = 0
        self.num_summaries = 0

    def reset(self, observation: str, info: dict) -> None:
        super().reset(observation, info)
        self.summary, self.summarizing, self.turn, self.num_summaries = "", False, 0, 0
        self._context = None

    def first_message(self) -> str:
        """The task prompt, and after a summary the resumed prompt with it."""
        if not self.summary:
            return self.task_prompt()
        return _fill(self.resume_prompt, {"{question}": self.task_prompt(), "{summary}": self.summary})

    def summary_request(self) -> str:
        """The summary call's prompt text (ReSum's summarizer sees it as its only, user message)."""
        prompt = self.summary_prompt_last if self.summary else self.summary_prompt
        return _fill(prompt, {"{{{question}}}": self.questions, "{{{last_summary}}}": self.summary,
                              "{{{recent_history_messages}}}": render_history(self.turns)})

    def observe(self, observation: str, info: dict) -> None:
        super().observe(observation, info)
        self.turn += 1
        self._context = self._history_ids(self.turns)
        size = len(self._context)
        by_turn = self.summary_every is not None and self.turn % self.summary_every == 0
        self.summarizing = size >= self.trigger * self.max_context_tokens or by_turn

    def prompt_ids(self) -> list[int]:
        if self.summarizing:
            return self.chat_ids([{"role": "user", "content": self.summary_request()}])
        ids = self._context if self._context is not None else self._history_ids(self.turns)
        if len(ids) > self.max_context_tokens and self.turns:
            reply, _ = self.turns[-1]
            ids = self._history_ids([*self.turns[:-1], (reply, FULL_CONTEXT)])
        return ids

    def on_response(self, response_ids: list[int]) -> tuple[str | None, dict[str, list[tuple[int, int]]]]:
        if not self.summarizing:
            return super().on_response(response_ids)
        # A summary call: no env action. A summary replaces the turns it condenses; an empty one keeps them.
        self.summarizing, self._context = False, None
        summary = read_summary(self.decode(response_ids))
        if summary:
            self.summary, self.turns = summary, []
            self.num_summaries += 1
        return None, {}

    def expert_response(self, action: str, memory: str | None = None) -> str:
        """Outside a summary call, ReAct's reply. In one, the expert's summary: the env's notes when it gives them
        (the search env's expert_notes option), else the last summary's lines and the top passage of every search
        since, the oldest lines dropped to fit memory_tokens."""
        if not self.summarizing:
            return super().expert_response(action, memory)
        if memory is not None:
            lines = memory.splitlines()
        else:
            inside = self.summary.removeprefix("<summary>").removesuffix("</summary>")
            lines = [line for line in inside.splitlines() if line.strip()]
            for _, observation in self.turns:
                hit = PASSAGE.search(observation)
                if hit and hit.group(1) not in lines:
                    lines.append(hit.group(1))
        if self.memory_tokens is not None:
            while lines and len(self.text_ids("\n".join(lines))) > self.memory_tokens:
                lines.pop(0)
        body = "\n".join(lines)
        return f"<summary>\n{body}\n</summary>"
