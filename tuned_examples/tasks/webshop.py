"""The CPU task shared by the WebShop examples (MEM1 on WebShop and the ReAct baselines).

The generated catalog (400 products, memrl_envs.webshop_catalog) with three products per result page, MEM1's ten turns
and its -1 for a reply without an action, and short prompts: the embedded tiny model's tokenizer makes a ten-product
result page about 900 tokens and MEM1's full instructions a few hundred more, which would dominate every call on a
CPU. Users with a real model keep the paper's settings (page size 10, the workflows' prompts) by passing none.
"""

from __future__ import annotations

from pathlib import Path

from memrl_tuned_examples.tasks import CHECKPOINTS

PAGE_SIZE = 3
"""Products per result page on the CPU task (the original shows 10)."""
MAX_TURNS = 10
"""Actions per episode (MEM1's WebShop training)."""
MEMORY_TOKENS = 64
"""Cap of MEM1's <summary>: the search, the product opened and the options chosen."""
MAX_TOKENS = 128
"""Most new tokens per call: a line of reasoning, a full summary and an action."""
TEMPLATES = {
    "webshop_mem1": "{instruction}\nReply <think>reason</think><summary>progress</summary><answer>action</answer>.",
    "webshop_react": "{instruction}\nReply <think>reason</think><answer>action</answer>.",
}
"""Short task prompts of the CPU task, per workflow (the truncated ReAct and ReSum use webshop_react's)."""
REACT_WINDOW = 1536
"""Truncated ReAct's context window on the CPU task: the prompt and about two turns."""
RESUM_PROMPTS = {
    "summary_prompt": "{{{question}}}\nKeep what was done in <summary></summary>:\n{{{recent_history_messages}}}",
    "summary_prompt_last": "{{{question}}}\nLast: {{{last_summary}}}\nKeep what was done in <summary></summary>:\n"
                           "{{{recent_history_messages}}}",
    "resume_prompt": "{question}\nSo far: {summary}",
}
"""ReSum's three prompts on the CPU task, short for the tiny model's tokenizer (ReSum's parts, in its order)."""
HELDOUT_TASKS = 500
"""Held-out goals: the test split (the first 500 in the original order)."""
HELDOUT = {"evaluation_num_tasks": HELDOUT_TASKS, "evaluation_num_envs_per_env_runner": HELDOUT_TASKS // 2}
"""Evaluation settings: every held-out goal in flight at once over two env runners."""
WORKFLOWS = ("webshop_mem1", "webshop_react", "webshop_react_truncated", "webshop_resum")


def env_config(split: str = "train", expert_recall: float = 1.0) -> dict:
    """The WebShop env of the CPU task on `split` (training runs on 'train'; held-out evaluation on 'test')."""
    return {"split": split, "page_size": PAGE_SIZE, "max_turns": MAX_TURNS, "malformed_reward": -1.0,
            "expert_recall": expert_recall}


def workflow_config(workflow: str) -> dict:
    """Options of `workflow` on the CPU task."""
    if workflow == "webshop_mem1":
        return {"memory_tokens": MEMORY_TOKENS, "template": TEMPLATES[workflow]}
    if workflow == "webshop_react":
        return {"template": TEMPLATES[workflow]}
    if workflow == "webshop_react_truncated":
        return {"template": TEMPLATES["webshop_react"], "max_context_tokens": REACT_WINDOW}
    if workflow == "webshop_resum":  # a summary when ReAct's context would outgrow truncated ReAct's window
        return {"template": TEMPLATES["webshop_react"], "max_context_tokens": REACT_WINDOW,
                "memory_tokens": MEMORY_TOKENS, **RESUM_PROMPTS}
    raise ValueError(f"workflow={workflow!r} is not allowed; choose one of {WORKFLOWS}")


def warm_start(workflow: str) -> Path:
    """The warm-start of `workflow` on the CPU task (truncated ReAct starts from ReAct's)."""
    return CHECKPOINTS / f"{'webshop_react' if workflow == 'webshop_react_truncated' else workflow}_sft"
