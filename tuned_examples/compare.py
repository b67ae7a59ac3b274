"""Every method on every CPU task its workflow fits, each trained on the same budget, in one table.

    python tuned_examples/compare.py                         # the CPU table (hours; rerun to go on: done cells stay)
    python tuned_examples/compare.py --columns search_1 webshop --rows ReAct ReSum   # some cells
    python tuned_examples/compare.py --table-only            # the table of the cells done so far
    python tuned_examples/compare.py --quick --rows ReAct --columns search_1   # a check in minutes

A cell is one method (a row: its workflow and its RL algorithm) on one task (a column: an env of the CPU examples
with its settings). Every trained cell starts from the same checkpoint (the embedded tiny model that learned to copy
text, tuned_examples/checkpoints/copying), takes the same SFT on its own scripted expert (BUDGET: steps x rows, lr
1e-3 decaying linearly to 0), then the same RL (iterations x trajectories, lr 1e-4, temperature 0.7, one vLLM engine
and two ZeRO-3 learners), and is scored greedily on the same held-out tasks after SFT and after RL. Baselines without
a policy of their own (the memory-store answerer reading the raw chunks) are evaluated only, and say so. A cell
writes <out>/<row>__<column>/ (the warm-start, the RL run and cell.json). The table (held-out score with its 95%
interval after RL, the change RL made, peak tokens per call, each cell's budget) goes to --results as
compare_table.json, .md and .png, and that JSON is the durable record: a cell done is one with a cell.json under
<out> or a record in the table already written (a fresh checkout, whose runs/ is empty, goes on from the committed
table), and it is not run again unless --redo names it. A cell of another budget is refused before anything trains,
never mixed in silently.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

from memrl.algorithms import DAPOConfig, GRPOConfig, MemAlphaConfig, MemPOConfig, PPOConfig, sft
from memrl.algorithms.sft import SFTConfig
from memrl.config import AlgorithmConfig
from memrl.evaluation import evaluate_checkpoint
from memrl.experiment import RUNS, heldout_summary, init_ray, train, training_budget, write_table
from memrl_tuned_examples.tasks import CHECKPOINTS, memagent, memalpha, memory_r1, search, webshop
from memrl_tuned_examples.warm_starts import memagent_sft, memalpha_sft, memory_r1_sft, search_sft, webshop_sft

RESULTS = Path(__file__).resolve().parent / "results"
"""Where the recorded table goes."""
INIT = CHECKPOINTS / "copying"
"""Where every trained cell starts: the embedded tiny model trained to copy text (webshop_sft.py --workflow copying),
a start that favours no task and no workflow."""


@dataclass(frozen=True)
class Budget:
    """What every trained cell gets."""

    sft_steps: int = 400
    """SFT optimizer steps on the cell's own expert."""
    sft_rows: int = 32
    """Expert calls per SFT step."""
    rl_iterations: int = 20
    """RL iterations."""
    trajectories: int = 64
    """Trajectories sampled per RL iteration (8 tasks x 8 for group methods, 64 tasks x 1 for PPO)."""
    heldout_tasks: int = 300
    """Held-out tasks each cell is scored on, before and after RL."""

    def words(self) -> str:
        return (f"SFT {self.sft_steps} steps x {self.sft_rows} rows from copying, then RL {self.rl_iterations} "
                f"iterations x {self.trajectories} trajectories; {self.heldout_tasks} held-out tasks")


BUDGET = Budget()
"""The recorded table's budget."""
QUICK = Budget(sft_steps=2, sft_rows=8, rl_iterations=1, trajectories=8, heldout_tasks=4)
"""--quick: a check that every part runs, not a result."""
SFT_EVAL_TASKS = 16
"""Greedy episodes the SFT itself scores (its summary; the table's scores come from the held-out tasks)."""
LEARNERS = 2
"""ZeRO-3 learners of every SFT and RL run (--quick: 0, one learner in this process, which sums the same
gradients)."""


@dataclass(frozen=True)
class Algorithm:
    """A row's RL algorithm: its config class and its own settings (the budget's trajectories come on top)."""

    config: Callable[[], AlgorithmConfig]
    settings: dict
    group_size: int = 8


