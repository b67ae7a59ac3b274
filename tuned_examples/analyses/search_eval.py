"""MEM1's Table 1 for the search agents: accuracy and cost against the number of questions per task.

    python tuned_examples/analyses/search_eval.py  # the shipped policies (and RL runs), 1-16 objectives
    python tuned_examples/analyses/search_eval.py --policy MemPO=runs/mempo_grpo/model:mempo --objectives 1 2 4

Per policy and number of objectives N (tasks of N one-hop questions, `table_env_config` of the CPU task in
tuned_examples/tasks/search.py, with 2N + 2 turns): exact match and F1 (means over questions, with EM's 95%
interval over tasks), peak tokens per call (mean over tasks of each task's largest call, and the largest of all),
dependency (MEM1's measure of the tokens each generated token depends on, summed over a task), the share of tasks
whose history outgrew the model's context (a full-history baseline at large N) and seconds per task (greedy,
batched, one engine). The JSON also holds ReAct's peak over each policy's at the largest N (react_peak_ratio) and
each policy's peak at its largest N over its smallest (peak_growth). Writes search_table.json, search_table.md
and search_table.png to --out.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from memrl.evaluation import evaluate_checkpoint
from memrl.stats import reward_interval
from memrl.experiment import RUNS, budget_table, init_ray, policy_arg, training_budget, write_table
from memrl_tuned_examples.tasks.search import MAX_TOKENS, table_env_config, warm_start, workflow_config

OBJECTIVES = (1, 2, 4, 8, 16)
"""Questions per task, as in MEM1's Table 1."""
EXAMPLES = {"MEM1": ("mem1_ppo", "mem1"), "MemSearcher": ("memsearcher_grpo", "memsearcher"),
            "MemPO": ("mempo_grpo", "mempo")}
"""Trained policies: name -> (tuned example whose runs/<example>/model is the policy, workflow)."""


def default_policies() -> list[tuple[str, Path, str]]:
    """(name, checkpoint, workflow) of each method's warm-start trained on 1 to 8 questions per task, every RL policy
    trained by a tuned example (on two questions) that exists, and the ReAct baselines."""
    found = []
    for name, (example, workflow) in EXAMPLES.items():
        for label, path in ((name, warm_start(workflow, multi=True)), (f"RL-{name} (2 questions)",
                                                                      RUNS / example / "model")):
            if (path / "config.json").is_file():
                found.append((label, path, workflow))
    react = warm_start("react", multi=True)
    if (react / "config.json").is_file():
        found += [("ReAct", react, "react"), ("ReAct (truncated)", react, "react_truncated")]
    return found


def measure(name: str, path: Path, workflow: str, objectives: list[int], num_tasks: int, engine: str,
            seed: int = 0, num_env_runners: int = 2) -> list[dict]:
    """One row per number of objectives for one policy (one engine serves them all); `num_env_runners` as for
    evaluate_checkpoint (0: in this process)."""
    engine_config = {"kv_cache_bytes": 256 * 1024**2} if engine == "vllm" else {}
    results = evaluate_checkpoint(
        str(path), "memrl/Search-v0", [table_env_config(n) for n in objectives], workflow, workflow_config(workflow),
        num_tasks, max_tokens=MAX_TOKENS, engine=engine, engine_config=engine_config, seed=seed,
        num_env_runners=num_env_runners)
    rows = []
    for n, (summary, trajectories) in zip(objectives, results):
        em = [t.metrics.get("em", 0.0) for t in trajectories]
        mean, low, high = reward_interval(em)
        low, high = max(low, 0.0), min(high, 1.0)  # a task's EM is a share of its questions: never outside [0, 1]
        rows.append({"policy": name, "workflow": workflow, "objectives": n, "num_tasks": len(trajectories),
                     "em": mean, "em_ci_low": low, "em_ci_high": high, "f1": summary.get("f1_mean", 0.0),
                     "peak_tokens": summary["peak_context_tokens_mean"],
                     "peak_tokens_max": summary["peak_context_tokens_max"],
                     "dependency": summary["dependency_mean"], "calls": summary["num_calls_mean"],
                     "context_overflow": summary["context_overflow_mean"],
                     "seconds_per_task": summary["sample_s"] / max(len(trajectories), 1)})
    return rows


