"""Workflows (context policies): what the model sees on each call and how its reply becomes an env action."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


class Workflow(ABC):
    """Per-trajectory state machine between a text env and an LLM.

    The env runner calls `reset` with the env's first observation, then loops: `prompt_ids` -> LLM ->
    `on_response` (returns the env action) -> env.step -> `observe`, until the env ends the episode.
    One instance serves one trajectory at a time. A workflow that supports SFT warm-starts (memrl.algorithms.sft) also
    implements `expert_response(action) -> str`: the response text its own `on_response` parses back to `action`;
    a workflow with a memory also takes `memory=`, the memory the env's expert keeps (memrl.rollout.ExpertResponder).

    Env text and model replies are data: `chat_ids` and `text_ids` tokenize them as text, so a passage or a reply
    that spells a control token such as `<|im_start|>` never becomes that token in a prompt.
    """

    def __init__(self, tokenizer: PreTrainedTokenizerBase, **config):
        self.tokenizer = tokenizer
        if config:
            raise ValueError(f"{type(self).__name__} takes no options; got {sorted(config)}")
        self._control_texts = tuple(token.content for token in tokenizer.added_tokens_decoder.values()
                                    if token.special)

    @abstractmethod
    def reset(self, observation: str, info: dict) -> None:
        """Start a trajectory from the env's first observation."""

    @abstractmethod
    def prompt_ids(self) -> list[int]:
        """Token ids of the next LLM call's full context."""

    @abstractmethod
    def on_response(self, response_ids: list[int]) -> tuple[str, dict[str, list[tuple[int, int]]]]:
        """Turn the model's response into (env action text, named token spans of the response)."""

    @abstractmethod
    def observe(self, observation: str, info: dict) -> None:
        """Take in the env's observation after a step."""

    def probes(self, info: dict) -> list[dict[str, list[int]]]:
        """Token sequences for the learner to score, one dict per call made (or none at all), from the env's final
        info; they travel with the conversations (Conversation.probes). Most workflows have none."""
        return []

    def chat_ids(self, messages: list[dict[str, str]]) -> list[int]:
        """Chat-templated token ids ending with the assistant generation prompt; message contents are text only."""
        if not any(control in message["content"] for message in messages for control in self._control_texts):
            return list(self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                                           return_dict=False))
        # Some content spells a control token: render the template around private-use marker characters, tokenize
        # the template's own text as usual and each content as plain text.
        marks = [f"\ue000{i}\ue001" for i in range(len(messages))]
        rendered = self.tokenizer.apply_chat_template(
            [{**message, "content": mark} for message, mark in zip(messages, marks)],
            add_generation_prompt=True, tokenize=False)
        ids, done = [], 0
        for message, mark in zip(messages, marks):
            at = rendered.find(mark, done)
            if at < 0:  # the template leaves this message out
                continue
            ids += self.tokenizer.encode(rendered[done:at], add_special_tokens=False)
            ids += self.text_ids(message["content"])
            done = at + len(mark)
        return ids + self.tokenizer.encode(rendered[done:], add_special_tokens=False)

    def text_ids(self, text: str) -> list[int]:
        """Token ids of `text` as plain text: a control token's spelling gives ordinary tokens."""
        return list(self.tokenizer.encode(text, add_special_tokens=False, split_special_tokens=True))

    def decode(self, ids: list[int]) -> str:
        """Response text without special tokens (the stop token included in `ids` is dropped)."""
        return self.tokenizer.decode(ids, skip_special_tokens=True)


class LastObservationWorkflow(Workflow):
    """Each call sees the system prompt and the latest observation only; the reply is the action.

    The simplest context policy, used by the toy envs and as a building block for tests.
    """

    def __init__(self, tokenizer: PreTrainedTokenizerBase, system_prompt: str = ""):
        super().__init__(tokenizer)
        self.system_prompt = system_prompt
        self._observation = ""

    def reset(self, observation: str, info: dict) -> None:
        self._observation = observation

    def prompt_ids(self) -> list[int]:
        messages = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        return self.chat_ids(messages + [{"role": "user", "content": self._observation}])

    def on_response(self, response_ids: list[int]) -> tuple[str, dict[str, list[tuple[int, int]]]]:
        return self.decode(response_ids), {}

    def observe(self, observation: str, info: dict) -> None:
        self._observation = observation

    def expert_response(self, action: str) -> str:
        """The reply is the action itself."""
        return action