ALGORITHMS = {
    "GRPO": Algorithm(GRPOConfig, {}),
    "DAPO": Algorithm(DAPOConfig, {"dynamic_sampling": True}),
    "PPO": Algorithm(PPOConfig, {"critic_lr": 1e-4, "critic_warmup_iterations": 2}, group_size=1),
    "MemPO": Algorithm(MemPOConfig, {"memory_advantage_coef": 1.0}),
    "Mem-α GRPO": Algorithm(MemAlphaConfig, {"dynamic_sampling": True, "dynamic_sampling_metric": "r_acc",
                                             "dynamic_sampling_max_rounds": 1}),
}
"""The algorithms of the rows, with the settings their CPU examples use."""


class Column(ABC):
    """A CPU task: how a policy of it is warm-started (its SFT config from INIT) and trained (its RL env, workflow and
    services), and the score of its table cell (`metric`: an env figure, or None for the reward)."""

    key: str
    label: str
    metric: str | None = None
    max_tokens: int
    token_budget: int = 32768
    """Padded tokens per learner micro-batch. The learners sum every micro-batch's loss over the step's global token
    count, so a smaller budget takes the same gradients in more passes, with less memory at once."""

    @abstractmethod
    def sft(self, policy: str, steps: int) -> SFTConfig:
        """The SFT of `policy` on this task's expert for `steps` steps (the budget's other settings come on top)."""

    @abstractmethod
    def rl(self, cfg: AlgorithmConfig, policy: str, model: Path) -> AlgorithmConfig:
        """`cfg` with this task's env, `policy`'s workflow and the services it needs, for `model`."""


class ChunkStream(Column):
    key, label, max_tokens = "chunk_stream", "chunk stream", memagent.MEMORY_TOKENS

    def sft(self, policy, steps):
        return memagent_sft.config(policy, memagent_sft.Stage(steps, 2000), SFT_EVAL_TASKS, INIT)

    def rl(self, cfg, policy, model):
        env, workflow = memagent.cpu_task(policy, tokenizer_path=str(model))
        return (cfg.environment("memrl/ChunkStream-v0", env_config=env)
                .env_runners(workflow=policy, workflow_config=workflow)
                .evaluation(evaluation_env_config={"num_docs": memagent.NUM_DOCS}))


class SearchQA(Column):
    """MEM1's Table-1 task at `objectives` one-hop questions per task; scored by exact match per question."""

    metric, max_tokens = "em", search.MAX_TOKENS

    def __init__(self, objectives: int):
        self.objectives = objectives
        self.key, self.label = f"search_{objectives}", f"search QA, {objectives} question{'s' * (objectives > 1)}"

    def sft(self, policy, steps):
        stage = search_sft.Stage(steps, 2000, (self.objectives,), expert_notes=True, table_task=True)
        return search_sft.config(policy, stage, SFT_EVAL_TASKS, INIT)

    def rl(self, cfg, policy, model):
        return (cfg.environment("memrl/Search-v0", env_config=search.table_env_config(self.objectives))
                .env_runners(workflow=policy, workflow_config=search.workflow_config(policy)))


class WebShop(Column):
    """WebShop's trajectories run to thousands of tokens per row (MEM1's stitched rows carry a 4D mask, whose
    attention the learner materializes per row): at 32768 tokens per micro-batch four ZeRO-3 learners (MEM1's policy
    and critic) outgrow a 24 GB machine, so micro-batches here are a quarter of that."""

    key, label, max_tokens, token_budget = "webshop", "WebShop", webshop.MAX_TOKENS, 8192

    def sft(self, policy, steps):
        return webshop_sft.config(policy, steps, num_eval_tasks=SFT_EVAL_TASKS, init=INIT)

    def rl(self, cfg, policy, model):
        return (cfg.environment("memrl/WebShop-v0", env_config=webshop.env_config("train"))
                .env_runners(workflow=policy, workflow_config=webshop.workflow_config(policy),
                             max_calls_per_episode=webshop.MAX_TURNS)
                .evaluation(evaluation_env_config={"split": "test"}))


