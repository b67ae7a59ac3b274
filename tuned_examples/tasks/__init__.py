"""The CPU tasks the tuned examples, the warm-start recipes (warm_starts/) and the analyses (analyses/) share: env
and workflow settings, the shipped checkpoints they start from, and their sizes. An example imports its task from
here, never another example."""

from __future__ import annotations

from pathlib import Path

from memrl.config import AlgorithmConfig

CHECKPOINTS = Path(__file__).resolve().parents[1] / "checkpoints"
"""Where the shipped warm-start checkpoints live (tuned_examples/checkpoints, built by the recipes in warm_starts/)."""


def chat_service(model: str | Path, max_tokens: int, num_gpus: float = 0, temperature: float = 0.0) -> dict:
    """A frozen chat model serving `model` as a side service (memrl.services): a chat actor on vLLM over GPUs of its
    own (a model too large for one GPU split across them), on the torch engine on CPU."""
    engine = {"engine": "torch"}
    if num_gpus:
        engine = {"engine": "vllm", "dtype": "bfloat16",  # its KV cache: what its GPUs leave after the weights
                  **({"tensor_parallel_size": int(num_gpus)} if num_gpus > 1 else {})}
    return {"actor_class": "memrl.engines.chat:ChatActor", "num_cpus": 1, "num_gpus": num_gpus,
            "options": {"model_path": str(model), "temperature": temperature, "max_tokens": max_tokens, **engine}}


def served_chat(cfg: AlgorithmConfig, model: str | Path, name: str, max_tokens: int,
                **service) -> tuple[AlgorithmConfig, str]:
    """`cfg` with `model` served as the side service `name` when it is a local checkpoint (chat_service's `service`
    options), and what an env's answerer option names: that service, or the URL or "actor:NAME" given."""
    if str(model).startswith(("http://", "https://", "actor:")):
        return cfg, str(model)
    return cfg.services(actors={name: chat_service(model, max_tokens, **service)}), f"actor:{name}"
