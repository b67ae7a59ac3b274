"""Mem-α: a memory agent that writes its own memory with tool calls, trained with GRPO over rows.

CPU default:              python tuned_examples/memalpha_grpo.py
A flat-memory baseline:   python tuned_examples/memalpha_grpo.py --writer memagent   (or --writer mem1)
GPUs, the paper's preset: python tuned_examples/memalpha_grpo.py --model /ckpt/Qwen3-4B --num-gpus 8 \\
                              --answerer http://127.0.0.1:8001/v1 [--data /data/memalpha_train.parquet]

Each task streams chunks of a conversation, a labelled sample set or a story (envs/memory_generators.py, the three
categories the paper trains on, in turn); the policy writes one reply of tool calls per chunk against the episode's
memory store (core, semantic, episodic). After the last chunk a frozen answerer answers the task's questions from
the memory, and every chunk row is rewarded r_acc + 0.05 r_compress + r_tool + 0.1 r_content (memrl/MemoryStore-v0).

On CPU the policy starts from the shipped warm-start of the embedded tiny model
(tuned_examples/warm_starts/memalpha_sft.py, which learned to write the calls of an expert that keeps too few facts),
and the answerer is the shipped tiny checkpoint trained to answer from a memory (memalpha_sft.py --role answerer),
frozen and served by a chat actor. Held-out r_acc (the answerer's accuracy from the memory the policy built) is measured
on the same tasks before and after training, with 95% intervals and the paired change; tool-call success and memory size
come with it. The policy is written to <out>/model.
--writer trains a flat-memory baseline instead (WRITERS: MemAgent or MEM1-style, one paragraph rewritten per
chunk) from its own warm-start, with the same GRPO, iterations, tasks and answerer (reward r_acc + 0.05 r_compress:
it makes no tool calls).

On GPUs: the paper's settings (group 8, 32 tasks per step, lr 1e-6, KL loss 1e-3 as the authors' script,
beta 0.05, gamma 0.1), the full prompt with the tools' JSON schemas, and the answerer either an OpenAI-compatible
endpoint (--answerer URL, e.g. Qwen3-32B behind vLLM's server) or a local checkpoint served on its own GPUs
(--answerer PATH --answerer-gpus N). --data takes the authors' training rows or MemoryAgentBench rows.
"""

from __future__ import annotations

from pathlib import Path

from memrl.algorithms import MemAlphaConfig
from memrl.experiment import parser, run_example, size_for_gpus
from memrl_tuned_examples.tasks.memalpha import (
    ANSWERER_CHECKPOINT,
    CPU_MAX_TOKENS,
    WRITERS,
    cpu_env_config,
    run_name,
    served_answerer,
)

CPU_ITERATIONS = 30
"""Training iterations of the CPU default."""
PAPER = {"group_size": 8, "tasks_per_iteration": 32, "lr": 1e-6, "kl_coef": 1e-3, "beta": 0.05, "gamma": 0.1,
         "max_tokens": 2048, "max_model_len": 32768, "answerer_temperature": 0.7}
"""Mem-α's published training settings (paper, section 4.1 and eq. 1; KL loss from the authors' script)."""


def config(model: str | Path | None = None, answerer: str | Path | None = None,
           writer: str = "mem-alpha") -> MemAlphaConfig:
    """The CPU default: 8 tasks x 8 rollouts per iteration, one vLLM engine fed by one env runner of 64 envs, two
    ZeRO-3 learners. The answerer is an OpenAI-compatible URL, or else a local checkpoint (by default the shipped CPU
    answerer) that the algorithm serves as the side service ANSWERER (answerer_service). One runner keeps runs
    repeatable: the prompts share a long system prompt, and an engine that several runners feed in whatever order
    they come caches its blocks from one runner's batch or another's, whose last bits differ. `writer` (a WRITERS
    name) says how the policy keeps its memory; `model` defaults to that writer's warm-start.

    A group whose rollouts all score the same r_acc is left out of the update (dynamic sampling on r_acc, one round,
    as DAPO keeps groups whose accuracy differs): its std-normalised advantages would rank the rollouts by the small
    r_compress / r_tool / r_content differences scaled up to unit size, and on 8 tasks per iteration that steady push
    shrinks the memory until it loses facts (docs/methods/memalpha.md)."""
    w = WRITERS[writer]
    model = model or w.warm_start
    cfg, where = served_answerer(MemAlphaConfig(), answerer or ANSWERER_CHECKPOINT)
    return (cfg
            .environment("memrl/MemoryStore-v0", env_config={**cpu_env_config(model, where), "memory": w.memory})
            .env_runners(num_env_runners=1, num_envs_per_env_runner=64, workflow=w.workflow,
                         workflow_config=w.workflow_config, engine="vllm", max_tokens=CPU_MAX_TOKENS,
                         engine_config={"kv_cache_bytes": 256 * 1024**2})
            .learners(model_path=str(model), num_learners=2, token_budget=32768)
            .training(lr=1e-4, tasks_per_iteration=8, group_size=8, dynamic_sampling=True,
                      dynamic_sampling_metric="r_acc", dynamic_sampling_max_rounds=1)
            .evaluation(evaluation_num_tasks=300)
            .debugging(seed=0, wandb_project="memrl-memalpha"))


