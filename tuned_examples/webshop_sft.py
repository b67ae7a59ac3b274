"""Build the warm-starts the WebShop examples start RL from: SFT of the embedded tiny model on the scripted expert of
the CPU task (tuned_examples/webshop_agents.py), one checkpoint per workflow.

    python tuned_examples/webshop_sft.py --workflow webshop_mem1     # MEM1's warm-start on WebShop
    python tuned_examples/webshop_sft.py --workflow webshop_react    # the ReAct baselines' warm-start
    python tuned_examples/webshop_sft.py --workflow webshop_mem1 --steps 20 --out /tmp/x   # a short try

The expert searches the goal's attributes and product type, opens the goal's product (or the first hit), chooses
the options the goal asks for, each with probability EXPERT_RECALL, and buys. An expert that skips options leaves
its student the choice RL can improve on: the options the buyer is paid for. Expert episodes come from the training
goals, held-out ones from the validation goals. Writes <out>/<workflow>_sft with its sft_summary.json (held-out
NLL, per-call exact match, greedy reward with its 95% interval, wall time).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from memrl import sft
from memrl.algorithms.sft import SFTConfig
from tuned_examples.common import default_model
from tuned_examples.webshop_agents import CHECKPOINTS, MAX_TURNS, env_config, workflow_config

EXPERT_RECALL = 0.5
"""Share of the goal's options the imitated expert chooses."""
STEPS = 600
"""Optimizer steps of a full build (32 expert calls each, lr 1e-3 constant)."""
NUM_TRAIN_TASKS = 1000
"""Expert episodes trained on (seeds 0 .. 999 over the training goals)."""
BUILDS = ("webshop_mem1", "webshop_react")
"""The warm-starts a full build writes (truncated ReAct starts from ReAct's)."""


def build(workflow: str, out: Path, steps: int = STEPS, num_train_tasks: int = NUM_TRAIN_TASKS,
          num_eval_tasks: int = 200, recall: float = EXPERT_RECALL, init: str | Path | None = None) -> dict:
    """SFT of `workflow` on the CPU task's expert calls from `init` (default: the embedded tiny model, freshly
    initialised); writes the checkpoint to `out` and returns the summary."""
    config = (SFTConfig()
              .environment("memrl/WebShop-v0", env_config=env_config("train", recall))
              .env_runners(workflow=workflow, workflow_config=workflow_config(workflow),
                           max_calls_per_episode=MAX_TURNS)
              # Absolute paths: the learner actors do not share this process's working directory.
              .learners(model_path=str(Path(init or default_model()).resolve()), num_learners=2, token_budget=8192)
              .training(lr=1e-3, batch_size=32, steps=steps, steps_per_iteration=min(300, steps),
                        num_train_tasks=num_train_tasks)
              .evaluation(evaluation_num_tasks=num_eval_tasks, evaluation_env_config={"split": "val"})
              .debugging(seed=0))
    return sft.run(config, out.resolve())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workflow", choices=BUILDS, required=True, help="which warm-start to build")
    p.add_argument("--steps", type=int, default=STEPS, help="optimizer steps")
    p.add_argument("--num-train-tasks", type=int, default=NUM_TRAIN_TASKS, help="expert episodes to train on")
    p.add_argument("--recall", type=float, default=EXPERT_RECALL, help="share of options the expert chooses")
    p.add_argument("--init", help="checkpoint to start from (default: the embedded tiny model)")
    p.add_argument("--num-eval-tasks", type=int, default=200, help="held-out expert episodes (validation goals)")
    p.add_argument("--out", type=Path, default=CHECKPOINTS, help="directory that receives <workflow>_sft")
    args = p.parse_args()
    build(args.workflow, args.out / f"{args.workflow}_sft", args.steps, args.num_train_tasks, args.num_eval_tasks,
          args.recall, args.init)


if __name__ == "__main__":
    main()
