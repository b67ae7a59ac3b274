"""GPU check: memrl's GPU path measured on one machine in minutes, with torch and transformers alone (no Ray, vLLM or
DeepSpeed, which a lent machine may not have).

    python benchmarks/gpu_check.py [--quick] [--out benchmarks/results] [--minutes 8]

Each step adds its figures to gpu_check.json as soon as it ends (a run cut short keeps what it measured):

1. learner_step: a Qwen2 stack at Qwen2.5-7B's width (random weights, LAYERS of its layers beside their optimizer
   state) trains one micro-batch as a learner does (padded rows, response logits, logprobs and entropy, AdamW) at
   8K, 16K and 32K tokens, a quarter of them response tokens, with and without gradient checkpointing: the bytes
   autograd saves and, on a GPU, the peak memory above weights, gradients and optimizer state, each against the
   memory plan's figure (memrl.memory_plan.activation_bytes); tokens/s and MFU. A size the plan says does not fit
   the free memory is skipped, named.
2. weight_transfer: Qwen2.5-7B's weights in bfloat16 (15 GB) sent bucket by bucket (memrl.weight_sync) to a second
   process, into fresh buffers (vLLM's reload) and into the receiver's own tensors (the torch engine's), against one
   raw broadcast of the same bytes: NCCL between two GPUs where there are two, else gloo through host memory (the
   path of ranks that share a GPU) and the NCCL branch on a group of one rank.
3. torch_engine: the reference engine's sampling throughput on a random Qwen2.5-1.5B-shaped checkpoint.

--quick runs every step at narrow widths and small sizes on whatever device there is (what the test runs on CPU).
"""

from __future__ import annotations

import json
import multiprocessing as mp
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from memrl.learner.batching import pad_rows
from memrl.memory_plan import GB, ModelShape, activation_bytes, saved_tensor_bytes
from memrl_benchmarks.common import elapsed_log, free_port, machine, parser

QWEN25_7B = {"model_type": "qwen2", "hidden_size": 3584, "num_hidden_layers": 28, "num_attention_heads": 28,
             "num_key_value_heads": 4, "intermediate_size": 18944, "vocab_size": 152064, "tie_word_embeddings": False,
             "max_position_embeddings": 32768}
QWEN25_1_5B = {**QWEN25_7B, "hidden_size": 1536, "num_attention_heads": 12, "num_key_value_heads": 2,
               "intermediate_size": 8960, "vocab_size": 151936, "tie_word_embeddings": True}
"""The sizes of Qwen2.5-7B-Instruct and Qwen2.5-1.5B-Instruct (their config.json)."""

PEAK_BF16_FLOPS = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "L40S": 362e12}
"""Dense bfloat16 tensor-core peak by GPU name (SXM parts); MFU is left out for other devices."""


@dataclass
class Sizes:
    """One run's sizes; QUICK shrinks every one."""

    learner_model: dict
    """config.json fields of the trained stack (its width; num_hidden_layers is `layers`)."""
    layers: int = 8
    """Layers of the trained stack: 8 of the 7B's with AdamW state fit a 141 GB GPU beside 32K tokens' activations."""
    tokens: tuple[int, ...] = (8192, 16384, 32768)
    """Micro-batch sizes (padded tokens) of the learner step."""
    rows: int = 4
    """Rows per micro-batch, of equal length; a quarter of each is response."""
    transfer_model: dict | None = None
    """config.json fields whose bfloat16 weights the transfer sends (None: learner_model's, all its layers)."""
    transfer_repeats: int = 2
    engine_model: dict | None = None
    """config.json fields of the engine's checkpoint (None: memrl's tiny model)."""
    engine_prompts: int = 64
    engine_prompt_tokens: int = 512
    engine_new_tokens: int = 256


FULL = Sizes(learner_model=QWEN25_7B, engine_model=QWEN25_1_5B)
QUICK = Sizes(learner_model={**QWEN25_7B, "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
                             "num_key_value_heads": 2, "intermediate_size": 338, "vocab_size": 512},
              layers=2, tokens=(256, 512), rows=2, transfer_repeats=1, engine_prompts=4, engine_prompt_tokens=32,
              engine_new_tokens=8)


def _qwen2(fields: dict, layers: int | None = None):
    from transformers import Qwen2Config

    config = {**fields, **({"num_hidden_layers": layers} if layers else {})}
    return Qwen2Config(**{k: v for k, v in config.items() if k != "model_type"})


# -- 1. learner step -------------------------------------------------------------------------------------


