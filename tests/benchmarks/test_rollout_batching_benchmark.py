"""The rollout batching benchmark in its --quick form, run in this process on the session's Ray: both modes sample
the same tasks, every figure and the plot are written."""

import json
import math
import sys

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def test_quick_run_measures_both_modes_on_the_same_tasks(ray_session, tmp_path, monkeypatch):
    from memrl_benchmarks import rollout_batching

    monkeypatch.setattr(sys, "argv", ["rollout_batching.py", "--quick", "--out", str(tmp_path)])
    rollout_batching.main()
    results = json.loads((tmp_path / "rollout_batching.json").read_text())
    assert results["settings"]["quick"] is True and list(results["runners"]) == ["2"]
    modes = results["runners"]["2"]
    tasks = results["settings"]["tasks"]
    for name in ("barrier", "continuous"):
        m = modes[name]
        assert m["wall_s"] > 0 and m["new_tokens_per_s"] > 0, name
        assert m["trajectories_per_s"] * m["wall_s"] == pytest.approx(tasks), name  # every task came back
    # Continuous batching sends each request on its own and the engine holds those of both runners at once; the
    # barrier mode sends a runner's pending requests as one call.
    assert modes["continuous"]["engine_calls"] == modes["continuous"]["calls"]
    assert modes["continuous"]["max_requests_in_flight"] > 1
    assert modes["barrier"]["engine_calls"] < modes["barrier"]["calls"]
    assert modes["barrier"]["max_requests_in_flight"] == 0
    assert math.isclose(modes["ratio"], modes["continuous"]["new_tokens_per_s"] / modes["barrier"]["new_tokens_per_s"])
    assert (tmp_path / "rollout_batching.png").stat().st_size > 10_000
