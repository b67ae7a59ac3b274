"""Build the checkpoints the Mem-α example ships: SFT of the embedded tiny model on the scripted expert.

    python tuned_examples/warm_starts/memalpha_sft.py --role base  # writes and answers (what the others start from)
    python tuned_examples/warm_starts/memalpha_sft.py  # the policy's warm-start, from the base
    python tuned_examples/warm_starts/memalpha_sft.py --role answerer  # the frozen CPU answerer, from the base
    python tuned_examples/warm_starts/memalpha_sft.py --role memagent  # a flat-memory baseline's warm-start (or mem1)
    python tuned_examples/warm_starts/memalpha_sft.py --steps 20 --out /tmp/x  # a short run, e.g. to try a change

The expert episodes are those of the CPU task of tuned_examples/memalpha_grpo.py. For the base the policy answers
(answerer="policy"): each chunk's row is the expert's tool calls for it (facts as semantic items, the rules of a
labelled set or the story so far in core memory), and each question's row is the gold answer read from the memory
the expert built, so the base learns both to write a memory and to answer from one.

The policy's warm-start (--role policy, where RL starts) continues the base on the expert's calls alone, twice as
often on conversations as on the other categories (POLICY_TASKS): the base writes calls of the right form but
seldom copies the chunk's names into them, and copying names is what the answerer needs. Its expert keeps a fact
only 30% of the time (WARM_START_RECALL), which leaves RL a choice to learn. The flat-memory baselines' warm-starts
(--role memagent, --role mem1) get the same: the base continued on the same tasks, steps and expert, on the
expert's memory written as one paragraph through their own workflow (WRITERS).

The answerer (--role answerer) learns answering only, from every kind of memory the evaluation shows it
(ANSWERER_TASKS): the store the expert writes with tools (at the training length and at 4x), the expert's flat
paragraph (the MemAgent and MEM1-style baselines) and the chunks themselves (long-context and RAG-top2), so each
baseline is read by the same answerer. Its held-out reward is r_acc + 0.05 r_compress over those kinds of memory.
Each build writes the checkpoint and sft_summary.json (held-out NLL, per-call exact match, greedy reward with its
95% interval, wall time).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path

from memrl.algorithms import sft
from memrl.algorithms.sft import SFTConfig
from memrl.experiment import default_model
from memrl_tuned_examples.tasks.memalpha import (
    ANSWER_MEMORIES,
    ANSWERER_CHECKPOINT,
    BASE_CHECKPOINT,
    CPU_TASK,
    WARM_START,
    WRITERS,
    cpu_env_config,
)

POLICY_TASKS = [{"category": c} for c in ("accurate_retrieval", "long_range_understanding", "accurate_retrieval",
                                          "test_time_learning")]
"""The policy's episodes, in turn by seed: conversations twice as often as stories and labelled sets."""
ANSWERER_TASKS = [*ANSWER_MEMORIES.values(), {"expert_writes": True, "num_chunks": 4 * CPU_TASK["num_chunks"]}]
"""The answerer's episodes, in turn by seed (five kinds, so each meets every category): the questions over each of
ANSWER_MEMORIES, and over an expert's store four times longer (a longer stream's memory holds more items)."""
NUM_LEARNERS = 2
"""DeepSpeed ranks of every build (the shipped checkpoints were made with two; another count sums the same gradients
in another order, so a rebuild would differ in its last digits)."""
WARM_START_STEPS = 600
"""Steps of the warm-starts RL continues (the policy's and each flat-memory baseline's, the same budget): by 600 the
policy copies more of the chunk's names into its inserts (held-out per-call exact match on the full expert, in
sft_summary.json)."""
WARM_START_RECALL = 0.3
"""The expert the warm-starts imitate keeps each fact in full with this probability (MemoryStoreConfig.expert_recall):
otherwise it files a conversation's small talk instead of its fact, or only the place of a story's event. The
warm-start learns that habit with its uncertainty, so a task's rollouts differ in what they keep and GRPO learns
which memories the answerer needs (docs/methods/memalpha.md). Below 0.5 on purpose:
greedy decoding then picks the wrong memory, which the held-out evaluation shows; at 0.5 the warm-start already
leaned to the fact and RL's gain stayed out of the greedy figure. With the full expert the rollouts differ only where
a name is miscopied, a skill 30 RL iterations do not teach."""


