"""The long-context benchmark in its --quick form, run as a user runs it: both contexts chunked by memrl and by the
authors' way, every chunk within its budget, the envs sharing one copy of their file, the plot written."""

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("long_context")
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "long_context.py"), "--quick", "--out", str(out)],
                          check=False, cwd=ROOT, capture_output=True, text=True, timeout=280)
    assert proc.returncode == 0, f"benchmark failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    return out, json.loads((out / "long_context.json").read_text()), proc.stdout


def test_both_contexts_are_chunked_both_ways_within_the_budget(quick_run):
    _, results, stdout = quick_run
    settings = results["settings"]
    assert settings["quick"] is True and set(results["reset"]) == {"single_line", "lines"}
    for kind, r in results["reset"].items():
        assert r["characters"] >= settings["context_mb"] * 1e6
        for key in ("memrl_reset_s", "authors_chunking_s", "memrl_over_authors"):
            assert math.isfinite(r[key]) and r[key] > 0, (kind, key)
        assert r["chunks_join_to_context"] is True and r["max_chunk_tokens"] <= settings["chunk_tokens"]
        assert r["memrl_chunks"] > 1 and r["authors_chunks"] > 1
        assert f"{kind:>12} {r['characters']:>10}" in stdout


def test_envs_over_one_file_share_its_tasks_and_the_plot_is_written(quick_run):
    out, results, _ = quick_run
    memory = results["memory"]
    assert memory["one_copy_shared"] is True and memory["num_envs"] == results["settings"]["num_envs"]
    assert memory["file_mb"] >= results["settings"]["file_mb"] and memory["one_copy_mb"] > 0
    assert (out / "long_context.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
