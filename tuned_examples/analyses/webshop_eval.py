"""MEM1's WebShop table in shape (paper, Table 2): reward and cost of MEM1 against the ReAct baselines.

    python tuned_examples/analyses/webshop_eval.py  # the warm-starts, and the RL policies of mem1_webshop_ppo.py
    python tuned_examples/analyses/webshop_eval.py --policy MEM1=runs/mem1_webshop_ppo/model:webshop_mem1 --num-tasks
    200

Per policy, greedy on held-out tasks of the test goals (the CPU task of tuned_examples/tasks/webshop.py): average
final reward with its 95% interval, success rate (reward 1) with its Wilson interval, peak tokens per call (mean over
tasks of each task's largest call, and the largest of all), dependency (the tokens each generated token depends on,
summed over a task), calls and seconds per task (batched, one engine). A second table gives the peak tokens per call
by episode length (the number of calls a task took): flat for MEM1, whose context is the prompt, its summary and
one page; growing for ReAct, whose context holds every page so far. Writes webshop_table.json, webshop_table.md and
webshop_table.png to --out.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from memrl.evaluation import evaluate_checkpoint
from memrl.stats import reward_interval, wilson_interval
from memrl.experiment import RUNS, budget_table, init_ray, policy_arg, training_budget, write_table
from memrl_tuned_examples.tasks.webshop import MAX_TOKENS, MAX_TURNS, env_config, warm_start, workflow_config

TRAINED = {"webshop_mem1": RUNS / "mem1_webshop_ppo" / "model",
           "webshop_react": RUNS / "mem1_webshop_ppo_react" / "model",
           "webshop_react_truncated": RUNS / "mem1_webshop_ppo_react_truncated" / "model"}
"""Where mem1_webshop_ppo.py [--workflow W] writes each workflow's RL policy."""
NAMES = {"webshop_mem1": "MEM1", "webshop_react": "ReAct", "webshop_react_truncated": "ReAct (truncated)"}


def default_policies() -> list[tuple[str, Path, str]]:
    """(name, checkpoint, workflow): each workflow's built warm-start (truncated ReAct's is ReAct's), then each
    workflow's RL policy where mem1_webshop_ppo.py has trained it, so every RL row stands beside where it started."""
    warm = [(f"{name} warm-start", warm_start(workflow), workflow) for workflow, name in NAMES.items()]
    trained = [(f"RL {name}", TRAINED[workflow], workflow) for workflow, name in NAMES.items()]
    return [(label, path, workflow) for label, path, workflow in warm + trained if (path / "config.json").is_file()]


def measure(name: str, path: Path, workflow: str, num_tasks: int, engine: str, seed: int = 0,
            num_env_runners: int = 2) -> tuple[dict, list]:
    """One table row for a policy, and (calls, peak tokens) per task; `num_env_runners` as for evaluate_checkpoint
    (0: in this process)."""
    engine_config = {"kv_cache_bytes": 256 * 1024**2} if engine == "vllm" else {}
    [(summary, trajectories)] = evaluate_checkpoint(
        str(path), "memrl/WebShop-v0", [env_config("test")], workflow, workflow_config(workflow), num_tasks,
        max_tokens=MAX_TOKENS, engine=engine, engine_config=engine_config, max_calls=MAX_TURNS, seed=seed,
        num_env_runners=num_env_runners)
    scored = [t for t in trajectories if not t.failure]
    rewards = [t.reward for t in scored]
    mean, low, high = reward_interval(rewards)
    wins = sum(r >= 1.0 for r in rewards)
    s_low, s_high = wilson_interval(wins, len(rewards))
    row = {"policy": name, "workflow": workflow, "checkpoint": str(path), "num_tasks": len(scored),
           "reward": mean, "reward_ci_low": low, "reward_ci_high": high,
           "success": wins / max(len(rewards), 1), "success_ci_low": s_low, "success_ci_high": s_high,
           "peak_tokens": summary["peak_context_tokens_mean"], "peak_tokens_max": summary["peak_context_tokens_max"],
           "dependency": summary["dependency_mean"], "calls": summary["num_calls_mean"],
           "format_ok": summary.get("format_ok_mean", float("nan")),
           "seconds_per_task": summary["sample_s"] / max(len(scored), 1)}
    lengths = [(int(t.metrics["num_calls"]), float(t.metrics["peak_context_tokens"])) for t in scored]
    return row, lengths


