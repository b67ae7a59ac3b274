"""The Memory-R1 CPU task: synthetic conversations whose facts change (memrl/MemoryBank-v0), the shipped warm-starts
of its two agents and the frozen Answer Agent that scores the manager; shared by the example (memory_r1.py) and its
warm-start recipe (warm_starts/memory_r1_sft.py)."""

from __future__ import annotations

from pathlib import Path

from memrl.config import AlgorithmConfig
from memrl_tuned_examples.tasks import CHECKPOINTS, served_chat

MANAGER_WARM_START = CHECKPOINTS / "memory_r1_manager_sft"
"""The CPU Memory Manager RL starts from: the embedded tiny model trained on an expert manager that updates a changed
fact only some of the time (TEACHER_UPDATE_RATE); tuned_examples/warm_starts/memory_r1_sft.py --role manager."""
ANSWER_WARM_START = CHECKPOINTS / "memory_r1_answer_sft"
"""The CPU Answer Agent: the embedded tiny model trained on an expert that answers from the most recent entry of the
asked fact only some of the time (TEACHER_RECENCY_RATE); the frozen Answer Agent of the manager stage, and where the
answer stage starts (tuned_examples/warm_starts/memory_r1_sft.py --role answer)."""
ANSWER_AGENT = "memory-r1-answer"
"""Name of the chat actor that answers for the manager stage (envs reach it as answerer="actor:memory-r1-answer")."""

CPU_TASK = {"prompt": "brief", "expert_reply": "changes", "num_people": 3, "num_turns": 6, "num_questions": 2}
"""The CPU conversations: three friends over six turns, half of their facts changed later, two questions on facts
that changed. The prompts are the data alone (the tiny model learned the replies by SFT, not by reading), and the
expert manager it learned from writes its changes alone (the unchanged entries' NONE items would be most of a reply
to copy)."""
CPU_MANAGER_TOKENS = 448
"""Longest CPU manager reply: room for a full JSON (every shown entry with its event, under 400 tokens of the tiny
tokenizer), though the expert the warm-start learned from writes its changes alone."""
CPU_ANSWER_TOKENS = 96
"""Longest CPU Answer Agent reply: the selected memory and the answer (under 64 tokens for the expert)."""
TEACHER_UPDATE_RATE = 0.3
"""The expert manager of the manager warm-start updates a fact that changed with this chance, else adds the new fact
beside the old one, so a warm-started manager keeps some stale facts that RL can learn to replace."""
TEACHER_RECENCY_RATE = 0.3
"""The expert Answer Agent of the answer warm-start answers from the most recent entry of the asked fact with this
chance, else from the first shown (BM25 order, the older entry on a tie): a stale fact in the bank then misleads it
most of the time, which is what makes the manager's updates pay and what the answer stage can learn."""


def env_config(role: str, answerer: str | None = None, **options) -> dict:
    """env_config of the CPU task for `role` ("manager" or "answer"), the manager answered by `answerer` (None: no
    answers, as for the warm-start's rows)."""
    return {**CPU_TASK, "role": role, **({"answerer": answerer} if role == "manager" else {}), **options}


def served_answer_agent(cfg: AlgorithmConfig, answerer: str | Path,
                        max_tokens: int = CPU_ANSWER_TOKENS, **service) -> tuple[AlgorithmConfig, str]:
    """`cfg` with the frozen Answer Agent `answerer` served as the side service ANSWER_AGENT when it is a local
    checkpoint (served_chat), and what the env's answerer option names."""
    return served_chat(cfg, answerer, ANSWER_AGENT, max_tokens, **service)
