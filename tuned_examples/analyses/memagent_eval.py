"""Accuracy vs context length for MemAgent (the trained policy and its warm-start) and the full-context baseline.

    python tuned_examples/analyses/memagent_eval.py  # after tuned_examples/memagent_dapo.py
    python tuned_examples/analyses/memagent_eval.py --policy runs/memagent_dapo/model --multipliers 1 2 4 8 16

Every policy answers the same held-out questions at each length (the generator keeps a question and its gold
facts and adds distractor documents as the length grows). Per policy and length: exact-match accuracy with its
95% interval, the paired change against the warm-start on the same questions (with its interval), sub_em (the
paper's definition, memrl_envs.qa_metrics.sub_em) and F1, what the answer rested on (the share of questions whose last
memory, or the baseline's quoted evidence, held both gold facts, and the distractor documents it held), peak tokens
per call and total tokens per task. Writes
length.json, length.md (the table) and length.png (accuracy and peak tokens per call against length) to --out.

Greedy by default. With --samples K --temperature T every policy answers each question K times at T instead (what
RL trains on): accuracy is then the mean over the K answers, and the table adds pass@K (any answer right) and
all-K-right, each with its interval and its change against the warm-start:

    python tuned_examples/analyses/memagent_eval.py --multipliers 1 --num-tasks 500 --samples 4 --temperature 1
"""

from __future__ import annotations

import argparse
from pathlib import Path

import gymnasium as gym
import matplotlib
import numpy as np

import memrl_envs  # noqa: F401  (registers memrl/ChunkStream-v0)
from memrl.evaluation import check_sampling, evaluate_checkpoint, heldout_tasks
from memrl.stats import paired_interval, per_task_of_k, task_rewards
from memrl.experiment import RUNS, budget_table, init_ray, require_checkpoint, trained_policy, write_table
from memrl_tuned_examples.tasks.memagent import BASELINE, MEMORY_TOKENS, NUM_DOCS, WARM_START, cpu_task

MULTIPLIERS = (1, 2, 4, 8, 16)
"""Document lengths, as multiples of NUM_DOCS (the length the warm-starts learnt at; the main job's RL trains at 4x)."""
WARM_START_NAME = "MemAgent warm-start"
"""The policy every other one is compared with, paired on the same questions at each length."""
TRAINED = RUNS / "memagent_dapo" / "model"
"""Where tuned_examples/memagent_dapo.py writes the trained policy."""


def policies(trained: Path | None, warm_start: Path = WARM_START, baseline: Path = BASELINE
             ) -> list[tuple[str, Path, str]]:
    """(name, checkpoint, workflow) of each policy to measure; the trained one only when given. `warm_start` is the
    MemAgent policy the trained one started from (the shipped one by default); `baseline` the full-context one (the
    shipped SFT one by default, or one trained by `memagent_dapo.py --workflow full_context`)."""
    rows = [("RL-MemAgent", trained, "memagent")] if trained is not None else []
    return rows + [(WARM_START_NAME, warm_start, "memagent"), ("full-context baseline", baseline, "full_context")]


def document_tokens(env_config: dict, num_tasks: int, seed: int) -> float:
    """Mean length in tokens of the held-out documents of the chunk-stream env under `env_config`."""
    env = gym.make("memrl/ChunkStream-v0", **env_config).unwrapped
    counts = []
    for task in heldout_tasks(seed, num_tasks):
        env.reset(seed=task.seed)
        counts.append(env.counter.count(env.task.context))
    return float(np.mean(counts))


SAMPLED = ("pass_at_k", "all_k")
"""Figures of a sampled evaluation beside accuracy: each question's best and worst of its K answers."""


