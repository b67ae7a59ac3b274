"""The Mem-α CPU task: chunks of a conversation, a labelled sample set or a story written into a memory (a
tool-call store or a flat paragraph), the frozen answerer that answers from it, the shipped checkpoints and the
policies compared on it; shared by the example (memalpha_grpo.py), its warm-start recipe
(warm_starts/memalpha_sft.py) and the evaluation tables (analyses/memalpha_eval.py)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from memrl.config import AlgorithmConfig
from memrl_tuned_examples.tasks import CHECKPOINTS, chat_service, served_chat

BASE_CHECKPOINT = CHECKPOINTS / "memalpha_base"
"""The embedded tiny model trained to write the expert's calls and to answer from a memory (tuned_examples/warm_starts/
memalpha_sft.py --role base); the warm-start and the answerer continue from it."""
WARM_START = CHECKPOINTS / "memalpha_sft"
"""The CPU policy RL starts from: the base trained further on the expert's calls
(tuned_examples/warm_starts/memalpha_sft.py)."""
ANSWERER_CHECKPOINT = CHECKPOINTS / "memalpha_answerer"
"""The frozen CPU answerer: the base trained further to answer from every kind of memory
(tuned_examples/warm_starts/memalpha_sft.py --role answerer)."""
ANSWERER = "memalpha-answerer"
"""Name of the chat actor that answers the questions (envs reach it as answerer="actor:memalpha-answerer")."""

CPU_TASK = {"category": "mixed", "num_chunks": 3, "num_questions": 2, "facts_per_chunk": 1,
            "small_talk_per_chunk": 1, "num_classes": 2, "samples_per_chunk": 2, "filler_per_chunk": 0,
            "keywords": 7}
"""The CPU tasks: the three categories in turn, three chunks each, two questions (one for a story, which asks for all
seven of its people and places)."""
CPU_WORKFLOW = {"prompt": "brief", "tool_format": "compact", "max_items": 20}
"""The CPU prompt: the memory and the chunk only (the tiny model learned the calls by SFT, not by reading), with up
to 20 items per list, as its shipped warm-start was trained to read (the GPU preset shows the authors' 5)."""
CPU_MAX_TOKENS = 320
"""Longest CPU reply: the expert's longest (a labelled set's rules rewritten in core, and its samples) is under 300
tokens of the tiny tokenizer."""
CPU_ANSWER_TOKENS = 24
"""Longest answer of the CPU answerer (a name, a boxed label or a few key words)."""
LONG_CONTEXT_TOKENS = 1024
"""The long-context baseline's window: it reads the latest chunks that fit (all of them at the training length)."""
ANSWER_MEMORIES = {
    "expert memory": {"expert_writes": True},
    "expert paragraph": {"expert_writes": True, "memory": "text"},
    "long-context": {"memory": "context", "context_tokens": LONG_CONTEXT_TOKENS},
    "RAG-top2": {"memory": "context", "context_top_k": 2},
}
"""What the answerer reads other than a policy's store, as env options: the expert's tool-written store, the expert's
flat paragraph, the latest chunks (long-context) and the two chunks BM25 ranks highest (RAG-top2)."""
EMPTY_MEMORY = {"memory": "none"}
"""The floor of the evaluation tables, as env options: every question asked over an empty store (not a kind of memory
the answerer trains on)."""


@dataclass(frozen=True)
class Writer:
    """How a policy keeps its memory on the CPU task, and the warm-start it starts from (tuned_examples/warm_starts/
    memalpha_sft.py builds each)."""

    label: str
    """Its name in the evaluation's tables."""
    warm_start: Path
    """The shipped SFT checkpoint RL starts from."""
    workflow: str
    """The workflow that prompts the policy and turns its replies into env actions."""
    workflow_config: dict
    """The workflow's options."""
    memory: str
    """The env's memory mode: "tools" (the store, written with tool calls) or "text" (one paragraph, rewritten)."""


WRITERS = {
    "mem-alpha": Writer("Mem-α", WARM_START, "memalpha", CPU_WORKFLOW, "tools"),
    "memagent": Writer("MemAgent", CHECKPOINTS / "memalpha_memagent_sft", "memagent",
                       {"memory_tokens": CPU_MAX_TOKENS}, "text"),
    "mem1": Writer("MEM1-style", CHECKPOINTS / "memalpha_mem1_sft", "memalpha", CPU_WORKFLOW, "text"),
}
"""The policies the evaluation compares on the same tasks and answerer: Mem-α's tool-written store, and the two
flat-memory baselines, MemAgent (its overwrite prompt: problem, memory, section) and MEM1-style (the memalpha
workflow's paragraph mode: the memory and the chunk, the reply is the new paragraph)."""



def run_name(writer: str) -> str:
    """The run directory under runs/ of a CPU run with --writer `writer`: memalpha_grpo[_WRITER]."""
    return "memalpha_grpo" + ("" if writer == "mem-alpha" else f"_{writer}")


def cpu_env_config(tokenizer_path: str | Path, answerer: str | None = f"actor:{ANSWERER}") -> dict:
    """env_config of the CPU task, answered by `answerer` (a frozen chat actor; "policy" for SFT rows with
    answers; None for SFT rows of calls alone)."""
    return {**CPU_TASK, "answerer": answerer, "tokenizer_path": str(tokenizer_path)}


def answerer_service(model: str | Path, num_gpus: float = 0, temperature: float = 0.0,
                     max_tokens: int = CPU_ANSWER_TOKENS) -> dict:
    """The frozen answerer serving `model` as a side service (chat_service)."""
    return chat_service(model, max_tokens, num_gpus, temperature)


def served_answerer(cfg: AlgorithmConfig, answerer: str | Path, max_tokens: int = CPU_ANSWER_TOKENS,
                    **service) -> tuple[AlgorithmConfig, str]:
    """`cfg` with `answerer` served as the side service ANSWERER when it is a local checkpoint (served_chat), and what
    the env's answerer option names."""
    return served_chat(cfg, answerer, ANSWERER, max_tokens, **service)


def start_answerer(model: str | Path = ANSWERER_CHECKPOINT):
    """The CPU answerer (answerer_service) as the chat actor ANSWERER, for runs without an algorithm to serve it
    (tuned_examples/analyses/memalpha_eval.py); returns its handle, which must be kept (the actor ends with its last
    handle)."""
    from memrl.engines.chat import start_chat_server

    service = answerer_service(model)
    return start_chat_server(ANSWERER, num_cpus=service["num_cpus"], **service["options"])
