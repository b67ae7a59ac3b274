"""Mem-α's workflow: one reply of tool calls per chunk, seeing the tools and the memory as it stands.

Each call sees a system prompt with the env's tools (the OpenAI schemas its first info names) and the
current memory (core, then the most recent `max_items` semantic and episodic items with their ids, halved until the
prompt fits `max_prompt_tokens`, as the authors' rollout does; the paper does not give the number, the default is the
5 of the authors' training rollout), and a user message asking to memorise the chunk.
Tool results are not fed back: the next chunk's prompt shows the memory the calls left. The reply is the env action;
the env (memrl/MemoryStore-v0) finds and runs its calls. When the env has the policy answer (answerer="policy"),
each question's call sees the env's answer chat (the memory retrieved for the question, and the question) instead.
When the env keeps a flat paragraph (memory="text", the MEM1-style baseline) each call shows that paragraph, asks
for its rewrite, and the reply is the new paragraph.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from memrl.workflows.base import WORKFLOWS, Workflow

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

SYSTEM_TEMPLATE = (
    "You are an assistant with a memory of three parts. Read what the user shares and keep what matters in it.\n"
    "* core_memory: one short paragraph: who the user is, a summary of what is being read, or the rules of a "
    "classification task (label 1: meaning; label 2: meaning).\n"
    "* semantic_memory: facts and knowledge, one item each (\"Kema works for Quovex\", \"Sample: ...; Label: 2\").\n"
    "* episodic_memory: events with their time (\"At Day 2 09:15, the user said ...\").\n\n"
    "Tools:\n{tools}\n\n"
    "Call tools as:\n\u273fFUNCTION\u273f: tool_name\n\u273fARGS\u273f: {{\"argument\": \"value\"}}\n"
    "Several calls may follow one another.\n\n"
    "Current memory:\n{memory}"
)
"""The system prompt: memory types, tools (one JSON schema a line), call format, the memory as it stands."""
USER_TEMPLATE = (
    "{question}\n\nMemorise this chunk: update the core memory briefly, and store its facts as semantic items and "
    "its dated events as episodic items.\n\n<new_chunk>\n{chunk}\n</new_chunk>"
)
"""The user message of each call: the task's purpose and the chunk."""
BRIEF_SYSTEM = "Write memory tool calls for the new chunk.\n\nCurrent memory:\n{memory}"
"""The system prompt of prompt="brief": no tool list and no explanations, the memory as it stands."""
TEXT_SYSTEM = ("You keep a memory of one paragraph. Read what the user shares and rewrite the paragraph so that it "
               "keeps what matters, old and new. Reply with the new paragraph only.\n\nCurrent memory:\n{memory}")
"""The system prompt when the env keeps a flat paragraph (memory="text", the MEM1-style baseline)."""
BRIEF_TEXT_SYSTEM = "Rewrite the memory paragraph with the new chunk.\n\nCurrent memory:\n{memory}"
"""The system prompt of prompt="brief" when the env keeps a flat paragraph."""
TEXT_USER = "{question}\n\n<new_chunk>\n{chunk}\n</new_chunk>"
"""The user message when the env keeps a flat paragraph: the task's purpose and the chunk."""
BRIEF_USER = "<new_chunk>\n{chunk}\n</new_chunk>"
"""The user message of prompt="brief": the chunk alone."""
PROMPTS = ("full", "brief")
"""What each call shows besides the memory and the chunk (see MemAlphaWorkflow)."""


MAX_ITEMS = 5
"""Most recent semantic and episodic items each write prompt shows: the authors' training rollout's 5 (their agent's
MAX_MEMORY_ITEMS; the paper does not say). The answer side shows the BM25 top 20 (the memory env's answer_top_k)."""
TOOL_FORMATS = ("json", "compact")
"""How the system prompt lists the tools (see MemAlphaWorkflow)."""


def _signature(schema: dict) -> str:
    """A tool as one line: name(arg: "a" | "b", text: string, id?: string) - description."""
    properties, required = schema["parameters"]["properties"], schema["parameters"]["required"]
    args = []
    for name, spec in properties.items():
        kind = " | ".join(f'"{v}"' for v in spec["enum"]) if "enum" in spec else spec["type"]
        args.append(f"{name}{'' if name in required else '?'}: {kind}")
    return f"{schema['name']}({', '.join(args)}) - {schema['description']}"


def render_store(memory: dict, max_items: int) -> str:
    """The memory as the policy sees it: core, then the latest `max_items` items of each list with their ids."""
    parts = [f"<core_memory>\n{memory.get('core') or '(empty)'}\n</core_memory>"]
    for kind in ("semantic", "episodic"):
        items = list(memory.get(kind, {}).items())
        shown = items[-max_items:] if max_items else []
        body = "\n".join(f"[{memory_id}] {content}" for memory_id, content in shown) or "(empty)"
        parts.append(f"<{kind}_memory> ({len(shown)} most recent of {len(items)})\n{body}\n</{kind}_memory>")
    return "\n\n".join(parts)


