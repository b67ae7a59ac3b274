"""Long-context benchmark: how fast a chunk-stream env resets on a very long context, and how much memory many envs
over one data file hold.

    python benchmarks/long_context.py [--quick] [--out benchmarks/results]

Writes long_context.json (machine, settings, every figure) and long_context.png to --out and prints a table.

- `reset`: the first `ChunkStreamEnv.reset` on a context of `context_mb` megabytes, on one line and on lines of
  about 80 characters (chunking into `chunk_tokens`-token chunks is most of it), beside what the MemAgent authors'
  evaluation does instead: encode the whole context once and decode every `chunk_tokens` ids. memrl cuts at word
  starts and checks every chunk's own token count; the baseline cuts anywhere, mid-character included. Both are
  timed in the same run on the same text and tokenizer (the embedded tiny one, a small vocabulary: many tokens per
  character, a hard case).
- `memory`: the resident memory `num_envs` envs over one data file of `file_mb` megabytes add to the process,
  beside what each copy of the file's tasks costs (loaded without the per-process cache), i.e. what the envs
  would hold if each loaded its own.
"""

from __future__ import annotations

import gc
import json
import random
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psutil

from memrl_benchmarks.common import elapsed_log, machine, parser, write
from memrl_envs.chunk_stream import ChunkStreamEnv, TokenCounter
from memrl_envs.loaders import _load_tasks

WORDS = ("the", "river", "Document", "Zürich", "1901", "founded", "by", "Kema", "–", "naïve", "of", "東京", "and")
"""The vocabulary of the generated text (ASCII, accented, CJK, digits and a dash)."""


@dataclass
class Settings:
    """Sizes of one run; `QUICK` shrinks them so the whole run takes seconds."""

    context_mb: float = 10.0
    """Characters in each long context, in millions."""
    chunk_tokens: int = 24
    """Chunk size in tokens (the CPU default of the MemAgent task)."""
    file_mb: float = 48.0
    """Size of the data file the memory section's envs read."""
    num_envs: int = 64
    """Envs over that file (the GPU preset's envs per runner)."""
    copies: int = 3
    """Uncached loads of the file measured for the per-copy cost."""
    seed: int = 0
    """Seeds the generated text."""


QUICK = Settings(context_mb=0.2, file_mb=2.0, num_envs=8, copies=2)
"""--quick: every measurement on small sizes (what the test uses)."""


def text(num_chars: int, seed: int, line_chars: int = 0) -> str:
    """Random words up to `num_chars` characters; a newline about every `line_chars` characters when set."""
    rng, parts, size, line = random.Random(seed), [], 0, 0
    while size < num_chars:
        word = rng.choice(WORDS)
        separator = "\n" if line_chars and line > line_chars else " "
        line = 0 if separator == "\n" else line + len(word) + 1
        parts += [word, separator]
        size += len(word) + 1
    return "".join(parts[:-1])


def authors_chunks(tokenizer, context: str, chunk_tokens: int) -> list[str]:
    """The MemAgent authors' chunking: the whole context encoded once, every `chunk_tokens` ids decoded."""
    ids = tokenizer.encode(context, add_special_tokens=False)
    return [tokenizer.decode(ids[i : i + chunk_tokens]) for i in range(0, len(ids), chunk_tokens)]


def measure_reset(settings: Settings, tokenizer_path: str, workdir: Path, log) -> dict[str, Any]:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_path)
    counter = TokenCounter(tokenizer_path)
    out = {}
    for kind, line_chars in (("single_line", 0), ("lines", 80)):
        context = text(int(settings.context_mb * 1e6), settings.seed, line_chars)
        path = workdir / f"{kind}.jsonl"
        path.write_text(json.dumps({"question": "q", "context": context, "answers": ["a"]}, ensure_ascii=False),
                        encoding="utf-8")
        env = ChunkStreamEnv(task="file", data_path=str(path), tokenizer_path=tokenizer_path,
                             chunk_tokens=settings.chunk_tokens)
        log(f"reset on {len(context) / 1e6:.1f} M characters ({kind})")
        start = time.perf_counter()
        env.reset(seed=0)
        memrl_s = time.perf_counter() - start
        start = time.perf_counter()
        baseline = authors_chunks(tokenizer, context.strip(), settings.chunk_tokens)
        baseline_s = time.perf_counter() - start
        counts = counter.counts(env.chunks)
        out[kind] = {
            "characters": len(context), "memrl_reset_s": memrl_s, "authors_chunking_s": baseline_s,
            "memrl_over_authors": memrl_s / baseline_s, "memrl_chunks": len(env.chunks),
            "authors_chunks": len(baseline), "max_chunk_tokens": max(counts),
            "mean_chunk_tokens": sum(counts) / len(counts),
            "chunks_join_to_context": "".join(env.chunks) == env.task.context,
            "authors_chunks_join_to_context": "".join(baseline) == context.strip(),
        }
    return out


def rss_mb() -> float:
    gc.collect()
    return psutil.Process().memory_info().rss / 1e6


