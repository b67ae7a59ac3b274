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
    # One round, a process of its own (means and ranges over several rounds: test_ratios_are_paired_within_each_round).
    assert settings["rounds"] == len(r["rounds"]) == 1 and settings["trl_gradient_checkpointing"] is False
    (one,) = r["rounds"]
    assert len(one["step_s_all"]) == settings["steps"] + settings["warmup_steps"]
    assert r["step_s"] == pytest.approx(one["step_s"])
    for key in ("startup_s", "step_s", "completions_per_s", "peak_pss_mb"):
        assert math.isfinite(r[key]) and r[key] > 0, key
    # every step trains the full batch: prompts x group size completions of at most max_tokens tokens
    assert one["completions_per_s"] == pytest.approx(settings["num_prompts"] * settings["group_size"] / one["step_s"])
    assert 0 < r["completion_tokens_mean"] <= settings["max_tokens"]
    assert r["peak_pss_mb"] > 200  # Ray, the driver and the actors together
    assert r["settings"]["max_staleness"] == 1
    assert (tmp_path / "vs_trl.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = (tmp_path / "vs_trl.md").read_text()
    assert "| TRL GRPOTrainer | skipped: no TRL environment" in table
    assert f"| memrl, torch engine, 1 learner, one batch ahead | {r['step_s']:.3f} |" in table
    assert "skipped: no TRL environment" in proc.stdout


def test_ratios_are_paired_within_each_round():
    from memrl_benchmarks.vs_trl import mean_over_rounds, paired_ratios

    # TRL slows down over the run: each round's ratio compares the two systems under the same conditions.
    trl, memrl = [{"step_s": 0.5}, {"step_s": 0.7}], [{"step_s": 0.25}, {"step_s": 0.5}]
    assert paired_ratios(trl, memrl) == {"": pytest.approx(1.7), "_range": [1.4, 2.0], "_rounds": [2.0, 1.4]}

    rounds = [{"step_s": 1.0, "peak_pss_mb": 100.0, "step_s_all": [1.0]}, {"step_s": 3.0, "peak_pss_mb": 300.0,
                                                                             "step_s_all": [3.0]}]
    assert mean_over_rounds(rounds) == {"step_s": 2.0, "peak_pss_mb": 200.0}


def test_full_run_measures_every_one_learner_setting_at_zero_stage_2_too():
    from memrl_benchmarks.vs_trl import memrl_runs

    runs = memrl_runs(quick=False)
    assert len({run.name for run in runs}) == len(runs) == 13
    assert {run.name for run in runs if run.zero_stage == 2} == {
        f"memrl_{engine}_1L_{mode}_zero2" for engine in ("torch", "vllm") for mode in ("sync", "async1")} | {
        "memrl_torch_1L_async1_zero2_1runner"}
    assert [run.name for run in memrl_runs(quick=True)] == ["memrl_torch_1L_async1"]


def test_the_trl_worker_imports_nothing_of_memrl():
    # It runs in TRL's own environment, where memrl is not installed: only the standard library, TRL's stack and
    # benchmarks/common.py beside it.
    import ast

    tree = ast.parse((ROOT / "benchmarks" / "trl_grpo_worker.py").read_text())
    modules = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names} | {
        node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.level == 0}
    assert not any(m.split(".")[0].startswith("memrl") for m in modules), modules
    assert "common" in modules and (ROOT / "benchmarks" / "common.py").is_file()
