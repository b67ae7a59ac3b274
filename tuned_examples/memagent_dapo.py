"""MemAgent with multi-conversation DAPO: read a long document chunk by chunk into a bounded memory, then answer.

CPU default (the main job):  python tuned_examples/memagent_dapo.py
GPUs, the paper's preset:    python tuned_examples/memagent_dapo.py --model /ckpt/Qwen2.5-7B-Instruct --num-gpus 16 \\
                                 [--data /data/hotpotqa_train.parquet]
The full-context baseline, the same RL:  python tuned_examples/memagent_dapo.py --workflow full_context

The CPU default starts from the shipped warm-start of the embedded tiny model (built by
`tuned_examples/warm_starts/memagent_sft.py` at 10 documents) on synthetic two-hop questions over 40 documents streamed
in 24-token chunks (4x the warm-start's length), trains with DAPO on vLLM engines and two DeepSpeed ZeRO-3 learners
(each batch sampled one iteration ahead, while the learners train on the one before), and evaluates on 400 held-out
tasks of 40 documents before and after. The trained policy is written as a Hugging Face
checkpoint to <out>/model, which `tuned_examples/analyses/memagent_eval.py` measures against longer documents.
"""

from __future__ import annotations

from pathlib import Path

from memrl.algorithms import DAPOConfig
from memrl.experiment import parser, run_example, size_for_gpus
from memrl_tuned_examples.tasks.memagent import (
    BASELINE,
    MEMORY_TOKENS,
    NUM_DOCS,
    RL_NUM_DOCS,
    WARM_START,
    cpu_task,
)

CPU_ITERATIONS = 24
"""DAPO iterations of the CPU default (one optimizer step each; about 38 s each at RL_NUM_DOCS)."""
CPU_LR = 1e-4
"""Learning rate of the CPU default (AdamW, constant)."""

PAPER = {"group_size": 16, "lr": 1e-6, "chunk_tokens": 5000, "memory_tokens": 1024, "window_tokens": 8192,
         "kl_coef": 1e-3, "clip_low": 0.2, "clip_high": 0.28}
"""MemAgent's published training settings (paper, section 4.1 and appendix A)."""


def config(model: str | Path = WARM_START, workflow: str = "memagent", num_docs: int | None = None,
           lr: float = CPU_LR) -> DAPOConfig:
    """The CPU default: 8 tasks x 8 trajectories per iteration at RL_NUM_DOCS documents, one vLLM engine, two
    ZeRO-3 learners, one batch sampled ahead, held-out evaluation at the same length. Sampling ahead gives more
    iterations per minute than the synchronous loop and a policy at least as good after the same minutes
    (benchmarks/async_training.py; both phases share the same two cores). `workflow` "full_context" gives the
    full-context baseline (`model`: BASELINE) the same training at the length its window holds (NUM_DOCS), one call
    per question. `num_docs` (default: those lengths) and `lr` change where and how fast it learns."""
    num_docs = num_docs or (RL_NUM_DOCS if workflow == "memagent" else NUM_DOCS)
    env_config, workflow_config = cpu_task(workflow, tokenizer_path=model, num_docs=num_docs)
    return (DAPOConfig()
            .environment("memrl/ChunkStream-v0", env_config=env_config)
            .env_runners(num_env_runners=2, num_envs_per_env_runner=64, workflow=workflow,
                         workflow_config=workflow_config, engine="vllm", max_tokens=MEMORY_TOKENS,
                         engine_config={"kv_cache_bytes": 256 * 1024**2})
            .learners(model_path=str(model), num_learners=2, token_budget=32768)
            .training(lr=lr, tasks_per_iteration=8, group_size=8, dynamic_sampling=True, max_staleness=1)
            .evaluation(evaluation_num_tasks=400, evaluation_env_config={"num_docs": num_docs})
            .debugging(seed=0, wandb_project="memrl-memagent"))


def paper_config(model: str, num_gpus: int, data_path: str | None = None) -> DAPOConfig:
    """MemAgent's preset on GPUs: group 16, lr 1e-6, 5000-token chunks, 1024-token memory, an 8K window, KL 1e-3.

    Data: a local file of the authors' HotpotQA-based training rows (or any question/context/answers file), else
    the synthetic two-hop generator at GPU scale (200 five-fact documents, two-word names, hard distractors).
    """
    task = ({"task": "file", "data_path": data_path} if data_path else
            {"task": "multihop", "num_docs": 200, "facts_per_doc": 5, "name_length": "long", "hardness": "hard"})
    cfg = (DAPOConfig()
           .environment("memrl/ChunkStream-v0",
                        env_config={**task, "chunk_tokens": PAPER["chunk_tokens"], "tokenizer_path": model})
           .env_runners(num_envs_per_env_runner=64, workflow="memagent",
                        workflow_config={"memory_tokens": PAPER["memory_tokens"]},
                        max_tokens=PAPER["memory_tokens"])
           .learners(model_path=model, token_budget=4 * PAPER["window_tokens"])
           .training(lr=PAPER["lr"], tasks_per_iteration=32, group_size=PAPER["group_size"], dynamic_sampling=True,
                     kl_coef=PAPER["kl_coef"], clip_low=PAPER["clip_low"], clip_high=PAPER["clip_high"])
           .evaluation(evaluation_num_tasks=256)
           .debugging(seed=0, wandb_project="memrl-memagent"))
    cfg = size_for_gpus(cfg, num_gpus)
    # Every call (prompt, memory, chunk and reply) fits the 8K window; the engine refuses anything longer.
    return cfg.env_runners(engine_config={**cfg.env_runners_cfg.engine_config,
                                          "max_model_len": PAPER["window_tokens"]})


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--data", help="GPU runs: local training file (MemAgent's eval/training files or question, "
                   "context, answers rows; docs/envs/chunk_stream.md), else synthetic tasks")
    p.add_argument("--workflow", choices=("memagent", "full_context"), default="memagent",
                   help="CPU runs: train MemAgent (from its warm-start) or the full-context baseline (from its own, "
                   "the same settings; writes runs/memagent_dapo_full_context by default)")
    p.add_argument("--num-docs", type=int, help=f"CPU runs: documents per question, where the RL trains and is scored "
                   f"(default: {RL_NUM_DOCS} for MemAgent, {NUM_DOCS} for the baseline)")
    p.add_argument("--lr", type=float, help=f"CPU runs: learning rate (default: {CPU_LR})")
    args = p.parse_args()
    if args.workflow == "full_context" and args.num_gpus:
        p.error("--workflow full_context is the CPU baseline; the GPU preset trains MemAgent")
    if args.num_gpus and (args.num_docs is not None or args.lr is not None):
        p.error("--num-docs and --lr set the CPU default; the GPU preset uses the paper's settings")
    if (args.num_docs is not None and args.num_docs < 1) or (args.lr is not None and args.lr <= 0):
        p.error(f"--num-docs must be a positive integer and --lr positive; got --num-docs {args.num_docs} "
                f"--lr {args.lr}")
    baseline = args.workflow == "full_context"
    name = Path(__file__).stem + ("_full_context" if baseline else "")
    start = args.model or (BASELINE if baseline else WARM_START)
    run_example(p, args, name, lambda: config(start, args.workflow, args.num_docs, args.lr or CPU_LR),
                lambda: paper_config(args.model, args.num_gpus, args.data), cpu_iterations=CPU_ITERATIONS)


if __name__ == "__main__":
    main()
