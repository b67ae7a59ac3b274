"""Mem-α's evaluation tables in shape (paper, Tables 1-2): accuracy and memory size per category for the trained
policy, its warm-start, the flat-memory baselines and the baselines without a memory, on the same held-out tasks,
and accuracy as the stream grows past the training length.

    python tuned_examples/analyses/memalpha_eval.py  # after tuned_examples/memalpha_grpo.py [--writer W]
    python tuned_examples/analyses/memalpha_eval.py --policy runs/memalpha_grpo/model --multipliers 1 4 8 13

Every policy meets the same held-out tasks of each category (the CPU task of tuned_examples/memalpha_grpo.py) and
the same frozen answerer (the shipped CPU answerer): the Mem-α policies build a memory with tool calls that the
answerer reads; the flat-memory baselines (MemAgent, MEM1-style) rewrite one paragraph per chunk that it reads
instead, trained by memalpha_grpo.py --writer when runs/memalpha_grpo_<writer>/model exists, else their
warm-starts; "expert memory" is the store the scripted expert writes, read by the same answerer (what a memory
written as it should be gives), "empty memory" the store before anything is written (the floor: what the answerer
gets right without a memory); long-context (the latest LONG_CONTEXT_TOKENS of the chunks) and RAG-top2 (the two
chunks BM25 ranks highest for the question) have no memory, and the answerer's own weights read the chunks instead.
Per policy and category: r_acc (the questions' mean score) with its 95% interval, memory tokens (what the answerer
is shown) and tool-call success; then r_acc on mixed tasks of 1x, 4x, 8x and 13x the training chunks. Writes
memalpha_eval.json, memalpha_eval.md and memalpha_eval.png to --out.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib
import numpy as np

import memrl_envs  # noqa: F401  (registers memrl/MemoryStore-v0)
from memrl_envs.memory_generators import CATEGORIES
from memrl.evaluation import evaluate_checkpoint
from memrl.experiment import RUNS, budget_table, heldout_summary, init_ray, trained_policy, write_table
from memrl_tuned_examples.tasks.memalpha import (
    ANSWER_MEMORIES,
    ANSWERER,
    ANSWERER_CHECKPOINT,
    CPU_MAX_TOKENS,
    CPU_TASK,
    EMPTY_MEMORY,
    WRITERS,
    cpu_env_config,
    run_name,
    start_answerer,
)

MULTIPLIERS = (1, 4, 8, 13)
"""Stream lengths, as multiples of the training chunks (the paper's 13x is its longest)."""
TRAINED = {writer: RUNS / run_name(writer) / "model" for writer in WRITERS}
"""Where tuned_examples/memalpha_grpo.py [--writer W] writes each trained policy."""
MEMORY_MODES = {**{writer: {"memory": w.memory, "answerer": f"actor:{ANSWERER}"} for writer, w in WRITERS.items()},
                **{name: {**options, "answerer": "policy"} for name, options in ANSWER_MEMORIES.items()
                   if name != "expert paragraph"},
                "empty memory": {**EMPTY_MEMORY, "answerer": "policy"}}
"""Env options per kind of row: a writer's memory (tools or a paragraph) read by the frozen answerer, the expert's
memory read by the answerer's weights (the checkpoint of that row), an empty store read by them (the floor), or no
memory and the answerer's weights reading the chunks."""


def policies(trained: dict[str, Path]) -> list[tuple[str, Path, str]]:
    """(name, checkpoint, memory mode) of each row: each trained writer given (a WRITERS name -> its RL checkpoint),
    Mem-α's warm-start, the warm-start of each flat-memory baseline not trained, then the rows without a policy's
    memory, which run the answerer's weights."""
    rows = [(f"{WRITERS[w].label} RL", trained[w], w) for w in WRITERS if w in trained]
    rows += [(f"{WRITERS[w].label} warm-start", WRITERS[w].warm_start, w) for w in WRITERS
             if w == "mem-alpha" or w not in trained]
    return rows + [("expert memory", ANSWERER_CHECKPOINT, "expert memory"),
                   ("empty memory", ANSWERER_CHECKPOINT, "empty memory"),
                   ("long-context", ANSWERER_CHECKPOINT, "long-context"),
                   ("RAG-top2", ANSWERER_CHECKPOINT, "RAG-top2")]


def figures(name: str, setting: dict, trajectories: list) -> dict:
    """One table row: r_acc with its 95% interval and the memory figures over the scored trajectories."""
    ev = heldout_summary(trajectories, "r_acc")
    return {"policy": name, **setting, "num_tasks": int(ev["num_tasks"]), "num_failed": int(ev["num_failed"]),
            "r_acc": ev["r_acc_mean"], "ci_low": ev["r_acc_ci_low"], "ci_high": ev["r_acc_ci_high"],
            **{key: ev[f"{key}_mean"] for key in ("memory_tokens", "chunk_tokens", "tool_success")}}


def evaluate(runs: list[tuple[str, Path, str]], multipliers: list[int], num_tasks: int, length_tasks: int,
             engine: str = "vllm", seed: int = 0, num_env_runners: int = 2) -> list[dict]:
    """Rows per (policy, category) at the training length, then per (policy, multiplier) on mixed tasks;
    `num_env_runners` as for evaluate_checkpoint (0: in this process)."""
    engine_config = {"kv_cache_bytes": 256 * 1024**2} if engine == "vllm" else {}
    settings = ([{"category": c, "multiplier": 1} for c in CATEGORIES]
                + [{"category": "mixed", "multiplier": m} for m in multipliers])
    counts = [num_tasks] * len(CATEGORIES) + [length_tasks] * len(multipliers)
    # One engine per checkpoint and workflow: the rows without a policy's memory share the answerer's weights, and
    # answer through Mem-α's workflow (it only shows them the answer chat).
    served: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for name, path, mode in runs:
        served.setdefault((str(path), mode if mode in WRITERS else "mem-alpha"), []).append((name, mode))
    rows = []
    for (path, writer), policies_here in served.items():
        workflow = WRITERS[writer]
        # Each policy's categories at the training length, then its lengths on mixed tasks.
        env_configs = [{**cpu_env_config(Path(path)), **MEMORY_MODES[mode], "category": s["category"],
                        "num_chunks": CPU_TASK["num_chunks"] * s["multiplier"]}
                       for _, mode in policies_here for s in settings]
        results = evaluate_checkpoint(path, "memrl/MemoryStore-v0", env_configs, workflow.workflow,
                                      workflow.workflow_config, counts * len(policies_here), max_tokens=CPU_MAX_TOKENS,
                                      engine=engine, engine_config=engine_config, seed=seed,
                                      num_env_runners=num_env_runners)
        named = [(name, setting) for name, _ in policies_here for setting in settings]
        for (name, setting), (_, trajectories) in zip(named, results, strict=True):
            row = figures(name, setting, trajectories)
            rows.append(row)
            print(f"{name:>17} {setting['category']:>24} x{setting['multiplier']:<3} r_acc {row['r_acc']:.3f} "
                  f"[{row['ci_low']:.3f}, {row['ci_high']:.3f}]  memory tokens {row['memory_tokens']:.0f}",
                  flush=True)
    order = {name: i for i, (name, _, _) in enumerate(runs)}
    return sorted(rows, key=lambda row: order[row["policy"]])  # stable: each policy's settings stay in order


def average(cells: list[dict]) -> tuple[float, float, float]:
    """The mean r_acc over categories and its 95% interval: the categories' tasks are drawn independently, so the
    mean's standard error is the root of the summed squared errors (each its interval's half-width / 1.96) over
    the number of categories."""
    mean = float(np.mean([r["r_acc"] for r in cells]))
    half = 1.96 * np.sqrt(sum(((r["ci_high"] - r["ci_low"]) / (2 * 1.96)) ** 2 for r in cells)) / len(cells)
    return mean, mean - half, mean + half


def markdown(rows: list[dict]) -> str:
    """Two tables: per category at the training length (with the mean over categories), and r_acc per length."""
    names = list(dict.fromkeys(r["policy"] for r in rows))
    at = {(r["policy"], r["category"], r["multiplier"]): r for r in rows}
    head = " | ".join(c.replace("_", " ") for c in CATEGORIES)
    lines = [f"| policy | {head} | average | memory tokens (average) |", "|---" * (len(CATEGORIES) + 3) + "|"]
    for name in names:
        cells = [at[name, c, 1] for c in CATEGORIES if (name, c, 1) in at]
        if len(cells) < len(CATEGORIES):
            continue
        acc = " | ".join(f"{r['r_acc']:.3f} [{r['ci_low']:.3f}, {r['ci_high']:.3f}]" for r in cells)
        mean, low, high = average(cells)
        lines.append(f"| {name} | {acc} | {mean:.3f} [{low:.3f}, {high:.3f}] | "
                     f"{np.mean([r['memory_tokens'] for r in cells]):.0f} |")
    multipliers = sorted({r["multiplier"] for r in rows if r["category"] == "mixed"})
    lines += ["", "| policy | " + " | ".join(f"{m}x" for m in multipliers) + " |",
              "|---" * (len(multipliers) + 1) + "|"]
    for name in names:
        cells = [at.get((name, "mixed", m)) for m in multipliers]
        lines.append(f"| {name} | " + " | ".join(
            f"{r['r_acc']:.3f} [{r['ci_low']:.3f}, {r['ci_high']:.3f}]" if r else "" for r in cells) + " |")
    return "\n".join(lines) + "\n"


def plot(rows: list[dict], path: Path) -> None:
    """r_acc per category (bars with intervals) and against stream length, one colour per policy."""
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(dict.fromkeys(r["policy"] for r in rows))
    fig, (cat_ax, len_ax) = plt.subplots(1, 2, figsize=(12, 4.2))
    width = 0.8 / len(names)
    for i, name in enumerate(names):
        rs = [r for r in rows if r["policy"] == name and r["category"] in CATEGORIES]
        x = np.array([CATEGORIES.index(r["category"]) for r in rs]) + i * width
        acc = np.array([r["r_acc"] for r in rs])
        cat_ax.bar(x, acc, width, yerr=[acc - [r["ci_low"] for r in rs], [r["ci_high"] for r in rs] - acc],
                   capsize=3, label=name)
        ls = sorted((r for r in rows if r["policy"] == name and r["category"] == "mixed"),
                    key=lambda r: r["multiplier"])
        len_ax.errorbar([r["multiplier"] for r in ls], [r["r_acc"] for r in ls],
                        yerr=[[r["r_acc"] - r["ci_low"] for r in ls], [r["ci_high"] - r["r_acc"] for r in ls]],
                        marker="o", capsize=3, label=name)
    cat_ax.set_xticks(np.arange(len(CATEGORIES)) + 0.4 - width / 2, [c.replace("_", "\n") for c in CATEGORIES])
    cat_ax.set_ylabel("held-out r_acc (95% CI)")
    cat_ax.set_title("accuracy per category (training length)")
    len_ax.set_xlabel("chunks, as a multiple of the training length")
    len_ax.set_ylabel("held-out r_acc (95% CI)")
    len_ax.set_title("length generalisation (mixed tasks)")
    for ax in (cat_ax, len_ax):
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
    cat_ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--policy", type=Path,
                   help=f"trained Mem-α checkpoint (default: {TRAINED['mem-alpha']} when it exists); the baselines' "
                   "trained checkpoints are read from runs/memalpha_grpo_<writer>/model when they exist")
    p.add_argument("--multipliers", type=int, nargs="+", default=list(MULTIPLIERS),
                   help="stream lengths as multiples of the training chunks")
    p.add_argument("--num-tasks", type=int, default=200, help="held-out tasks per category")
    p.add_argument("--length-tasks", type=int, default=100, help="held-out mixed tasks per length")
    p.add_argument("--engine", choices=("vllm", "torch"), default="vllm", help="the policies' inference engine")
    p.add_argument("--out", type=Path, default=RUNS / "memalpha_eval", help="where to write the tables and plot")
    args = p.parse_args(argv)
    found = {w: trained_policy(p, args.policy if w == "mem-alpha" else None, path) for w, path in TRAINED.items()}
    trained = {w: path for w, path in found.items() if path is not None}
    if min(args.multipliers) < 1 or args.num_tasks < 1 or args.length_tasks < 1:
        p.error("--multipliers, --num-tasks and --length-tasks must be positive integers")
    init_ray(0)
    answerer = start_answerer(ANSWERER_CHECKPOINT)  # noqa: F841 (the actor lives as long as its handle)
    measured = policies(trained)
    rows = evaluate(measured, sorted(args.multipliers), args.num_tasks, args.length_tasks, args.engine)
    # The rows without a policy's memory run the answerer, whose training is the expert memory row's.
    budgets = budget_table([(name, path) for name, path, _ in measured])
    write_table(args.out, "memalpha_eval", rows, markdown(rows) + "\n" + budgets, lambda p: plot(rows, p))
    print(markdown(rows) + "\n" + budgets)
    print(f"wrote {args.out}/memalpha_eval.json, memalpha_eval.md, memalpha_eval.png")
    return rows


if __name__ == "__main__":
    main()
