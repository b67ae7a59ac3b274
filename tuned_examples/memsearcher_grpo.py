"""MemSearcher: a search agent that carries only the question and its own <memory> from call to call, trained with
multi-context GRPO (the trajectory's group advantage on every one of its conversations).

CPU default:              python tuned_examples/memsearcher_grpo.py
GPUs, the paper's preset: python tuned_examples/memsearcher_grpo.py --model /ckpt/Qwen2.5-7B-Instruct --num-gpus 8 \\
                              --qa /data/nq_hotpotqa_train.jsonl --retriever http://127.0.0.1:8000/retrieve

The CPU default starts from the shipped warm-start of the embedded tiny model (tuned_examples/warm_starts/search_sft.py)
on the CPU task of tuned_examples/tasks/search.py (two questions per task), rewards MemSearcher's F1 (0.1 for a
well-formed episode whose answers miss), trains on a vLLM engine and two DeepSpeed ZeRO-3 learners, and evaluates
on 2000 held-out tasks before and after. The policy is written to <out>/model.

The CPU default does not divide advantages by the group's std (the paper's preset does): with the 0.1 floor, a
group whose rollouts differ only in a format slip (rewards 0.1 and 0) would otherwise weigh as much as one with a
right answer, and the tiny model's sampled rollouts slip often. It also samples at temperature 0.7 (the paper's
is 1): the tiny model's rollouts at 1 stray far from its greedy ones, and at 0.7 training moves the greedy policy
further in the same 40 iterations (docs/methods/search.md has both runs).
"""

from __future__ import annotations

from pathlib import Path

from memrl.algorithms import GRPOConfig
from memrl_tuned_examples.tasks.search import cpu_preset, paper_preset, run_search_example

CPU_ITERATIONS = 40
"""Training iterations of the CPU default (about 20 s each)."""
PAPER = {"group_size": 5, "tasks_per_iteration": 51, "lr": 1e-6, "kl_coef": 1e-3, "max_turns": 5,
         "memory_tokens": 1024}
"""MemSearcher's published RL settings (appendix A.1: lr 1e-6, 256 trajectories per batch as 51 groups of 5
rollouts, temperature 1, KL 1e-3, clip 0.2; 5 turns in training, a memory of at most 1024 tokens)."""


def config(model: str | Path | None = None) -> GRPOConfig:
    """The CPU default: 8 tasks x 8 trajectories per iteration sampled at temperature 0.7, advantages against the
    group mean, one vLLM engine, two ZeRO-3 learners."""
    return cpu_preset(GRPOConfig(), "memsearcher", model, reward="f1").training(
        lr=1e-4, tasks_per_iteration=8, group_size=8, norm_adv_by_std=False)


def paper_config(model: str, num_gpus: int, qa_path: str | None, retriever: str | None) -> GRPOConfig:
    """MemSearcher's preset on GPUs with the paper's prompt (search_agents.paper_preset for the data options)."""
    cfg = paper_preset(GRPOConfig(), "memsearcher", "f1", PAPER["max_turns"], model, num_gpus, qa_path, retriever,
                       max_tokens=PAPER["memory_tokens"] + 512,
                       workflow_config={"memory_tokens": PAPER["memory_tokens"]})
    return cfg.training(lr=PAPER["lr"], tasks_per_iteration=PAPER["tasks_per_iteration"],
                        group_size=PAPER["group_size"], kl_coef=PAPER["kl_coef"])


def main() -> None:
    run_search_example(__doc__, Path(__file__).stem, config, paper_config, CPU_ITERATIONS)


if __name__ == "__main__":
    main()
