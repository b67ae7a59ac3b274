"""Build the warm-start checkpoints the MemAgent example ships: SFT of the embedded tiny model on scripted experts.

    python tuned_examples/memagent_sft.py                          # both, in full (what is shipped)
    python tuned_examples/memagent_sft.py --workflow memagent      # only the MemAgent policy
    python tuned_examples/memagent_sft.py --steps 20 --out /tmp/x  # a short run, e.g. to try a change

`memagent` (what RL starts from) learns MemAgent's calls on the CPU task: copy the question's relevant facts
from each chunk into the memory, then answer from memory. `full_context` (the baseline of the length
evaluation) learns to answer from the whole document in one call. Each writes its checkpoint and
sft_summary.json (held-out NLL, per-call exact match, greedy accuracy with its 95% interval, wall time).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from memrl import sft
from memrl.algorithms.sft import SFTConfig
from tuned_examples.common import default_model
from tuned_examples.memagent_dapo import CHECKPOINTS, cpu_task

STEPS = {"memagent": 900, "full_context": 600}
"""Optimizer steps of each full build (64 expert calls per step)."""


def build(workflow: str, out: Path, steps: int, num_train_tasks: int, num_eval_tasks: int,
          model: str | None = None) -> dict:
    """SFT `model` (default: the embedded tiny model) on `workflow`'s expert calls of the CPU task; returns the
    summary."""
    model = str(model or default_model())
    env_config, workflow_config = cpu_task(workflow, tokenizer_path=model)
    config = (SFTConfig()
              .environment("memrl/ChunkStream-v0", env_config=env_config)
              .env_runners(workflow=workflow, workflow_config=workflow_config)
              .learners(model_path=model, num_learners=2, token_budget=4096)
              .training(lr=1e-3, batch_size=64, steps=steps, steps_per_iteration=min(150, steps),
                        num_train_tasks=num_train_tasks)
              .evaluation(evaluation_num_tasks=num_eval_tasks)
              .debugging(seed=0))
    return sft.run(config, out)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workflow", choices=sorted(STEPS), action="append",
                   help="which warm-start to build (repeatable; default: both)")
    p.add_argument("--steps", type=int, help="optimizer steps (default: the full build's)")
    p.add_argument("--num-train-tasks", type=int, default=4000, help="expert episodes to train on")
    p.add_argument("--num-eval-tasks", type=int, default=200, help="held-out expert episodes to evaluate on")
    p.add_argument("--out", type=Path, default=CHECKPOINTS,
                   help="directory that receives one sub-directory per workflow (default: the shipped ones)")
    args = p.parse_args()
    for workflow in args.workflow or sorted(STEPS):
        build(workflow, args.out / f"{workflow}_sft", args.steps or STEPS[workflow], args.num_train_tasks,
              args.num_eval_tasks)


if __name__ == "__main__":
    main()
