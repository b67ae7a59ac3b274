"""Memory policies scored on the field's memory benchmarks from their released files: LongMemEval, LoCoMo and
MemoryAgentBench, each read, shown and scored as the benchmark does (memrl_envs.memory_benchmarks,
memrl_envs.memory_benchmark_scores) through the memory-store env's data="benchmark" mode.

    memrl eval locomo --data locomo10.json                        # the shipped CPU policies, every memory
    memrl eval longmemeval --data longmemeval_s.json --policy "7B MemAgent=runs/memagent/model:memagent" \\
        --answerer http://127.0.0.1:8000/v1 --answerer-model Qwen2.5-7B-Instruct --judge https://api.openai.com/v1 \\
        --judge-model gpt-4o-2024-08-06
    memrl eval memoryagentbench --data Conflict_Resolution-00000-of-00001.parquet --memory rag long_context

A row is a policy and the memory it keeps (--policy NAME=CHECKPOINT:MEMORY, repeatable; without one, each --memory
with its shipped CPU policy):
- memalpha, memagent, mem1: the policy writes Mem-α's tool store, MemAgent's overwritten paragraph or a MEM1-style
  paragraph chunk by chunk (tuned_examples/tasks/memalpha.py's writers), and the frozen answerer (--answerer)
  answers every question from it;
- rag, long_context: no memory; the policy's weights answer each question from the two chunks BM25 ranks highest for
  it, or from the latest chunks that fit in --context-tokens.
LongMemEval's questions (and MemoryAgentBench's LongMemEval rows) are judged with LongMemEval's prompts by --judge
(default: the answerer); on LoCoMo a --judge adds the LLM-judge figure the field reports beside the benchmark's F1
(Mem0's prompt, categories 1-4). The judge's model is recorded with every result.

Each row's finished instances are appended to <out>/<benchmark>/<row>.jsonl as they finish; a run that is stopped
and started again asks only the instances not finished yet. The table (<out>/<benchmark>.json, .md, .png): accuracy
per category with 95% intervals (LongMemEval's question types with its task-averaged and abstention figures, LoCoMo's
categories, MemoryAgentBench's sub-datasets), the overall accuracy, memory tokens (what the answerer is shown), calls
per instance and seconds per instance.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

import matplotlib
import numpy as np
from tqdm import tqdm

import memrl_envs  # noqa: F401  (registers memrl/MemoryStore-v0)
from memrl_envs.memory_benchmark_scores import (
    LOCOMO_CATEGORIES,
    LOCOMO_JUDGE_MODEL,
    LOCOMO_JUDGE_SAMPLING,
    LONGMEMEVAL_JUDGE_MODEL,
    LONGMEMEVAL_JUDGE_SAMPLING,
    LONGMEMEVAL_TYPES,
    Scored,
    locomo_metrics,
    longmemeval_metrics,
    mab_metrics,
)
from memrl_envs.memory_benchmarks import BENCHMARKS, MAB_CHUNK_TOKENS, load_benchmark
from memrl.cluster import FaultToleranceConfig
from memrl.engines import start_engine, stop_engine
from memrl.engines.base import SamplingConfig
from memrl.episode import from_arrow
from memrl.experiment import RUNS, budget_table, init_ray, require_checkpoint, write_table
from memrl.rollout import EnvRunnerGroup, EnvRunnerSpec, Task
from memrl_tuned_examples.tasks.memalpha import (
    ANSWERER,
    ANSWERER_CHECKPOINT,
    CPU_ANSWER_TOKENS,
    CPU_MAX_TOKENS,
    CPU_WORKFLOW,
    LONG_CONTEXT_TOKENS,
    WRITERS,
    start_answerer,
)

MEMORIES = ("memalpha", "memagent", "mem1", "rag", "long_context")
"""What a row's policy keeps (the module docstring)."""
WRITTEN = {"memalpha": "mem-alpha", "memagent": "memagent", "mem1": "mem1"}
"""The memories a policy writes, by their writer in tuned_examples/tasks/memalpha.py."""
SHIPPED = {"memalpha": WRITERS["mem-alpha"].warm_start, "memagent": WRITERS["memagent"].warm_start,
           "mem1": WRITERS["mem1"].warm_start, "rag": ANSWERER_CHECKPOINT, "long_context": ANSWERER_CHECKPOINT}
"""The CPU policy of each memory: the writers' warm-starts, and the answerer's weights for the rows without one."""
SHIPPED_NAMES = {"memalpha": "Mem-α warm-start", "memagent": "MemAgent warm-start", "mem1": "MEM1-style warm-start",
                 "rag": "RAG-top2 (answerer)", "long_context": "long-context (answerer)"}
