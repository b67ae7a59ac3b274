"""Engines by name: unknown names are refused with the allowed ones; the classes load lazily."""

import pytest

from memrl.engines import ENGINES, engine_arguments, engine_class, start_engine


def test_unknown_engines_are_refused_naming_the_allowed_ones():
    with pytest.raises(ValueError, match=r"engine='sglang' is not registered; choose one of \['torch', 'vllm'\]"):
        start_engine("/nowhere", "sglang")


def test_registered_names_load_their_classes():
    from memrl.engines.base import InferenceEngine

    assert issubclass(engine_class("torch"), InferenceEngine) and set(ENGINES) == {"torch", "vllm"}


def test_an_engine_actor_computes_on_the_cpus_it_reserves(ray_session, tiny_checkpoint):
    """Ray sets an actor's OpenMP threads to its CPUs, so num_cpus sizes the engine's torch thread pool."""
    import os

    import ray

    threads = min(2, len(os.sched_getaffinity(0)))  # torch never runs more threads than the machine has cores
    engine = start_engine(tiny_checkpoint, "torch", num_cpus=threads)
    try:
        assert ray.get(engine.__ray_call__.remote(lambda self: __import__("torch").get_num_threads()),
                       timeout=120) == threads
    finally:
        ray.kill(engine)


def test_engines_get_their_gpu_layout_from_their_gpus():
    # vLLM: a worker per GPU; a share of one GPU is passed on (its KV cache is sized from that share).
    assert engine_arguments("vllm", 0, {"dtype": "float32"}) == {"dtype": "float32", "tensor_parallel_size": 1}
    assert engine_arguments("vllm", 0.5, {}) == {"tensor_parallel_size": 1, "gpu_share": 0.5}
    assert engine_arguments("vllm", 4, {}) == {"tensor_parallel_size": 4}
    assert engine_arguments("torch", 0.5, {"dtype": "float32"}) == {"dtype": "float32"}  # takes neither
