"""The MemAgent CPU task: synthetic two-hop questions over documents streamed in chunks into a bounded memory,
shared by the main job (memagent_dapo.py), its warm-start recipe (warm_starts/memagent_sft.py) and the length
analyses (analyses/memagent_eval.py, analyses/full_context_lookups.py)."""

from __future__ import annotations

from memrl_tuned_examples.tasks import CHECKPOINTS

WARM_START = CHECKPOINTS / "memagent_sft"
"""The MemAgent policy RL starts from on CPU machines."""
BASELINE = CHECKPOINTS / "full_context_sft"
"""The full-context baseline policy (same tiny model, trained to quote the facts it needs from the whole document,
then answer)."""

NUM_DOCS = 10
"""Base length of the CPU task (1x): documents per context (one fact each, about 9 chunks). The warm-starts learn
at this length, the full-context baseline's RL trains at it (its window holds no more), and the length evaluation's
multiples refer to it."""
RL_NUM_DOCS = 4 * NUM_DOCS
"""Length the main job's RL trains at and its held-out score is measured at: 40 documents, 4x the warm-start's.
At this length about four in ten of the warm-start's answers are wrong, and most of those failures are names lost
while the memory is rewritten over about 36 calls, what a trajectory's reward can teach. From the shipped warm-start,
RL here gains at 40 documents and at every longer length and stays within the interval at 10, while RL at 10
documents loses at 10 and 80 (figures: docs/methods/memagent.md)."""
CHUNK_TOKENS = 24
"""Tokens per chunk on CPU: one document of up to 13 tokens, two when both are short."""
MEMORY_TOKENS = 32
"""Memory cap on CPU: room for the two gold facts."""
BASELINE_WINDOW = 320
"""Context window of the full-context baseline on CPU: holds the prompt with a 1x document (about 255 tokens in
all); at 2x the document's end is cut."""

def cpu_task(workflow: str, tokenizer_path: str, num_docs: int | tuple[int, ...] = NUM_DOCS) -> tuple[dict, dict]:
    """(env_config, workflow_config) of the CPU task for the "memagent" or "full_context" workflow; a tuple of
    `num_docs` draws one length per question."""
    # Numbering starts at a per-task random number: a document's number must not tell where it sits in the
    # context, or a policy trained on 10 documents learns "Document 9 is near the end" and fails on longer ones.
    env_config = {"task": "multihop", "num_docs": num_docs, "chunk_tokens": CHUNK_TOKENS, "first_doc_number": None,
                  "tokenizer_path": str(tokenizer_path)}
    if workflow == "memagent":
        return env_config, {"memory_tokens": MEMORY_TOKENS}
    if workflow == "full_context":
        return {**env_config, "stream": False}, {"max_context_tokens": BASELINE_WINDOW}
    raise ValueError(f"cpu_task: workflow={workflow!r} is not allowed; choose 'memagent' or 'full_context'")
