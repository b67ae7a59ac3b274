"""Experiments: what every tuned example (and the benchmarks built on them) runs through.

The command line every example takes (`parser`, `run_example`: the CPU default, or with --num-gpus its paper
preset), GPU sizing (`size_for_gpus`, `use_engine`), the train loop with its progress bars and held-out evaluations
before and after (`train`: the paired change with its 95% interval, summary.json, the learning curve), and the
training budget a checkpoint records (`training_budget`, `budget_table`). A tuned example is then its CPU config,
its paper preset and its expected score; `memrl train <example>` runs it (memrl.cli).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import ray
from tqdm import tqdm

from memrl.checkpoints import portable
from memrl.cluster import ensure_ray
from memrl.config import AlgorithmConfig
from memrl.console import VERBOSE_ENV
from memrl.engines import ENGINES
from memrl.memory_plan import fit_engines, fit_token_budget, local_gpu_memory_gb
from memrl.models import tiny
from memrl.algorithms.sft import SUMMARY_FILE
from memrl.stats import eval_summary, paired_interval, reward_interval

RUNS = Path("runs")
"""Where examples write models, checkpoints and results (relative to the working directory)."""


def parser(description: str) -> argparse.ArgumentParser:
    """Arguments every tuned example takes; no arguments means the CPU default."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--model", help="local Hugging Face checkpoint (default: the example's CPU starting policy)")
    p.add_argument("--num-gpus", type=int, default=0, help="GPUs to use; 0 runs the CPU default")
    p.add_argument("--engine", choices=sorted(ENGINES), default="vllm",
                   help="inference engine of a GPU run (--num-gpus): vllm, or the reference torch engine")
    p.add_argument("--gpu-memory-gb", type=float, help="GPU runs: memory of each GPU, in GB (debugging.gpu_memory_gb; "
                   "default: this machine's first GPU's); the run stops before any actor starts when it would not fit")
    p.add_argument("--plan", action="store_true", help="GPU runs: print the memory plan of each learner and engine "
                   "GPU (memrl.memory_plan) and exit")
    p.add_argument("--iterations", type=int, help="training iterations (default: the example's own)")
    p.add_argument("--seed", type=int, help="the run's seed (debugging.seed; default: the example's own), e.g. to "
                   "repeat an example over seeds; its run directory is then runs/<example>_seed<N>")
    p.add_argument("--out", type=Path, help="run directory (default: runs/<example>)")
    p.add_argument("--verbose", action="store_true",
                   help="show every library's log (vLLM, Ray actors, DeepSpeed, wandb); same as MEMRL_VERBOSE=1")
    return p


def require_checkpoint(p: argparse.ArgumentParser, flag: str, path: Path) -> Path:
    """`path`, given as `flag`, if it holds a Hugging Face checkpoint; else a command-line error."""
    if not (path / "config.json").is_file():
        p.error(f"{flag} {path} is not a Hugging Face checkpoint directory (no config.json)")
    return path


def trained_policy(p: argparse.ArgumentParser, given: Path | None, default: Path) -> Path | None:
    """An evaluation's trained policy: --policy as `given`, else `default` when a training run wrote it there, else
    None; a path that holds no Hugging Face checkpoint is a command-line error."""
    trained = given or (default if (default / "config.json").is_file() else None)
    return None if trained is None else require_checkpoint(p, "--policy", trained)


def policy_arg(text: str, workflows=None) -> tuple[str, Path, str]:
    """An evaluation's --policy NAME=CHECKPOINT:WORKFLOW as (name, checkpoint, workflow); with `workflows`, the
    workflow must be one of them."""
    name, _, rest = text.partition("=")
    path, _, workflow = rest.rpartition(":")
    if not (name and path and workflow):
        raise argparse.ArgumentTypeError(f"--policy takes NAME=CHECKPOINT:WORKFLOW, got {text!r}")
    if workflows is not None and workflow not in workflows:
        raise argparse.ArgumentTypeError(f"workflow {workflow!r} is not one of {sorted(workflows)}")
    return name, Path(path), workflow


def init_ray(num_gpus: int) -> None:
    """Join the Ray cluster this node belongs to (GPU runs, e.g. under `ray up cluster.yaml`), or start a local one
    (memrl.cluster.ensure_ray). Does nothing when Ray is already running in this process."""
    if num_gpus and not ray.is_initialized():
        ray.init()
    ensure_ray()


def default_model(num_layers: int = tiny.TinyModelConfig.num_layers) -> str:
    """The embedded tiny model (random weights), built once under runs/ (memrl.models.tiny.default_model); another
    `num_layers` gives the same model with that many transformer blocks, in a directory of its own."""
    if num_layers == tiny.TinyModelConfig.num_layers:
        return tiny.default_model(RUNS / "tiny-model")
    return tiny.default_model(RUNS / f"tiny-model-{num_layers}-layers", tiny.TinyModelConfig(num_layers=num_layers))


