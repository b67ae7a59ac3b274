"""Build the warm-starts the search-agent examples start RL from: SFT of the embedded tiny model on the scripted
expert of the CPU task (tuned_examples/tasks/search.py), one checkpoint per workflow.

    python tuned_examples/warm_starts/search_sft.py --workflow mempo  # what is shipped for MemPO
    python tuned_examples/warm_starts/search_sft.py --workflow mempo --multi  # for Table 1: 1, 2, 4 and 8 questions
    python tuned_examples/warm_starts/search_sft.py --workflow mem1 --steps 20 --out /tmp/x  # a short try
    python tuned_examples/warm_starts/search_sft.py --workflow react --steps 400 --objectives 1 2 3 4 \
        --init tuned_examples/checkpoints/react_search_sft --out runs/mixed     # one stage on mixed task sizes
    python tuned_examples/warm_starts/search_sft.py --workflow mem1 --steps 600 --objectives 1 2 4 8 --expert-notes \
        --table-task --init tuned_examples/checkpoints/mem1_search_sft --out runs/short   # a third of --multi's stage

A full build runs the workflow's STAGES in order, each continuing from the last one's weights with a fresh
optimizer and more expert episodes. Each writes <out>/<workflow>_search_sft with its sft_summary.json (held-out
NLL, per-call exact match, greedy reward with its 95% interval, wall time; earlier stages' summaries under
"earlier_stages", as memrl.algorithms.sft.run records them). --multi continues the shipped <workflow>_search_sft with
the MULTI stage and writes <out>/<workflow>_multi_search_sft, the policy search_eval.py measures.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from memrl.algorithms import sft
from memrl.algorithms.sft import SFTConfig
from memrl.experiment import RUNS, default_model
from memrl_tuned_examples.tasks.search import (
    CHECKPOINTS,
    NUM_OBJECTIVES,
    env_config,
    table_env_config,
    warm_start,
    workflow_config,
)


@dataclass(frozen=True)
class Stage:
    """One SFT run of a warm-start build."""

    steps: int
    """Optimizer steps (32 expert calls each, lr 1e-3 at its peak)."""
    num_train_tasks: int
    """Expert episodes on seeds 0 .. num_train_tasks - 1; held-out episodes come from the next seeds."""
    objectives: tuple[int, ...] = (NUM_OBJECTIVES,)
    """Questions per episode, taken in turn by seed (each with the CPU task's turn budget for its count): more
    than one count teaches a policy to search for every question of a task, whatever their number."""
    probe_rows: bool = False
    """Also train on each episode's memory probe (SFTTrainingConfig.probe_rows; MemPO's workflow only)."""
    expert_notes: bool = False
    """The expert's memory is one note per answered question and the question it works on
    (memrl_envs.search.SearchConfig.expert_notes: `Q1 Kolm` / `Q2: Who founded the company Drexex?`, about 6 tokens per
    answered question), not the passages it read (about 25 tokens each): a 64-token memory then holds 8 questions'
    answers instead of about 2."""
    table_task: bool = False
    """Questions of MEM1's Table-1 task (search_agents.table_env_config: one hop each) instead of the RL examples'
    even mix of one- and two-hop questions."""
    lr_schedule: str = "constant"
    """training.lr_schedule over the stage: "linear" or "cosine" decay lr 1e-3 to 0 at its last step."""


NUM_LEARNERS = 2
"""DeepSpeed ranks of every build (the shipped checkpoints were made with two; another count sums the same gradients
in another order, so a rebuild would differ in its last digits)."""
MULTI = Stage(1800, 2000, (1, 2, 4, 8), expert_notes=True, table_task=True, lr_schedule="linear")
"""The stage that takes a shipped two-question warm-start to Table 1's task, one-hop questions 1, 2, 4 and 8 at a
time (--multi): a policy trained on two questions alone answers two questions whatever it is asked, so MEM1's
Table 1 (1 to 16 questions, search_eval.py) evaluates these instead. The memory agents' expert keeps one note per
answered question, so 64 tokens hold what 8 questions need; every workflow gets the same steps x batch and the same
schedule; the rate decays to 0 over the stage, which answered more questions at 4 and 8 than a rate held constant
(docs/methods/search.md)."""

STAGES = {
    "mem1": (Stage(400, 2000), Stage(800, 4000)),
    "memsearcher": (Stage(400, 2000), Stage(800, 4000)),
    "mempo": (Stage(600, 2000), Stage(800, 4000), Stage(200, 4000, probe_rows=True)),
    "react": (Stage(400, 2000),),
    "resum": (Stage(400, 2000, expert_notes=True),),
}
"""Stages of each full build. The loss was still falling fast when the first stages ended, so the second ones go
on with twice the episodes. MemPO's third stage adds its memory probe (an answer right after the questions and a
memory): without it the warm-start gives the gold answers so little probability there that the memory advantage is
mostly noise (docs/methods/search.md). ReSum's expert summarizes with the env's notes (one line per answered
question and the question it works on), which a 64-token summary holds whatever the number of searches."""


def config(workflow: str, stage: Stage, num_eval_tasks: int, init: str | Path | None = None) -> SFTConfig:
    """One SFT stage on `workflow`'s expert calls of the CPU task, from `init` (default: the embedded tiny model,
    freshly initialised)."""
    # Absolute paths: the learner actors do not share this process's working directory.
    task_options = [{"num_objectives": n, "max_turns": env_config(n)["max_turns"]} for n in stage.objectives]
    task = table_env_config if stage.table_task else env_config
    env = {**task(max(stage.objectives)), **({"expert_notes": True} if stage.expert_notes else {})}
    return (SFTConfig()
            .environment("memrl/Search-v0", env_config=env)
            .env_runners(workflow=workflow, workflow_config=workflow_config(workflow))
            .learners(model_path=str(Path(init or default_model()).resolve()), num_learners=NUM_LEARNERS,
                      token_budget=8192)
            .training(lr=1e-3, lr_schedule=stage.lr_schedule,
                      lr_decay_steps=stage.steps if stage.lr_schedule != "constant" else 0, batch_size=32,
                      steps=stage.steps, steps_per_iteration=min(400, stage.steps),
                      num_train_tasks=stage.num_train_tasks,
                      task_options=task_options if len(stage.objectives) > 1 else [], probe_rows=stage.probe_rows)
            .evaluation(evaluation_num_tasks=num_eval_tasks)
            .debugging(seed=0))


def build(workflow: str, out: Path, stage: Stage, num_eval_tasks: int, init: str | Path | None = None) -> dict:
    """`config`'s SFT stage, written to `out`; returns the summary."""
    return sft.run(config(workflow, stage, num_eval_tasks, init), out.resolve())


