"""Retrieval benchmark: the shared BM25 Ray actor serving concurrent clients against calling bm25s directly.

    python benchmarks/retrieval.py [--quick] [--out benchmarks/results]

Writes retrieval.json (machine, settings, every figure, the correctness check) and retrieval.png (queries/s and
single-query latency against the number of concurrent clients, the direct baseline as lines) to --out and prints
a short table. Direct calls and actor calls are timed in turns in the same run, so their ratios are meaningful
even where absolute figures depend on the machine and its load.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import ray

from memrl_benchmarks.common import elapsed_log, machine, parser, write
from memrl_envs.encyclopedia import EncyclopediaConfig, make_questions, make_world
from memrl_envs.retrieval import BM25Retriever, Retriever, start_retrieval_server
from memrl.cluster import ensure_ray

MODES = ("single", "batched")
"""'single': one query per call, as a search env sends them. 'batched': batch_size queries per call."""


@dataclass
class Settings:
    """Sizes of one benchmark run; `QUICK` shrinks them so the whole run takes seconds."""

    num_people: int = 3200
    """People in the synthetic world (long names); with the companies and cities, one passage each."""
    num_companies: int = 480
    """Companies in the synthetic world (at most 480 with long names)."""
    num_cities: int = 480
    """Cities in the synthetic world (at most 480 with long names)."""
    num_questions: int = 800
    """Questions whose hop queries and question texts form the query set."""
    top_k: int = 3
    """Hits per query (SearchConfig's default, as in MEM1 and Search-R1)."""
    batch_size: int = 32
    """Queries per call in the batched mode."""
    client_counts: tuple[int, ...] = (1, 2, 4, 8, 16)
    """Numbers of concurrent client actors measured; the query set is split evenly among the clients."""
    rounds: int = 2
    """Times every configuration is measured, in turns, after one untimed warm-up call per client."""
    seed: int = 0
    """Seeds the world and the questions."""


QUICK = Settings(num_people=400, num_companies=100, num_cities=100, num_questions=60, client_counts=(1, 8), rounds=1)
"""--quick: every kind of measurement, on a small corpus and query set (what the test uses)."""


# -- workload -------------------------------------------------------------------------------------


def make_workload(settings: Settings) -> tuple[list, list[str]]:
    """The corpus (one passage per entity) and the queries: every question's hop queries and its text."""
    config = EncyclopediaConfig(num_people=settings.num_people, num_companies=settings.num_companies,
                                num_cities=settings.num_cities, name_length="long", world_seed=settings.seed)
    passages = list(make_world(config).passages)
    queries = [q for question in make_questions(settings.seed, settings.num_questions, config)
               for q in (*question.queries, question.question)]
    return passages, queries


def answer(retriever: Retriever, queries: list[str], batch_size: int, top_k: int) -> dict[str, Any]:
    """Search `queries` in calls of `batch_size`; the hit ids per query and each call's latency."""
    ids, latencies = [], []
    for start in range(0, len(queries), batch_size):
        t0 = time.perf_counter()
        hits = retriever.search(queries[start:start + batch_size], top_k)
        latencies.append(time.perf_counter() - t0)
        ids.extend([hit["id"] for hit in row] for row in hits)
    return {"ids": ids, "latencies_s": latencies}


@ray.remote(num_cpus=0)  # like memrl's EnvRunner actors: they mostly wait, and 16 must fit beside the server
class QueryClient:
    """A caller of the retrieval actor in its own process, as an env runner is."""

    def __init__(self, retriever: Retriever):
        self.retriever = retriever

    def answer(self, queries: list[str], batch_size: int, top_k: int) -> dict[str, Any]:
        return answer(self.retriever, queries, batch_size, top_k)


# -- measurement ----------------------------------------------------------------------------------


def run_direct(retriever: BM25Retriever, queries: list[str], batch_size: int, top_k: int) -> dict[str, Any]:
    t0 = time.perf_counter()
    out = answer(retriever, queries, batch_size, top_k)
    return {**out, "seconds": time.perf_counter() - t0}


def run_actor(clients: list, queries: list[str], batch_size: int, top_k: int) -> dict[str, Any]:
    """Client c answers queries c, c + C, c + 2C, ...; all clients at once, timed from submit to the last answer."""
    count = len(clients)
    t0 = time.perf_counter()
    shards = ray.get([client.answer.remote(queries[c::count], batch_size, top_k) for c, client in enumerate(clients)])
    seconds = time.perf_counter() - t0
    ids: list = [None] * len(queries)  # a query whose answer never came back stays None
    for c, shard in enumerate(shards):
        for i, hit_ids in zip(range(c, len(queries), count), shard["ids"]):
            ids[i] = hit_ids
    return {"ids": ids, "latencies_s": [s for shard in shards for s in shard["latencies_s"]], "seconds": seconds}


def summarise(runs: list[dict[str, Any]], reference: list[list[str]], num_queries: int) -> dict[str, Any]:
    """Figures over the rounds of one configuration; its hits are checked against the reference's."""
    seconds = [run["seconds"] for run in runs]
    latencies_ms = np.array([s for run in runs for s in run["latencies_s"]]) * 1e3
    return {
        "queries": min(sum(ids is not None for ids in run["ids"]) for run in runs),
        "calls": min(len(run["latencies_s"]) for run in runs),
        "mean_s": float(np.mean(seconds)),
        "min_s": float(np.min(seconds)),
        "queries_per_s": num_queries / float(np.mean(seconds)),
        "queries_per_s_best": num_queries / float(np.min(seconds)),
        "latency_p50_ms": float(np.percentile(latencies_ms, 50)),
        "latency_p95_ms": float(np.percentile(latencies_ms, 95)),
        "hits_match_direct": all(run["ids"] == reference for run in runs),
    }


def bench(settings: Settings, log) -> dict[str, Any]:
    passages, queries = make_workload(settings)
    t0 = time.perf_counter()
    direct = BM25Retriever(passages)
    index_s = time.perf_counter() - t0
    log(f"{len(passages)} passages, {len(queries)} queries; starting the retrieval actor and clients")
    server = start_retrieval_server(passages)
    clients = [QueryClient.remote(server) for _ in range(max(settings.client_counts))]
    # Untimed: actor start-up, the server's index build and every client's first call.
    ray.get([client.answer.remote(queries[:1], 1, settings.top_k) for client in clients])
    run_direct(direct, queries[:settings.batch_size], 1, settings.top_k)

    sizes = {"single": 1, "batched": settings.batch_size}
    runs: dict[tuple[str, str, int], list] = {}
    for r in range(settings.rounds):
        log(f"round {r + 1}/{settings.rounds}")
        # In turns, so a change of load on a shared machine hits direct and actor figures alike.
        for mode in MODES:
            runs.setdefault(("direct", mode, 1), []).append(run_direct(direct, queries, sizes[mode], settings.top_k))
            for count in settings.client_counts:
                run = run_actor(clients[:count], queries, sizes[mode], settings.top_k)
                runs.setdefault(("actor", mode, count), []).append(run)

    reference = runs[("direct", "single", 1)][0]["ids"]
    results: dict[str, Any] = {"corpus": {"num_passages": len(passages), "num_queries": len(queries),
                                          "index_s": index_s}, "direct": {}, "actor": {}}
    for mode in MODES:
        base = summarise(runs[("direct", mode, 1)], reference, len(queries))
        results["direct"][mode] = {**base, "batch_size": sizes[mode]}
        results["actor"][mode] = []
        for count in settings.client_counts:
            figures = summarise(runs[("actor", mode, count)], reference, len(queries))
            figures["over_direct"] = figures["queries_per_s"] / base["queries_per_s"]
            results["actor"][mode].append({"clients": count, "batch_size": sizes[mode], **figures})
    checked = [results["direct"][mode] for mode in MODES] + [f for mode in MODES for f in results["actor"][mode]]
    results["correct"] = all(f["hits_match_direct"] and f["queries"] == len(queries) for f in checked)
    for client in clients:
        ray.kill(client)
    ray.kill(server.actor)
    return results


# -- report ---------------------------------------------------------------------------------------


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    settings, corpus = results["settings"], results["corpus"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(14, 5.5))
    fig.suptitle(f"Retrieval: {corpus['num_passages']} passages, {corpus['num_queries']} queries, top-"
                 f"{settings['top_k']} ({results['machine']['cpu_count']} CPUs"
                 f"{', quick' if settings['quick'] else ''})")
    counts = settings["client_counts"]
    for mode, color in zip(MODES, ("tab:blue", "tab:orange")):
        label = "1 query per call" if mode == "single" else f"{settings['batch_size']} queries per call"
        actor = results["actor"][mode]
        qps = [f["queries_per_s"] for f in actor]
        left.plot(counts, qps, "o-", color=color, label=f"actor, {label}")
        for count, f in zip(counts, actor):
            left.annotate(f"{f['over_direct']:.2f}x", (count, f["queries_per_s"]), textcoords="offset points",
                          xytext=(0, 6), ha="center", fontsize=8, color=color)
        left.axhline(results["direct"][mode]["queries_per_s"], ls="--", color=color, label=f"direct bm25s, {label}")
    left.set_title("Throughput (label: actor / direct)")
    left.set_ylabel("queries / s (mean over rounds)")
    left.set_yscale("log")  # actor figures can sit one or two orders of magnitude below direct ones

    single = results["actor"]["single"]
    for name, marker, line in (("p50", "o-", "--"), ("p95", "s-", ":")):
        key = f"latency_{name}_ms"
        right.plot(counts, [f[key] for f in single], marker, color="tab:blue", label=f"actor {name}")
        right.axhline(results["direct"]["single"][key], ls=line, color="tab:gray", label=f"direct {name}")
    right.set_title("Latency of one single-query call")
    right.set_ylabel("ms")
    right.set_yscale("log")
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        ax.set_xticks(counts, [str(c) for c in counts])
        ax.set_xlabel("concurrent client actors")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def table(results: dict[str, Any]) -> str:
    lines = [f"{'configuration':34s} {'queries/s':>10s} {'best':>10s} {'p50 ms':>8s} {'p95 ms':>8s}  ratio  hits ok"]

    def row(name: str, f: dict[str, Any], ratio: str) -> None:
        lines.append(f"{name:34s} {f['queries_per_s']:10.0f} {f['queries_per_s_best']:10.0f} "
                     f"{f['latency_p50_ms']:8.2f} {f['latency_p95_ms']:8.2f}  {ratio:>5s}  {f['hits_match_direct']}")

    for mode in MODES:
        direct = results["direct"][mode]
        row(f"direct bm25s, {direct['batch_size']} per call", direct, "1.00x")
        for f in results["actor"][mode]:
            row(f"actor, {f['clients']:2d} clients, {f['batch_size']} per call", f, f"{f['over_direct']:.2f}x")
    lines.append(f"every query answered and every hit list equal to direct bm25s: {results['correct']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parser(__doc__, "retrieval", "small corpus, few queries, 1 and 8 clients").parse_args(argv)
    settings = QUICK if args.quick else Settings()
    args.out.mkdir(parents=True, exist_ok=True)
    started, log = time.perf_counter(), elapsed_log()
    results: dict[str, Any] = {"machine": machine("ray", "bm25s", "numpy"),
                               "settings": {**asdict(settings), "quick": args.quick}}
    own_ray = not ray.is_initialized()
    ensure_ray()
    try:
        results.update(bench(settings, log))
    finally:
        if own_ray:
            ray.shutdown()
    results["machine"]["load_average_1m_end"] = os.getloadavg()[0]
    write(results, args.out, "retrieval", plot, table, started)
    return results


if __name__ == "__main__":
    main()
