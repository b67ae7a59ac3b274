"""The Ray actor that serves one inference engine (`start_engine` starts it).

A shell that builds the engine in its own process and passes calls through. Ray loads an actor's class in
every process that receives its handle, and env runners receive engine handles: with this shell they load a
class that needs no torch, instead of an engine module that imports torch and transformers (seconds of CPU
per runner). The engine itself (`self.engine`) lives only in the actor's process.
"""

from __future__ import annotations

from memrl.engines.base import GenerationOutput, SamplingConfig


class EngineActor:
    """Runs the engine named `engine` (memrl.engines.ENGINES) on `model_path`; each method is the engine's own
    (memrl.engines.base.InferenceEngine)."""

    def __init__(self, engine: str, model_path: str, seed: int = 0, **engine_config):
        from memrl.engines import engine_class

        self.engine = engine_class(engine)(model_path, seed=seed, **engine_config)

    def generate(self, prompts: list[list[int]], sampling: SamplingConfig) -> list[GenerationOutput]:
        return self.engine.generate(prompts, sampling)

    def generate_batch(self, prompts: list[list[int]], sampling: SamplingConfig,
                       seed: int | None = None) -> list[GenerationOutput]:
        return self.engine.generate_batch(prompts, sampling, seed)

    def max_model_len(self) -> int:
        return self.engine.max_model_len()

    def reseed(self, seed: int) -> None:
        self.engine.reseed(seed)

    def pop_generate_seconds(self) -> float:
        return self.engine.pop_generate_seconds()

    def score(self, prompt_ids: list[int], continuation_ids: list[int]) -> list[float]:
        return self.engine.score(prompt_ids, continuation_ids)

    def load_weights(self, named_tensors, version: int) -> None:
        self.engine.load_weights(named_tensors, version)

    def node_ip(self) -> str:
        return self.engine.node_ip()

    def weight_sync_ranks(self) -> int:
        return self.engine.weight_sync_ranks()

    def init_weight_sync(self, host: str, port: int, rank: int, world_size: int, backend: str) -> None:
        self.engine.init_weight_sync(host, port, rank, world_size, backend)

    def receive_weights(self, metas: list[tuple[str, tuple[int, ...], str]], version: int, bucket_bytes: int) -> None:
        self.engine.receive_weights(metas, version, bucket_bytes)