def paper_config(model: str, num_gpus: int, answerer: str, data_path: str | None = None,
                 answerer_gpus: int = 1) -> MemAlphaConfig:
    """Mem-α's preset on `num_gpus` GPUs for the policy, answered by `answerer`: an http(s) URL, "actor:NAME" (a
    running actor), or a local checkpoint the algorithm serves on `answerer_gpus` GPUs of their own (the side service
    ANSWERER, at the paper's answer temperature).

    Data: a local file of the authors' rows or MemoryAgentBench rows, else the synthetic generators at GPU scale
    (ten chunks of four facts and two distractors, eight questions, five hidden classes)."""
    task = ({"data": "file", "data_path": data_path} if data_path else
            {"category": "mixed", "num_chunks": 10, "num_questions": 8, "facts_per_chunk": 4,
             "small_talk_per_chunk": 2, "num_classes": 5, "samples_per_chunk": 8, "keywords": 8})
    cfg, where = served_answerer(MemAlphaConfig(), answerer, num_gpus=answerer_gpus,
                                 temperature=PAPER["answerer_temperature"], max_tokens=PAPER["max_tokens"])
    cfg = (cfg
           .environment("memrl/MemoryStore-v0", env_config={
               **task, "answerer": where, "tokenizer_path": model, "beta": PAPER["beta"],
               "gamma": PAPER["gamma"]})
           .env_runners(num_envs_per_env_runner=64, workflow="memalpha",
                        workflow_config={"max_prompt_tokens": PAPER["max_model_len"] - PAPER["max_tokens"]},
                        max_tokens=PAPER["max_tokens"])
           .learners(model_path=model, token_budget=2 * PAPER["max_model_len"])
           .training(lr=PAPER["lr"], tasks_per_iteration=PAPER["tasks_per_iteration"],
                     group_size=PAPER["group_size"], kl_coef=PAPER["kl_coef"])
           .evaluation(evaluation_num_tasks=256)
           .debugging(seed=0, wandb_project="memrl-memalpha"))
    cfg = size_for_gpus(cfg, num_gpus)
    return cfg.env_runners(engine_config={**cfg.env_runners_cfg.engine_config,
                                          "max_model_len": PAPER["max_model_len"]})


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--answerer", help="an OpenAI-compatible API base (http://HOST:PORT/v1), or a local checkpoint "
                   "served as the frozen answerer (CPU default: the warm-start; needed with --num-gpus)")
    p.add_argument("--answerer-gpus", type=int, default=1,
                   help="GPUs that serve a local --answerer checkpoint, taken from --num-gpus; unused for a URL")
    p.add_argument("--data", help="GPU runs: the Mem-α authors' training rows or MemoryAgentBench rows "
                   "(docs/envs/memory_store.md), else synthetic tasks")
    p.add_argument("--writer", choices=sorted(WRITERS), default="mem-alpha",
                   help="CPU runs: how the policy keeps its memory (WRITERS: Mem-α's tool store, or a flat-memory "
                   "baseline from its own warm-start); writes to runs/memalpha_grpo[_WRITER]")
    args = p.parse_args()
    if args.num_gpus and args.writer != "mem-alpha":
        p.error("--writer picks a CPU baseline; the GPU preset trains Mem-α (--writer mem-alpha)")
    url = args.answerer if args.answerer and args.answerer.startswith(("http://", "https://")) else None
    policy_gpus = args.num_gpus - (0 if url else args.answerer_gpus)
    if args.num_gpus and not args.answerer:
        p.error("--num-gpus needs --answerer: an OpenAI-compatible URL or a local checkpoint to answer from memory")
    if args.num_gpus and policy_gpus < 1:
        p.error(f"--num-gpus {args.num_gpus} leaves no GPU for the policy beside the answerer's {args.answerer_gpus} "
                "(--answerer-gpus)")

    run_example(p, args, run_name(args.writer), lambda: config(args.model, args.answerer, args.writer),
                lambda: paper_config(args.model, policy_gpus, args.answerer, args.data, args.answerer_gpus),
                cpu_iterations=CPU_ITERATIONS, metric="r_acc")


if __name__ == "__main__":
    main()
