"""MemPO: a search agent that keeps only its own <mem> summary between steps, trained with GRPO plus the memory
advantage on the <mem> tokens.

CPU default:              python tuned_examples/mempo_grpo.py
GPUs, the paper's preset: python tuned_examples/mempo_grpo.py --model /ckpt/Qwen2.5-7B-Instruct --num-gpus 8 \\
                              --qa /data/hotpotqa_nq_2obj.jsonl --retriever http://127.0.0.1:8000/retrieve

The CPU default starts from the shipped warm-start of the embedded tiny model (tuned_examples/warm_starts/search_sft.py)
on the CPU task of tuned_examples/tasks/search.py (two questions per task over the synthetic encyclopedia), trains
with MemPO on a vLLM engine and two DeepSpeed ZeRO-3 learners, and evaluates on 2000 held-out tasks before and
after. The CPU reward is MEM1's summed exact match (0-2 per task): the tiny warm-start answers both questions
too rarely for MemPO's all-or-nothing answer-and-format reward, which the GPU preset keeps, to give a group
anything to compare. The policy is written to <out>/model.

One CPU setting differs from the paper's, which the GPU preset keeps: rollouts are sampled at temperature 0.7 (the
paper's is 1), where they stay closer to the greedy policy that is evaluated. The memory advantage has the paper's
weight (memory_advantage_coef=1): the warm-start's last stage trains on the memory probe (an answer right after the
questions and a memory), so the probe's answer probabilities carry the memory's worth (the settings tried are
on docs/methods/search.md).
"""

from __future__ import annotations

from pathlib import Path

from memrl.algorithms import MemPOConfig
from memrl_tuned_examples.tasks.search import cpu_preset, paper_preset, run_search_example

CPU_ITERATIONS = 60
"""Training iterations of the CPU default (about 15 s each)."""
PAPER = {"group_size": 16, "lr": 1e-6, "max_turns": 16, "tasks_per_iteration": 8, "kl_coef": 1e-3}
"""MemPO's published RL settings (paper, section 5.1: group 16, batch 128 trajectories, lr 1e-6, 16 rounds)."""


def config(model: str | Path | None = None) -> MemPOConfig:
    """The CPU default: 8 tasks x 8 trajectories per iteration sampled at temperature 0.7, the memory advantage at
    the paper's weight, one vLLM engine, two ZeRO-3 learners."""
    return cpu_preset(MemPOConfig(), "mempo", model).training(lr=1e-4, tasks_per_iteration=8, group_size=8,
                                                              memory_advantage_coef=1.0)


def paper_config(model: str, num_gpus: int, qa_path: str | None, retriever: str | None) -> MemPOConfig:
    """MemPO's preset on GPUs with the paper's prompt (search_agents.paper_preset for the data options)."""
    cfg = paper_preset(MemPOConfig(), "mempo", "answer_format", PAPER["max_turns"], model, num_gpus, qa_path,
                       retriever)
    return cfg.training(lr=PAPER["lr"], tasks_per_iteration=PAPER["tasks_per_iteration"],
                        group_size=PAPER["group_size"], kl_coef=PAPER["kl_coef"])


def main() -> None:
    run_search_example(__doc__, Path(__file__).stem, config, paper_config, CPU_ITERATIONS)


if __name__ == "__main__":
    main()
