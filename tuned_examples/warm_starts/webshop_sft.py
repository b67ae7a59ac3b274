"""Build the warm-starts the WebShop examples start RL from: SFT of the embedded tiny model, first on in-context
copying (memrl/Copy-v0), then on the scripted expert of the CPU task (tuned_examples/tasks/webshop.py), one
checkpoint per workflow.

    python tuned_examples/warm_starts/webshop_sft.py --workflow copying  # the copying stage both warm-starts start from
    python tuned_examples/warm_starts/webshop_sft.py --workflow webshop_mem1  # MEM1's warm-start on WebShop
    python tuned_examples/warm_starts/webshop_sft.py --workflow webshop_react  # the ReAct baselines' warm-start
    python tuned_examples/warm_starts/webshop_sft.py --workflow webshop_mem1 --steps 20 --out /tmp/x  # a short try

Every WebShop action copies from the page: a product id (ten random characters), an option value, the goal's
words. The tiny model learns copying slowly from the few such characters in WebShop's expert episodes (800 steps of
them: 12 of 30 product ids right) and fast from memrl/Copy-v0's dense examples (300 WebShop steps after the copying
stage: 22 of 30), so the copying stage comes first: short texts, where copying is found, then page-length ones.

The expert searches the goal's attributes and product type, opens the top hit, chooses
the options the goal asks for, each with probability EXPERT_RECALL, and buys. An expert that skips options leaves
its student the choice RL can improve on: the options the buyer is paid for. Expert episodes come from the training
goals, held-out ones from the validation goals. Writes <out>/<workflow>_sft with its sft_summary.json (held-out
NLL, per-call exact match, greedy reward with its 95% interval, wall time).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from memrl.algorithms import sft
from memrl.algorithms.sft import SFTConfig
from memrl.experiment import RUNS, default_model
from memrl_tuned_examples.tasks.webshop import CHECKPOINTS, MAX_TURNS, env_config, workflow_config

NUM_LEARNERS = 2
"""DeepSpeed ranks of every build (the shipped checkpoints were made with two; another count sums the same gradients
in another order, so a rebuild would differ in its last digits)."""
EXPERT_RECALL = 0.5
"""Share of the goal's options the imitated expert chooses."""
STEPS = 600
"""Optimizer steps of a full build (32 expert calls each, lr 1e-3 constant)."""
NUM_TRAIN_TASKS = 1000
"""Expert episodes trained on (seeds 0 .. 999 over the training goals)."""
BUILDS = ("copying", "webshop_mem1", "webshop_react")
"""The checkpoints a full build writes, in order (truncated ReAct starts from ReAct's)."""
COPY_STAGES = ((300, 128, [{"max_chars": 24}]),
               (300, 32, [{"min_chars": 24, "max_chars": 200}, {"min_chars": 200, "max_chars": 900}]))
"""The copying stage's runs, in order, each from the previous one's weights: (optimizer steps, rows per step, text
lengths of its episodes taken in turn). Short texts first, where the tiny model finds copying within a few hundred
steps (mixed in with long ones from the start, 300 steps did not find it), then up to a result page's length."""
COPYING = CHECKPOINTS / "copying"
"""The copying stage's checkpoint, where the WebShop warm-starts start by default."""


def build_copying(out: Path, stages=COPY_STAGES, num_train_tasks: int = 6000, num_eval_tasks: int = 200,
                  work: Path = RUNS / "webshop_sft") -> dict:
    """SFT of the embedded tiny model, freshly initialised, on memrl/Copy-v0 through `stages`; writes the
    checkpoint to `out` (earlier stages to <work>/<out name>_stage<i>) and returns the last stage's summary."""
    model = Path(default_model())
    for i, (steps, batch_size, lengths) in enumerate(stages, 1):
        config = (SFTConfig()
                  .environment("memrl/Copy-v0", env_config={"max_chars": 900})
                  .env_runners(workflow="last_observation", max_calls_per_episode=1)
                  .learners(model_path=str(model.resolve()), num_learners=NUM_LEARNERS, token_budget=8192)
                  .training(lr=1e-3, batch_size=batch_size, steps=steps, steps_per_iteration=steps,
                            num_train_tasks=num_train_tasks, task_options=lengths)
                  .evaluation(evaluation_num_tasks=num_eval_tasks)
                  .debugging(seed=0))
        model = out if i == len(stages) else work / f"{out.name}_stage{i}"
        summary = sft.run(config, model.resolve())
    return summary


def config(workflow: str, steps: int = STEPS, num_train_tasks: int = NUM_TRAIN_TASKS, num_eval_tasks: int = 200,
           recall: float = EXPERT_RECALL, init: str | Path | None = None) -> SFTConfig:
    """SFT of `workflow` on the CPU task's expert calls from `init` (default: the copying stage, COPYING)."""
    init = Path(init or COPYING)
    if not (init / "config.json").exists():
        raise FileNotFoundError(f"{init} holds no checkpoint; build the copying stage first: python "
                                "tuned_examples/warm_starts/webshop_sft.py --workflow copying")
    return (SFTConfig()
            .environment("memrl/WebShop-v0", env_config=env_config("train", recall))
            .env_runners(workflow=workflow, workflow_config=workflow_config(workflow),
                         max_calls_per_episode=MAX_TURNS)
            # Absolute paths: the learner actors do not share this process's working directory.
            .learners(model_path=str(init.resolve()), num_learners=NUM_LEARNERS, token_budget=8192)
            .training(lr=1e-3, batch_size=32, steps=steps, steps_per_iteration=min(300, steps),
                      num_train_tasks=num_train_tasks)
            .evaluation(evaluation_num_tasks=num_eval_tasks, evaluation_env_config={"split": "val"})
            .debugging(seed=0))


def build(workflow: str, out: Path, steps: int = STEPS, num_train_tasks: int = NUM_TRAIN_TASKS,
          num_eval_tasks: int = 200, recall: float = EXPERT_RECALL, init: str | Path | None = None) -> dict:
    """`config`'s SFT, written to `out`; returns the summary."""
    return sft.run(config(workflow, steps, num_train_tasks, num_eval_tasks, recall, init), out.resolve())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workflow", choices=BUILDS, required=True, help="which checkpoint to build")
    p.add_argument("--steps", type=int, help=f"optimizer steps (default {STEPS}; copying: per stage, default 300)")
    p.add_argument("--num-train-tasks", type=int, default=NUM_TRAIN_TASKS, help="expert episodes to train on")
    p.add_argument("--recall", type=float, default=EXPERT_RECALL, help="share of options the expert chooses")
    p.add_argument("--init", help="checkpoint to start from (default: the copying stage)")
    p.add_argument("--num-eval-tasks", type=int, default=200, help="held-out expert episodes (validation goals)")
    p.add_argument("--out", type=Path, default=CHECKPOINTS, help="directory that receives <workflow>_sft")
    args = p.parse_args()
    if args.workflow == "copying":
        stages = COPY_STAGES if args.steps is None else [(args.steps, b, lengths) for _, b, lengths in COPY_STAGES]
        build_copying(args.out / "copying", stages, num_eval_tasks=args.num_eval_tasks)
    else:
        build(args.workflow, args.out / f"{args.workflow}_sft", args.steps or STEPS, args.num_train_tasks,
              args.num_eval_tasks, args.recall, args.init)


if __name__ == "__main__":
    main()
