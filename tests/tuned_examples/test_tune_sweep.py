import pytest

from memrl_tuned_examples.tune_sweep import run_sweep

pytestmark = pytest.mark.slow


def test_the_sweep_runs_its_grid(ray_session, tiny_checkpoint, tmp_path):
    # A grid of one point: that a grid of several runs every trial in placement groups of its own is held by
    # tests/algorithms/test_algorithm.py::test_tune_trials_hold_their_learners_and_engines_in_their_placement_groups.
    grid = run_sweep(str(tiny_checkpoint), iterations=1, storage=tmp_path, lrs=(1e-3,))
    assert len(grid) == 1
    assert not grid.errors
    assert [r.config["training"]["optimizer"]["lr"] for r in grid] == [1e-3]
    for result in grid:
        assert result.metrics["training_iteration"] == 1
        assert result.metrics["env_runners"]["num_trajectories"] == 16
