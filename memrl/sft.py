"""SFT warm-starts from the command line: flags onto SFTConfig (memrl.algorithms.sft), train, write the model.

    python -m memrl.sft --env memrl/Echo-v0 --workflow last_observation --model runs/tiny-model \\
        --out runs/echo-sft --steps 1000

`run(config, out)` is the same from Python: it trains until training.steps, writes the Hugging Face checkpoint
and sft_summary.json (the config, the evaluation curve, the training NLL per step, times) to `out`.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from pathlib import Path

from tqdm import tqdm

from memrl.algorithms.sft import SFTConfig
from memrl.checkpoints import portable
from memrl.learner.learner_config import LR_SCHEDULES

SUMMARY_FILE = "sft_summary.json"
"""Written next to the checkpoint: the run's config and out, evaluation curve, final figures and wall time."""


def run(config: SFTConfig, out: str | Path, keep_eval_checkpoints: bool = False) -> dict:
    """Build `config` (starting Ray if needed), train all its steps, write the checkpoint and SUMMARY_FILE to
    `out`; keep_eval_checkpoints also saves the weights of every evaluation to out/step_<N>. Returns the summary.

    A run that starts from a checkpoint an SFT run wrote carries that run's summary (and the ones it carried, oldest
    first) under "earlier_stages", so the summary states the whole training budget."""
    start = time.perf_counter()
    base = Path(config.learners_cfg.model_path) / SUMMARY_FILE
    earlier = json.loads(base.read_text()) if base.is_file() else None
    out = Path(out).absolute()  # learner actors do not share this process's working directory
    algo = config.build()
    try:
        bar = tqdm(total=config.training_cfg.steps, desc="sft", unit="step",
                   disable=not config.debugging_cfg.progress_bars)
        done = False
        while not done:
            result = algo.train()
            done = result["done"]
            bar.update(int(result["learners"]["optimizer_steps"]))
            ev = result["evaluation"]
            bar.set_postfix(nll=f"{result['learners']['nll']:.3f}", eval_nll=f"{ev['eval_nll']:.3f}",
                            exact=f"{ev['call_exact_match']:.2f}")
            if keep_eval_checkpoints and not done:
                algo.save_model(out / f"step_{result['steps']}")
        bar.close()
        algo.save_model(out)
        summary = {**algo.summary(), "out": str(out), "wall_s": time.perf_counter() - start}
        if earlier is not None:
            summary["earlier_stages"] = [*earlier.pop("earlier_stages", []), earlier]
    finally:
        algo.stop()
    (out / SUMMARY_FILE).write_text(json.dumps(portable(summary), indent=1))
    for name in ("initial", "final"):
        m = summary[name]
        print(f"{name} (step {m['step']}): held-out NLL {m['eval_nll']:.4f}, per-call exact match "
              f"{m['call_exact_match']:.3f}, greedy reward {m['reward_mean']:.3f} "
              f"[{m['reward_ci_low']:.3f}, {m['reward_ci_high']:.3f}]")
    print(f"wrote {out} in {summary['wall_s']:.0f} s")
    return summary


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


def parser() -> argparse.ArgumentParser:
    """The command's flags; each names the SFTConfig field it sets."""
    d = SFTConfig()
    train, optimizer = d.training_cfg, d.training_cfg.optimizer
    p = argparse.ArgumentParser(description="SFT warm-start on scripted-expert episodes (memrl.algorithms.sft).")
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


def main(argv: Sequence[str] | None = None) -> dict:
    """Command-line entry point."""
    p = parser()
    args = p.parse_args(argv)
    try:
        config = config_from_args(args)
    except ValueError as exc:
        p.error(str(exc))
    return run(config, args.out, args.keep_eval_checkpoints)


if __name__ == "__main__":
    main()