def size_for_gpus(config: AlgorithmConfig, num_gpus: int) -> AlgorithmConfig:
    """Spread `num_gpus` GPUs over the actors, asking for exactly that many: half train (one learner each, with
    gradient checkpointing), the rest serve (one vLLM engine each). A PPO config's critic learners come out of the
    training half: as many critic as policy learners, a GPU each, or both on one GPU, half each, when the training
    half is a single GPU. On a single GPU every actor shares it (a small model; the weights then travel over gloo, as
    NCCL takes one rank per GPU)."""
    if num_gpus < 1:
        raise ValueError(f"num_gpus must be >= 1 for a GPU preset, got {num_gpus}")
    critic = config.has_critic
    if num_gpus == 1:
        learners, per_learner, engines, per_engine = 1, (1 / 3 if critic else 0.5), 1, (1 / 3 if critic else 0.5)
    else:
        train = num_gpus // 2
        if critic and train == 1:
            learners, per_learner = 1, 0.5  # the policy learner and the critic learner share the GPU
        else:
            learners, per_learner = (train // 2 if critic else train), 1
        trained = learners * per_learner * (2 if critic else 1)
        engines, per_engine = int(num_gpus - trained), 1
    # No kv_cache_bytes: each engine's KV cache is what its GPUs (or its share of one) leave after the weights.
    return (config.learners(num_learners=learners, num_gpus_per_learner=per_learner, dtype="bfloat16",
                            gradient_checkpointing=True)
            .env_runners(engine="vllm", num_engines=engines, num_gpus_per_engine=per_engine,
                         num_env_runners=2 * engines, engine_config={"dtype": "bfloat16"})
            # An autoscaling cluster (cluster.yaml) brings its GPU nodes only once the actors ask for them.
            .debugging(check_resources=False))


def gpu_preset(config: AlgorithmConfig, gpu_memory_gb: float | None) -> AlgorithmConfig:
    """A GPU preset on GPUs of `gpu_memory_gb` GB (None: unknown, left as it is): engines too large for one GPU split
    over 2, 4 or 8 (tensor parallel, memrl.memory_plan.fit_engines), the learners' micro-batches halved until the
    memory plan fits (fit_token_budget), and the size kept in debugging.gpu_memory_gb, which build() checks the whole
    plan against."""
    if gpu_memory_gb is None:
        return config
    return fit_token_budget(fit_engines(config, gpu_memory_gb), gpu_memory_gb).debugging(gpu_memory_gb=gpu_memory_gb)


def use_engine(config: AlgorithmConfig, engine: str) -> AlgorithmConfig:
    """A GPU preset served by `engine` (--engine): the presets are written for vLLM; the reference TorchEngine
    keeps their dtype and max_model_len, and vLLM's KV-cache size does not apply to it."""
    if engine == config.env_runners_cfg.engine:
        return config
    kept = {k: v for k, v in config.env_runners_cfg.engine_config.items() if k in ("dtype", "max_model_len")}
    return config.env_runners(engine=engine, engine_config=kept)


def run_example(p: argparse.ArgumentParser, args: argparse.Namespace, name: str,
                cpu_config: Callable[[], AlgorithmConfig], gpu_config: Callable[[], AlgorithmConfig],
                cpu_iterations: int, gpu_iterations: int = 200, metric: str | None = None) -> dict:
    """An example's main: the CPU default, or with --num-gpus its paper preset on the local checkpoint --model;
    writes to --out (default runs/<name>). `metric` is train()'s held-out score."""
    if args.num_gpus and not args.model:
        p.error("--num-gpus needs --model: a local Hugging Face checkpoint to train (e.g. Qwen2.5-7B-Instruct)")
    if args.verbose:
        os.environ[VERBOSE_ENV] = "1"
    if (args.plan or args.gpu_memory_gb) and not args.num_gpus:
        p.error("--plan and --gpu-memory-gb are for GPU runs: give --num-gpus (and --model)")
    if args.num_gpus:
        preset, gpu_memory_gb = use_engine(gpu_config(), args.engine), args.gpu_memory_gb or local_gpu_memory_gb()
        try:
            cfg = gpu_preset(preset, gpu_memory_gb)
        except ValueError as e:
            if args.plan:
                print(preset.plan(gpu_memory_gb).table())
            p.error(str(e))
        if args.plan:
            print(cfg.plan(gpu_memory_gb).table())
            raise SystemExit(0)
    init_ray(args.num_gpus)
    if args.num_gpus:
        iterations = args.iterations or gpu_iterations
    else:
        cfg, iterations = cpu_config(), args.iterations or cpu_iterations
    if args.seed is not None:
        cfg, name = cfg.debugging(seed=args.seed), f"{name}_seed{args.seed}"
    return train(cfg, iterations, args.out or RUNS / name, metric)


def train(config: AlgorithmConfig, iterations: int, out: Path, metric: str | None = None) -> dict:
    """Build, evaluate before, train with a progress bar, evaluate after, write the algorithm checkpoint to
    out/checkpoint, the policy to out/model (a Hugging Face checkpoint), the figures to out/summary.json (with
    "change": the per-task change of the held-out score and its 95% interval, both evaluations being on the same
    tasks) and the learning curve to out/curve.png. The score is the trajectory's reward, or with `metric` that env
    figure of each trajectory (e.g. Mem-α's r_acc); its mean and 95% interval are then added to each evaluation's
    figures as <metric>_mean, <metric>_ci_low and <metric>_ci_high."""
    start = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    bars = config.debugging_cfg.progress_bars
    algo = config.build()
    t_eval = time.perf_counter()
    before_trajectories = heldout(algo, "evaluation before", bars)
    eval_s = time.perf_counter() - t_eval
    key = metric or "reward"
    curve, score_curve, timers, learners, counters = [], [], [], [], {}
    bar = tqdm(range(iterations), desc="training", unit="iter", disable=not bars)
    for _ in bar:
        result = algo.train()
        curve.append(result["env_runners"]["reward_mean"])
        score_curve.append(result["env_runners"].get(f"{key}_mean", float("nan")))
        timers.append(result["timers"])
        learners.append(result["learners"])
        counters = result["counters"]
        # An iteration whose every group was dropped (equal rewards under dynamic sampling) takes no step.
        loss = f"{result['learners']['loss']:.4f}" if "loss" in result["learners"] else "no step"
        bar.set_postfix(reward=f"{curve[-1]:.3f}", loss=loss, it_s=f"{result['timers']['iteration_s']:.1f}")
    after_trajectories = heldout(algo, "evaluation after", bars)
    before, after = heldout_summary(before_trajectories, metric), heldout_summary(after_trajectories, metric)
    # Tasks where either evaluation's episode failed (its env could not finish it) have no pair to compare.
    pairs = [(score(b, metric), score(a, metric)) for b, a in zip(before_trajectories, after_trajectories)
             if not (b.failure or a.failure)]
    change, low, high = paired_interval([b for b, _ in pairs], [a for _, a in pairs])
    algo.save_to_path(out / "checkpoint")
    algo.save_model(out / "model")
    algo.stop()
    summary = {"init": str(config.learners_cfg.model_path), "reward_per_iteration": curve, "eval_before": before,
               "eval_after": after, "score": key,
               "score_per_iteration": score_curve, "learners_per_iteration": learners, "counters": counters,
               "change": {"mean": change, "ci_low": low, "ci_high": high},
               "wall_s": time.perf_counter() - start, "eval_s": eval_s,
               "mean_timers_s": {k: sum(t[k] for t in timers) / len(timers) for k in timers[0]} if timers else {}}
    (out / "summary.json").write_text(json.dumps(portable(summary), indent=1))
    plot_curve(summary, out / "curve.png")
    for name, ev in (("before", before), ("after", after)):
        print(f"held-out {key} {name} training: {ev[f'{key}_mean']:.3f} "
              f"[{ev[f'{key}_ci_low']:.3f}, {ev[f'{key}_ci_high']:.3f}] over {int(ev['num_tasks'])} tasks")
    print(f"change on the same tasks: {change:+.3f} [{low:+.3f}, {high:+.3f}]")
    print(f"wrote {out} in {summary['wall_s']:.0f} s")
    return summary


def training_budget(checkpoint: str | Path) -> str:
    """What `checkpoint` was trained with, in words: its SFT stages (steps x rows per step and, where one decayed, the
    learning-rate schedule of each, from its sft_summary.json) or, for a policy `train` wrote (<run>/model), its
    starting checkpoint's budget then the RL iterations and trajectories trained; with the wall-clock minutes of it
    all where recorded (machines differ)."""
    path = Path(checkpoint)
    sft_file, rl_file = path / SUMMARY_FILE, path.parent / "summary.json"
    # First the RL run: a policy saved by train() keeps the files of the checkpoint it started from, its warm-start's
    # sft_summary.json included.
    if path.name == "model" and rl_file.is_file():
        run = json.loads(rl_file.read_text())
        rl = (f"RL {len(run['reward_per_iteration'])} iterations, "
              f"{run['counters'].get('trajectories_trained', 0)} trajectories trained{_minutes([run])}")
        return f"{training_budget(run['init'])}, then {rl}" if run.get("init") else rl
    if sft_file.is_file():
        last = json.loads(sft_file.read_text())
        summaries = [*last.get("earlier_stages", []), last]
        # A stage's config is SFTConfig.to_dict() (settings under "training", the schedule under its "optimizer"), or
        # flatter in older summaries.
        stages = [summary["config"].get("training", summary["config"]) for summary in summaries]
        steps = "+".join(str(stage["steps"]) for stage in stages)
        schedules = [stage.get("optimizer", stage).get("lr_schedule", "constant") for stage in stages]
        lr = f", lr {'+'.join(schedules)}" if set(schedules) != {"constant"} else ""
        rows = [str(stage["batch_size"]) for stage in stages]
        rows = "+".join(rows) if len(set(rows)) > 1 else rows[-1]  # per stage where they differ
        return f"SFT {steps} steps x {rows} rows{lr}{_minutes(summaries)}"
    return "not recorded"


def _minutes(summaries: list[dict]) -> str:
    """", N min" of the summaries' wall_s together, or "" when one lacks it."""
    if not summaries or any("wall_s" not in summary for summary in summaries):
        return ""
    return f", {sum(summary['wall_s'] for summary in summaries) / 60:.0f} min"


def write_table(out: Path, stem: str, data: Any, table: str, plot: Callable[[Path], None]) -> None:
    """An analysis's results: `data` as out/<stem>.json, the Markdown `table` as out/<stem>.md and `plot(path)` as
    out/<stem>.png."""
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.json").write_text(json.dumps(data, indent=1))
    (out / f"{stem}.md").write_text(table)
    plot(out / f"{stem}.png")


def budget_table(policies: list[tuple[str, str | Path]]) -> str:
    """A Markdown table of what each (name, checkpoint) was trained with (training_budget), for the comparison
    tables: a baseline is only as good as the training it got."""
    lines = ["| policy | trained with |", "|---|---|"]
    lines += [f"| {name} | {training_budget(path)} |" for name, path in dict(policies).items()]
    return "\n".join(lines) + "\n"


def score(trajectory, metric: str | None) -> float:
    """A held-out trajectory's score: its reward, or its env figure `metric`."""
    if metric is None:
        return trajectory.reward
    if metric not in trajectory.metrics:
        raise KeyError(f"held-out score {metric!r} is not among the trajectory's metrics {sorted(trajectory.metrics)}")
    return trajectory.metrics[metric]


def heldout_summary(trajectories: list, metric: str | None) -> dict:
    """eval_summary, plus the mean of `metric` and its 95% interval when the score is an env figure."""
    summary = eval_summary(trajectories)
    if metric is not None:
        values = [score(t, metric) for t in trajectories if not t.failure]
        mean, low, high = reward_interval(values)
        summary.update({f"{metric}_mean": mean, f"{metric}_ci_low": low, f"{metric}_ci_high": high})
    return summary


def heldout(algo, label: str, bar: bool = True) -> list:
    """The algorithm's held-out trajectories, as one phase of the console: a bar that ends with the reward."""
    with tqdm(total=algo.cfg.evaluation_cfg.evaluation_num_tasks, desc=label, unit="task", disable=not bar) as progress:
        trajectories = algo.heldout_trajectories()
        progress.update(len(trajectories))
        progress.set_postfix(reward=f"{eval_summary(trajectories)['reward_mean']:.3f}")
    return trajectories


def plot_curve(summary: dict, path: Path) -> None:
    """The training score (reward, or the env figure summary["score"]) per iteration, with the held-out score (and
    its interval) before and after training."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    key, curve = summary["score"], summary["score_per_iteration"]
    fig, ax = plt.subplots(figsize=(6.5, 4))
    ax.plot(range(1, len(curve) + 1), curve, marker=".", alpha=0.5, label=f"training {key} (sampled)")
    window = min(5, len(curve))
    if window > 1:  # a handful of tasks per iteration makes the raw curve noisy
        smooth = np.convolve(curve, np.ones(window) / window, mode="valid")
        ax.plot(range(window, len(curve) + 1), smooth, label=f"mean of the last {window} iterations")
    for x, name in ((0, "eval_before"), (len(curve), "eval_after")):
        ev = summary[name]
        ax.errorbar([x], [ev[f"{key}_mean"]], yerr=[[ev[f"{key}_mean"] - ev[f"{key}_ci_low"]],
                                                    [ev[f"{key}_ci_high"] - ev[f"{key}_mean"]]],
                    fmt="s", capsize=4, color="black")
    ax.plot([], [], "s", color="black", label=f"held-out {key}, greedy (95% CI)")
    ax.set_xlabel("iteration")
    ax.set_ylabel(key)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
