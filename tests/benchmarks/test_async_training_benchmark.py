"""The asynchronous training benchmark in its --quick form, run as a user runs it: both modes train the main job's
config within the budget and are evaluated on the same held-out tasks, every figure written, the plot written."""

import json
import math
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def test_quick_run_measures_both_modes_on_the_same_tasks(tmp_path):
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, str(root / "benchmarks" / "async_training.py"), "--quick", "--out",
                           str(tmp_path)], check=False, cwd=root, capture_output=True, text=True, timeout=580)
    assert proc.returncode == 0, f"benchmark failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    results = json.loads((tmp_path / "async_training.json").read_text())
    assert results["settings"]["quick"] is True and set(results["modes"]) == {"sync", "async_1"}
    tasks = results["settings"]["eval_tasks"]
    assert results["eval_before"]["num_tasks"] == tasks
    for name, mode in results["modes"].items():
        assert mode["iterations"] >= 1 and mode["trained_s"] > 0, name
        # The machine worked while it trained, and no more than its cores allow.
        assert 0 < mode["cores_busy"] <= results["overlap_ceiling"]["cores"] + 0.05, name
        assert mode["eval_after"]["num_tasks"] == len(mode["rewards_after"]) == tasks, name
        counters = mode["counters"]
        ahead = counters["trajectories_prefetched"]
        assert (ahead > 0) == (mode["max_staleness"] > 0), name
        assert counters["trajectories_sampled"] == (counters["trajectories_trained"] + counters["trajectories_failed"]
                                                    + counters["trajectories_dropped"]
                                                    + counters["trajectories_stale"] + ahead), name
    assert math.isfinite(results["speedup"]) and results["speedup"] > 0
    assert results["async_minus_sync"]["ci_low"] <= results["async_minus_sync"]["mean"]
    ceiling = results["overlap_ceiling"]
    sync = results["modes"]["sync"]
    assert ceiling["best_iteration_s"] == sync["busy_cpu_s_per_iteration"] / ceiling["cores"]
    assert ceiling["speedup"] >= 1.0 - 0.05  # the synchronous loop cannot keep more than every core busy
    assert "async_1 / sync iterations per minute" in proc.stdout and "at most" in proc.stdout
    assert (tmp_path / "async_training.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
