import pytest

from memrl_tuned_examples.tune_sweep import run_sweep

pytestmark = pytest.mark.slow


def test_sweep_runs_every_trial(ray_session, tiny_checkpoint, tmp_path):
    grid = run_sweep(str(tiny_checkpoint), iterations=1, storage=tmp_path, lrs=(1e-4, 1e-3))
    assert len(grid) == 2
    assert not grid.errors
    assert sorted(r.config["training"]["optimizer"]["lr"] for r in grid) == [1e-4, 1e-3]
    for result in grid:
        assert result.metrics["training_iteration"] == 1
        assert result.metrics["env_runners"]["num_trajectories"] == 16
