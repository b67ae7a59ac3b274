"""Build the warm-start checkpoints the MemAgent example ships: SFT of the embedded tiny model on scripted experts.

    python tuned_examples/warm_starts/memagent_sft.py  # both, in full (what is shipped)
    python tuned_examples/warm_starts/memagent_sft.py --workflow memagent  # only the MemAgent policy
    python tuned_examples/warm_starts/memagent_sft.py --steps 20 --out /tmp/x  # one short stage, e.g. to try a change
    python tuned_examples/warm_starts/memagent_sft.py --workflow full_context --layers 8 --out runs/deep  # 8 blocks

`memagent` (what RL starts from) learns MemAgent's calls on the CPU task: copy the question's relevant facts
from each chunk into the memory, then answer from memory. `full_context` (the baseline of the length
evaluation) learns to answer from the whole document in one call. A full build runs the workflow's STAGES in order;
each writes its checkpoint and sft_summary.json (held-out NLL, per-call exact match, greedy accuracy with its 95%
interval, wall time; the last one's carries the earlier stages' under "earlier_stages").
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from memrl.algorithms import sft
from memrl.algorithms.sft import SFTConfig
from memrl.experiment import RUNS, default_model
from memrl_tuned_examples.tasks.memagent import CHECKPOINTS, NUM_DOCS, cpu_task


@dataclass(frozen=True)
class Stage:
    """One SFT run of a warm-start build (64 expert calls per optimizer step, lr 1e-3 at its peak)."""

    steps: int
    """Optimizer steps."""
    num_train_tasks: int
    """Expert episodes whose calls are the training rows; held-out episodes come from the next seeds."""
    lr_schedule: str = "constant"
    """training.lr_schedule over the stage: "linear" or "cosine" decay lr 1e-3 to 1e-3 * lr_min_ratio at its last
    step (after one warm-up step, since the stage starts a fresh optimizer)."""
    lr_min_ratio: float = 0.0
    """Where a decaying schedule ends, as a share of 1e-3 (training.lr_min_ratio)."""


NUM_LEARNERS = 2
"""DeepSpeed ranks of every build (the shipped checkpoints were made with two; another count sums the same gradients
in another order, so a rebuild would differ in its last digits)."""
STAGES = {
    "memagent": (Stage(900, 4000), Stage(900, 8000, "linear")),
    "full_context": (Stage(940, 40000), Stage(900, 40000, "linear")),
}
"""Stages of each full build, each from the previous one's weights with a fresh optimizer and its own seed (so its
rows come in another order). The baseline is compared with the RL policy, so it gets the same schedule and at least
the warm-start's steps plus the main job's (one per DAPO iteration).

MemAgent's warm-start has to carry the first fact in memory across the chunks between the two gold documents and
copy names exactly: the first stage, at a constant rate, teaches the format and the carrying; the second, the rate
decaying to 0 over twice the episodes, the copying. Its remaining failures are copying errors: the first fact with a
wrong name, or a name of a fact already held changed while rewriting the memory.

The full-context baseline's one-pass lookup blurs as the documents it chooses among grow; its expert reply quotes the
facts after a lead-in (memrl_envs.chunk_stream.EVIDENCE_LEAD), so that the quoted names keep their document tokens
(what else was tried: docs/methods/memagent.md). Each stage's figures are in the build's sft_summary.json; greedy
accuracy on 200 questions swings between evaluations 40 steps apart, so the summary's last point is a noisy reading
of the build."""

TRAIN_LENGTHS = {"memagent": NUM_DOCS, "full_context": (2, 4, 6, 8, NUM_DOCS)}
"""Documents per question in each build's training episodes (a tuple draws one length per question); both are
evaluated at NUM_DOCS. MemAgent's calls each see a chunk of two or three documents. The baseline finds the facts in
documents of 2 to 10, where the short ones teach the lookup (a build at 10 documents alone learned it less well:
docs/methods/memagent.md)."""


def config(workflow: str, stage: Stage, num_eval_tasks: int, init: str | Path | None = None,
           seed: int = 0) -> SFTConfig:
    """One SFT stage on `workflow`'s expert calls of the CPU task, from `init` (default: the embedded tiny model,
    freshly initialised)."""
    # Absolute paths: the learner actors do not share this process's working directory.
    model = str(Path(init or default_model()).resolve())
    env_config, workflow_config = cpu_task(workflow, tokenizer_path=model, num_docs=TRAIN_LENGTHS[workflow])
    decays = stage.lr_schedule != "constant"
    return (SFTConfig()
            .environment("memrl/ChunkStream-v0", env_config=env_config)
            .env_runners(workflow=workflow, workflow_config=workflow_config)
            .learners(model_path=model, num_learners=NUM_LEARNERS, token_budget=4096)
            .training(lr=1e-3, lr_schedule=stage.lr_schedule, lr_warmup_steps=1 if decays else 0,
                      lr_decay_steps=stage.steps if decays else 0, lr_min_ratio=stage.lr_min_ratio, batch_size=64,
                      steps=stage.steps, steps_per_iteration=min(150, stage.steps),
                      num_train_tasks=stage.num_train_tasks)
            .evaluation(evaluation_num_tasks=num_eval_tasks, evaluation_env_config={"num_docs": NUM_DOCS})
            .debugging(seed=seed))


def build(workflow: str, out: Path, stage: Stage, num_eval_tasks: int, init: str | Path | None = None,
          seed: int = 0) -> dict:
    """`config`'s SFT stage, written with its sft_summary.json to `out`; returns the summary."""
    return sft.run(config(workflow, stage, num_eval_tasks, init, seed), Path(out).resolve())


