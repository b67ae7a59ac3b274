"""The runtime benchmark in its --quick form, run as a user runs it: every figure and the plot are written."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
MEASURED = ("rollout", "weight_sync", "weight_sync_sizes", "serialization", "object_store", "iteration_overhead")
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def numbers(tree, path: str = ""):
    """(path, value) of every number in a nested dict/list."""
    if isinstance(tree, dict):
        for key, value in tree.items():
            yield from numbers(value, f"{path}/{key}")
    elif isinstance(tree, list):
        for i, value in enumerate(tree):
            yield from numbers(value, f"{path}[{i}]")
    elif isinstance(tree, (int, float)) and not isinstance(tree, bool):
        yield path, tree


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("runtime")
    # Its own local Ray instance, never one a test session may have started.
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "runtime.py"), "--quick", "--out", str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=840,
    )
    assert proc.returncode == 0, f"benchmark failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    return out, json.loads((out / "runtime.json").read_text()), proc.stdout


def test_every_measured_figure_is_positive(quick_run):
    _, results, _ = quick_run
    assert results["machine"]["cpu_count"] > 0 and results["machine"]["torch"]
    assert results["settings"]["quick"] is True
    for section in MEASURED:
        figures = list(numbers(results[section]))
        assert figures, f"section {section} has no figures"
        for path, value in figures:
            assert math.isfinite(value) and value > 0, f"{section}{path} = {value}"


def test_figures_describe_the_same_work(quick_run):
    _, results, _ = quick_run
    s = results["settings"]
    rollout = results["rollout"]
    # No stop tokens: every engine produced exactly max_tokens per prompt, so the throughputs compare equal work.
    for engine in ("hf_generate", "torch_engine", "vllm_engine"):
        assert rollout[engine]["new_tokens"] == s["num_prompts"] * s["max_tokens"], engine
        assert rollout[engine]["min_s"] <= rollout[engine]["mean_s"]
    assert set(rollout["ratios"]) == {"vllm_over_hf", "torch_over_hf", "vllm_over_torch"}

    sync = results["weight_sync"]
    assert sync["bytes"] == 4 * s["model_parameters"]  # float32, every parameter once
    assert sync["bucketed_default"]["num_buckets"] == 1
    assert sync["bucketed_small"]["num_buckets"] > 1
    assert {"raw_gloo", "torch_engine_reload", "vllm_engine_reload"} <= set(sync)

    sizes = results["weight_sync_sizes"]
    assert list(sizes) == [f"{mb}mb" for mb in s["sync_sizes_mb"]]
    for mb in s["sync_sizes_mb"]:
        size = sizes[f"{mb}mb"]
        assert abs(size["bytes"] / (mb * 1e6) - 1) < 0.2, (mb, size["bytes"])  # the built parameters' size
        assert {"raw_gloo", "bucketed", "staged", "torch_engine_reload"} <= set(size)
        assert "vllm_engine_reload" not in size  # --quick starts no vLLM per size (tests/engines holds its receive)

    ser = results["serialization"]
    assert ser["num_conversations"] == s["num_trajectories"] * s["convs_per_trajectory"]
    token_bytes = ser["num_conversations"] * (s["episode_prompt_len"] + 2 * s["episode_response_len"]) * 4
    assert ser["arrow"]["bytes"] > token_bytes and ser["pickle"]["bytes"] > token_bytes

    overhead = results["iteration_overhead"]
    assert len(overhead["iterations"]) == s["iterations"]
    for it in overhead["iterations"]:
        assert 0 < it["outside_fraction"] < 1
        assert it["new_tokens"] > 0
    assert overhead["config"]["engine"] == "vllm" and overhead["config"]["num_learners"] == s["learners"] == 1


def test_plot_and_table_are_written(quick_run):
    out, _, stdout = quick_run
    png = out / "runtime.png"
    assert png.read_bytes()[:8] == PNG_SIGNATURE
    import matplotlib.image

    height, width, _ = matplotlib.image.imread(png).shape
    assert height > 200 and width > 200
    assert "Echo DAPO mean fraction outside model compute" in stdout
    assert "rollout VLLMEngine" in stdout