def by_length(lengths: list[tuple[int, float]], min_tasks: int = 5) -> dict[int, float]:
    """Mean peak tokens per call of the tasks that took each number of calls (lengths seen at least min_tasks
    times)."""
    calls = sorted({c for c, _ in lengths})
    return {c: float(np.mean([p for k, p in lengths if k == c])) for c in calls
            if sum(k == c for k, _ in lengths) >= min_tasks}


def markdown(rows: list[dict]) -> str:
    lines = ["| policy | avg final reward [95% CI] | success [95% CI] | peak tokens/call (max) | dependency | calls | "
             "s/task |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['policy']} | {r['reward']:.3f} [{r['reward_ci_low']:.3f}, {r['reward_ci_high']:.3f}] | "
                     f"{r['success']:.3f} [{r['success_ci_low']:.3f}, {r['success_ci_high']:.3f}] | "
                     f"{r['peak_tokens']:.0f} ({r['peak_tokens_max']:.0f}) | {r['dependency']:.3g} | "
                     f"{r['calls']:.1f} | {r['seconds_per_task']:.2f} |")
    calls = sorted({int(c) for r in rows for c in r["peak_by_calls"]})
    lines += ["", "| policy | " + " | ".join(f"{c} calls" for c in calls) + " |", "|---" * (len(calls) + 1) + "|"]
    for r in rows:
        cells = [r["peak_by_calls"].get(c) for c in calls]
        lines.append(f"| {r['policy']} | " + " | ".join("" if v is None else f"{v:.0f}" for v in cells) + " |")
    return "\n".join(lines) + "\n"


def plot(rows: list[dict], path: Path) -> None:
    """Reward per policy (bars with intervals) and peak tokens per call against episode length."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (reward, tokens) = plt.subplots(1, 2, figsize=(11, 4))
    x = np.arange(len(rows))
    means = np.array([r["reward"] for r in rows])
    reward.bar(x, means, yerr=[means - [r["reward_ci_low"] for r in rows], [r["reward_ci_high"] for r in rows] - means],
               capsize=4)
    reward.set_xticks(x, [r["policy"] for r in rows], rotation=15)
    reward.set_ylabel("average final reward (95% CI)")
    for r in rows:
        calls = sorted(r["peak_by_calls"])
        tokens.plot(calls, [r["peak_by_calls"][c] for c in calls], marker="o", label=r["policy"])
    tokens.set_xlabel("calls the task took")
    tokens.set_ylabel("peak tokens per call")
    tokens.legend()
    for ax in (reward, tokens):
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def run(policies: list[tuple[str, Path, str]], num_tasks: int, engine: str, out: Path,
        num_env_runners: int = 2) -> dict:
    """Measure every policy (`num_env_runners` runners each); write the JSON, the Markdown tables and the plot after
    each one; returns the JSON."""
    if not policies:
        raise ValueError("webshop_eval.run needs at least one (name, checkpoint, workflow) policy")
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for name, path, workflow in policies:
        row, lengths = measure(name, path, workflow, num_tasks, engine, num_env_runners=num_env_runners)
        rows.append({**row, "peak_by_calls": by_length(lengths)})
        done = [(n, p) for n, p, _ in policies[: len(rows)]]
        result = {"rows": rows, "budgets": {n: training_budget(p) for n, p in done}, "num_tasks": num_tasks,
                  "engine": engine}
        write_table(out, "webshop_table", result, markdown(rows) + "\n" + budget_table(done),
                    lambda p: plot(rows, p))
    return result


def _policy(text: str) -> tuple[str, Path, str]:
    return policy_arg(text, NAMES)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--policy", type=_policy, action="append",
                   help="NAME=CHECKPOINT:WORKFLOW (repeatable; default: every warm-start and RL policy found)")
    p.add_argument("--num-tasks", type=int, default=500, help="held-out tasks per policy")
    p.add_argument("--engine", choices=("vllm", "torch"), default="vllm")
    p.add_argument("--out", type=Path, default=RUNS / "webshop_eval")
    args = p.parse_args()
    policies = args.policy or default_policies()
    if not policies:
        p.error("no policy found: build the warm-starts (tuned_examples/warm_starts/webshop_sft.py) or pass --policy")
    init_ray(0)
    result = run(policies, args.num_tasks, args.engine, args.out)
    print(markdown(result["rows"]))
    print(budget_table([(n, p) for n, p, _ in policies]))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
