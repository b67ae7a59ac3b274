"""Shared fixtures: one local Ray instance and one tiny checkpoint per test session."""

import os

import pytest

os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def ray_session():
    """A local Ray instance shared by every test that needs actors."""
    import ray

    # Logical CPUs above the 2 physical cores so tests can place several 1-CPU actors at once.
    ray.init(num_cpus=8, include_dashboard=False, log_to_driver=True, configure_logging=False)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory):
    """Path of a freshly built tiny Qwen2 checkpoint (tokenizer included)."""
    from memrl.models.tiny import build_tiny_checkpoint

    return build_tiny_checkpoint(tmp_path_factory.mktemp("tiny") / "model")