class MemoryStore(Column):
    """Mem-α's task; a policy is one of tasks/memalpha.py's WRITERS (how it keeps its memory), read by the frozen
    CPU answerer; scored by r_acc."""

    key, label, metric, max_tokens = "memory_store", "memory store", "r_acc", memalpha.CPU_MAX_TOKENS
    ROLES = {"mem-alpha": "policy", "memagent": "memagent", "mem1": "mem1"}
    """memalpha_sft.py's build of each writer."""

    def sft(self, policy, steps):
        return memalpha_sft.config(steps, 2000, SFT_EVAL_TASKS, str(INIT), role=self.ROLES[policy])

    def rl(self, cfg, policy, model):
        writer = memalpha.WRITERS[policy]
        cfg, where = memalpha.served_answerer(cfg, memalpha.ANSWERER_CHECKPOINT)
        return (cfg.environment("memrl/MemoryStore-v0",
                                env_config={**memalpha.cpu_env_config(model, where), "memory": writer.memory})
                .env_runners(workflow=writer.workflow, workflow_config=writer.workflow_config))

    def evaluate_only(self, name: str, num_tasks: int, engine: str) -> dict:
        """A baseline without a policy's memory (tasks/memalpha.py ANSWER_MEMORIES): the answerer's weights read the
        chunks themselves; its held-out figures as `train` reports them."""
        env = {**memalpha.cpu_env_config(memalpha.ANSWERER_CHECKPOINT), **memalpha.ANSWER_MEMORIES[name],
               "answerer": "policy"}
        writer = memalpha.WRITERS["mem-alpha"]  # its workflow shows the answerer the answer chat alone
        engine_config = {"kv_cache_bytes": 256 * 1024**2} if engine == "vllm" else {}
        [(_, trajectories)] = evaluate_checkpoint(
            str(memalpha.ANSWERER_CHECKPOINT), "memrl/MemoryStore-v0", [env], writer.workflow,
            writer.workflow_config, num_tasks, max_tokens=self.max_tokens, engine=engine, engine_config=engine_config,
            num_env_runners=1 if engine == "vllm" else 0)  # as rl_config places them
        return heldout_summary(trajectories, self.metric)


class MemoryBank(Column):
    """Memory-R1's task: the memory manager's bank, read by the frozen CPU Answer Agent; scored by its exact match."""

    key, label, max_tokens = "memory_bank", "memory bank", memory_r1.CPU_MANAGER_TOKENS

    def sft(self, policy, steps):
        return memory_r1_sft.config(steps, 2000, SFT_EVAL_TASKS, role=policy, model=str(INIT), lr_schedule="linear")

    def rl(self, cfg, policy, model):
        cfg, where = memory_r1.served_answer_agent(cfg, memory_r1.ANSWER_WARM_START)
        return (cfg.environment("memrl/MemoryBank-v0", env_config=memory_r1.env_config(policy, where))
                .env_runners(workflow="last_observation"))


COLUMNS = {c.key: c for c in (ChunkStream(), SearchQA(1), SearchQA(4), WebShop(), MemoryStore(), MemoryBank())}


@dataclass(frozen=True)
class Row:
    """A method: its RL algorithm (an ALGORITHMS name) and its policy on each column it fits (a workflow, or the
    column's own kind of policy); `evaluate_only` columns have no policy to train (a baseline read by the task's
    own answerer)."""

    label: str
    algorithm: str
    policies: dict
    evaluate_only: tuple = ()


ROWS = {r.label: r for r in (
    Row("MemAgent", "DAPO", {"chunk_stream": "memagent", "memory_store": "memagent"}),
    Row("MEM1", "PPO", {"search_1": "mem1", "search_4": "mem1", "webshop": "webshop_mem1", "memory_store": "mem1"}),
    Row("MemSearcher", "GRPO", {"search_1": "memsearcher", "search_4": "memsearcher"}),
    Row("MemPO", "MemPO", {"search_1": "mempo", "search_4": "mempo"}),
    Row("Mem-α", "Mem-α GRPO", {"memory_store": "mem-alpha"}),
    Row("ReSum", "GRPO", {"search_1": "resum", "search_4": "resum", "webshop": "webshop_resum"}),
    Row("Memory-R1", "GRPO", {"memory_bank": "manager"}),
    Row("ReAct", "GRPO", {"search_1": "react", "search_4": "react", "webshop": "webshop_react"}),
    Row("truncated ReAct", "GRPO", {"search_1": "react_truncated", "search_4": "react_truncated",
                                    "webshop": "webshop_react_truncated"}),
    Row("full context", "GRPO", {"chunk_stream": "full_context", "memory_store": "long-context"},
        evaluate_only=("memory_store",)),
    Row("RAG top-2", "GRPO", {"memory_store": "RAG-top2"}, evaluate_only=("memory_store",)),
)}
"""The table's rows. MEM1 on the memory store is its paragraph memory (the memalpha workflow's text mode); on search
and WebShop, ReAct keeps the full history, so the full-context row has no cell there."""
NOT_APPLICABLE = "n/a"