"""The table's names of the shipped CPU policies."""
RAG_TOP_K = 2
"""Chunks the RAG row shows per question."""
JUDGES = {"longmemeval": {"prompts": "LongMemEval's src/evaluation/evaluate_qa.py",
                           "sampling": LONGMEMEVAL_JUDGE_SAMPLING, "field_model": LONGMEMEVAL_JUDGE_MODEL},
          "locomo": {"prompts": "Mem0's evaluation/metrics/llm_judge.py (categories 1-4)",
                     "sampling": LOCOMO_JUDGE_SAMPLING, "field_model": LOCOMO_JUDGE_MODEL}}
"""What a judge is asked with, and the judge the published figures come from."""
ENDPOINTS = ("http://", "https://", "actor:")
"""How an --answerer or --judge that is not a checkpoint starts."""


@dataclass(frozen=True)
class Row:
    """One line of the table: a policy and the memory it keeps."""

    name: str
    checkpoint: Path
    memory: str

    @property
    def slug(self) -> str:
        return re.sub(r"[^A-Za-z0-9._-]+", "_", self.name).strip("_") or "row"


def row_arg(text: str) -> Row:
    """--policy NAME=CHECKPOINT:MEMORY."""
    name, _, rest = text.partition("=")
    path, _, memory = rest.rpartition(":")
    if not (name and path and memory):
        raise argparse.ArgumentTypeError(f"--policy takes NAME=CHECKPOINT:MEMORY, got {text!r}")
    if memory not in MEMORIES:
        raise argparse.ArgumentTypeError(f"--policy {text!r}: memory {memory!r} is not one of {', '.join(MEMORIES)}")
    return Row(name, Path(path), memory)


def env_config(benchmark: str, data: Path, row: Row, answerer: str, answerer_model: str, judge: str | None,
               judge_model: str, context_tokens: int, chunk_tokens: int) -> dict:
    """The memory-store env's options for one row."""
    config = {"data": "benchmark", "benchmark": benchmark, "data_path": str(data), "chunk_tokens": chunk_tokens,
              "tokenizer_path": str(row.checkpoint), "answerer_model": answerer_model}
    if row.memory in WRITTEN:
        config.update(memory=WRITERS[WRITTEN[row.memory]].memory, answerer=answerer)
    else:  # the policy's weights read the chunks themselves
        config.update(memory="context", answerer="policy",
                      **({"context_top_k": RAG_TOP_K} if row.memory == "rag" else {"context_tokens": context_tokens}))
    if judge is not None:
        config.update(answer_judge=judge, answer_judge_model=judge_model)
    return config


def workflow_of(row: Row) -> tuple[str, dict]:
    """The workflow that prompts the policy: its writer's, or Mem-α's for the rows without a memory (it only shows
    them the answer chat)."""
    writer = WRITERS[WRITTEN.get(row.memory, "mem-alpha")]
    return writer.workflow, writer.workflow_config if row.memory in WRITTEN else CPU_WORKFLOW


def finished(path: Path, failed: bool = False) -> dict[int, dict]:
    """The records of the instances a row has finished (a run stopped half way left the others out; a line cut
    short by the stop is dropped); with `failed`, the last failure of each instance not finished instead (an
    answerer or judge that failed: asked again on the next run)."""
    done, failures = {}, {}
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            (failures if record.get("failure") else done)[record["instance"]] = record
    return {i: r for i, r in failures.items() if i not in done} if failed else done


def _append(path: Path, records: list[dict]) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write("".join(json.dumps(r) + "\n" for r in records))
        f.flush()
        os.fsync(f.fileno())


