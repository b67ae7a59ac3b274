"""The retrieval benchmark in its --quick form, run as a user runs it: every configuration measured, every query
answered, the actor's hits equal to direct bm25s, the plot written."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[2]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("retrieval")
    # Its own local Ray instance, never one a test session may have started: Ray workers could not import the
    # benchmark's client actor class from a module the test loaded, while a script's __main__ travels by value.
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "retrieval.py"), "--quick", "--out", str(out)],
        check=False, cwd=ROOT, env=env, capture_output=True, text=True, timeout=280,
    )
    assert proc.returncode == 0, f"benchmark failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    return out, json.loads((out / "retrieval.json").read_text()), proc.stdout


def test_every_configuration_is_measured(quick_run):
    _, results, _ = quick_run
    s = results["settings"]
    assert s["quick"] is True and 8 in s["client_counts"]
    for mode in ("single", "batched"):
        assert results["direct"][mode]["batch_size"] == (1 if mode == "single" else s["batch_size"])
        assert [f["clients"] for f in results["actor"][mode]] == s["client_counts"]
        for f in [results["direct"][mode], *results["actor"][mode]]:
            for key in ("queries_per_s", "queries_per_s_best", "latency_p50_ms", "latency_p95_ms"):
                assert math.isfinite(f[key]) and f[key] > 0, (mode, f.get("clients"), key)
        for f in results["actor"][mode]:
            assert f["over_direct"] == pytest.approx(f["queries_per_s"] / results["direct"][mode]["queries_per_s"])


def test_every_query_is_answered_with_the_direct_hits(quick_run):
    _, results, _ = quick_run
    num_queries = results["corpus"]["num_queries"]
    assert num_queries > 0 and results["corpus"]["num_passages"] > 0
    for mode in ("single", "batched"):
        batch_size = results["direct"][mode]["batch_size"]
        for f in [results["direct"][mode], *results["actor"][mode]]:
            assert f["queries"] == num_queries, (mode, f.get("clients"))
            assert f["hits_match_direct"] is True, (mode, f.get("clients"))
            # Each client sends its share of the queries in calls of batch_size: no call was dropped or merged.
            shares = [len(range(c, num_queries, f.get("clients", 1))) for c in range(f.get("clients", 1))]
            assert f["calls"] == sum(math.ceil(n / batch_size) for n in shares)
    assert results["correct"] is True


def test_plot_and_table_are_written(quick_run):
    out, _, stdout = quick_run
    png = out / "retrieval.png"
    assert png.read_bytes()[:8] == PNG_SIGNATURE
    import matplotlib.image

    height, width, _ = matplotlib.image.imread(png).shape
    assert height > 200 and width > 200
    assert "actor,  8 clients, 1 per call" in stdout
    assert "every hit list equal to direct bm25s: True" in stdout