def _micro_batch(tokens: int, rows: int, vocab: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    length = tokens // rows
    response = length // 4
    return pad_rows([{"prompt_ids": rng.integers(3, vocab, length - response),
                      "response_ids": rng.integers(3, vocab, response)} for _ in range(rows)])


def learner_step(sizes: Sizes, device: torch.device, log, flops_per_s: float | None) -> dict[str, Any]:
    from transformers import Qwen2ForCausalLM

    config = _qwen2(sizes.learner_model, sizes.layers)
    shape = ModelShape.from_config({**sizes.learner_model, "num_hidden_layers": sizes.layers})
    torch.manual_seed(0)
    with device:
        model = Qwen2ForCausalLM._from_config(config, attn_implementation="sdpa", dtype=torch.bfloat16).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6)
    out: dict[str, Any] = {"layers": sizes.layers, "hidden_size": shape.hidden_size,
                           "params": sum(p.numel() for p in model.parameters()), "runs": []}

    def step(mb, measure_saved: bool) -> tuple[float, int]:
        def forward():
            with mb.head_sees_responses(model):
                logits = model(input_ids=mb.input_ids.to(device), attention_mask=mb.attention_mask.to(device),
                               position_ids=mb.position_ids.to(device), use_cache=False).logits
            return mb.logprobs_and_entropy(logits)

        saved = saved_tensor_bytes(model, forward) if measure_saved else 0
        _sync(device)
        start = time.perf_counter()
        logp, entropy = forward()
        (-(logp.sum() + 1e-3 * entropy.sum()) / logp.numel()).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=False)  # gradients stay allocated: the baseline below holds them
        _sync(device)
        return time.perf_counter() - start, saved

    step(_micro_batch(sizes.tokens[0], sizes.rows, shape.vocab_size), False)  # gradients and AdamW state now exist
    for checkpointing in (False, True):
        if checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        for tokens in sizes.tokens:
            mb = _micro_batch(tokens, sizes.rows, shape.vocab_size)
            responses = int(mb.response_mask.sum())
            plan = activation_bytes(shape, 2, tokens, responses, checkpointing=checkpointing,
                                    row_tokens=tokens // sizes.rows)
            run: dict[str, Any] = {"tokens": tokens, "response_tokens": responses, "checkpointing": checkpointing,
                                   "plan_saved_bytes": plan["saved"], "plan_peak_bytes": plan["peak"]}
            if device.type == "cuda":
                free = torch.cuda.mem_get_info(device)[0]
                if plan["peak"] > 0.9 * free:
                    run["skipped"] = f"the plan's peak {plan['peak'] / GB:.1f} GB > 90% of {free / GB:.1f} GB free"
                    out["runs"].append(run)
                    continue
                torch.cuda.reset_peak_memory_stats(device)
                base = torch.cuda.memory_allocated(device)
            seconds, saved = step(mb, True)
            run.update(seconds=seconds, tokens_per_s=tokens / seconds, saved_bytes=saved,
                       saved_over_plan=saved / plan["saved"])
            if device.type == "cuda":
                peak = torch.cuda.max_memory_allocated(device) - base
                run.update(peak_bytes=peak, peak_over_plan=peak / plan["peak"])
            # Model FLOPs (no recompute counted): 6 per weight per token in the layers, the head on response tokens,
            # and causal attention's two products over each row.
            length = tokens // sizes.rows
            attention = 6 * 2 * shape.num_layers * shape.num_heads * shape.head_dim * length * length / 2 * sizes.rows
            flops = 6 * tokens * shape.num_layers * shape.layer_params + 6 * responses * shape.embedding_params \
                + attention
            run["model_flops"] = flops
            if flops_per_s:
                run["mfu"] = flops / seconds / flops_per_s
            log(f"learner step: {tokens} tokens, checkpointing {checkpointing}: {seconds:.2f} s, saved "
                f"{saved / GB:.2f} GB ({run['saved_over_plan']:.2f}x plan)")
            out["runs"].append(run)
    del model, optimizer
    _free(device)
    return out


# -- 2. weight transfer ----------------------------------------------------------------------------------


def _metas(fields: dict) -> list:
    """(name, shape, "bfloat16") of every tensor of the model's state dict, built on the meta device."""
    from transformers import Qwen2ForCausalLM

    with torch.device("meta"):
        model = Qwen2ForCausalLM(_qwen2(fields))
    return [(name, tuple(t.shape), "bfloat16") for name, t in model.state_dict().items()]


def _fill(index: int) -> float:
    """The value every element of the index-th tensor is sent with (an integer bfloat16 holds exactly)."""
    return float(index % 200)


def _receiver(port: int, backend: str, device: str, metas: list, bucket_bytes: int, repeats: int, queue) -> None:
    """Rank 1: each round, the raw broadcast into one flat buffer, the bucketed transfer into fresh buffers, and into
    tensors of its own (as an engine's parameters); puts whether the last round's tensors were the sender's."""
    from memrl.weight_sync import broadcast_recv, init_group, receive_into, transfer

    pg = init_group("127.0.0.1", port, 1, 2, backend, timeout_s=600)
    numel = sum(int(np.prod(shape)) for _, shape, _ in metas)
    flat = torch.empty(numel, dtype=torch.bfloat16, device=device)
    own = {name: torch.empty(shape, dtype=torch.bfloat16, device=device) for name, shape, _ in metas}
    for _ in range(repeats + 1):
        for work in transfer(pg, flat, 0):
            work.wait()
        for _ in broadcast_recv(pg, metas, bucket_bytes, device=device):
            pass
        receive_into(pg, own, metas)
    _sync(torch.device(device))
    queue.put(all(bool((t == _fill(i)).all()) for i, t in enumerate(own.values())))


def weight_transfer(sizes: Sizes, device: torch.device, log) -> dict[str, Any]:
    from memrl.config import LearnersConfig
    from memrl.weight_sync import broadcast_send, init_group, transfer

    fields = sizes.transfer_model or sizes.learner_model
    metas = _metas(fields)
    two_gpus = device.type == "cuda" and torch.cuda.device_count() >= 2
    backend = "nccl" if two_gpus else "gloo"
    receiver_device = "cuda:1" if two_gpus else str(device)
    bucket = LearnersConfig().weight_sync_bucket_bytes
    tensors = {name: torch.full(shape, _fill(i), dtype=torch.bfloat16, device=device)
               for i, (name, shape, _) in enumerate(metas)}
    nbytes = sum(t.numel() * t.element_size() for t in tensors.values())
    flat = torch.empty(nbytes // 2, dtype=torch.bfloat16, device=device)
    port = free_port()
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_receiver, args=(port, backend, receiver_device, metas, bucket,
                                               sizes.transfer_repeats, queue))
    proc.start()
    pg = init_group("127.0.0.1", port, 0, 2, backend, timeout_s=600)
    times: dict[str, list[float]] = {"raw": [], "bucketed": [], "into_own_tensors": []}
    try:
        for round_ in range(sizes.transfer_repeats + 1):  # the first round warms up
            for name, send in (("raw", lambda: [w.wait() for w in transfer(pg, flat, 0)]),
                               ("bucketed", lambda: broadcast_send(pg, tensors, metas, bucket)),
                               ("into_own_tensors", lambda: broadcast_send(pg, tensors, metas, bucket))):
                _sync(device)
                start = time.perf_counter()
                send()
                _sync(device)
                if round_:
                    times[name].append(time.perf_counter() - start)
        exact = queue.get(timeout=600)
    finally:
        proc.join(timeout=60)
    out: dict[str, Any] = {"backend": backend, "bytes": nbytes, "num_tensors": len(metas), "bucket_bytes": bucket,
                           "received_exactly": exact}
    for name, ts in times.items():
        mean = float(np.mean(ts))
        out[name] = {"mean_s": mean, "gb_per_s": nbytes / mean / GB, "vs_raw": float(np.mean(times["raw"])) / mean}
    log(f"weight transfer ({backend}, {nbytes / GB:.2f} GB): raw {out['raw']['gb_per_s']:.2f} GB/s, bucketed "
        f"{out['bucketed']['vs_raw']:.2f}x raw, into own tensors {out['into_own_tensors']['vs_raw']:.2f}x raw")
    if device.type == "cuda":
        # The NCCL branch (a broadcast per tensor) on a group of one rank: it runs whatever the GPU count.
        alone = init_group("127.0.0.1", free_port(), 0, 1, "nccl", timeout_s=120)
        start = time.perf_counter()
        broadcast_send(alone, tensors, metas, bucket)
        torch.cuda.synchronize(device)
        out["nccl_one_rank_s"] = time.perf_counter() - start
    del tensors, flat
    _free(device)
    return out


# -- 3. torch engine --------------------------------------------------------------------------------------


def torch_engine(sizes: Sizes, device: torch.device, log) -> dict[str, Any]:
    from transformers import Qwen2ForCausalLM
    from transformers.utils import logging as hf_logging

    from memrl.engines.base import SamplingConfig
    from memrl.engines.torch_engine import TorchEngine
    from memrl.models.tiny import build_tiny_checkpoint

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "model"
        shown = hf_logging.is_progress_bar_enabled()
        hf_logging.disable_progress_bar()  # the check's own log says what it does
        try:
            if sizes.engine_model is None:
                build_tiny_checkpoint(path)
            else:
                with device:
                    Qwen2ForCausalLM._from_config(_qwen2(sizes.engine_model), dtype=torch.bfloat16).save_pretrained(
                        path)
        finally:
            if shown:
                hf_logging.enable_progress_bar()
        _free(device)
        engine = TorchEngine(path, dtype="bfloat16" if device.type == "cuda" else "float32", device=str(device),
                             max_batch_size=sizes.engine_prompts)
        vocab = engine.vocab_size
        rng = np.random.default_rng(0)
        prompts = [rng.integers(3, vocab, sizes.engine_prompt_tokens).tolist() for _ in range(sizes.engine_prompts)]
        sampling = SamplingConfig(max_tokens=sizes.engine_new_tokens, temperature=1.0, top_p=1.0, stop_token_ids=[])
        engine.generate(prompts[:2], SamplingConfig(max_tokens=2))  # warm-up
        _sync(device)
        start = time.perf_counter()
        new = sum(len(o.token_ids) for o in engine.generate(prompts, sampling))
        _sync(device)
        seconds = time.perf_counter() - start
    log(f"torch engine: {new / seconds:.0f} new tokens/s")
    return {"prompts": sizes.engine_prompts, "prompt_tokens": sizes.engine_prompt_tokens, "new_tokens": new,
            "seconds": seconds, "tokens_per_s": new / seconds}


# -- run ---------------------------------------------------------------------------------------------------


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _free(device: torch.device) -> None:
    import gc

    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def _peak_flops(device: torch.device) -> float | None:
    """The device's dense bfloat16 peak (PEAK_BF16_FLOPS), or on a CPU the float32 rate torch reaches in a matrix
    product on every core."""
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        return next((rate for key, rate in PEAK_BF16_FLOPS.items() if key in name), None)
    a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
    a @ b
    start = time.perf_counter()
    for _ in range(3):
        a @ b
    return 3 * 2 * 1024**3 / (time.perf_counter() - start)


def plot(results: dict, path: Path) -> None:
    """Measured over planned activation bytes of each learner run; the transfer's bandwidth by receiving path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    runs = [r for r in results["steps"].get("learner_step", {}).get("runs", []) if "seconds" in r]
    labels = [f"{r['tokens'] // 1024 or r['tokens']}{'K' if r['tokens'] >= 1024 else ''}"
              f"{' ckpt' if r['checkpointing'] else ''}" for r in runs]
    xs = np.arange(len(runs))
    ax1.bar(xs - 0.2, [r["saved_over_plan"] for r in runs], width=0.4, label="saved tensors")
    ax1.bar(xs + 0.2, [r.get("peak_over_plan", 0.0) for r in runs], width=0.4, label="peak (GPU)")
    ax1.axhline(1.0, color="k", linestyle="--")
    ax1.set_xticks(xs, labels, fontsize=8)
    ax1.set_ylabel("measured / memory plan")
    ax1.set_title(f"learner step, {results['device']}")
    ax1.legend(fontsize=8)
    transfer = results["steps"].get("weight_transfer", {})
    names = [n for n in ("raw", "bucketed", "into_own_tensors") if n in transfer]
    ax2.bar(names, [transfer[n]["gb_per_s"] for n in names], color=["tab:gray", "tab:blue", "tab:green"][: len(names)])
    ax2.set_ylabel("GB/s")
    ax2.set_title(f"weight transfer, {transfer.get('backend', '')} {transfer.get('bytes', 0) / GB:.2f} GB")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> dict:
    p = parser(__doc__, "gpu_check", "narrow widths and small sizes on any device (what the test runs on CPU)")
    p.add_argument("--minutes", type=float, default=8.0, help="stop starting steps after this long")
    args = p.parse_args(argv)
    log = elapsed_log()
    started = time.perf_counter()
    sizes = QUICK if args.quick else FULL
    device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    results: dict[str, Any] = {
        "machine": machine("torch", "transformers"), "settings": {"quick": args.quick, **asdict(sizes)},
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "gpu_memory_gb": torch.cuda.get_device_properties(device).total_memory / GB if device.type == "cuda" else None,
        "peak_flops": _peak_flops(device), "steps": {}}
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "gpu_check.json"
    for name, step in (("learner_step", lambda: learner_step(sizes, device, log, results["peak_flops"])),
                       ("weight_transfer", lambda: weight_transfer(sizes, device, log)),
                       ("torch_engine", lambda: torch_engine(sizes, device, log))):
        if time.perf_counter() - started > 60 * args.minutes:
            results["steps"][name] = {"skipped": f"past the {args.minutes:g}-minute budget"}
        else:
            log(name)
            results["steps"][name] = step()
        results["wall_s"] = time.perf_counter() - started
        path.write_text(json.dumps(results, indent=1))
    plot(results, args.out / "gpu_check.png")
    print(f"wrote {path} and gpu_check.png in {results['wall_s']:.0f} s")
    return results


if __name__ == "__main__":
    main()
