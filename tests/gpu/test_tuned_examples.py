"""A tuned example's GPU preset end to end on one GPU: two iterations of echo_dapo with `--num-gpus 1` (learner and
engine sharing the GPU) on a small model built here, with each engine, then its summary and saved policy.

Skipped without CUDA; the vLLM case also without vLLM's CUDA build. On a GPU machine: `make gpu-test`.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.slow,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("engine", ["torch", "vllm"])
def test_echo_gpu_preset_runs_two_iterations_on_one_gpu(tiny_checkpoint, tmp_path, engine, request):
    if engine == "vllm":
        request.getfixturevalue("cuda_vllm")
    out = tmp_path / "run"
    command = [sys.executable, "tuned_examples/echo_dapo.py", "--model", str(tiny_checkpoint), "--num-gpus", "1",
               "--engine", engine, "--iterations", "2", "--out", str(out)]
    # A Ray instance of its own: the preset reserves the whole GPU.
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert len(summary["reward_per_iteration"]) == 2
    counters = summary["counters"]
    assert counters["trajectories_sampled"] == counters["trajectories_trained"] > 0
    assert summary["eval_after"]["num_tasks"] == summary["eval_before"]["num_tasks"] == 64
    assert (out / "model" / "config.json").is_file()