@dataclass(frozen=True)
class Role:
    """One shipped checkpoint's build."""

    out: Path
    """Where the checkpoint is shipped."""
    steps: int
    """Optimizer steps of the full build (32 expert calls per step)."""
    eval_tasks: int
    """Held-out expert episodes the build evaluates on."""
    answerer: str | None
    """The env's answerer: "policy" trains on answers too, None on the writing calls alone."""
    task_options: list[dict] = field(default_factory=list)
    """Reset options in turn by env seed (empty: the CPU task's categories in turn)."""
    from_base: bool = True
    """Start from the base checkpoint (else from the embedded tiny model)."""
    writer: str = "mem-alpha"
    """How the rows keep memory (a WRITERS name: its workflow and the env's memory mode)."""
    expert_recall: float = 1.0
    """Share of the facts the expert keeps in full (MemoryStoreConfig.expert_recall)."""


ROLES = {
    "base": Role(BASE_CHECKPOINT, steps=1500, eval_tasks=48, answerer="policy", from_base=False),
    # Answering is the frozen answerer's job during RL: the policy's rows are its calls alone.
    "policy": Role(WARM_START, steps=WARM_START_STEPS, eval_tasks=48, answerer=None, task_options=POLICY_TASKS,
                   expert_recall=WARM_START_RECALL),
    "answerer": Role(ANSWERER_CHECKPOINT, steps=1000, eval_tasks=100, answerer="policy", task_options=ANSWERER_TASKS),
    **{writer: Role(WRITERS[writer].warm_start, steps=WARM_START_STEPS, eval_tasks=48, answerer=None,
                    task_options=POLICY_TASKS, writer=writer, expert_recall=WARM_START_RECALL)
       for writer in ("memagent", "mem1")},
}
"""The builds by --role: the base (calls and answers), the policy's warm-start (calls, over POLICY_TASKS), the
answerer (answers, over ANSWERER_TASKS), and the flat-memory baselines' warm-starts (the expert's paragraph, with
the policy's tasks and steps); all but the base start from the base."""


def config(steps: int, num_train_tasks: int, num_eval_tasks: int, model: str | None = None,
           role: str = "policy") -> SFTConfig:
    """The SFT of `model` (default: the role's start) on the expert episodes of the CPU task for `role` (a ROLES
    name)."""
    if role not in ROLES:
        raise ValueError(f"role must be one of {sorted(ROLES)}, got {role!r}")
    spec = ROLES[role]
    model = str(model or (BASE_CHECKPOINT if spec.from_base else default_model()))
    writer = WRITERS[spec.writer]
    env_config = {**cpu_env_config(model, answerer=spec.answerer), "memory": writer.memory,
                  "expert_recall": spec.expert_recall}
    return (SFTConfig()
            .environment("memrl/MemoryStore-v0", env_config=env_config)
            .env_runners(workflow=writer.workflow, workflow_config=writer.workflow_config)
            .learners(model_path=model, num_learners=NUM_LEARNERS, token_budget=8192)
            .training(lr=1e-3, batch_size=32, steps=steps, steps_per_iteration=min(250, steps),
                      num_train_tasks=num_train_tasks, task_options=spec.task_options,
                      # Each call weighs the same: a short answer row counts as much as a long row of calls.
                      aggregation="seq_mean_token_mean")
            .evaluation(evaluation_num_tasks=num_eval_tasks)
            .debugging(seed=0))


def build(out: Path, steps: int, num_train_tasks: int, num_eval_tasks: int, model: str | None = None,
          keep_eval_checkpoints: bool = False, role: str = "policy") -> dict:
    """Run `config`'s SFT and write the checkpoint to `out`; returns the summary. keep_eval_checkpoints also saves
    the weights of every evaluation to out/step_<N>."""
    return sft.run(config(steps, num_train_tasks, num_eval_tasks, model, role), out, keep_eval_checkpoints)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, help="optimizer steps (default: the role's full build, Role.steps)")
    p.add_argument("--num-train-tasks", type=int, default=3000, help="expert episodes to train on")
    p.add_argument("--num-eval-tasks", type=int,
                   help="held-out expert episodes to evaluate on (default: the role's Role.eval_tasks)")
    p.add_argument("--role", choices=sorted(ROLES), default="policy",
                   help="the base (writes and answers), the policy's warm-start (writes, from the base), the frozen "
                   "answerer (answers only, from the base) or a flat-memory baseline's warm-start (memagent, mem1)")
    p.add_argument("--out", type=Path, help="where the checkpoint goes (default: the role's shipped one)")
    p.add_argument("--keep-eval-checkpoints", action="store_true",
                   help="also save the weights of every evaluation to <out>/step_<N>")
    args = p.parse_args()
    spec = ROLES[args.role]
    build(args.out or spec.out, args.steps or spec.steps, args.num_train_tasks, args.num_eval_tasks or spec.eval_tasks,
          keep_eval_checkpoints=args.keep_eval_checkpoints, role=args.role)


if __name__ == "__main__":
    main()
