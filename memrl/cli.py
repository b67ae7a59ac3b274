"""memrl's command line (`memrl ...`, or `python -m memrl ...`).

    memrl train memagent_dapo --iterations 2     # a tuned example, with its own flags
    memrl eval locomo --data locomo10.json       # memory policies on a benchmark's released file
    memrl sft --env memrl/Echo-v0 --workflow last_observation --model runs/tiny-model \\
        --out runs/echo-sft --steps 1000        # an SFT warm-start from flags

`memrl train` runs the examples registered under the "memrl.examples" entry points, by name: memrl's tuned
examples, and those of any installed package that registers its own. `memrl eval` runs the evaluations registered
under "memrl.evaluations" the same way: longmemeval, locomo and memoryagentbench (memrl_tuned_examples.analyses.
benchmark_eval). `memrl sft` maps its flags onto SFTConfig
(memrl.algorithms.sft), trains, and writes the model and sft_summary.json.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path

from memrl.algorithms.sft import SFTConfig, run
from memrl.learner.learner_config import LR_SCHEDULES

EXAMPLES_GROUP = "memrl.examples"
"""The entry-point group of runnable examples: name = "package.module:main"."""
EVALUATIONS_GROUP = "memrl.evaluations"
"""The entry-point group of evaluations (`memrl eval NAME`): name = "package.module:function"."""


def examples(group: str = EXAMPLES_GROUP) -> dict[str, EntryPoint]:
    """The entry points registered under `group`, by name."""
    return {entry.name: entry for entry in entry_points(group=group)}


def _run_registered(command: str, group: str, what: str, argv: Sequence[str]) -> object:
    """`memrl COMMAND NAME [flags]`: the entry point NAME of `group`, called with its own flags."""
    found = examples(group)
    if not argv or argv[0].startswith("-"):
        print(f"usage: memrl {command} NAME [flags]; NAME is one of: {', '.join(sorted(found))}", file=sys.stderr)
        raise SystemExit(2 if not argv or argv[0] not in ("-h", "--help") else 0)
    name, rest = argv[0], list(argv[1:])
    if name not in found:
        print(f"memrl {command}: no {what} named {name!r}; the registered ones ({group} entry points): "
              f"{', '.join(sorted(found))}", file=sys.stderr)
        raise SystemExit(2)
    sys.argv = [f"memrl {command} {name}", *rest]  # the entry point parses its own flags
    return found[name].load()()


def train(argv: Sequence[str]) -> object:
    """`memrl train NAME [flags]`: the example's main() with its own flags (its --help lists them)."""
    return _run_registered("train", EXAMPLES_GROUP, "example", argv)


def evaluate(argv: Sequence[str]) -> object:
    """`memrl eval NAME [flags]`: a registered evaluation with its own flags (its --help lists them)."""
    return _run_registered("eval", EVALUATIONS_GROUP, "evaluation", argv)


def _json(kind: type, what: str):
    def parse(text: str):
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            raise argparse.ArgumentTypeError(f"{text!r} is not valid JSON ({exc})") from exc
        if not isinstance(value, kind) or (kind is list and not all(isinstance(v, dict) for v in value)):
            raise argparse.ArgumentTypeError(f"{text!r} must be {what}")
        return value

    return parse


