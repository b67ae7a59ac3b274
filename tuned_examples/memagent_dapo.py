"""MemAgent with multi-conversation DAPO: read a long document chunk by chunk into a bounded memory, then answer.

CPU default (the main job):  python tuned_examples/memagent_dapo.py
GPUs, the paper's preset:    python tuned_examples/memagent_dapo.py --model /ckpt/Qwen2.5-7B-Instruct --num-gpus 16 \\
                                 [--data /data/hotpotqa_train.parquet]
The full-context baseline, the same RL:  python tuned_examples/memagent_dapo.py --workflow full_context

The CPU default starts from the shipped warm-start of the embedded tiny model (built by
`tuned_examples/memagent_sft.py` at 10 documents) on synthetic two-hop questions over 10 documents streamed in
24-token chunks, trains with DAPO on vLLM engines and two DeepSpeed ZeRO-3 learners (each batch sampled
one iteration ahead, while the learners train on the one before), and evaluates on 1000 held-out tasks of 10
documents before and after (95% intervals of about +-0.027). The trained policy is written as a Hugging Face
checkpoint to <out>/model, which `tuned_examples/memagent_eval.py` measures against longer documents.
"""

from __future__ import annotations

from pathlib import Path

from memrl.algorithms import DAPOConfig
from tuned_examples.common import parser, run_example, size_for_gpus

CHECKPOINTS = Path(__file__).resolve().parent / "checkpoints"
"""Where the shipped warm-start checkpoints live (built by tuned_examples/memagent_sft.py)."""
WARM_START = CHECKPOINTS / "memagent_sft"
"""The MemAgent policy RL starts from on CPU machines."""
BASELINE = CHECKPOINTS / "full_context_sft"
"""The full-context baseline policy (same tiny model, trained to quote the facts it needs from the whole document,
then answer)."""

NUM_DOCS = 10
"""Base length of the CPU task (1x): documents per context (one fact each, about 9 chunks). The warm-start learns
at this length, the main job's held-out score is measured at it, and the length evaluation's multiples refer to it."""
TRAIN_LENGTHS = (NUM_DOCS,)
"""Lengths the main job trains on, one drawn per question from its seed (give several to train across lengths).
Drawing 10, 20, 40 or 80 documents per question lost accuracy at 10 documents on this task: -0.026 [-0.047, -0.005]
over 30 iterations (1318 s, from a warm-start built by the same recipe), and -0.049 [-0.071, -0.027] sampling at
temperature 0.6 with tempered logprobs (1491 s, from the shipped one; 72% of its groups were all right or all
wrong), while its long documents made each iteration take 45 s against about 15 s at 10 documents."""
CHUNK_TOKENS = 24
"""Tokens per chunk on CPU: one document of up to 13 tokens, two when both are short."""
MEMORY_TOKENS = 32
"""Memory cap on CPU: room for the two gold facts."""
BASELINE_WINDOW = 320
"""Context window of the full-context baseline on CPU: holds the prompt with a 1x document (about 255 tokens in
all); at 2x the document's end is cut."""
CPU_ITERATIONS = 40
"""DAPO iterations of the CPU default (one optimizer step each)."""

PAPER = {"group_size": 16, "lr": 1e-6, "chunk_tokens": 5000, "memory_tokens": 1024, "window_tokens": 8192,
         "kl_coef": 1e-3, "clip_low": 0.2, "clip_high": 0.28}
"""MemAgent's published training settings (paper, section 4.1 and appendix A)."""


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


def config(model: str | Path = WARM_START, workflow: str = "memagent") -> DAPOConfig:
    """The CPU default: 8 tasks x 8 trajectories per iteration over TRAIN_LENGTHS documents, one vLLM engine, two
    ZeRO-3 learners, one batch sampled ahead, held-out evaluation at 10 documents. Sampling ahead gives 1.16x the
    iterations per minute of the synchronous loop at 10 documents and a better policy after the same minutes
    (benchmarks/async_training.py; both phases share the same two cores). `workflow` "full_context" gives the
    full-context baseline (`model`: BASELINE) the same training, one call per question."""
    env_config, workflow_config = cpu_task(workflow, tokenizer_path=model, num_docs=TRAIN_LENGTHS)
    return (DAPOConfig()
            .environment("memrl/ChunkStream-v0", env_config=env_config)
            .env_runners(num_env_runners=2, num_envs_per_env_runner=64, workflow=workflow,
                         workflow_config=workflow_config, engine="vllm", max_tokens=MEMORY_TOKENS,
                         engine_config={"kv_cache_bytes": 256 * 1024**2})
            .learners(model_path=str(model), num_learners=2, token_budget=32768)
            .training(lr=2e-4, tasks_per_iteration=8, group_size=8, dynamic_sampling=True, max_staleness=1)
            .evaluation(evaluation_num_tasks=1000, evaluation_env_config={"num_docs": NUM_DOCS})
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
                   "context, answers rows; README 'Data files'), else synthetic tasks")
    p.add_argument("--workflow", choices=("memagent", "full_context"), default="memagent",
                   help="CPU runs: train MemAgent (from its warm-start) or the full-context baseline (from its own, "
                   "the same settings; writes runs/memagent_dapo_full_context by default)")
    args = p.parse_args()
    if args.workflow == "full_context" and args.num_gpus:
        p.error("--workflow full_context is the CPU baseline; the GPU preset trains MemAgent")
    baseline = args.workflow == "full_context"
    name = Path(__file__).stem + ("_full_context" if baseline else "")
    start = args.model or (BASELINE if baseline else WARM_START)
    run_example(p, args, name, lambda: config(start, args.workflow),
                lambda: paper_config(args.model, args.num_gpus, args.data), cpu_iterations=CPU_ITERATIONS)


if __name__ == "__main__":
    main()
