"""The CPU task shared by the search-agent examples (MEM1, MemSearcher, MemPO, ReSum and the ReAct baselines).

Two questions per task over the synthetic encyclopedia (MEM1 trains on 2 objectives), the top 2 passages per
search, a 64-token memory, and short prompts: the embedded tiny model's tokenizer splits the papers' long
instructions into hundreds of tokens, which would dominate every call on a CPU. Users with a real model keep
the papers' prompts (the workflows' defaults) by passing no template.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from memrl_envs.search import load_questions
from memrl.config import AlgorithmConfig
from memrl.experiment import parser, run_example, size_for_gpus
from memrl_tuned_examples.tasks import CHECKPOINTS

NUM_OBJECTIVES = 2
"""Questions per training task."""
TOP_K = 2
"""Passages per search."""
MEMORY_TOKENS = 64
"""Cap of the memory (MEM1's state, MemSearcher's <memory>, MemPO's <mem>): room for the facts of two questions."""
MAX_TOKENS = 160
"""Most new tokens per call: a full memory, a line of reasoning and an action (MemSearcher's JSON tool call is the
longest)."""

TEMPLATES = {
    "mem1": "{questions}\nReply <think>summary</think> then <search>query</search> or <answer>a1; a2</answer>.",
    "mempo": "{questions}\nReply <mem>summary</mem><think>reason</think> then <search>query</search> or "
             "<answer>a1; a2</answer>.",
    "memsearcher": "{questions}",
    "react": "{questions}\nReply <think>reason</think> then <search>query</search> or <answer>a1; a2</answer>.",
}
"""Short task prompts of the CPU task, per workflow (react_truncated and resum use react's)."""
RESUM_PROMPTS = {
    "summary_prompt": "{{{question}}}\nKeep what answers the questions in <summary></summary>:\n"
                      "{{{recent_history_messages}}}",
    "summary_prompt_last": "{{{question}}}\nLast: {{{last_summary}}}\nKeep what answers the questions in "
                           "<summary></summary>:\n{{{recent_history_messages}}}",
    "resume_prompt": "{question}\nSo far: {summary}",
}
"""ReSum's three prompts on the CPU task, short for the tiny model's tokenizer (ReSum's parts, in its order)."""
RESUM_CONTEXT_TOKENS = 256
"""ReSum's context budget on the CPU task: ReAct's contexts there reach 270-480 tokens by the answer (a search adds
about 100), so a summary replaces the history after the second search and again as the turns add up."""
MEMSEARCHER_SYSTEM = ("Call wikipedia_search in <tool_call></tool_call>, keep a <memory></memory> of the facts "
                      "found, and write the answers in \\boxed{{}}.")
"""MemSearcher's short system prompt on the CPU task."""

HELDOUT_TASKS = 2000
"""Held-out tasks of the search examples' CPU defaults: enough to narrow the summed-EM reward's 95% interval to a
few hundredths."""
HELDOUT = {"evaluation_num_tasks": HELDOUT_TASKS, "evaluation_num_envs_per_env_runner": HELDOUT_TASKS // 2}
"""Their evaluation settings: every held-out task in flight at once over the CPU defaults' two env runners (about
twice as fast as 32 at a time)."""



def env_config(num_objectives: int = NUM_OBJECTIVES) -> dict:
    """The search env of the CPU task with `num_objectives` questions and a turn budget that fits them
    (two hops per question, then the answer, plus two spare turns)."""
    return {"num_objectives": num_objectives, "top_k": TOP_K, "max_turns": 2 * num_objectives + 2}


TABLE_TWO_HOP_FRACTION = 0.0
"""Share of two-hop questions in MEM1's Table 1 on CPU (search_eval.py and the multi-count warm-starts it measures):
none, so a task of N questions takes N searches and the answer within its 2N + 2 turns, and each answer is one fact
of the passage just read. The RL examples keep the encyclopedia's even mix of one- and two-hop questions."""


def table_env_config(num_objectives: int) -> dict:
    """The search env of MEM1's Table 1 on CPU: env_config(num_objectives) with one-hop questions only
    (TABLE_TWO_HOP_FRACTION)."""
    return {**env_config(num_objectives), "two_hop_fraction": TABLE_TWO_HOP_FRACTION}


def workflow_config(workflow: str) -> dict:
    """Options of `workflow` on the CPU task."""
    if workflow == "memsearcher":
        return {"memory_tokens": MEMORY_TOKENS, "template": TEMPLATES["memsearcher"],
                "system_prompt": MEMSEARCHER_SYSTEM}
    if workflow in ("mem1", "mempo"):
        return {"memory_tokens": MEMORY_TOKENS, "template": TEMPLATES[workflow]}
    if workflow == "react":
        return {"template": TEMPLATES["react"]}
    if workflow == "react_truncated":
        return {"template": TEMPLATES["react"], "max_context_tokens": 1024}
    if workflow == "resum":
        return {"template": TEMPLATES["react"], "max_context_tokens": RESUM_CONTEXT_TOKENS,
                "memory_tokens": MEMORY_TOKENS, **RESUM_PROMPTS}
    raise ValueError(f"workflow={workflow!r} is not allowed; choose one of mem1, memsearcher, mempo, react, "
                     "react_truncated, resum")


def warm_start(workflow: str, multi: bool = False) -> Path:
    """The shipped warm-start checkpoint of `workflow` on the CPU task; multi=True: the one that went on to tasks of
    1, 2, 4 and 8 questions (search_sft.py --multi)."""
    return CHECKPOINTS / f"{workflow}{'_multi' if multi else ''}_search_sft"


def cpu_preset(config: AlgorithmConfig, workflow: str, model: str | Path | None = None, *,
               reward: str | None = None, temperature: float = 0.7) -> AlgorithmConfig:
    """What the search examples' CPU defaults share, on `config` (the example then sets its training settings): the
    CPU task's search env (its reward `reward` when given), two env runners of 32 envs each running `workflow` with
    its CPU options, sampled at `temperature` from one vLLM engine with a 256 MiB KV cache, two ZeRO-3 learners
    from `model` (default: the workflow's shipped warm-start), the held-out evaluation, seed 0 and a wandb project
    named after the workflow."""
    env = {**env_config(), "reward": reward} if reward else env_config()
    return (config.environment("memrl/Search-v0", env_config=env)
            .env_runners(num_env_runners=2, num_envs_per_env_runner=32, workflow=workflow,
                         workflow_config=workflow_config(workflow), engine="vllm", max_tokens=MAX_TOKENS,
                         temperature=temperature, engine_config={"kv_cache_bytes": 256 * 1024**2})
            .learners(model_path=str(model or warm_start(workflow)), num_learners=2, token_budget=32768)
            .evaluation(**HELDOUT)
            .debugging(seed=0, wandb_project=f"memrl-{workflow}"))


def paper_preset(config: AlgorithmConfig, workflow: str, reward: str, max_turns: int, model: str, num_gpus: int,
                 qa_path: str | None = None, retriever: str | None = None, *, max_tokens: int = 1024,
                 workflow_config: dict | None = None) -> AlgorithmConfig:
    """What the search examples' GPU presets share, on `config` (the example then sets its paper's training
    settings): two questions per task from the local QA file `qa_path` (as many as each row holds for MEM1's
    multi-objective rows; else the synthetic encyclopedia), passages
    from the HTTP `retriever` (else BM25 in process), the paper's reward and turn budget, `workflow` with the
    paper's prompt, 64 episodes in flight per runner, 256 held-out tasks, sized for `num_gpus`."""
    env = {"num_objectives": NUM_OBJECTIVES, "max_turns": max_turns, "reward": reward}
    if qa_path:
        # MEM1's rows are fixed tasks of as many questions as each holds (read when the file is here already).
        counts = {len(row) for row in load_questions(qa_path)} if Path(qa_path).is_file() else set()
        fixed = len(counts) == 1 and counts != {1}
        env.update(data="file", qa_path=qa_path, num_objectives=counts.pop() if fixed else NUM_OBJECTIVES)
    if retriever:
        env.update(retriever=retriever)
    cfg = (config.environment("memrl/Search-v0", env_config=env)
           .env_runners(num_envs_per_env_runner=64, workflow=workflow, workflow_config=workflow_config or {},
                        max_tokens=max_tokens, max_calls_per_episode=max_turns)
           .learners(model_path=model, token_budget=65536)
           .evaluation(evaluation_num_tasks=256)
           .debugging(seed=0, wandb_project=f"memrl-{workflow}"))
    return size_for_gpus(cfg, num_gpus)


def run_search_example(description: str, name: str, config: Callable, paper_config: Callable,
                       cpu_iterations: int, gpu_options: dict[str, str] | None = None) -> dict:
    """A search example's main: `config(model)` on CPU for `cpu_iterations`, or `paper_config(model, num_gpus,
    qa_path, retriever)` with --num-gpus, taking the GPU presets' data options --qa and --retriever (see
    paper_preset) and the example's own `gpu_options` ({name: help}; each --name is handed to paper_config as the
    keyword name)."""
    p = parser(description)
    p.add_argument("--qa", help="GPU runs: local QA file (Search-R1 / FlashRAG / HotpotQA / NQ rows or MEM1's "
                   "multi-objective rows; docs/envs/search.md), else synthetic questions")
    p.add_argument("--retriever", help="GPU runs: URL of a /retrieve or /search server, else BM25 in process")
    for option, text in (gpu_options or {}).items():
        p.add_argument(f"--{option.replace('_', '-')}", help=text)
    args = p.parse_args()
    extra = {option: getattr(args, option) for option in gpu_options or {}}
    return run_example(p, args, name, lambda: config(args.model),
                       lambda: paper_config(args.model, args.num_gpus, args.qa, args.retriever, **extra),
                       cpu_iterations)