def cell_name(row: Row, column: Column) -> str:
    return f"{row.label.replace(' ', '_')}__{column.key}"


def rl_config(row: Row, column: Column, model: Path, budget: Budget, engine: str,
              learners: int = LEARNERS) -> AlgorithmConfig:
    """The cell's RL: the row's algorithm on the column's task, the budget's trajectories and held-out tasks; a
    vLLM engine actor fed by one runner actor, or the torch engine and its runner in this process."""
    algorithm = ALGORITHMS[row.algorithm]
    cfg = column.rl(algorithm.config(), row.policies[column.key], model)
    engine_config = {"kv_cache_bytes": 256 * 1024**2} if engine == "vllm" else {}
    placed = {"num_env_runners": 1} if engine == "vllm" else {"num_env_runners": 0, "num_engines": 0}
    return (cfg
            .env_runners(**placed, num_envs_per_env_runner=64, engine=engine, max_tokens=column.max_tokens,
                         temperature=0.7, engine_config=engine_config)
            .learners(model_path=str(model), num_learners=learners, token_budget=column.token_budget)
            .training(lr=1e-4, tasks_per_iteration=budget.trajectories // algorithm.group_size,
                      group_size=algorithm.group_size, **algorithm.settings)
            .evaluation(evaluation_num_tasks=budget.heldout_tasks,
                        evaluation_num_envs_per_env_runner=min(budget.heldout_tasks, 256))
            .debugging(seed=0, wandb_project="memrl-compare"))


def scored(figures: dict, key: str) -> dict:
    """The mean of held-out figure `key` and its 95% interval, from an evaluation's figures (heldout_summary)."""
    return {k: figures[f"{key}_{k}"] for k in ("mean", "ci_low", "ci_high")}


def run_cell(row: Row, column: Column, budget: Budget, out: Path, engine: str, learners: int = LEARNERS) -> dict:
    """Train and score one cell (or, for an evaluate-only baseline, score it); writes and returns cell.json."""
    where = out / cell_name(row, column)
    policy = row.policies[column.key]
    start = time.perf_counter()
    key = column.metric or "reward"
    record = {"row": row.label, "column": column.key, "policy": policy, "budget": asdict(budget), "metric": key}
    if column.key in row.evaluate_only:
        ev = column.evaluate_only(policy, budget.heldout_tasks, engine)
        record.update(trained="no policy to train: the task's answerer reads the chunks",
                      score=scored(ev, key),
                      peak_tokens=ev["peak_context_tokens_mean"], num_tasks=int(ev["num_tasks"]))
    else:
        warm = where / "warm_start"
        if not (warm / sft.SUMMARY_FILE).is_file():  # a cell stopped during RL keeps its warm-start
            cfg = column.sft(policy, budget.sft_steps)
            cfg = (cfg.learners(model_path=str(INIT.resolve()), num_learners=learners)
                   .evaluation(evaluation_num_tasks=min(SFT_EVAL_TASKS, budget.heldout_tasks))
                   .training(lr=1e-3, lr_schedule="linear", lr_warmup_steps=0, lr_decay_steps=budget.sft_steps,
                             lr_min_ratio=0.0, batch_size=budget.sft_rows, steps=budget.sft_steps,
                             steps_per_iteration=min(200, budget.sft_steps)))
            sft.run(cfg, warm.resolve())
        summary = train(rl_config(row, column, warm.resolve(), budget, engine, learners), budget.rl_iterations,
                        where / "rl", column.metric)
        after, before = summary["eval_after"], summary["eval_before"]
        record.update(trained=training_budget(where / "rl" / "model"),
                      score=scored(after, key), warm_start_score=scored(before, key),
                      change=summary["change"], peak_tokens=after["peak_context_tokens_mean"],
                      num_tasks=int(after["num_tasks"]))
    record["wall_s"] = time.perf_counter() - start
    where.mkdir(parents=True, exist_ok=True)
    (where / "cell.json").write_text(json.dumps(record, indent=1))
    return record