def run_row(benchmark: str, instances, row: Row, config: dict, path: Path, engine_of, max_tokens: int,
            batch: int, seed: int) -> None:
    """Asks the row's unfinished instances, `batch` at a time, appending each batch's records to `path`;
    `engine_of(checkpoint)` gives the engine serving the row's policy (rows of one checkpoint share it)."""
    done = finished(path)
    pending = [i for i in range(len(instances)) if i not in done]
    if not pending:
        return
    workflow, workflow_config = workflow_of(row)
    spec = EnvRunnerSpec(env="memrl/MemoryStore-v0", env_config=config, workflow=workflow,
                         workflow_config=workflow_config, tokenizer_path=str(row.checkpoint),
                         sampling=SamplingConfig(max_tokens=max_tokens, temperature=0.0), num_envs=batch,
                         max_calls=4096, continuous_batching=False, faults=FaultToleranceConfig())
    group = EnvRunnerGroup(spec, [engine_of(row.checkpoint)], 0)
    try:
        with tqdm(total=len(instances), initial=len(done), desc=f"{benchmark} {row.name}", unit="instance") as bar:
            for start in range(0, len(pending), batch):
                indices = pending[start:start + batch]
                tasks = [Task(seed=i, group_id=f"instance-{i}", traj_id=f"instance-{i}") for i in indices]
                began = time.perf_counter()
                table, _ = group.sample(tasks, seed=seed)
                seconds = (time.perf_counter() - began) / len(indices)
                by_id = {t.traj_id: t for t in from_arrow(table)}
                _append(path, [record(instances[i], i, by_id[f"instance-{i}"], seconds) for i in indices])
                bar.update(len(indices))
    finally:
        group.shutdown()


def record(instance, index: int, trajectory, seconds: float) -> dict:
    """What a finished instance keeps: each question's score (from the env's question_score_<i>), the memory and
    cost figures, or the failure that kept it from being scored."""
    metrics = trajectory.metrics
    out = {"instance": index, "instance_id": instance.instance_id, "failure": trajectory.failure,
           "memory_tokens": metrics.get("memory_tokens", float("nan")), "calls": metrics.get("num_calls", 0.0),
           "seconds": seconds}
    if not trajectory.failure:
        out["questions"] = [{"question_id": q.question_id, "category": q.category, "abstention": q.abstention,
                             "score": metrics[f"question_score_{k}"],
                             **({"judge": metrics[f"question_judge_{k}"]} if f"question_judge_{k}" in metrics else {})}
                            for k, q in enumerate(instance.questions)]
    return out


def figures(benchmark: str, row: Row, records: list[dict]) -> dict:
    """One table row from a row's records."""
    if not records:  # every instance failed (or none was asked): a row that says so
        return {"policy": row.name, "checkpoint": str(row.checkpoint), "memory": row.memory, "per_category": {},
                "overall": None, "task_averaged": float("nan"), "instances": 0, "memory_tokens": float("nan"),
                "calls": float("nan"), "seconds_per_instance": float("nan")}
    scored = [Scored(q["question_id"], q["category"], q["score"], q["abstention"])
              for r in records for q in r["questions"]]
    if benchmark == "longmemeval":
        metrics = longmemeval_metrics(scored)
    elif benchmark == "locomo":
        judged = [Scored(q["question_id"], q["category"], q["judge"]) for r in records for q in r["questions"]
                  if "judge" in q]
        metrics = locomo_metrics(scored, judged)
    else:  # MemoryAgentBench: by sub-dataset, the instance id's source
        sources = {}
        for r in records:
            sources.setdefault(r["instance_id"].rsplit("#", 1)[0], []).extend(q["score"] for q in r["questions"])
        metrics = mab_metrics(sources)
    return {"policy": row.name, "checkpoint": str(row.checkpoint), "memory": row.memory, **metrics,
            "instances": len(records), "memory_tokens": float(np.mean([r["memory_tokens"] for r in records])),
            "calls": float(np.mean([r["calls"] for r in records])),
            "seconds_per_instance": float(np.mean([r["seconds"] for r in records]))}


def categories(benchmark: str, rows: list[dict]) -> list[str]:
    """The table's category columns, in the benchmark's order."""
    seen = {c for r in rows for c in r["per_category"]}
    if benchmark == "locomo":
        return [name for name in LOCOMO_CATEGORIES.values() if name in seen]
    return sorted(seen)


def _cell(m: dict | None) -> str:
    return f"{m['mean']:.3f} [{m['ci_low']:.3f}, {m['ci_high']:.3f}]" if m else ""


def markdown(benchmark: str, rows: list[dict], judge: dict | None) -> str:
    cats = categories(benchmark, rows)
    extra = {"longmemeval": ["task-averaged", "abstention"], "locomo": ["LLM judge (1-4)"] if judge else []}.get(
        benchmark, [])
    head = ["policy", "memory", *cats, "overall", *extra, "memory tokens", "calls", "s / instance", "instances",
            "failed"]
    lines = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    for r in rows:
        cells = [r["policy"], r["memory"], *(_cell(r["per_category"].get(c)) for c in cats), _cell(r["overall"])]
        if benchmark == "longmemeval":
            cells += [f"{r['task_averaged']:.3f}", _cell(r.get("abstention"))]
        elif extra:
            cells.append(_cell(r.get("judge", {}).get("overall")))
        cells += [f"{r['memory_tokens']:.0f}", f"{r['calls']:.1f}", f"{r['seconds_per_instance']:.2f}",
                  str(r["instances"]), str(r["failed"])]
        lines.append("| " + " | ".join(cells) + " |")
    if judge:
        lines += ["", f"Judged by {judge['model']} ({judge['endpoint']}) with {judge['prompts']}; the published "
                      f"figures come from {judge['field_model']}."]
    return "\n".join(lines) + "\n"