def sft_parser() -> argparse.ArgumentParser:
    """`memrl sft`'s flags; each names the SFTConfig field it sets."""
    d = SFTConfig()
    train, optimizer = d.training_cfg, d.training_cfg.optimizer
    p = argparse.ArgumentParser(prog="memrl sft",
                                description="SFT warm-start on scripted-expert episodes (memrl.algorithms.sft).")
    p.add_argument("--model", required=True, help="learners.model_path: local Hugging Face checkpoint to start from")
    p.add_argument("--out", required=True, help="directory to write the checkpoint and sft_summary.json to")
    p.add_argument("--env", default=d.environment_cfg.env, help="environment: registered gymnasium id whose "
                   "unwrapped env implements expert_action()")
    p.add_argument("--env-config", type=_json(dict, "a JSON object"), default={},
                   help="environment env_config: keyword arguments for gymnasium.make (a JSON object)")
    p.add_argument("--workflow", default=d.env_runners_cfg.workflow,
                   help="env_runners.workflow: a registered workflow that implements expert_response(action)")
    p.add_argument("--workflow-config", type=_json(dict, "a JSON object"), default={},
                   help="env_runners.workflow_config: keyword arguments for the workflow (a JSON object)")
    p.add_argument("--task-options", type=_json(list, "a JSON list of objects"), default=[],
                   help="training.task_options: reset options taken in turn by env seed (a JSON list of objects)")
    p.add_argument("--num-train-tasks", type=int, default=train.num_train_tasks, help="training.num_train_tasks")
    p.add_argument("--probe-rows", action="store_true",
                   help="training.probe_rows: also train on each episode's last memory probe (workflow mempo)")
    p.add_argument("--num-eval-tasks", type=int, default=d.evaluation_cfg.evaluation_num_tasks,
                   help="evaluation.evaluation_num_tasks: held-out expert episodes, on the seeds after training's")
    p.add_argument("--batch-size", type=int, default=train.batch_size, help="training.batch_size: rows per step")
    p.add_argument("--steps", type=int, default=train.steps, help="training.steps: optimizer steps")
    p.add_argument("--eval-every", type=int, default=train.steps_per_iteration,
                   help="training.steps_per_iteration: evaluate every this many steps (and before and after)")
    p.add_argument("--lr", type=float, default=optimizer.lr, help="training.lr: AdamW peak learning rate")
    p.add_argument("--lr-schedule", choices=LR_SCHEDULES, default=optimizer.lr_schedule,
                   help="training.lr_schedule: linear and cosine decay to 0 at the last step (lr_decay_steps = steps)")
    p.add_argument("--lr-warmup-steps", type=int, default=optimizer.lr_warmup_steps, help="training.lr_warmup_steps")
    p.add_argument("--num-learners", type=int, default=d.learners_cfg.num_learners, help="learners.num_learners")
    p.add_argument("--token-budget", type=int, default=d.learners_cfg.token_budget,
                   help="learners.token_budget: most padded tokens in one forward pass")
    p.add_argument("--seed", type=int, default=d.debugging_cfg.seed, help="debugging.seed: env seeds count up "
                   "from it; it also seeds the batch draws and the learners")
    p.add_argument("--keep-eval-checkpoints", action="store_true",
                   help="also save the weights of every evaluation to <out>/step_<N>")
    return p


def config_from_args(args: argparse.Namespace) -> SFTConfig:
    """The SFTConfig the parsed flags describe (validated)."""
    config = (SFTConfig()
              .environment(args.env, env_config=args.env_config)
              .env_runners(workflow=args.workflow, workflow_config=args.workflow_config)
              .learners(model_path=str(Path(args.model).absolute()), num_learners=args.num_learners,
                        token_budget=args.token_budget)
              .training(lr=args.lr, lr_schedule=args.lr_schedule, lr_warmup_steps=args.lr_warmup_steps,
                        lr_decay_steps=args.steps if args.lr_schedule != "constant" else 0, batch_size=args.batch_size,
                        steps=args.steps, steps_per_iteration=args.eval_every,
                        num_train_tasks=args.num_train_tasks, task_options=args.task_options,
                        probe_rows=args.probe_rows)
              .evaluation(evaluation_num_tasks=args.num_eval_tasks)
              .debugging(seed=args.seed))
    config.validate()
    return config


def sft(argv: Sequence[str]) -> dict:
    """`memrl sft [flags]`: train the warm-start the flags describe and write it to --out."""
    p = sft_parser()
    args = p.parse_args(argv)
    try:
        config = config_from_args(args)
    except ValueError as exc:
        p.error(str(exc))
    return run(config, args.out, args.keep_eval_checkpoints)


COMMANDS = {"train": train, "eval": evaluate, "sft": sft}


def main(argv: Sequence[str] | None = None) -> object:
    """The `memrl` command."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        print(__doc__.split("\n\n", 1)[1].rstrip(), file=sys.stderr)
        if argv and argv[0] not in ("-h", "--help"):
            print(f"\nmemrl: no command {argv[0]!r}; the commands: {', '.join(COMMANDS)}", file=sys.stderr)
        raise SystemExit(0 if argv and argv[0] in ("-h", "--help") else 2)
    return COMMANDS[argv[0]](argv[1:])