def cells(rows: list[Row], columns: list[Column]) -> list[tuple[Row, Column]]:
    """The (row, column) pairs that apply, in table order."""
    return [(r, c) for r in rows for c in columns if c.key in r.policies]


def recorded(results: Path) -> list[dict]:
    """The cells of the table already written to `results` (none when there is none)."""
    table = results / "compare_table.json"
    return json.loads(table.read_text())["cells"] if table.is_file() else []


def collect(out: Path, budget: Budget, results: Path) -> dict:
    """Every cell done, by (row label, column key): the records of the table in `results`, then every cell.json
    under `out` (which replaces a record of the same cell). A cell of another budget is an error naming it."""
    applicable = cells(list(ROWS.values()), list(COLUMNS.values()))
    records = [(results / "compare_table.json", record) for record in recorded(results)]
    records += [(path, json.loads(path.read_text())) for path in (out / cell_name(r, c) / "cell.json"
                                                                  for r, c in applicable) if path.is_file()]
    known = [(r.label, c.key) for r, c in applicable]
    found = {}
    for path, record in records:
        if (record["row"], record["column"]) not in known:
            continue  # a row or column since removed from the table
        if record["budget"] != asdict(budget):
            raise ValueError(f"{path}: {record['row']} on {record['column']} was trained with {record['budget']}, "
                             f"not this table's {asdict(budget)}; move it away or make the table with that budget")
        found[(record["row"], record["column"])] = record
    return {key: found[key] for key in known if key in found}  # in table order


def interval(score: dict) -> str:
    return f"{score['mean']:.3f} [{score['ci_low']:.3f}, {score['ci_high']:.3f}]"


def grid(found: dict, text: Callable[[dict], str]) -> str:
    """A Markdown table of every row and column: text(record) for a cell done, else "not run yet" or n/a."""
    columns = list(COLUMNS.values())
    lines = ["| method | " + " | ".join(c.label for c in columns) + " |", "|---|" + "---|" * len(columns)]
    for row in ROWS.values():
        cells_here = [NOT_APPLICABLE if column.key not in row.policies else
                      text(found[row.label, column.key]) if (row.label, column.key) in found else "not run yet"
                      for column in columns]
        lines.append(f"| {row.label} | " + " | ".join(cells_here) + " |")
    return "\n".join(lines) + "\n"


def markdown(found: dict, budget: Budget) -> str:
    """The scores after RL, the scores after SFT, RL's change with the peak tokens per call, each cell's budget."""
    def shown(record: dict, key: str) -> str:  # an evaluate-only cell has one score, before and after alike
        return interval(record.get(key, record["score"])) + ("" if "change" in record else " (evaluated only)")

    after = grid(found, lambda r: shown(r, "score"))
    before = grid(found, lambda r: shown(r, "warm_start_score"))
    costs = grid(found, lambda r: (f"{r['change']['mean']:+.3f} [{r['change']['ci_low']:+.3f}, "
                                   f"{r['change']['ci_high']:+.3f}], " if "change" in r else "")
                 + f"{r['peak_tokens']:.0f}")
    metrics = ", ".join(f"{c.label}: {c.metric or 'reward'}" for c in COLUMNS.values())
    budgets = "| cell | trained with |\n|---|---|\n" + "".join(
        f"| {row} on {COLUMNS[col].label} | {record['trained']} |\n" for (row, col), record in found.items())
    return (f"Held-out score after RL [95% interval] ({metrics}); every trained cell: {budget.words()}.\n\n"
            f"{after}\nThe same tasks after SFT, before RL:\n\n{before}\n"
            f"Change RL made on the same tasks [95% interval], then peak tokens per call (mean over tasks of each "
            f"task's largest call):\n\n{costs}\n{budgets}")