def build_all(workflow: str, out: Path, stages: tuple[Stage, ...], num_eval_tasks: int) -> dict:
    """Run `stages` in order (each from the previous one's weights) and write the last to `out`; its summary
    carries the earlier stages' summaries."""
    init = None
    for i, stage in enumerate(stages):
        stage_out = out if i == len(stages) - 1 else RUNS / "search_sft" / f"{workflow}_stage{i + 1}"
        summary = build(workflow, stage_out, stage, num_eval_tasks, init)
        init = stage_out
    return summary


def build_multi(workflow: str, out: Path, num_eval_tasks: int, stage: Stage = MULTI, base: Path | None = None) -> dict:
    """`stage` (default MULTI) from the checkpoint `base` (default: the shipped <workflow>_search_sft), written to
    `out`; its summary carries every earlier stage's."""
    base = base or warm_start(workflow)
    return build(workflow, out, stage, num_eval_tasks, init=str(base))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workflow", choices=sorted(STAGES), required=True, help="which warm-start to build")
    p.add_argument("--multi", action="store_true",
                   help="build <workflow>_multi_search_sft: the shipped warm-start trained on 1, 2, 4 and 8 questions")
    p.add_argument("--steps", type=int, help="one stage of this many optimizer steps instead of the full build")
    p.add_argument("--num-train-tasks", type=int, default=2000, help="expert episodes to train on (with --steps)")
    p.add_argument("--objectives", type=int, nargs="+", default=[NUM_OBJECTIVES],
                   help="questions per expert episode, several counts taken in turn (with --steps)")
    p.add_argument("--probe-rows", action="store_true",
                   help="also train on each episode's memory probe (with --steps; --workflow mempo)")
    p.add_argument("--expert-notes", action="store_true",
                   help="the expert's memory is a note per answered question (with --steps; Stage.expert_notes)")
    p.add_argument("--table-task", action="store_true",
                   help="one-hop questions, as in MEM1's Table 1 (with --steps; Stage.table_task)")
    p.add_argument("--lr-schedule", choices=("constant", "linear", "cosine"), default="constant",
                   help="learning rate over the stage (with --steps; Stage.lr_schedule)")
    p.add_argument("--init", help="checkpoint to start from (with --steps; default: the embedded tiny model)")
    p.add_argument("--num-eval-tasks", type=int, default=200, help="held-out expert episodes to evaluate on")
    p.add_argument("--out", type=Path, default=CHECKPOINTS,
                   help="directory that receives <workflow>_search_sft (with --multi: <workflow>_multi_search_sft)")
    args = p.parse_args()
    out = args.out / f"{args.workflow}_search_sft"
    if args.multi:
        if args.steps or args.init:
            p.error("--multi runs the MULTI stage from the shipped warm-start; leave out --steps and --init")
        build_multi(args.workflow, args.out / f"{args.workflow}_multi_search_sft", args.num_eval_tasks)
    elif args.steps:
        stage = Stage(args.steps, args.num_train_tasks, tuple(args.objectives), args.probe_rows, args.expert_notes,
                      args.table_task, args.lr_schedule)
        build(args.workflow, out, stage, args.num_eval_tasks, args.init)
    else:
        if args.init:
            p.error("--init needs --steps: a full build starts from the embedded tiny model")
        build_all(args.workflow, out, STAGES[args.workflow], args.num_eval_tasks)


if __name__ == "__main__":
    main()
