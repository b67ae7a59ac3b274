"""The one interface every inference engine implements: token ids in, token ids + logprobs out."""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # only for annotations: env runners import this module and need no torch
    import torch


@dataclass
class SamplingConfig:
    """How to sample one response: the builder's env_runners(max_tokens=..., temperature=..., top_p=...) for
    training rollouts, and what held-out runs and chat actors ask for."""

    max_tokens: int = 64
    """Most new tokens per call."""
    temperature: float = 1.0
    """Softmax temperature; 0 means greedy. For training rollouts the learner trains the model's own distribution
    (logits not divided by it) on them, as the engine's logprobs are; below 1 this keeps training near the greedy
    policy (training.tempered_logprobs trains the tempered one instead)."""
    top_p: float = 1.0
    """Nucleus sampling mass in (0, 1]; 1 keeps the whole distribution."""
    stop_token_ids: list[int] = field(default_factory=list)
    """Generation ends after any of these tokens (the token is kept in the output); an env runner given none stops
    on its tokenizer's EOS."""

    def __post_init__(self) -> None:
        if self.max_tokens < 1:
            raise ValueError(f"SamplingConfig.max_tokens must be >= 1, got {self.max_tokens}")
        if self.temperature < 0:
            raise ValueError(f"SamplingConfig.temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"SamplingConfig.top_p must be in (0, 1], got {self.top_p}")


@dataclass
class GenerationOutput:
    """One sampled response."""

    token_ids: list[int]
    """New token ids, stop token included when generation stopped on one."""
    logprobs: list[float]
    """Logprob of each new token under the (temperature-free) model distribution, or under softmax(logits /
    temperature) from an engine started with tempered_logprobs."""
    finish_reason: str
    """"stop" (a stop token) or "length" (max_tokens reached)."""
    weight_version: int
    """Version of the weights that produced this response."""


class InferenceEngine(ABC):
    """A generator over token ids whose weights the learner can replace in place."""

    weight_version: int = 0
    """Version of the weights currently loaded (0 = initial checkpoint)."""
    generate_seconds: float = 0.0
    """Wall time spent inside generate_batch (or stepping continuous batches) since the last pop_generate_seconds()."""
    _submitted: tuple = ()  # (id, prompt, sampling) of each request the default `submit` queued for the next step
    _next_request: int = 0

    @abstractmethod
    def generate(self, prompts: list[list[int]], sampling: SamplingConfig) -> list[GenerationOutput]:
        """Sample one response per prompt, batched as the engine sees fit."""

    @abstractmethod
    def max_model_len(self) -> int:
        """Most tokens one sequence (prompt + response) may hold: a prompt must be shorter, and a response stops
        with finish_reason "length" when it fills the rest."""

    @abstractmethod
    def reseed(self, seed: int) -> None:
        """Restart the engine-level sampling RNG (never per request: vLLM's CPU worker rejects that)."""

    def generate_batch(
        self, prompts: list[list[int]], sampling: SamplingConfig, seed: int | None = None
    ) -> list[GenerationOutput]:
        """`generate`, after reseeding when `seed` is given; one call, so on an engine shared by several
        callers nobody's batch lands between the reseed and the generate. Env runners use this."""
        start = time.perf_counter()
        if seed is not None:
            self.reseed(seed)
        outputs = self.generate(prompts, sampling)
        self.generate_seconds += time.perf_counter() - start
        return outputs

    def pop_generate_seconds(self) -> float:
        """Time spent generating since the last call (the engine's busy time, for iteration timers)."""
        seconds, self.generate_seconds = self.generate_seconds, 0.0
        return seconds

    # -- continuous batching (memrl.engines.batcher) --------------------------------------------------------
    def submit(self, prompts: list[list[int]], sampling: SamplingConfig) -> list[str]:
        """Queue one request per prompt for `step` and return their ids. This default keeps them until the next
        step, which generates everything queued as batches: an engine without a scheduler of its own (the torch
        engine) then serves the requests of many callers together. vLLM adds them to its running batch."""
        self.check_prompts(prompts)  # a bad prompt fails its caller's call here, not every request of the next step
        ids = [str(self._next_request + i) for i in range(len(prompts))]
        self._next_request += len(prompts)
        self._submitted = (*self._submitted, *((rid, prompt, sampling) for rid, prompt in zip(ids, prompts)))
        return ids

    def step(self) -> list[tuple[str, GenerationOutput]]:
        """Advance the submitted requests; returns those that finished, by id. The default generates every queued
        request, one `generate` per distinct SamplingConfig."""
        pending, self._submitted = self._submitted, ()
        groups: dict[str, list[tuple[str, list[int], SamplingConfig]]] = {}
        for request in pending:
            groups.setdefault(repr(request[2]), []).append(request)
        finished = []
        for group in groups.values():
            outputs = self.generate([prompt for _, prompt, _ in group], group[0][2])
            finished.extend((rid, out) for (rid, _, _), out in zip(group, outputs, strict=True))
        return finished

    def check_prompts(self, prompts: list[list[int]]) -> None:
        """Raise ValueError naming a prompt `generate` would refuse (the default refuses none)."""

    def has_unfinished(self) -> bool:
        """Whether submitted requests wait for a `step`."""
        return bool(self._submitted)

    @abstractmethod
    def score(self, prompt_ids: list[int], continuation_ids: list[int]) -> list[float]:
        """Logprob of each continuation token given the prompt and the tokens before it."""

    @abstractmethod
    def load_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]], version: int) -> None:
        """Replace weights in place from (HF parameter name, tensor) pairs and set the version."""

    def node_ip(self) -> str:
        """This engine's node address (the weight-sync group meets on loopback when it is the learner's)."""
        from memrl.rendezvous import node_ip

        return node_ip()

    def weight_sync_ranks(self) -> int:
        """Ranks this engine takes in the weight-sync group: one per process holding a copy or a shard of the weights
        (a tensor-parallel engine's workers each receive the whole tensors and keep their shard)."""
        return 1

    @abstractmethod
    def init_weight_sync(self, host: str, port: int, rank: int, world_size: int, backend: str) -> None:
        """Join the weight-sync process group whose rank 0 is the learner, at ranks rank .. rank +
        weight_sync_ranks() - 1."""

    @abstractmethod
    def receive_weights(self, metas: list[tuple[str, tuple[int, ...], str]], version: int, bucket_bytes: int) -> None:
        """Receive a broadcast of (name, shape, dtype) tensors from rank 0 and load them in place."""
