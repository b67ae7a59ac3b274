"""MEM1: a search agent whose <think> state replaces its whole history each turn, trained with PPO (a critic and
GAE) on each trajectory stitched into one sequence.

CPU default:              python tuned_examples/mem1_ppo.py
GPUs, the paper's preset: python tuned_examples/mem1_ppo.py --model /ckpt/Qwen2.5-7B --num-gpus 4 \\
                              --qa /data/hotpotqa_nq_2obj.jsonl --retriever http://127.0.0.1:8000/retrieve

The CPU default starts from the shipped warm-start of the embedded tiny model (tuned_examples/warm_starts/search_sft.py)
on the CPU task of tuned_examples/tasks/search.py (two questions per task, MEM1's summed exact match, 0-2), trains
with PPO on a vLLM engine, two DeepSpeed ZeRO-3 policy learners and two critic learners (the critic starts from
the warm-start's backbone), and evaluates on 2000 held-out tasks before and after. The policy is written to
<out>/model.
"""

from __future__ import annotations

from pathlib import Path

from memrl.algorithms import PPOConfig
from memrl_tuned_examples.tasks.search import cpu_preset, paper_preset, run_search_example

CPU_ITERATIONS = 43
"""Training iterations of the CPU default (about 20 s each)."""
PAPER = {"tasks_per_iteration": 64, "lr": 1e-6, "critic_lr": 1e-5, "max_turns": 6, "max_tokens": 1024}
"""MEM1's published RL settings (appendix: batch and mini-batch 64, actor lr 1e-6, critic lr 1e-5, temperature 1,
6 turns in training)."""


def config(model: str | Path | None = None) -> PPOConfig:
    """The CPU default: 64 tasks per iteration (one trajectory each, MEM1's batch), one vLLM engine, 2 + 2 ZeRO-3
    learners."""
    return (cpu_preset(PPOConfig(), "mem1", model, temperature=1.0)
            .training(lr=1e-4, critic_lr=1e-4, critic_warmup_iterations=2, tasks_per_iteration=64))


def paper_config(model: str, num_gpus: int, qa_path: str | None, retriever: str | None) -> PPOConfig:
    """MEM1's preset on GPUs with the paper's prompt (search_agents.paper_preset for the data options)."""
    cfg = paper_preset(PPOConfig(), "mem1", "em_sum", PAPER["max_turns"], model, num_gpus, qa_path, retriever,
                       max_tokens=PAPER["max_tokens"])
    return cfg.training(lr=PAPER["lr"], critic_lr=PAPER["critic_lr"], tasks_per_iteration=PAPER["tasks_per_iteration"])


def main() -> None:
    run_search_example(__doc__, Path(__file__).stem, config, paper_config, CPU_ITERATIONS)


if __name__ == "__main__":
    main()