@WORKFLOWS.register("memalpha")
class MemAlphaWorkflow(Workflow):
    """Mem-α: each call sees the tools and the memory, and writes tool calls for one chunk."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, max_items: int = MAX_ITEMS, max_prompt_tokens: int = 6144,
                 tool_format: str = "json", prompt: str = "full"):
        """`max_items`: most recent items of each list the prompt shows (MAX_ITEMS), halved while the prompt is over
        `max_prompt_tokens`.
        `tool_format`: "json" lists each tool's OpenAI schema as a JSON line (what Qwen-Agent shows); "compact"
        one signature line per tool (about a third of the tokens, for small models and CPU runs).
        `prompt`: "full" explains the memory types and the call format and lists the tools; "brief" shows only the
        memory and the chunk (about a third of the tokens of "full" with compact tools), for a model that learns the
        calls from SFT on the expert rather than from reading, such as the CPU runs' tiny one."""
        super().__init__(tokenizer)
        if isinstance(max_items, bool) or not isinstance(max_items, int) or max_items < 0:
            raise ValueError(f"MemAlphaWorkflow: max_items must be an int >= 0; got {max_items!r}")
        if isinstance(max_prompt_tokens, bool) or not isinstance(max_prompt_tokens, int) or max_prompt_tokens < 1:
            raise ValueError(f"MemAlphaWorkflow: max_prompt_tokens must be a positive int; got {max_prompt_tokens!r}")
        self.max_items = max_items
        self.max_prompt_tokens = max_prompt_tokens
        if prompt not in PROMPTS:
            raise ValueError(f"MemAlphaWorkflow: prompt must be one of {PROMPTS}; got {prompt!r}")
        self.prompt = prompt
        if tool_format not in TOOL_FORMATS:
            raise ValueError(f"MemAlphaWorkflow: tool_format must be one of {TOOL_FORMATS}; got {tool_format!r}")
        self.tool_format = tool_format
        self.tools = ""
        self.question = self.chunk = ""
        self.memory: dict = {}
        self.mode = "tools"
        self.answer_chat: list[dict[str, str]] | None = None

    def reset(self, observation: str, info: dict) -> None:
        """The env's first info names its tools (info["tools"], OpenAI function schemas), which every call shows."""
        if "tools" not in info:
            raise ValueError(f"MemAlphaWorkflow: the env's first info lacks tools (its tools' OpenAI schemas); it "
                             f"needs the memory-store env (memrl/MemoryStore-v0), got keys {sorted(info)}")
        schemas = [tool["function"] for tool in info["tools"]]
        if self.tool_format == "json":
            self.tools = "\n".join(json.dumps(s, separators=(",", ":")) for s in schemas)
        else:
            self.tools = "\n".join(_signature(s) for s in schemas)
        self.observe(observation, info)

    def observe(self, observation: str, info: dict) -> None:
        missing = [k for k in ("question", "memory") if k not in info]
        if missing:
            raise ValueError(f"MemAlphaWorkflow: the env's info lacks {missing}; it needs the memory-store env "
                             f"(memrl/MemoryStore-v0), got keys {sorted(info)}")
        self.question, self.memory, self.chunk = str(info["question"]), info["memory"], observation
        self.mode = info.get("memory_mode", "tools")
        self.answer_chat = info.get("answer_chat") if info.get("phase") == "answer" else None

    def _ids(self, max_items: int) -> list[int]:
        if self.mode == "text":  # a flat paragraph: no tools, no lists
            memory = f"<memory>\n{self.memory.get('core') or '(empty)'}\n</memory>"
            system = (BRIEF_TEXT_SYSTEM if self.prompt == "brief" else TEXT_SYSTEM).format(memory=memory)
        else:
            memory = render_store(self.memory, max_items)
            system = (BRIEF_SYSTEM.format(memory=memory) if self.prompt == "brief" else
                      SYSTEM_TEMPLATE.format(tools=self.tools, memory=memory))
        if self.prompt == "brief":
            user = BRIEF_USER.format(chunk=self.chunk)
        else:
            template = TEXT_USER if self.mode == "text" else USER_TEMPLATE
            user = template.format(question=self.question, chunk=self.chunk)
        return self.chat_ids([{"role": "system", "content": system}, {"role": "user", "content": user}])

    def prompt_ids(self) -> list[int]:
        if self.answer_chat is not None:  # the env asks the policy to answer: it sees what an answerer would
            return self.chat_ids(self.answer_chat)
        max_items = self.max_items
        ids = self._ids(max_items)
        while len(ids) > self.max_prompt_tokens and max_items > 0:
            max_items //= 2
            ids = self._ids(max_items)
        return ids

    def on_response(self, response_ids: list[int]) -> tuple[str, dict[str, list[tuple[int, int]]]]:
        ids = list(response_ids)
        if ids and ids[-1] == self.tokenizer.eos_token_id:
            ids = ids[:-1]
        return self.decode(ids), {"calls": [(0, len(ids))]}

    def expert_response(self, action: str) -> str:
        """The expert's calls are exactly what the model should write."""
        return action