def plot(benchmark: str, rows: list[dict], path: Path) -> None:
    """Accuracy per category and overall, with 95% intervals, one bar per row."""
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cats = [*categories(benchmark, rows), "overall"]
    fig, ax = plt.subplots(figsize=(max(6.0, 1.4 * len(cats) * max(1, len(rows)) / 2), 4.2))
    width = 0.8 / max(1, len(rows))
    for i, r in enumerate(rows):
        cells = [r["per_category"].get(c) if c != "overall" else r["overall"] for c in cats]
        x = np.array([k for k, m in enumerate(cells) if m]) + i * width
        mean = np.array([m["mean"] for m in cells if m])
        low, high = np.array([m["ci_low"] for m in cells if m]), np.array([m["ci_high"] for m in cells if m])
        ax.bar(x, mean, width, yerr=[mean - low, high - mean], capsize=3, label=f"{r['policy']} ({r['memory']})")
    ax.set_xticks(np.arange(len(cats)) + 0.4 - width / 2, [str(c).replace("-", "-\n") for c in cats], fontsize=8)
    ax.set_ylabel("accuracy (95% CI)")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(f"{benchmark}: the benchmark's own scorer")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def run_and_summarise(benchmark: str, instances, row: Row, args: argparse.Namespace, answerer: str,
                      judge: str | None, judge_model: str, out: Path, engine_of) -> dict:
    """One row: its unfinished instances asked (run_row), then its line of the table from everything it finished."""
    config = env_config(benchmark, args.data, row, answerer, args.answerer_model, judge, judge_model,
                        args.context_tokens, args.chunk_tokens)
    if args.recsys_entities:
        config["entity_ids_path"] = str(args.recsys_entities)
    max_tokens = args.max_tokens if row.memory in WRITTEN else args.answer_tokens
    path = out / f"{row.slug}.jsonl"
    run_row(benchmark, instances, row, config, path, engine_of, max_tokens, args.batch, args.seed)
    records = [r for i, r in sorted(finished(path).items()) if i < len(instances)]
    failures = [r for i, r in sorted(finished(path, failed=True).items()) if i < len(instances)]
    for r in failures[:1]:
        print(f"{row.name}: {len(failures)} instances failed and are not scored (asked again on the next run); "
              f"the first: {r['failure']}")
    return {**figures(benchmark, row, records), "failed": len(failures)}


