"""The Ray actor that serves one inference engine (`start_engine` starts it).

A shell that builds the engine in its own process and passes calls through. Ray loads an actor's class in
every process that receives its handle, and env runners receive engine handles: with this shell they load a
class that needs no torch, instead of an engine module that imports torch and transformers (seconds of CPU
per runner). The engine itself (`self.engine`) lives only in the actor's process.
"""

from __future__ import annotations

import contextlib
import functools

from memrl.engines.base import GenerationOutput, SamplingConfig


def _exclusive(method):
    """Runs `method` while no continuous batch steps the engine (a weight load, a score, a reseed)."""

    @functools.wraps(method)
    def run(self, *args, **kwargs):
        with self._engine_lock():
            return method(self, *args, **kwargs)

    return run


class EngineActor:
    """Runs the engine named `engine` (memrl.engines.ENGINES) on `model_path`; each method is the engine's own
    (memrl.engines.base.InferenceEngine). With `continuous_batching` (start_engine makes the actor take calls
    concurrently) generate calls go through a ContinuousBatcher (memrl.engines.batcher)."""

    def __init__(self, engine: str, model_path: str, seed: int = 0, continuous_batching: bool = False,
                 **engine_config):
        from memrl.engines import engine_class

        self.engine = engine_class(engine)(model_path, seed=seed, **engine_config)
        self.batcher = None
        if continuous_batching:
            from memrl.engines.batcher import ContinuousBatcher

            self.batcher = ContinuousBatcher(self.engine)

    def _engine_lock(self):
        return self.batcher.lock if self.batcher is not None else contextlib.nullcontext()

    def generate(self, prompts: list[list[int]], sampling: SamplingConfig) -> list[GenerationOutput]:
        if self.batcher is not None:
            return self.batcher.generate(prompts, sampling)
        return self.engine.generate(prompts, sampling)

    def generate_batch(self, prompts: list[list[int]], sampling: SamplingConfig,
                       seed: int | None = None) -> list[GenerationOutput]:
        """`seed` reseeds the engine before this batch; under continuous batching, where other callers' requests
        share the steps, it is not used (runners send none then)."""
        if self.batcher is not None:
            return self.batcher.generate(prompts, sampling)
        return self.engine.generate_batch(prompts, sampling, seed)

    def pause_generation(self) -> None:
        """Hold the engine's steps (continuous batching only): generate calls queue until `resume_generation`, then
        share its first step. For a learner that needs the device to itself between sampling rounds."""
        self._require_batcher("pause_generation")
        self.batcher.pause()

    def resume_generation(self) -> None:
        self._require_batcher("resume_generation")
        self.batcher.resume()

    def queued_requests(self) -> int:
        """Requests that wait for their first step (0 without continuous batching)."""
        return self.batcher.queued_requests() if self.batcher is not None else 0

    def _require_batcher(self, method: str) -> None:
        if self.batcher is None:
            raise RuntimeError(f"{method} needs an engine started with continuous_batching=True: without it the "
                               "actor takes one call at a time and a paused engine would block its own resume")

    def max_requests_in_flight(self) -> int:
        """The most requests a continuous batch has held at once (0 without continuous batching)."""
        return self.batcher.max_requests if self.batcher is not None else 0

    def max_model_len(self) -> int:
        return self.engine.max_model_len()

    @_exclusive
    def reseed(self, seed: int) -> None:
        self.engine.reseed(seed)

    @_exclusive
    def pop_generate_seconds(self) -> float:
        return self.engine.pop_generate_seconds()

    @_exclusive
    def score(self, prompt_ids: list[int], continuation_ids: list[int]) -> list[float]:
        return self.engine.score(prompt_ids, continuation_ids)

    @_exclusive
    def load_weights(self, named_tensors, version: int) -> None:
        self.engine.load_weights(named_tensors, version)

    def node_ip(self) -> str:
        return self.engine.node_ip()

    def weight_sync_ranks(self) -> int:
        return self.engine.weight_sync_ranks()

    @_exclusive
    def init_weight_sync(self, host: str, port: int, rank: int, world_size: int, backend: str) -> None:
        self.engine.init_weight_sync(host, port, rank, world_size, backend)

    @_exclusive
    def receive_weights(self, metas: list[tuple[str, tuple[int, ...], str]], version: int, bucket_bytes: int) -> None:
        self.engine.receive_weights(metas, version, bucket_bytes)
