"""The GPU check in its --quick form on this machine's device (the CPU here): every step writes its figures, the
activation figures against the memory plan's, the weights arrive exactly."""

import json

import pytest

from memrl_benchmarks import gpu_check

pytestmark = pytest.mark.timeout(300)


def test_quick_run_measures_every_step_against_the_plan(tmp_path):
    results = gpu_check.main(["--quick", "--out", str(tmp_path)])
    assert json.loads((tmp_path / "gpu_check.json").read_text()) == json.loads(json.dumps(results))
    assert (tmp_path / "gpu_check.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    steps = results["steps"]
    runs = steps["learner_step"]["runs"]
    assert [(r["tokens"], r["checkpointing"]) for r in runs] == [(256, False), (512, False), (256, True), (512, True)]
    for run in runs:
        assert run["tokens_per_s"] > 0 and 0 < run["mfu"] < 1
        # What autograd saved is what the plan predicts (the plan's measured error, tests/test_memory_plan.py).
        assert run["saved_over_plan"] == pytest.approx(1.0, abs=0.15), run
    transfer = steps["weight_transfer"]
    assert transfer["backend"] == "gloo" and transfer["received_exactly"]
    assert transfer["num_tensors"] == 3 + 12 * 2  # embeddings, final norm, head and 12 tensors a layer
    for name in ("raw", "bucketed", "into_own_tensors"):
        assert transfer[name]["gb_per_s"] > 0
    assert steps["torch_engine"]["new_tokens"] == 4 * 8 and steps["torch_engine"]["tokens_per_s"] > 0