def parser(benchmark: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"memrl eval {benchmark}", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", type=Path, required=True, help=f"the {benchmark} file as released")
    p.add_argument("--policy", type=row_arg, action="append", default=[],
                   help="NAME=CHECKPOINT:MEMORY, repeatable (default: the shipped CPU policy of each --memory)")
    p.add_argument("--memory", nargs="+", choices=MEMORIES, default=list(MEMORIES),
                   help="the memories of the default rows")
    p.add_argument("--answerer", default=str(ANSWERER_CHECKPOINT),
                   help="who answers from a written memory: a checkpoint (served here), an OpenAI-compatible API "
                   "base (http://.../v1) or actor:NAME")
    p.add_argument("--answerer-model", default="default", help="the model name an --answerer endpoint serves")
    p.add_argument("--judge", help="an LLM judge, an OpenAI-compatible API base or actor:NAME: LongMemEval's "
                   "(default: the answerer), or on LoCoMo the added LLM-judge figure")
    p.add_argument("--judge-model", help="the model name the --judge endpoint serves (default: --answerer-model)")
    p.add_argument("--recsys-entities", type=Path, help="MemoryAgentBench: its movie catalogue, processed_data/"
                   "Recsys_Redial/entity2id.json, which scores the recommendation rows")
    p.add_argument("--limit", type=int, help="only the file's first LIMIT instances")
    p.add_argument("--batch", type=int, default=4, help="instances asked at once (and appended together)")
    p.add_argument("--context-tokens", type=int, default=LONG_CONTEXT_TOKENS, help="the long-context row's window")
    p.add_argument("--chunk-tokens", type=int, default=MAB_CHUNK_TOKENS, help="MemoryAgentBench: tokens per chunk")
    p.add_argument("--max-tokens", type=int, default=CPU_MAX_TOKENS, help="longest reply of a policy that writes")
    p.add_argument("--answer-tokens", type=int, default=CPU_ANSWER_TOKENS,
                   help="longest answer of a policy that answers from the chunks (rag, long_context)")
    p.add_argument("--engine", choices=("vllm", "torch"), default="vllm",
                   help="the policies' inference engine (vllm: an engine actor; torch: in this process)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=RUNS / "benchmarks", help="where results and tables go")
    return p


def run(benchmark: str, argv: list[str] | None = None) -> list[dict]:
    """`memrl eval BENCHMARK [flags]` (the module docstring): the table's rows."""
    if benchmark not in BENCHMARKS:
        raise ValueError(f"unknown benchmark {benchmark!r}; allowed: {', '.join(BENCHMARKS)}")
    p = parser(benchmark)
    args = p.parse_args(argv)
    if not args.data.is_file():
        p.error(f"--data {args.data} is not a file")
    if args.recsys_entities and not args.recsys_entities.is_file():
        p.error(f"--recsys-entities {args.recsys_entities} is not a file")
    for name in ("limit", "batch", "context_tokens", "chunk_tokens", "max_tokens", "answer_tokens"):
        value = getattr(args, name)
        if value is not None and value < 1:
            p.error(f"--{name.replace('_', '-')} must be a positive integer, got {value}")
    rows = args.policy or [Row(SHIPPED_NAMES[m], SHIPPED[m], m) for m in args.memory]
    for row in rows:
        require_checkpoint(p, "--policy", row.checkpoint)
    if len({r.slug for r in rows}) < len(rows):
        p.error("two --policy rows share a name; each row keeps its results under its own")
    instances = load_benchmark(benchmark, args.data)  # the questions; each env cuts the chunks in its own tokens
    instances = instances[: args.limit] if args.limit else instances
    judged = benchmark == "locomo" and args.judge is not None or any(
        q.category in LONGMEMEVAL_TYPES for i in instances for q in i.questions)
    init_ray(0)
    answerer, server = args.answerer, None
    needs_answerer = any(r.memory in WRITTEN for r in rows) or (judged and args.judge is None)
    if needs_answerer and not answerer.startswith(ENDPOINTS):
        require_checkpoint(p, "--answerer", Path(answerer))
        server = start_answerer(Path(answerer))  # noqa: F841 (the actor lives as long as its handle)
        answerer = f"actor:{ANSWERER}"
    judge = (args.judge or answerer) if judged else None
    judge_model = args.judge_model or args.answerer_model
    judge_record = None if judge is None else {
        "endpoint": judge, "model": judge_model if judge.startswith("http") else args.judge or args.answerer,
        **(JUDGES["locomo"] if benchmark == "locomo" else JUDGES["longmemeval"])}
    out = args.out / benchmark
    out.mkdir(parents=True, exist_ok=True)
    table, engines = [], {}

    def engine_of(checkpoint: Path):
        """An engine actor of the checkpoint, or the torch engine in this process beside the runners."""
        if checkpoint not in engines:
            engines[checkpoint] = start_engine(str(checkpoint), args.engine, seed=args.seed,
                                               in_process=args.engine == "torch")
        return engines[checkpoint]

    try:
        table = [run_and_summarise(benchmark, instances, row, args, answerer, judge, judge_model, out, engine_of)
                 for row in rows]
    finally:
        for engine in engines.values():
            stop_engine(engine)
    text = markdown(benchmark, table, judge_record)
    budgets = budget_table([(r.name, r.checkpoint) for r in rows])
    result = {"benchmark": benchmark, "data": str(args.data), "judge": judge_record, "rows": table}
    write_table(args.out, benchmark, result, text + "\n" + budgets, lambda path: plot(benchmark, table, path))
    print(text + "\n" + budgets)
    print(f"wrote {args.out}/{benchmark}.json, {benchmark}.md, {benchmark}.png")
    return table


def longmemeval(argv: list[str] | None = None) -> list[dict]:
    return run("longmemeval", argv)


def locomo(argv: list[str] | None = None) -> list[dict]:
    return run("locomo", argv)


def memoryagentbench(argv: list[str] | None = None) -> list[dict]:
    return run("memoryagentbench", argv)