def length_table(runs: list[tuple[str, Path, str]], multipliers: list[int], num_tasks: int, engine: str,
                 seed: int = 0, temperature: float = 0.0, samples: int = 1, num_env_runners: int = 2) -> list[dict]:
    """One row per (policy, length): accuracy with its interval and the token figures (greedy, or the mean of
    `samples` answers per question at `temperature`, with pass@k and all-k-right); `num_env_runners` as for
    evaluate_checkpoint (0: in this process)."""
    doc_tokens = {m: document_tokens(cpu_task("memagent", runs[0][1], NUM_DOCS * m)[0], num_tasks, seed)
                  for m in multipliers}
    engine_config = {"kv_cache_bytes": 256 * 1024**2} if engine == "vllm" else {}
    rows, rewards = [], {}
    for name, path, workflow in runs:
        configs = [cpu_task(workflow, tokenizer_path=path, num_docs=NUM_DOCS * m) for m in multipliers]
        results = evaluate_checkpoint(str(path), "memrl/ChunkStream-v0", [env for env, _ in configs], workflow,
                                      configs[0][1], num_tasks, max_tokens=MEMORY_TOKENS, engine=engine,
                                      engine_config=engine_config, seed=seed, temperature=temperature,
                                      samples=samples, num_env_runners=num_env_runners)
        for m, (summary, trajectories) in zip(multipliers, results):
            # NaN where any answer's episode failed
            rewards[name, m] = per_task_of_k(task_rewards([trajectories[r * num_tasks:(r + 1) * num_tasks]
                                                           for r in range(samples)]))
            row = {
                "policy": name, "workflow": workflow, "multiplier": m, "num_docs": NUM_DOCS * m,
                "document_tokens": doc_tokens[m], "num_tasks": int(summary["num_tasks"]),
                "accuracy": summary["reward_mean"], "ci_low": summary["reward_ci_low"],
                "ci_high": summary["reward_ci_high"], "sub_em": summary["sub_em_mean"], "f1": summary["f1_mean"],
                "all_facts_held": summary["all_facts_held_mean"], "facts_held": summary["facts_held_mean"],
                "distractors_held": summary["distractors_held_mean"],
                "peak_tokens_per_call": summary["peak_context_tokens_max"],
                "total_tokens_per_task": summary["total_tokens_mean"], "calls_per_task": summary["num_calls_mean"],
                "temperature": temperature, "samples": samples,
            }
            if samples > 1:
                for key in SAMPLED:
                    row.update({key: summary[f"{key}_mean"], f"{key}_ci_low": summary[f"{key}_ci_low"],
                                f"{key}_ci_high": summary[f"{key}_ci_high"]})
            rows.append(row)
            print(f"{name:>22} x{m:<3} accuracy {row['accuracy']:.3f} [{row['ci_low']:.3f}, {row['ci_high']:.3f}]  "
                  f"peak tokens/call {row['peak_tokens_per_call']:.0f}  tokens/task {row['total_tokens_per_task']:.0f}",
                  flush=True)
    for row in rows:  # each policy against the warm-start, paired on the same questions
        base = rewards.get((WARM_START_NAME, row["multiplier"]))
        if base is not None and row["policy"] != WARM_START_NAME:
            mine = rewards[row["policy"], row["multiplier"]]
            for key in ("reward", *(SAMPLED if samples > 1 else ())):
                pairs = [(b, a) for b, a in zip(base[key], mine[key]) if not (np.isnan(b) or np.isnan(a))]
                change = paired_interval([b for b, _ in pairs], [a for _, a in pairs])
                names = (("change_vs_warm_start", "change_ci_low", "change_ci_high") if key == "reward" else
                         (f"{key}_change", f"{key}_change_ci_low", f"{key}_change_ci_high"))
                row.update(zip(names, change))
    return rows


def markdown(rows: list[dict]) -> str:
    """The table, one line per (policy, length); a sampled evaluation adds pass@k and all-k-right."""
    sampled = rows and "pass_at_k" in rows[0]
    k = rows[0]["samples"] if sampled else 1
    head = "accuracy (EM) [95% CI]" if not sampled else f"accuracy, mean of {k} samples at T={rows[0]['temperature']:g}"
    extra = f" pass@{k} | change, paired | all {k} right | change, paired |" if sampled else ""
    lines = [f"| policy | length | docs | doc tokens | {head} | change vs warm-start, paired [95% CI] "
             f"| sub_em (paper's: contains a gold answer) | F1 | both gold facts held | distractors held "
             f"| peak tokens/call | tokens/task |{extra}",
             "|---|---|---|---|---|---|---|---|---|---|---|---|" + "---|" * (4 if sampled else 0)]

    def change(r: dict, name: str, prefix: str) -> str:
        return f"{r[name]:+.3f} [{r[prefix + '_ci_low']:+.3f}, {r[prefix + '_ci_high']:+.3f}]" if name in r else ""

    for r in rows:
        line = (f"| {r['policy']} | {r['multiplier']}x | {r['num_docs']} | {r['document_tokens']:.0f} | "
                f"{r['accuracy']:.3f} [{r['ci_low']:.3f}, {r['ci_high']:.3f}] | "
                f"{change(r, 'change_vs_warm_start', 'change')} | {r['sub_em']:.3f} | "
                f"{r['f1']:.3f} | {r['all_facts_held']:.3f} | {r['distractors_held']:.2f} | "
                f"{r['peak_tokens_per_call']:.0f} | {r['total_tokens_per_task']:.0f} |")
        for key in SAMPLED if sampled else ():
            line += (f" {r[key]:.3f} [{r[key + '_ci_low']:.3f}, {r[key + '_ci_high']:.3f}] | "
                     f"{change(r, key + '_change', key + '_change')} |")
        lines.append(line)
    return "\n".join(lines) + "\n"


