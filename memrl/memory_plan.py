"""How much GPU memory a run needs on each learner GPU and each engine GPU, worked out from the checkpoint's
config.json and the algorithm's config before any actor starts (`AlgorithmConfig.plan`, `python -m memrl plan`).

A learner GPU holds its share of the ZeRO state (parameters, gradients, fp32 master weights and Adam moments,
partitioned over the learners as the ZeRO stage says), its share of the frozen reference model, the parameters ZeRO-3
gathers for the layers in flight and its reduce bucket, and the activations of one micro-batch (learners.token_budget
tokens, padded or packed) with or without gradient checkpointing, plus the logits of the micro-batch's response
tokens. An engine GPU holds its tensor-parallel share of the weights, the KV cache, the CUDA graph pool and the
forward pass's peak. Both keep a reserve for the CUDA context and the allocator's fragmentation.

The activation model counts the bytes autograd saves for the backward pass, per token, in a Qwen2- or Llama-style
decoder (RMSNorm computed in float32, rotary embeddings, grouped-query attention through SDPA, a SwiGLU MLP), with e
the training dtype's bytes:

    per layer:             (8 + 6e) h + 4e i + 2e d_kv + 4 n_heads + 8
    outside the layers:    (2 + 2e) h + 4 d_head + 12 + e S      (embedding output, final norm, rotary tables,
                                                                  the attention mask of rows of S tokens)
    per response token:    4 V (+ 4 V when the entropy has a gradient)   (float32 log-softmax and its exp)

where h is the hidden size, i the MLP width, d_kv the key/value width (key-value heads x head dim), V the vocabulary.
With gradient checkpointing a layer keeps only its input (e h per token) and one layer is recomputed at a time. The
coefficients were read off measurements of narrow models on CPU (`saved_tensor_bytes`); tests/test_memory_plan.py
measures again at three widths and holds the model to them.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memrl.engines import tensor_parallel_size

GB = 1e9
"""Memory figures are given in GB (10^9 bytes), as GPU makers state them (an A100 40 GB, an H200 141 GB)."""

RESERVE_BYTES = 2 * GB
"""Kept free on every GPU: the CUDA context, NCCL's buffers and what the caching allocator cannot reuse."""
FRAGMENTATION = 1.10
"""Allocator slack on top of what tensors hold at the peak (blocks freed but not reusable at the size asked)."""
ZERO3_MAX_LIVE_PARAMETERS = 1_000_000_000
"""DeepSpeed's default stage3_max_live_parameters: the most parameters ZeRO-3 keeps gathered at once."""
ZERO_REDUCE_BUCKET = 500_000_000
"""DeepSpeed's default reduce_bucket_size, in elements: the gradients reduced together."""
CUDA_GRAPH_POOL_BYTES = 1 * GB
"""vLLM's CUDA graph pool when graphs are captured (by default on a GPU; engine_config enforce_eager=True turns them
off), about 0.5-1 GB for 7B models at its default capture sizes."""
VLLM_MAX_BATCHED_TOKENS = 8192
"""Tokens of the largest forward pass vLLM profiles (its max_num_batched_tokens) when engine_config does not say."""
VLLM_MAX_SEQS = 256
"""Sequences vLLM samples at once (its max_num_seqs) when engine_config does not say: each gets float32 logits."""


def local_gpu_memory_gb() -> float | None:
    """Memory of this machine's first GPU in GB, as nvidia-smi reports it (no CUDA context is made); None without
    one."""
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=10, check=True).stdout.split()
        return float(out[0]) * 1024**2 / GB if out else None  # MiB
    except (OSError, subprocess.SubprocessError, ValueError):
        return None