def markdown(rows: list[dict]) -> str:
    """The table, one line per (policy, N)."""
    lines = ["| policy | N | EM [95% CI] | F1 | peak tokens/call (max) | dependency | calls | context full | s/task |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['policy']} | {r['objectives']} | {r['em']:.3f} [{r['em_ci_low']:.3f}, "
                     f"{r['em_ci_high']:.3f}] | {r['f1']:.3f} | {r['peak_tokens']:.0f} ({r['peak_tokens_max']:.0f}) | "
                     f"{r['dependency']:.3g} | {r['calls']:.1f} | {r['context_overflow']:.0%} | "
                     f"{r['seconds_per_task']:.2f} |")
    return "\n".join(lines) + "\n"


def peak_ratio(rows: list[dict], baseline: str = "ReAct") -> dict[str, float]:
    """Peak tokens per call of `baseline` over each other policy's, at the largest N both were measured at."""
    out = {}
    base = {r["objectives"]: r["peak_tokens"] for r in rows if r["policy"] == baseline}
    for name in dict.fromkeys(r["policy"] for r in rows):
        own = {r["objectives"]: r["peak_tokens"] for r in rows if r["policy"] == name}
        shared = sorted(set(base) & set(own))
        if name != baseline and shared:
            out[f"{name} @ {shared[-1]}"] = base[shared[-1]] / own[shared[-1]]
    return out


def peak_growth(rows: list[dict]) -> dict[str, float]:
    """Each policy's peak tokens per call at its largest N over those at its smallest: 1 is flat, N_max/N_min linear."""
    out = {}
    for name in dict.fromkeys(r["policy"] for r in rows):
        own = sorted((r["objectives"], r["peak_tokens"]) for r in rows if r["policy"] == name)
        out[f"{name} {own[0][0]} -> {own[-1][0]}"] = own[-1][1] / own[0][1]
    return out


def plot(rows: list[dict], path: Path) -> None:
    """EM and peak tokens per call against N, one line per policy."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (acc, tokens) = plt.subplots(1, 2, figsize=(11, 4))
    for name in dict.fromkeys(r["policy"] for r in rows):
        own = [r for r in rows if r["policy"] == name]
        n = [r["objectives"] for r in own]
        acc.errorbar(n, [r["em"] for r in own], yerr=[[r["em"] - r["em_ci_low"] for r in own],
                                                     [r["em_ci_high"] - r["em"] for r in own]],
                     marker="o", capsize=3, label=name)
        tokens.plot(n, [r["peak_tokens"] for r in own], marker="o", label=name)
    for ax, label in ((acc, "exact match (95% CI)"), (tokens, "peak tokens per call")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("questions per task (N)")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    tokens.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def run(policies: list[tuple[str, Path, str]], objectives: list[int], num_tasks: int, engine: str,
        out: Path, num_env_runners: int = 2) -> dict:
    """Measure every policy at every N (`num_env_runners` runners each); write the JSON, the Markdown table and
    the plot (after each policy, so a long run keeps what it measured); returns the JSON."""
    if not policies:
        raise ValueError("search_eval.run needs at least one (name, checkpoint, workflow) policy")
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for name, path, workflow in policies:
        rows += measure(name, path, workflow, objectives, num_tasks, engine, num_env_runners=num_env_runners)
        done = [(n, p) for n, p, _ in policies[: policies.index((name, path, workflow)) + 1]]
        result = {"rows": rows, "react_peak_ratio": peak_ratio(rows), "peak_growth": peak_growth(rows),
                  "budgets": {n: training_budget(p) for n, p in done}, "num_tasks": num_tasks, "engine": engine}
        write_table(out, "search_table", result, markdown(rows) + "\n" + budget_table(done), lambda p: plot(rows, p))
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--policy", type=policy_arg, action="append",
                   help="NAME=CHECKPOINT:WORKFLOW (repeatable; default: every trained policy and warm-start found)")
    p.add_argument("--objectives", type=int, nargs="+", default=list(OBJECTIVES))
    p.add_argument("--num-tasks", type=int, default=100, help="held-out tasks per policy and N")
    p.add_argument("--engine", choices=("vllm", "torch"), default="vllm")
    p.add_argument("--out", type=Path, default=RUNS / "search_eval")
    args = p.parse_args()
    policies = args.policy or default_policies()
    if not policies:
        p.error("no policy found: train one (tuned_examples/*_grpo.py, mem1_ppo.py) or pass --policy")
    init_ray(0)
    result = run(policies, args.objectives, args.num_tasks, args.engine, args.out)
    print(markdown(result["rows"]))
    print(budget_table([(n, p) for n, p, _ in policies]))
    print("ReAct peak tokens per call over each policy's:", json.dumps(result["react_peak_ratio"]))
    print("Peak tokens per call, largest N over smallest:", json.dumps(result["peak_growth"]))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
