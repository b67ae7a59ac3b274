"""Build the checkpoints the Memory-R1 example ships: SFT of the embedded tiny model (after its copying stage) on the
scripted experts of the CPU task (tuned_examples/tasks/memory_r1.py), one per agent.

    python tuned_examples/warm_starts/memory_r1_sft.py --role manager  # the Memory Manager RL starts from
    python tuned_examples/warm_starts/memory_r1_sft.py --role answer   # the Answer Agent (frozen for the manager)
    python tuned_examples/warm_starts/memory_r1_sft.py --role manager --steps 20 --out /tmp/x  # a short try
    python tuned_examples/warm_starts/memory_r1_sft.py --role manager --steps 400 --init runs/x --out runs/y

--role manager: each row is one turn's call, the expert's mem0 JSON for the shown entries and the turn's facts (every
shown entry NONE, a changed fact UPDATE, a new one ADD). Its expert updates a changed fact only with chance
TEACHER_UPDATE_RATE (else it adds the new fact beside the old one), so the warm-start keeps some stale facts and the
manager stage has something to learn.

--role answer: each row is one question's answer, Memory-R1's memory distillation (the selected memory, then the
answer after **Answer:**), over banks the same imperfect expert manager wrote. Its expert answers from the most
recent entry of the asked fact only with chance TEACHER_RECENCY_RATE, else from the first shown: a stale entry then
misleads it, so the manager's updates change its exact match, and the answer stage can learn to read the
timestamps.

Each build writes the checkpoint and sft_summary.json (held-out NLL, per-call exact match, greedy reward with its 95%
interval, wall time).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from memrl.algorithms import sft
from memrl.algorithms.sft import SFTConfig
from memrl.experiment import RUNS
from memrl_tuned_examples.tasks import CHECKPOINTS
from memrl_tuned_examples.tasks.memory_r1 import (
    ANSWER_WARM_START,
    MANAGER_WARM_START,
    TEACHER_RECENCY_RATE,
    TEACHER_UPDATE_RATE,
    env_config,
)

COPYING = CHECKPOINTS / "copying"
"""Where both builds start: the embedded tiny model after the copying stage (memrl/Copy-v0; tuned_examples/
warm_starts/webshop_sft.py --workflow copying). Each reply copies names out of its prompt, which the tiny model learns
slowly from these experts alone."""
NUM_LEARNERS = 2
"""DeepSpeed ranks of every build (the shipped checkpoints were made with two)."""


@dataclass(frozen=True)
class Role:
    """One shipped checkpoint's build."""

    out: Path
    """Where the checkpoint is shipped."""
    stages: tuple[tuple[int, str], ...]
    """(optimizer steps, lr schedule) of each stage of the full build (32 expert calls per step, lr 1e-3 at its
    peak), each stage from the last one's weights with a fresh optimizer; "linear" decays lr to 0 at its last
    step."""
    eval_tasks: int
    """Held-out expert episodes the build evaluates on."""


ROLES = {"manager": Role(MANAGER_WARM_START, stages=((800, "constant"), (800, "linear")), eval_tasks=48),
         "answer": Role(ANSWER_WARM_START, stages=((300, "constant"), (700, "constant")), eval_tasks=96)}
"""The builds by --role: the Memory Manager's warm-start (its first stage, at constant lr, learns the reply's JSON and
copies the people's names from the facts; the decayed second copies their homes and employers too) and the Answer
Agent (its first stage learns the reply's frame; it copies the question's person and an entry's value only some
hundred steps into the second)."""


def config(steps: int, num_train_tasks: int, num_eval_tasks: int, role: str = "manager",
           model: str | None = None, lr_schedule: str = "constant") -> SFTConfig:
    """The SFT of `model` (default: COPYING, the tiny model that learned to copy text) on the expert episodes of the
    CPU task for `role` (a ROLES name)."""
    if role not in ROLES:
        raise ValueError(f"role must be one of {sorted(ROLES)}, got {role!r}")
    teacher = {"expert_update_rate": TEACHER_UPDATE_RATE, "expert_recency_rate": TEACHER_RECENCY_RATE}
    return (SFTConfig()
            .environment("memrl/MemoryBank-v0", env_config=env_config(role, **teacher))
            .env_runners(workflow="last_observation")
            # Absolute: the learner actors do not share this process's working directory.
            .learners(model_path=str(Path(model or COPYING).resolve()), num_learners=NUM_LEARNERS, token_budget=8192)
            .training(lr=1e-3, lr_schedule=lr_schedule, lr_decay_steps=steps if lr_schedule != "constant" else 0,
                      batch_size=32, steps=steps, steps_per_iteration=min(100, steps),
                      num_train_tasks=num_train_tasks)
            .evaluation(evaluation_num_tasks=num_eval_tasks)
            .debugging(seed=0))


def build(out: Path, steps: int, num_train_tasks: int, num_eval_tasks: int, role: str = "manager",
          model: str | None = None, lr_schedule: str = "constant") -> dict:
    """Run `config`'s SFT and write the checkpoint to `out`; returns the summary."""
    return sft.run(config(steps, num_train_tasks, num_eval_tasks, role, model, lr_schedule), out)


def build_all(role: str, out: Path, num_train_tasks: int, num_eval_tasks: int) -> dict:
    """Run the role's stages in order (each from the previous one's weights, the first from COPYING) and write the
    last to `out`; its summary carries the earlier stages' summaries."""
    stages, model = ROLES[role].stages, None
    for i, (steps, schedule) in enumerate(stages):
        stage_out = out if i == len(stages) - 1 else RUNS / "memory_r1_sft" / f"{role}_stage{i + 1}"
        summary = build(stage_out.resolve(), steps, num_train_tasks, num_eval_tasks, role, model, schedule)
        model = str(stage_out.resolve())
    return summary


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--role", choices=sorted(ROLES), default="manager",
                   help="the Memory Manager's warm-start or the Answer Agent")
    p.add_argument("--steps", type=int, help="one stage of this many optimizer steps instead of the full build "
                   "(Role.stages)")
    p.add_argument("--init", help="checkpoint to start from (with --steps; default: COPYING)")
    p.add_argument("--lr-schedule", choices=("constant", "linear", "cosine"), default="constant",
                   help="learning rate over the stage (with --steps)")
    p.add_argument("--num-train-tasks", type=int, default=3000, help="expert episodes to train on")
    p.add_argument("--num-eval-tasks", type=int,
                   help="held-out expert episodes to evaluate on (default: the role's Role.eval_tasks)")
    p.add_argument("--out", type=Path, help="where the checkpoint goes (default: the role's shipped one)")
    args = p.parse_args()
    spec = ROLES[args.role]
    if args.init and not args.steps:
        p.error("--init starts a single stage: give --steps too")
    out, num_eval_tasks = args.out or spec.out, args.num_eval_tasks or spec.eval_tasks
    if args.steps:
        build(out, args.steps, args.num_train_tasks, num_eval_tasks, args.role, args.init, args.lr_schedule)
    else:
        build_all(args.role, out, args.num_train_tasks, num_eval_tasks)


if __name__ == "__main__":
    main()