def plot(rows: list[dict], path: Path) -> None:
    """Accuracy (with intervals) and peak tokens per call against document length, one line per policy."""
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (acc_ax, tok_ax) = plt.subplots(1, 2, figsize=(11, 4.2))
    for name in dict.fromkeys(r["policy"] for r in rows):
        rs = [r for r in rows if r["policy"] == name]
        x = [r["document_tokens"] for r in rs]
        acc = np.array([r["accuracy"] for r in rs])
        err = np.array([[a - r["ci_low"], r["ci_high"] - a] for a, r in zip(acc, rs)]).T
        acc_ax.errorbar(x, acc, yerr=err, marker="o", capsize=3, label=name)
        tok_ax.plot(x, [r["peak_tokens_per_call"] for r in rs], marker="o", label=name)
    for ax in (acc_ax, tok_ax):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("document length (tokens)")
        ax.grid(alpha=0.3)
    acc_ax.set_ylabel("exact-match accuracy (95% CI)")
    acc_ax.set_ylim(-0.02, 1.02)
    acc_ax.set_title("accuracy vs context length")
    tok_ax.set_ylabel("peak tokens per call")
    tok_ax.set_title("peak tokens per call")
    acc_ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--policy", type=Path, help=f"trained MemAgent checkpoint (default: {TRAINED} when it exists)")
    p.add_argument("--warm-start", type=Path, default=WARM_START,
                   help="the MemAgent checkpoint the trained policy started from, which the others are paired with "
                        "(default: the shipped warm-start)")
    p.add_argument("--baseline", type=Path, default=BASELINE,
                   help="the full-context baseline's checkpoint (default: the shipped SFT one; "
                        "runs/memagent_dapo_full_context/model after memagent_dapo.py --workflow full_context)")
    p.add_argument("--multipliers", type=int, nargs="+", default=list(MULTIPLIERS),
                   help="document lengths as multiples of the warm-starts' length (10 documents)")
    p.add_argument("--num-tasks", type=int, default=200, help="held-out questions per length")
    p.add_argument("--samples", type=int, default=1, help="answers per question (> 1 needs --temperature > 0)")
    p.add_argument("--temperature", type=float, default=0.0, help="sampling temperature (default 0: greedy)")
    p.add_argument("--engine", choices=("vllm", "torch"), default="vllm", help="inference engine")
    p.add_argument("--out", type=Path, default=RUNS / "memagent_eval", help="where to write the table and plot")
    args = p.parse_args(argv)
    trained = trained_policy(p, args.policy, TRAINED)
    warm_start = require_checkpoint(p, "--warm-start", args.warm_start)
    baseline = require_checkpoint(p, "--baseline", args.baseline)
    if min(args.multipliers) < 1 or args.num_tasks < 1:
        p.error("--multipliers and --num-tasks must be positive integers")
    try:  # before Ray or any engine starts
        check_sampling(args.samples, args.temperature)
    except ValueError:
        p.error(f"--samples must be >= 1 and --temperature >= 0, with --temperature > 0 when --samples > 1; got "
                f"--samples {args.samples} --temperature {args.temperature}")
    init_ray(0)
    measured = policies(trained, warm_start, baseline)
    rows = length_table(measured, sorted(args.multipliers), args.num_tasks, args.engine,
                        temperature=args.temperature, samples=args.samples)
    budgets = budget_table([(name, path) for name, path, _ in measured])
    write_table(args.out, "length", rows, markdown(rows) + "\n" + budgets, lambda p: plot(rows, p))
    print(markdown(rows) + "\n" + budgets)
    print(f"wrote {args.out}/length.json, length.md, length.png")
    return rows


if __name__ == "__main__":
    main()