def measure_memory(settings: Settings, tokenizer_path: str, workdir: Path, log) -> dict[str, Any]:
    path = workdir / "tasks.jsonl"
    with path.open("w", encoding="utf-8") as f:
        written, row = 0, 0
        while written < settings.file_mb * 1e6:
            line = json.dumps({"question": f"q{row}", "context": text(20_000, row, 80), "answers": ["a"]},
                              ensure_ascii=False)
            f.write(line + "\n")
            written, row = written + len(line.encode()) + 1, row + 1
    log(f"{settings.num_envs} envs over a {written / 1e6:.0f} MB file of {row} rows")
    before = rss_mb()
    envs = [ChunkStreamEnv(task="file", data_path=str(path), tokenizer_path=tokenizer_path)]
    one_env = rss_mb()
    envs += [ChunkStreamEnv(task="file", data_path=str(path), tokenizer_path=tokenizer_path)
             for _ in range(settings.num_envs - 1)]
    all_envs = rss_mb()
    shared = len({id(env._make_task(0)) for env in envs}) == 1
    copies, start_copies = [], rss_mb()
    for _ in range(settings.copies):  # what each env would hold with a copy of its own
        copies.append(_load_tasks.__wrapped__(str(path.absolute()), 0))
    per_copy = (rss_mb() - start_copies) / settings.copies
    del copies, envs
    return {"file_mb": written / 1e6, "rows": row, "num_envs": settings.num_envs,
            "first_env_mb": one_env - before, "further_envs_mb": all_envs - one_env,
            "all_envs_mb": all_envs - before, "one_copy_mb": per_copy,
            "copy_per_env_mb": settings.num_envs * per_copy, "one_copy_shared": shared}


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (reset_ax, memory_ax) = plt.subplots(1, 2, figsize=(11, 4.2))
    kinds = list(results["reset"])
    x = range(len(kinds))
    reset_ax.bar([i - 0.2 for i in x], [results["reset"][k]["memrl_reset_s"] for k in kinds], 0.4,
                 label="memrl env.reset (word-start cuts, counted)")
    reset_ax.bar([i + 0.2 for i in x], [results["reset"][k]["authors_chunking_s"] for k in kinds], 0.4,
                 label="authors' encode + decode slices")
    reset_ax.set_xticks(list(x), [f"{k}\n{results['reset'][k]['characters'] / 1e6:.1f} M chars" for k in kinds])
    reset_ax.set_ylabel("seconds")
    reset_ax.set_title(f"chunking a long context ({results['settings']['chunk_tokens']}-token chunks)")
    reset_ax.legend(fontsize=8)
    m = results["memory"]
    memory_ax.bar(["1 env", f"{m['num_envs']} envs (shared)", f"a copy per env\n({m['num_envs']} x one measured)"],
                  [m["first_env_mb"], m["all_envs_mb"], m["copy_per_env_mb"]],
                  color=["tab:blue", "tab:blue", "tab:gray"])
    memory_ax.set_ylabel("resident MB added")
    memory_ax.set_title(f"envs over one {m['file_mb']:.0f} MB data file")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def table(results: dict) -> str:
    lines = [f"{'context':>12} {'chars':>10} {'memrl reset s':>14} {'authors s':>10} {'ratio':>6} {'max tok':>8}"]
    for kind, r in results["reset"].items():
        lines.append(f"{kind:>12} {r['characters']:>10} {r['memrl_reset_s']:>14.2f} {r['authors_chunking_s']:>10.2f} "
                     f"{r['memrl_over_authors']:>6.2f} {r['max_chunk_tokens']:>8}")
    m = results["memory"]
    lines.append(f"{m['num_envs']} envs over a {m['file_mb']:.0f} MB file add {m['all_envs_mb']:.0f} MB "
                 f"(first env {m['first_env_mb']:.0f} MB, the others {m['further_envs_mb']:.0f} MB); one copy of the "
                 f"file's tasks is {m['one_copy_mb']:.0f} MB, a copy per env {m['copy_per_env_mb']:.0f} MB")
    return "\n".join(lines)


def main() -> None:
    args = parser(__doc__, "long_context", "small sizes: seconds instead of minutes").parse_args()
    settings = QUICK if args.quick else Settings()
    args.out.mkdir(parents=True, exist_ok=True)
    started, log = time.perf_counter(), elapsed_log()
    from memrl.models.tiny import build_tiny_checkpoint

    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        tokenizer_path = str(build_tiny_checkpoint(workdir / "tiny"))
        results: dict[str, Any] = {"machine": machine("tokenizers", "transformers"),
                                   "settings": {**asdict(settings), "quick": args.quick}}
        results["memory"] = measure_memory(settings, tokenizer_path, workdir, log)  # first: a process still small
        results["reset"] = measure_reset(settings, tokenizer_path, workdir, log)
    write(results, args.out, "long_context", plot, table, started)


if __name__ == "__main__":
    main()
