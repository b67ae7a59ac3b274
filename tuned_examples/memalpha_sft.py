"""Build the warm-start the Mem-α example ships: SFT of the embedded tiny model on the scripted expert.

    python tuned_examples/memalpha_sft.py                          # in full (what is shipped)
    python tuned_examples/memalpha_sft.py --steps 20 --out /tmp/x  # a short run, e.g. to try a change

The expert episodes are those of the CPU task of tuned_examples/memalpha_grpo.py with the policy answering
(answerer="policy"): each chunk's row is the expert's tool calls for it (facts as semantic items, the rules of a
labelled set or the story so far in core memory), and each question's row is the gold answer read from the memory
the expert built. So one checkpoint learns both to write the memory and to answer from one: RL starts from it as
the policy, and a frozen copy of it is the CPU answerer. It writes the checkpoint and sft_summary.json (held-out
NLL, per-call exact match, greedy reward with its 95% interval, wall time).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from memrl import sft
from memrl.algorithms.sft import SFTConfig
from memrl.learner.losses import LossConfig
from tuned_examples.common import default_model
from tuned_examples.memalpha_grpo import CPU_WORKFLOW, WARM_START, cpu_env_config

STEPS = 1500
"""Optimizer steps of the full build (32 expert calls per step)."""


def build(out: Path, steps: int, num_train_tasks: int, num_eval_tasks: int, model: str | None = None,
          keep_eval_checkpoints: bool = False) -> dict:
    """SFT `model` (default: the embedded tiny model) on the expert's calls of the CPU task; returns the summary.
    keep_eval_checkpoints also saves the weights of every evaluation to out/step_<N>."""
    model = str(model or default_model())
    config = (SFTConfig()
              .environment("memrl/MemoryStore-v0", env_config=cpu_env_config(model, answerer="policy"))
              .env_runners(workflow="memalpha", workflow_config=CPU_WORKFLOW)
              .learners(model_path=model, num_learners=2, token_budget=8192)
              .training(lr=1e-3, batch_size=32, steps=steps, steps_per_iteration=min(250, steps),
                        num_train_tasks=num_train_tasks,
                        # Each call weighs the same: a short answer row counts as much as a long row of calls.
                        loss=LossConfig(kind="sft", aggregation="seq_mean_token_mean"))
              .evaluation(evaluation_num_tasks=num_eval_tasks)
              .debugging(seed=0))
    return sft.run(config, out, keep_eval_checkpoints)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=STEPS, help="optimizer steps")
    p.add_argument("--num-train-tasks", type=int, default=3000, help="expert episodes to train on")
    p.add_argument("--num-eval-tasks", type=int, default=48, help="held-out expert episodes to evaluate on")
    p.add_argument("--out", type=Path, default=WARM_START, help="where the checkpoint goes (default: the shipped one)")
    p.add_argument("--keep-eval-checkpoints", action="store_true",
                   help="also save the weights of every evaluation to <out>/step_<N>")
    args = p.parse_args()
    build(args.out, args.steps, args.num_train_tasks, args.num_eval_tasks,
          keep_eval_checkpoints=args.keep_eval_checkpoints)


if __name__ == "__main__":
    main()