def build_all(workflow: str, out: Path, num_eval_tasks: int, stages: tuple[Stage, ...] | None = None,
              init: str | Path | None = None, stage_dir: Path = RUNS / "memagent_sft") -> dict:
    """Run `stages` (default: the workflow's STAGES) in order, the first from `init` (default: the embedded tiny
    model), each next one from the previous one's weights, with the stage's index as its seed; the last is written
    to `out` and its summary carries the earlier ones'."""
    stages = stages or STAGES[workflow]
    for i, stage in enumerate(stages):
        stage_out = out if i == len(stages) - 1 else stage_dir / f"{workflow}_stage{i + 1}"
        summary = build(workflow, stage_out, stage, num_eval_tasks, init, seed=i)
        init = stage_out
    return summary


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workflow", choices=sorted(STAGES), action="append",
                   help="which warm-start to build (repeatable; default: both)")
    p.add_argument("--steps", type=int, help="one stage of this many optimizer steps instead of the full build")
    p.add_argument("--num-train-tasks", type=int, help="expert episodes to train on (with --steps; default: the "
                   "first stage's)")
    p.add_argument("--lr-schedule", choices=("constant", "linear", "cosine"), default="constant",
                   help="learning rate over the stage (with --steps; Stage.lr_schedule)")
    p.add_argument("--lr-min-ratio", type=float, default=0.0,
                   help="where a decaying --lr-schedule ends, as a share of the peak 1e-3 (with --steps)")
    p.add_argument("--seed", type=int, default=0, help="seed of the stage's row order (with --steps; a full build "
                   "seeds each stage with its index)")
    p.add_argument("--init", help="checkpoint to start from (with --steps; default: the embedded tiny model)")
    p.add_argument("--layers", type=int, help="start from a fresh tiny model with this many transformer blocks "
                   "instead of the embedded one's 4; writes <workflow>_<layers>_layers_sft")
    p.add_argument("--num-eval-tasks", type=int, default=200, help="held-out expert episodes to evaluate on")
    p.add_argument("--out", type=Path, default=CHECKPOINTS,
                   help="directory that receives one sub-directory per workflow (default: the shipped ones)")
    args = p.parse_args()
    if args.init and not args.steps:
        p.error("--init needs --steps: a full build starts from the embedded tiny model")
    if args.layers is not None and (args.init or args.layers < 1):
        p.error(f"--layers must be a positive number of blocks and excludes --init; got --layers {args.layers}"
                + (f" with --init {args.init}" if args.init else ""))
    init = args.init or (default_model(args.layers) if args.layers else None)
    for workflow in args.workflow or sorted(STAGES):
        out = args.out / (f"{workflow}_{args.layers}_layers_sft" if args.layers else f"{workflow}_sft")
        if args.steps:
            stage = Stage(args.steps, args.num_train_tasks or STAGES[workflow][0].num_train_tasks, args.lr_schedule,
                          args.lr_min_ratio)
            build(workflow, out, stage, args.num_eval_tasks, init, seed=args.seed)
        else:
            build_all(workflow, out, args.num_eval_tasks, init=init)


if __name__ == "__main__":
    main()