@dataclass(frozen=True)
class ModelShape:
    """The sizes of a decoder-only transformer that memory depends on, as its config.json gives them."""

    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    tied_embeddings: bool
    attention_bias: bool
    max_positions: int

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> ModelShape:
        """From a config.json's fields (Qwen2, Llama and Mistral name them alike). Qwen2 has biases on q, k and v."""
        try:
            h, heads = int(config["hidden_size"]), int(config["num_attention_heads"])
            return cls(hidden_size=h, num_layers=int(config["num_hidden_layers"]), num_heads=heads,
                       num_kv_heads=int(config.get("num_key_value_heads") or heads),
                       head_dim=int(config.get("head_dim") or h // heads),
                       intermediate_size=int(config["intermediate_size"]), vocab_size=int(config["vocab_size"]),
                       tied_embeddings=bool(config.get("tie_word_embeddings", False)),
                       attention_bias=bool(config.get("attention_bias", config.get("model_type") == "qwen2")),
                       max_positions=int(config.get("max_position_embeddings", 32768)))
        except KeyError as e:
            raise ValueError(f"the model config has no {e.args[0]!r}: the memory plan needs a decoder-only "
                             f"transformer's sizes (hidden_size, num_hidden_layers, num_attention_heads, "
                             f"intermediate_size, vocab_size)") from None

    @classmethod
    def from_checkpoint(cls, path: str | Path) -> ModelShape:
        """From the config.json of a local Hugging Face checkpoint."""
        file = Path(path) / "config.json"
        if not file.is_file():
            raise ValueError(f"{path!r} has no config.json: the memory plan reads the model's sizes from it")
        return cls.from_config(json.loads(file.read_text()))

    @property
    def kv_dim(self) -> int:
        return self.num_kv_heads * self.head_dim

    @property
    def layer_params(self) -> int:
        h, q = self.hidden_size, self.num_heads * self.head_dim
        attention = h * q + 2 * h * self.kv_dim + q * h + ((q + 2 * self.kv_dim) if self.attention_bias else 0)
        return attention + 3 * h * self.intermediate_size + 2 * h

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    def num_params(self, head: str = "lm") -> int:
        """Parameters of the causal LM (head "lm") or of the same backbone with a scalar value head ("value")."""
        out = (0 if self.tied_embeddings else self.embedding_params) if head == "lm" else self.hidden_size + 1
        return self.embedding_params + self.num_layers * self.layer_params + self.hidden_size + out


def layer_activation_bytes(shape: ModelShape, dtype_bytes: int) -> int:
    """Bytes one decoder layer saves for backward, per token (see the module docstring)."""
    e = dtype_bytes
    return ((8 + 6 * e) * shape.hidden_size + 4 * e * shape.intermediate_size + 2 * e * shape.kv_dim
            + 4 * shape.num_heads + 8)


def activation_bytes(shape: ModelShape, dtype_bytes: int, tokens: int, response_tokens: int, *,
                     checkpointing: bool, entropy_grad: bool = True, head: str = "lm",
                     row_tokens: int = 0) -> dict[str, int]:
    """Activation memory of one micro-batch of `tokens` padded tokens in rows of `row_tokens` (0: one row without
    padding, which attention masks causally without a mask tensor; else the [rows, 1, S, S] mask that padding or a
    stitched row's token tree needs): "saved" (what autograd keeps after the forward pass, the figure
    `saved_tensor_bytes` measures) and "peak" (saved plus what exists only for a moment: one layer recomputed under
    checkpointing, the response logits before their float32 log-softmax)."""
    e, h = dtype_bytes, shape.hidden_size
    layer = layer_activation_bytes(shape, e)
    mask = tokens * e * row_tokens
    outside = (2 + 2 * e) * h + 4 * shape.head_dim + 12
    per_token = shape.num_layers * (e * h if checkpointing else layer) + outside
    logits = (8 if entropy_grad else 4) * shape.vocab_size if head == "lm" else 0
    # Checkpoints hold the mask as an input of every layer, outside autograd's saved tensors.
    saved = tokens * per_token + response_tokens * logits + (0 if checkpointing else mask)
    transient = (tokens * layer + mask if checkpointing else 0) + (
        response_tokens * (e + 4) * shape.vocab_size if head == "lm" else 0)
    return {"saved": saved, "peak": saved + transient}


def saved_tensor_bytes(model, forward: Callable[[], Any]) -> int:
    """Bytes of the distinct tensors autograd saves for backward while `forward()` runs on `model`, parameters left
    out (each storage counted once): what the activation model predicts, measured."""
    import torch

    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    storages: dict[int, int] = {}

    def pack(tensor):
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in params:
            storages[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        forward()
    return sum(storages.values())


def zero_state_bytes(num_params: int, dtype_bytes: int, zero_stage: int, num_learners: int) -> dict[str, float]:
    """One learner's share of the training state: parameters and gradients in the training dtype, and AdamW's two
    float32 moments plus (when training in bfloat16) the float32 master weights. ZeRO-1 partitions the optimizer
    state over the learners, ZeRO-2 the gradients too, ZeRO-3 the parameters too."""
    n, master = num_learners, (4 if dtype_bytes == 2 else 0)
    return {"parameters": dtype_bytes * num_params / (n if zero_stage == 3 else 1),
            "gradients": dtype_bytes * num_params / (n if zero_stage >= 2 else 1),
            "optimizer": (8 + master) * num_params / n}


@dataclass
class GpuNeed:
    """What one actor needs on one GPU, part by part (bytes), and the share of a GPU it reserves."""

    name: str
    parts: dict[str, float]
    gpus: float
    settings: str
    """The settings that change it most, for the message when it does not fit."""

    @property
    def total(self) -> float:
        return RESERVE_BYTES + FRAGMENTATION * sum(self.parts.values())


@dataclass
class MemoryPlan:
    """The learner's (and a PPO critic's) and the engine's needs against the memory of the GPUs they reserve."""

    gpu_memory_bytes: float | None
    needs: list[GpuNeed] = field(default_factory=list)

    def budget(self, need: GpuNeed) -> float | None:
        """What the actor may use: its share of one GPU (a whole GPU per rank when it takes one or more)."""
        if self.gpu_memory_bytes is None or need.gpus <= 0:
            return None
        return self.gpu_memory_bytes * min(need.gpus, 1.0)

    def misfits(self) -> list[GpuNeed]:
        """The actors whose needs exceed their share of a GPU (none when the GPU's size is not known)."""
        return [need for need in self.needs if (budget := self.budget(need)) is not None and need.total > budget]

    def problems(self) -> list[str]:
        """One sentence per actor that does not fit its share, with the figures and the settings to change."""
        out = []
        for need in self.misfits():
            budget = self.budget(need)
            largest = sorted(need.parts.items(), key=lambda kv: -kv[1])[:3]
            out.append(f"each {need.name} needs {need.total / GB:.1f} GB of GPU memory but has "
                       f"{budget / GB:.1f} GB ({min(need.gpus, 1.0):g} of a {self.gpu_memory_bytes / GB:.0f} GB "
                       f"GPU); most of it: " + ", ".join(f"{k} {v / GB:.1f} GB" for k, v in largest)
                       + f". Change {need.settings}")
        return out

    @property
    def fits(self) -> bool:
        return not self.problems()

    def table(self) -> str:
        """The plan as text: each actor's parts and total in GB, against its budget."""
        lines = []
        for need in self.needs:
            budget = self.budget(need)
            head = f"{need.name} ({need.gpus:g} GPU each)"
            total = f"total {need.total / GB:.1f} GB with {RESERVE_BYTES / GB:.0f} GB reserve and " \
                    f"{FRAGMENTATION - 1:.0%} slack"
            against = "" if budget is None else (f" of {budget / GB:.1f} GB: "
                                                 + ("fits" if need.total <= budget else "DOES NOT FIT"))
            lines += [head] + [f"  {k:<28} {v / GB:8.2f} GB" for k, v in need.parts.items()]
            lines.append(f"  {total}{against}")
        return "\n".join(lines)


def _response_tokens(cfg, token_budget: int, context: int) -> int:
    """Response tokens one micro-batch can hold at most: rows of the engine's context, each with max_tokens per call
    (every call of the episode when trajectories are stitched into one row)."""
    run, train = cfg.env_runners_cfg, cfg.training_cfg
    rows = max(1, token_budget // max(1, context))
    calls = run.max_calls_per_episode if train.stitch_trajectories else 1
    return min(token_budget, rows * calls * run.sampling.max_tokens)


def _context(cfg, shape: ModelShape) -> int:
    """The longest row: the engine's max_model_len when the config sets it, else the model's context."""
    return int((cfg.env_runners_cfg.engine_config or {}).get("max_model_len") or shape.max_positions)


def plan(cfg, gpu_memory_gb: float | None = None, shape: ModelShape | None = None) -> MemoryPlan:
    """The memory plan of an AlgorithmConfig `cfg` on GPUs of `gpu_memory_gb` GB
    each (None: figures only, nothing checked). `shape` defaults to the config.json of learners.model_path."""
    learners, run = cfg.learners_cfg, cfg.env_runners_cfg
    shape = shape or ModelShape.from_checkpoint(learners.model_path)
    e = 2 if learners.dtype == "bfloat16" else 4
    n, stage, budget = max(learners.num_learners, 1), learners.zero_stage, learners.token_budget
    engine_config = dict(run.engine_config or {})
    context = _context(cfg, shape)
    response = _response_tokens(cfg, budget, context)
    training = cfg.training_cfg
    loss = training.loss
    entropy_grad = loss.entropy_coef > 0
    checkpointing = learners.gradient_checkpointing
    # The attention mask's rows: padded rows of up to the context each; rows packed without padding are one row of
    # the whole budget under sdpa and eager (a block-causal mask), and need no mask under flash_attention_2.
    row_tokens = min(budget, context)
    if learners.padding_free:
        row_tokens = 0 if learners.attn_implementation == "flash_attention_2" else budget

    def learner(head: str, name: str, reference: bool) -> GpuNeed:
        params = shape.num_params(head)
        parts = zero_state_bytes(params, e, stage, n)
        if reference:
            parts["reference model"] = e * params / (n if stage == 3 else 1)
        if stage == 3:
            parts["gathered layers"] = e * min(ZERO3_MAX_LIVE_PARAMETERS,
                                               max(shape.embedding_params, 2 * shape.layer_params))
        parts["reduce bucket"] = e * min(ZERO_REDUCE_BUCKET, params)
        act = activation_bytes(shape, e, budget, response if head == "lm" else 0, checkpointing=checkpointing,
                               entropy_grad=entropy_grad, head=head, row_tokens=row_tokens)
        parts["activations"] = act["peak"]
        return GpuNeed(name, parts, learners.num_gpus_per_learner,
                       "learners.num_learners (ZeRO shares), learners.token_budget (activations), "
                       "learners.gradient_checkpointing or learners.num_gpus_per_learner")

    needs = [learner("lm", "learner", reference=loss.kl_coef > 0)]
    if cfg.has_critic:
        needs.append(learner("value", "critic learner", reference=False))
    if run.num_engines and run.engine == "vllm":
        tp = tensor_parallel_size(run.num_gpus_per_engine)
        ee = 2 if str(engine_config.get("dtype", learners.dtype)) in ("bfloat16", "float16", "half") else 4
        tokens = int(engine_config.get("max_num_batched_tokens", VLLM_MAX_BATCHED_TOKENS))
        seqs = int(engine_config.get("max_num_seqs", VLLM_MAX_SEQS))
        parts = {"weights": ee * shape.num_params("lm") / tp,
                 "forward peak": tokens * ee * (4 * shape.hidden_size + 2 * shape.intermediate_size / tp)
                 + seqs * 4 * shape.vocab_size}
        if not engine_config.get("enforce_eager", run.num_gpus_per_engine <= 0):
            parts["CUDA graphs"] = CUDA_GRAPH_POOL_BYTES
        share = run.num_gpus_per_engine / tp
        parts["KV cache"] = _kv_cache_bytes(engine_config.get("kv_cache_bytes"), parts, share, gpu_memory_gb,
                                            2 * shape.num_layers * shape.kv_dim * ee / tp * context)
        needs.append(GpuNeed("engine", parts, share,
                             "env_runners.num_gpus_per_engine (tensor parallel) or env_runners.engine_config "
                             "kv_cache_bytes"))
    return MemoryPlan(None if gpu_memory_gb is None else gpu_memory_gb * GB, needs)


def _kv_cache_bytes(fixed: int | None, parts: dict[str, float], share: float, gpu_memory_gb: float | None,
                    one_sequence: float) -> float:
    """An engine's KV cache: `fixed` when engine_config sets kv_cache_bytes; else, on GPUs of known size, what its
    share leaves after the other parts (as the engine sizes it there, vllm_engine.memory_arguments), but at least
    `one_sequence` (the KV of one max_model_len sequence: less and no sequence of that length could run, so the
    plan counts that much and the engine does not fit)."""
    if fixed is not None:
        return float(fixed)
    if gpu_memory_gb is None or share <= 0:
        return 0.0  # sized at start-up from the GPU; unknown here
    left = (gpu_memory_gb * GB * min(share, 1.0) - RESERVE_BYTES) / FRAGMENTATION - sum(parts.values())
    return max(left, one_sequence)


def fit_token_budget(cfg, gpu_memory_gb: float, shape: ModelShape | None = None):
    """`cfg` with learners.token_budget halved until every learner's plan fits its share of a GPU of
    `gpu_memory_gb` GB, down to the longest row the engine serves (env_runners.engine_config max_model_len, else
    the model's context): a micro-batch must hold one row. Raises ValueError with the plan's figures when even that
    does not fit (the ZeRO state needs more learners, i.e. more GPUs, or a larger GPU). Engines are not resized."""
    shape = shape or ModelShape.from_checkpoint(cfg.learners_cfg.model_path)
    budget = cfg.learners_cfg.token_budget
    floor = min(budget, _context(cfg, shape))
    while True:
        fitted = cfg.copy().learners(token_budget=budget)
        fitted_plan = plan(fitted, gpu_memory_gb, shape)
        if all(need.name == "engine" for need in fitted_plan.misfits()):
            return fitted
        problems = [p for p in fitted_plan.problems() if not p.startswith("each engine ")]
        if budget // 2 < floor:
            raise ValueError(f"the learners do not fit GPUs of {gpu_memory_gb:g} GB even at learners.token_budget="
                             f"{budget} (one row of {floor} tokens): " + "; ".join(problems))
        budget //= 2


GPUS_PER_NODE = 8
"""Most GPUs one tensor-parallel engine spans: its workers talk over the node's own links."""


def fit_engines(cfg, gpu_memory_gb: float, shape: ModelShape | None = None):
    """`cfg` with its engines' GPUs regrouped into engines of twice as many GPUs (tensor_parallel_size 2, 4, 8: each
    worker holds a share of the weights) until an engine fits its GPUs of `gpu_memory_gb` GB, keeping the GPUs the
    engines reserve in all and two env runners per engine. Engines on shares of one GPU, or whose GPUs cannot be
    regrouped further, are left as they are (the plan then names them)."""
    shape = shape or ModelShape.from_checkpoint(cfg.learners_cfg.model_path)
    run = cfg.env_runners_cfg
    total, tp = run.num_engines * run.num_gpus_per_engine, tensor_parallel_size(run.num_gpus_per_engine)
    while any(need.name == "engine" for need in plan(cfg, gpu_memory_gb, shape).misfits()):
        if run.num_gpus_per_engine < 1 or total % (2 * tp) or 2 * tp > GPUS_PER_NODE:
            return cfg
        tp *= 2
        cfg = cfg.copy().env_runners(num_engines=int(total // tp), num_gpus_per_engine=tp,
                                     num_env_runners=2 * int(total // tp))
    return cfg
