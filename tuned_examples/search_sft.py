"""Build the warm-starts the search-agent examples start RL from: SFT of the embedded tiny model on the scripted
expert of the CPU task (tuned_examples/search_agents.py), one checkpoint per workflow.

    python tuned_examples/search_sft.py --workflow mempo            # what is shipped for MemPO
    python tuned_examples/search_sft.py --workflow mem1 --steps 20 --out /tmp/x   # a short try

Each writes <out>/<workflow>_search_sft with its sft_summary.json (held-out NLL, per-call exact match, greedy
reward with its 95% interval, wall time).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from memrl import sft
from tuned_examples.common import default_model
from tuned_examples.search_agents import CHECKPOINTS, env_config, workflow_config

STEPS = {"mem1": 400, "memsearcher": 400, "mempo": 600, "react": 400}
"""Optimizer steps of each full build (32 expert calls per step)."""


def build(workflow: str, out: Path, steps: int, num_train_tasks: int, num_eval_tasks: int) -> dict:
    """SFT the embedded tiny model on `workflow`'s expert calls of the CPU task; returns the summary."""
    model = default_model()
    config = sft.SFTConfig(env="memrl/Search-v0", env_config=env_config(), workflow=workflow,
                           workflow_config=workflow_config(workflow), model_path=model, out=str(out), steps=steps,
                           batch_size=32, lr=1e-3, num_learners=2, token_budget=8192,
                           num_train_tasks=num_train_tasks, num_eval_tasks=num_eval_tasks,
                           eval_every=min(200, steps), seed=0)
    return sft.run(config)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workflow", choices=sorted(STEPS), required=True, help="which warm-start to build")
    p.add_argument("--steps", type=int, help="optimizer steps (default: the full build's)")
    p.add_argument("--num-train-tasks", type=int, default=2000, help="expert episodes to train on")
    p.add_argument("--num-eval-tasks", type=int, default=200, help="held-out expert episodes to evaluate on")
    p.add_argument("--out", type=Path, default=CHECKPOINTS, help="directory that receives <workflow>_search_sft")
    args = p.parse_args()
    build(args.workflow, args.out / f"{args.workflow}_search_sft", args.steps or STEPS[args.workflow],
          args.num_train_tasks, args.num_eval_tasks)


if __name__ == "__main__":
    main()