def plot(found: dict, path: Path) -> None:
    """One panel per column: each method's held-out score after RL with its interval (gray: evaluated only), and a
    black mark where it stood after SFT."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    columns = list(COLUMNS.values())
    fig, axes = plt.subplots(1, len(columns), figsize=(3.2 * len(columns), 4), squeeze=False)
    for ax, column in zip(axes[0], columns):
        here = [(row, found[(row, column.key)]) for row in ROWS if (row, column.key) in found]
        for i, (row, record) in enumerate(here):
            s = record["score"]
            ax.barh(i, s["mean"], xerr=[[s["mean"] - s["ci_low"]], [s["ci_high"] - s["mean"]]], capsize=3,
                    color="tab:gray" if "change" not in record else "tab:blue")
            if "change" in record:
                ax.plot(record["warm_start_score"]["mean"], i, marker="|", markersize=14, color="black")
        ax.set_yticks(range(len(here)), [row for row, _ in here])
        ax.set_title(column.label, fontsize=9)
        ax.set_xlabel(column.metric or "reward")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def make_table(out: Path, results: Path, budget: Budget) -> dict:
    """The table of every cell done (recorded in `results` or under `out`), written to `results`."""
    found = collect(out, budget, results)
    data = {"budget": asdict(budget), "budget_words": budget.words(),
            "cells": [found[key] for key in sorted(found)],
            "not_applicable": [[r.label, c.key] for r in ROWS.values() for c in COLUMNS.values()
                               if c.key not in r.policies]}
    write_table(results, "compare_table", data, markdown(found, budget), lambda p: plot(found, p))
    return data


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", nargs="+", choices=sorted(ROWS), help="methods to run (default: all)")
    p.add_argument("--columns", nargs="+", choices=sorted(COLUMNS), help="tasks to run (default: all)")
    p.add_argument("--out", type=Path, help="where the cells are trained and kept (default: runs/compare; "
                   "with --quick, runs/compare_quick)")
    p.add_argument("--results", type=Path, help=f"where the table goes (default: {RESULTS}; with --quick, --out)")
    p.add_argument("--quick", action="store_true", help=f"a check that every part runs: {QUICK.words()}")
    p.add_argument("--table-only", action="store_true", help="make the table of the cells done, train nothing")
    p.add_argument("--redo", action="store_true", help="run the cells of --rows and --columns again, even those "
                   "done (their folders under --out are emptied first; their records are replaced)")
    p.add_argument("--engine", choices=("vllm", "torch"), default="vllm", help="inference engine of every cell")
    args = p.parse_args()
    budget = QUICK if args.quick else BUDGET
    out = args.out or RUNS / ("compare_quick" if args.quick else "compare")
    results = args.results or (out if args.quick else RESULTS)
    rows = [ROWS[r] for r in args.rows] if args.rows else list(ROWS.values())
    columns = [COLUMNS[c] for c in args.columns] if args.columns else list(COLUMNS.values())
    if args.redo and not (args.rows or args.columns):
        p.error("--redo runs the cells of --rows and --columns again: name them")
    try:
        done = collect(out, budget, results)  # a cell of another budget: refused now, not after hours of training
    except ValueError as e:
        p.error(str(e))
    if not args.table_only:
        todo = [(r, c) for r, c in cells(rows, columns) if args.redo or (r.label, c.key) not in done]
        if args.rows or args.columns:
            if not cells(rows, columns):
                p.error("none of the --rows applies to any of the --columns")
        if args.redo:
            for row, column in todo:
                shutil.rmtree(out / cell_name(row, column), ignore_errors=True)
        if todo:
            init_ray(0)
        for i, (row, column) in enumerate(todo, 1):
            print(f"cell {i}/{len(todo)}: {row.label} on {column.label}", flush=True)
            record = run_cell(row, column, budget, out, args.engine, 0 if args.quick else LEARNERS)
            print(f"  {interval(record['score'])} in {record['wall_s'] / 60:.1f} min", flush=True)
    data = make_table(out, results, budget)
    print(f"{len(data['cells'])} cells; wrote {results}/compare_table.md")


if __name__ == "__main__":
    main()
