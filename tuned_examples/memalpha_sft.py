"""Build the two checkpoints the Mem-α example ships: SFT of the embedded tiny model on the scripted expert.

    python tuned_examples/memalpha_sft.py                          # the policy's warm-start (what is shipped)
    python tuned_examples/memalpha_sft.py --role answerer          # the frozen CPU answerer (what is shipped)
    python tuned_examples/memalpha_sft.py --steps 20 --out /tmp/x  # a short run, e.g. to try a change

The expert episodes are those of the CPU task of tuned_examples/memalpha_grpo.py with the policy answering
(answerer="policy"): each chunk's row is the expert's tool calls for it (facts as semantic items, the rules of a
labelled set or the story so far in core memory), and each question's row is the gold answer read from the memory
the expert built. So the warm-start learns both to write the memory and to answer from one; RL starts from it.

The answerer (--role answerer) learns answering only, from every kind of memory the evaluation shows it
(ANSWERER_TASKS): the store the expert writes with tools (at the training length and at 4x), the expert's flat
paragraph (the MemAgent and MEM1-style baselines) and the chunks themselves (long-context and RAG-top2), so each
baseline is read by the same answerer. Its held-out reward is r_acc + 0.05 r_compress over those kinds of memory.
Each build writes the checkpoint and sft_summary.json (held-out NLL, per-call exact match, greedy reward with its
95% interval, wall time).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from memrl import sft
from memrl.algorithms.sft import SFTConfig
from memrl.learner.losses import LossConfig
from tuned_examples.common import default_model
from tuned_examples.memalpha_grpo import (
    ANSWER_MEMORIES,
    ANSWERER_CHECKPOINT,
    CPU_TASK,
    CPU_WORKFLOW,
    WARM_START,
    cpu_env_config,
)

STEPS = {"policy": 1500, "answerer": 1000}
"""Optimizer steps of each role's full build (32 expert calls per step)."""
EVAL_TASKS = {"policy": 48, "answerer": 100}
"""Held-out expert episodes each role's build evaluates on."""
ANSWERER_TASKS = [*ANSWER_MEMORIES.values(), {"expert_writes": True, "num_chunks": 4 * CPU_TASK["num_chunks"]}]
"""The answerer's episodes, in turn by seed (five kinds, so each meets every category): the questions over each of
ANSWER_MEMORIES, and over an expert's store four times longer (a longer stream's memory holds more items)."""
OUT = {"policy": WARM_START, "answerer": ANSWERER_CHECKPOINT}
"""Where each role's checkpoint is shipped."""


def build(out: Path, steps: int, num_train_tasks: int, num_eval_tasks: int, model: str | None = None,
          keep_eval_checkpoints: bool = False, role: str = "policy") -> dict:
    """SFT `model` on the expert episodes of the CPU task for `role` ("policy": its calls and answers, from the
    embedded tiny model; "answerer": answers only, over ANSWERER_TASKS, from the warm-start, which already answers
    from a store); returns the summary.
    keep_eval_checkpoints also saves the weights of every evaluation to out/step_<N>."""
    if role not in OUT:
        raise ValueError(f"role must be one of {sorted(OUT)}, got {role!r}")
    model = str(model or (WARM_START if role == "answerer" else default_model()))
    config = (SFTConfig()
              .environment("memrl/MemoryStore-v0", env_config=cpu_env_config(model, answerer="policy"))
              .env_runners(workflow="memalpha", workflow_config=CPU_WORKFLOW)
              .learners(model_path=model, num_learners=2, token_budget=8192)
              .training(lr=1e-3, batch_size=32, steps=steps, steps_per_iteration=min(250, steps),
                        num_train_tasks=num_train_tasks, task_options=ANSWERER_TASKS if role == "answerer" else [],
                        # Each call weighs the same: a short answer row counts as much as a long row of calls.
                        loss=LossConfig(kind="sft", aggregation="seq_mean_token_mean"))
              .evaluation(evaluation_num_tasks=num_eval_tasks)
              .debugging(seed=0))
    return sft.run(config, out, keep_eval_checkpoints)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, help="optimizer steps (default: the role's full build, STEPS)")
    p.add_argument("--num-train-tasks", type=int, default=3000, help="expert episodes to train on")
    p.add_argument("--num-eval-tasks", type=int, help="held-out expert episodes to evaluate on (default: EVAL_TASKS)")
    p.add_argument("--role", choices=sorted(OUT), default="policy",
                   help="the policy's warm-start (writes and answers) or the frozen answerer (answers only)")
    p.add_argument("--out", type=Path, help="where the checkpoint goes (default: the role's shipped one)")
    p.add_argument("--keep-eval-checkpoints", action="store_true",
                   help="also save the weights of every evaluation to <out>/step_<N>")
    args = p.parse_args()
    build(args.out or OUT[args.role], args.steps or STEPS[args.role], args.num_train_tasks,
          args.num_eval_tasks or EVAL_TASKS[args.role],
          keep_eval_checkpoints=args.keep_eval_checkpoints, role=args.role)


if __name__ == "__main__":
    main()
