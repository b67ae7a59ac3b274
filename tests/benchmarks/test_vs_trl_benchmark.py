"""The TRL comparison in its --quick form, run as a user runs it on a machine without TRL's environment: memrl's
configurations are measured in processes of their own, TRL's row says why it was skipped, the plot is written."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[2]


def test_quick_run_measures_memrl_and_names_a_missing_trl(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}  # each configuration starts its own Ray
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "vs_trl.py"), "--quick", "--out", str(tmp_path),
                           "--trl-python", str(tmp_path / "no-trl" / "python")], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=580)
    assert proc.returncode == 0, f"benchmark failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    results = json.loads((tmp_path / "vs_trl.json").read_text())
    systems = results["systems"]
    assert "no TRL environment" in systems["trl"]["skipped"]
    assert set(systems) == {"trl", "memrl_torch_1L_async1"}
    settings = results["settings"]
    r = systems["memrl_torch_1L_async1"]
    assert len(r["step_s_all"]) == settings["steps"] + settings["warmup_steps"]
    for key in ("startup_s", "step_s", "completions_per_s", "peak_pss_mb"):
        assert math.isfinite(r[key]) and r[key] > 0, key
    # every step trains the full batch: prompts x group size completions of at most max_tokens tokens
    assert r["completions_per_s"] == pytest.approx(settings["num_prompts"] * settings["group_size"] / r["step_s"])
    assert 0 < r["completion_tokens_mean"] <= settings["max_tokens"]
    assert r["peak_pss_mb"] > 200  # Ray, the driver and the actors together
    assert r["settings"]["max_staleness"] == 1
    assert (tmp_path / "vs_trl.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "skipped: no TRL environment" in proc.stdout


def test_full_run_measures_every_one_learner_setting_at_zero_stage_2_too():
    from memrl_benchmarks.vs_trl import memrl_runs

    runs = memrl_runs(quick=False)
    assert len({run.name for run in runs}) == len(runs) == 13
    assert {run.name for run in runs if run.zero_stage == 2} == {
        f"memrl_{engine}_1L_{mode}_zero2" for engine in ("torch", "vllm") for mode in ("sync", "async1")} | {
        "memrl_torch_1L_async1_zero2_1runner"}
    assert [run.name for run in memrl_runs(quick=True)] == ["memrl_torch_1L_async1"]
