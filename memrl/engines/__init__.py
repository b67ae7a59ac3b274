"""Inference engines behind one interface (memrl.engines.base): vLLM (vllm_engine) and a torch reference
(torch_engine), by name; `start_engine`, which serves a checkpoint from one as a Ray actor (or in this process,
memrl.engines.local), and `stop_engine`."""

from __future__ import annotations

from memrl.registry import Registry

ENGINES: Registry[type] = Registry("engine", "env_runners.engine")
"""Inference engines by name: an InferenceEngine subclass (`@ENGINES.register("name")` on it), or a "module:class"
string imported only when used, so memrl imports without vLLM."""
ENGINES.register("torch", "memrl.engines.torch_engine:TorchEngine")
ENGINES.register("vllm", "memrl.engines.vllm_engine:VLLMEngine")


def check_engine_name(name: str) -> None:
    """A ValueError naming the registered engines unless `name` is one (or a "module:class" that imports)."""
    ENGINES.check(name)


def engine_class(name: str) -> type:
    """The engine class registered as `name`, or the class "module:class" names."""
    return ENGINES.get(name)


def tensor_parallel_size(num_gpus: float) -> int:
    """Workers an engine of `num_gpus` GPUs splits its model over: one per GPU, or one sharing a GPU (or on CPU)."""
    return int(num_gpus) if num_gpus >= 1 else 1


def engine_arguments(engine: str, num_gpus: float, engine_config: dict) -> dict:
    """`engine_config` plus what memrl sets from the engine's `num_gpus`, for an engine whose constructor takes it:
    `tensor_parallel_size`, one worker per GPU (vLLM), and `gpu_share`, the part of a GPU it holds when it shares
    one (vLLM sizes its KV cache from that part)."""
    import inspect

    takes = inspect.signature(engine_class(engine)).parameters
    out = dict(engine_config)
    if "tensor_parallel_size" in takes:
        out["tensor_parallel_size"] = tensor_parallel_size(num_gpus)
    if "gpu_share" in takes and 0 < num_gpus < 1:
        out["gpu_share"] = num_gpus
    return out


MAX_CONCURRENT_CALLS = 1024
"""Calls an engine actor under continuous batching takes at once (each runner's envs wait on one call each)."""


def start_engine(model_path: str, engine: str = "vllm", seed: int = 0, num_gpus: float = 0.0, num_cpus: int = 1,
                 resources: dict | None = None, placement: tuple | None = None, continuous_batching: bool = False,
                 in_process: bool = False, **engine_config):
    """An inference engine actor (an ENGINES name or "module:class") serving `model_path` on `num_cpus` CPUs (Ray
    sets the actor's OMP_NUM_THREADS to the same), `num_gpus` GPUs and the Ray custom `resources` (which nodes it
    may run on); returns its handle at once.

    `placement` (a placement group and a bundle index, e.g. of a Tune trial's group) puts it in that bundle;
    without it the engine is outside any placement group the caller runs in. The engine gets `engine_config` with
    what memrl sets from `num_gpus` (`engine_arguments`). With `continuous_batching` the actor takes calls
    concurrently and serves them from one running batch (memrl.engines.batcher); else one call at a time.
    `in_process` builds the torch engine in this process instead (memrl.engines.local.LocalEngine), which takes
    calls as the actor does; it reserves nothing and batches nothing continuously."""
    import ray
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    from memrl.engines.actor import EngineActor

    check_engine_name(engine)  # fails here, in the caller, rather than in the actor
    engine_config = engine_arguments(engine, num_gpus, engine_config)
    if in_process:
        if engine != "torch" or num_gpus or resources or placement is not None or continuous_batching:
            raise ValueError(f"an engine in this process is the torch engine alone, on this process's CPUs, one call "
                             f"at a time; got engine={engine!r}, num_gpus={num_gpus}, resources={resources}, "
                             f"placement={placement}, continuous_batching={continuous_batching}")
        from memrl.engines.local import LocalEngine

        return LocalEngine(engine, model_path, seed=seed, **engine_config)
    pg, bundle = placement if placement is not None else (None, -1)
    actor = ray.remote(num_cpus=num_cpus, num_gpus=num_gpus, resources=resources or {})(EngineActor).options(
        scheduling_strategy=PlacementGroupSchedulingStrategy(placement_group=pg, placement_group_bundle_index=bundle),
        max_concurrency=MAX_CONCURRENT_CALLS if continuous_batching else 1)
    return actor.remote(engine, model_path, seed=seed, continuous_batching=continuous_batching, **engine_config)


def stop_engine(engine) -> None:
    """Kill an engine actor, or close an engine in this process (memrl.engines.local.LocalEngine)."""
    from memrl.engines.local import LocalEngine

    if isinstance(engine, LocalEngine):
        engine.close()
    else:
        import ray

        ray.kill(engine)
