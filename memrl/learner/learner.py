"""One data-parallel learner rank: a DeepSpeed ZeRO-3 engine that scores rows, trains on them and serves weights."""

from __future__ import annotations

import contextlib
import ctypes
import functools
import io
import os
import shutil
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from datetime import timedelta
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from memrl import process, rendezvous
from memrl.learner.batching import (MicroBatch, Row, check_rows, make_micro_batches, pack_rows, pad_rows,
                                   row_length)
from memrl.learner.learner_config import LearnerConfig, deepspeed_config, lr_factor
from memrl.learner.losses import LossConfig, compute_loss, value_loss
from memrl.weight_sync import TensorMeta, init_group, plan_buckets, send_bucket

# DeepSpeed and transformers are imported inside the methods that use them: the driver only names this class to
# start learner actors, and a driver's start-up stays short.
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
"""Parameter dtypes by their LearnerConfig name."""

TRAIN_KEYS = {"lm": ("loss_mask", "old_logprobs", "advantages"), "value": ("loss_mask", "old_values", "returns")}
"""Per-response-token arrays every training row carries besides its ids, by head; a policy's "ref_logprobs" is
optional (all rows or none), and its "rollout_logprobs" are needed by an off-policy correction."""

RENDEZVOUS_VARIABLES = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE")
"""What a learner sets in its process's environment to join DeepSpeed's world, besides LOCAL_RANK (which ZeRO-3
reads at every step): put back after the start in a shared process."""

STALE_BUILD_LOCK_S = 600.0
"""Age after which the lock of DeepSpeed's CPU communication op build is taken for one a killed process left behind:
building the op takes about a minute, checking a built one a second."""

# Files of a HF checkpoint that `save_hf` writes itself; everything else (tokenizer, chat template) is copied.
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".safetensors.index.json", ".bin.index.json")


MMAP_THRESHOLD_BYTES, TRIM_THRESHOLD_BYTES = 32 << 20, 1 << 30
"""keep_freed_memory's glibc settings: blocks from fresh OS pages only from this size on; freed memory at the heap's
top handed back only beyond this much."""


def keep_freed_memory() -> None:
    """Have this process's malloc keep the memory it frees for reuse (glibc; elsewhere nothing changes).

    A training step allocates and frees the same activation-sized buffers every time. By default glibc serves each
    of more than 128 KiB with fresh pages from the OS, which are faulted in and zeroed on first touch, and hands
    freed memory back at once. Kept in the heap, up to 1 GiB of it, they are reused without those page faults. The
    process holds on to its peak, as a GPU caching allocator does. (An inference engine's steps do not gain from
    it.)"""
    if not sys.platform.startswith("linux"):
        return
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):
        return
    mallopt(-3, MMAP_THRESHOLD_BYTES)  # M_MMAP_THRESHOLD
    mallopt(-1, TRIM_THRESHOLD_BYTES)  # M_TRIM_THRESHOLD


def cpu_comm_op_dir() -> Path:
    """Where torch's extension cache keeps DeepSpeed's CPU communication op (every learner on the machine shares it)."""
    from torch.utils.cpp_extension import _get_build_directory

    return Path(_get_build_directory("deepspeed_shm_comm", False))


def build_cpu_comm_op() -> Path:
    """Compile DeepSpeed's CPU communication op into torch's extension cache, if it is not there yet, and return its
    directory. A CPU learner loads it as it joins the DeepSpeed world; the first one on a machine would otherwise
    compile it then (about a minute of CPU on 2 cores), so installers call this once at set-up."""
    from deepspeed.accelerator import get_accelerator

    clear_stale_build_lock()
    get_accelerator().create_op_builder("ShareMemCommBuilder").load(verbose=False)  # as DeepSpeed's comm loads it
    return cpu_comm_op_dir()


def clear_stale_build_lock(max_age_s: float = STALE_BUILD_LOCK_S) -> Path | None:
    """Remove the lock file of DeepSpeed's CPU communication op in torch's extension cache when it is older than
    `max_age_s`; returns its path if it was removed.

    torch takes that lock on every load of the op, even a built one, and a process killed while holding it (a run
    stopped during its learners' start) leaves the file behind: every later learner on the machine then waits on
    it forever."""
    lock = cpu_comm_op_dir() / "lock"
    try:
        age = time.time() - lock.stat().st_mtime
    except FileNotFoundError:
        return None
    if age <= max_age_s:
        return None
    lock.unlink(missing_ok=True)  # another learner on this node may have removed it first
    warnings.warn(f"removed {lock}, left {age:.0f} s ago by a process that was stopped while loading DeepSpeed's "
                  f"CPU communication op", stacklevel=2)
    return lock


def _import_muon_uncompiled() -> None:
    """Import DeepSpeed's Muon optimizer with TorchDynamo off. DeepSpeed's ZeRO optimizers import it while they set up,
    whichever optimizer they are given, and its module wraps its kernels in torch.compile, which loads TorchInductor:
    about a second of every learner's start. memrl hands DeepSpeed its own AdamW, so those kernels never run; with
    Dynamo off they stay plain functions."""
    previous = os.environ.get("TORCHDYNAMO_DISABLE")
    os.environ["TORCHDYNAMO_DISABLE"] = "1"  # read by torch.compile when it wraps a function, i.e. at import here
    try:
        import deepspeed.runtime.zero.muon.muon_optimizer  # noqa: F401
    except ModuleNotFoundError:
        pass  # a DeepSpeed without Muon has nothing to compile
    finally:
        if previous is None:
            del os.environ["TORCHDYNAMO_DISABLE"]
        else:
            os.environ["TORCHDYNAMO_DISABLE"] = previous


class Learner:
    """One rank of the data-parallel learner group (the group runs it as a Ray actor, or with num_learners=0 on a
    thread of its own process: memrl.learner.local)."""

    def __init__(self, config: LearnerConfig, rank: int, world_size: int, own_process: bool = True):
        """Cheap: the group first asks rank 0 to `listen`, then every rank to `start` at the address it got.
        `own_process` False: a learner of world size 1 in a process it shares (memrl.learner.local)."""
        if not 0 <= rank < world_size:
            raise ValueError(f"learner rank {rank} is outside world size {world_size}")
        if not own_process and world_size != 1:
            raise ValueError(f"a learner in a shared process is a world of one rank; got world size {world_size}")
        process.learner_process(cuda=torch.cuda.is_available())
        self.config = config
        self.rank = rank
        self.world_size = world_size
        self.own_process = own_process
        self._listener = None
        self._sync_pg = None
        self._kept_weights: tuple[int, list, torch.device] | None = None  # rank 0: (version, [(tag, tensors)], device)
        if own_process:
            keep_freed_memory()

    def node_ip(self) -> str:
        return rendezvous.node_ip()

    def listen(self, host: str) -> int:
        """Rank 0: hold a listening socket on host for the next group this learner masters; returns its port."""
        self._listener = rendezvous.listen(host)
        return self._listener.getsockname()[1]

    def _take_listener(self):
        listener, self._listener = self._listener, None
        return listener

    def start(self, master_addr: str, master_port: int) -> None:
        """Join the DeepSpeed world at master_addr:master_port (rank 0 serves it) and build the model and optimizer.
        In a shared process, the world of one rank an earlier learner there formed is joined instead, and neither the
        rendezvous variables (but LOCAL_RANK) nor the seed outlast the start."""
        if self.own_process:
            self._start(master_addr, master_port)
            return
        saved = {key: os.environ.get(key) for key in RENDEZVOUS_VARIABLES}
        try:
            with torch.random.fork_rng(devices=[]):
                self._start(master_addr, master_port)
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value

    def _start(self, master_addr: str, master_port: int) -> None:
        import deepspeed
        from deepspeed.accelerator import get_accelerator

        _import_muon_uncompiled()
        config = self.config
        # Ray gives each learner its own GPU (or none), so the local device is always index 0. DeepSpeed's CPU
        # communication op names its shared memory after MASTER_ADDR and MASTER_PORT.
        os.environ.update(MASTER_ADDR=master_addr, MASTER_PORT=str(master_port), RANK=str(self.rank),
                          WORLD_SIZE=str(self.world_size), LOCAL_RANK="0")
        get_accelerator().set_device(0)
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        if backend == "gloo":
            clear_stale_build_lock()
        deadline_s = config.learners.dist_timeout_s
        timeout = timedelta(seconds=deadline_s)
        listener = self._take_listener()
        if dist.is_initialized():  # a shared process whose world of one rank an earlier learner formed
            if listener is not None:
                listener.close()
            if dist.get_world_size() != 1:
                raise RuntimeError(f"this process is already in a torch.distributed world of "
                                   f"{dist.get_world_size()} ranks; a learner in it must be a world of one")
        else:
            rendezvous.use_interface(master_addr)
            store = rendezvous.open_store(master_addr, master_port, self.rank, self.world_size, deadline_s, listener)
            dist.init_process_group(backend, store=store, rank=self.rank, world_size=self.world_size,
                                    timeout=timeout)
        # Takes torch's group. Its first call in a process prints a line about the CPU op, kept off a shared
        # process's console.
        with contextlib.redirect_stdout(io.StringIO()) if not self.own_process else contextlib.nullcontext():
            deepspeed.init_distributed(dist_backend=backend, timeout=timeout, verbose=False)
        self.device = torch.device(get_accelerator().current_device_name())
        torch.manual_seed(config.seed)

        train_ds = deepspeed_config(config, train=True)
        model, opt = self._trained_model(), config.optimizer
        optimizer = torch.optim.AdamW(
            model.parameters(), lr=opt.lr, betas=tuple(opt.betas), eps=opt.eps, weight_decay=opt.weight_decay
        )
        # DeepSpeed steps the scheduler after each optimizer step and keeps its position in its checkpoints.
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, functools.partial(lr_factor, opt))
        self.engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, lr_scheduler=scheduler,
                                                    config=train_ds)
        self.ref_engine = None
        if config.compute_ref:
            ref_ds = deepspeed_config(config, train=False)
            ref_model = self._load_model().requires_grad_(False)
            self.ref_engine, _, _, _ = deepspeed.initialize(model=ref_model, config=ref_ds)
            self.ref_engine.eval()

    def _load_model(self) -> torch.nn.Module:
        from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForTokenClassification

        # Every rank loads the full checkpoint and deepspeed.initialize partitions it. (Loading straight into
        # partitions needs transformers' HfDeepSpeedConfig, which requires the accelerate package.)
        if self.config.head == "value":
            # The head is new (seeded by torch.manual_seed above); transformers reports it as missing, as intended.
            # Its dropout (0.1 by default) is turned off: values must be a deterministic function of the context.
            head_config = AutoConfig.from_pretrained(self.config.model_path, num_labels=1)
            head_config.classifier_dropout = 0.0
            model = AutoModelForTokenClassification.from_pretrained(
                self.config.model_path, config=head_config, dtype=DTYPES[self.config.learners.dtype],
                attn_implementation=self.config.learners.attn_implementation,
            )
        else:
            model = AutoModelForCausalLM.from_pretrained(
                self.config.model_path,
                dtype=DTYPES[self.config.learners.dtype],
                attn_implementation=self.config.learners.attn_implementation,
            )
        model.config.use_cache = False
        return model

    def _trained_model(self) -> torch.nn.Module:
        """The model this rank trains, with gradient checkpointing when the learners ask for it (non-reentrant: it
        recomputes under ZeRO-3's gathered parameters and with inputs that need no gradient)."""
        model = self._load_model()
        if self.config.learners.gradient_checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        return model

    def _max_over_ranks(self, value: int) -> int:
        t = torch.tensor([value], dtype=torch.long, device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return int(t.item())

    def _forward(self, engine, mb: MicroBatch) -> torch.Tensor:
        """Policy: the [B, T, V] logits that predict the response tokens, divided by logit_temperature; critic: the
        [B, S, 1] values as they are."""
        inputs = {"input_ids": mb.input_ids, "attention_mask": mb.attention_mask, "position_ids": mb.position_ids,
                  "use_cache": False}
        if self.config.head != "lm":
            return engine(**inputs).logits
        with mb.head_sees_responses(engine.module):
            logits = engine(**inputs).logits
        temperature = self.config.logit_temperature
        return logits / temperature if temperature != 1.0 else logits

    def _dummy_batch(self) -> MicroBatch:
        # ZeRO-3 gathers parameters collectively in every forward and reduces gradients in every backward,
        # so a rank with fewer micro-batches runs this one-token pass until all ranks are done.
        return pad_rows([{"prompt_ids": np.zeros(1, np.int64), "response_ids": np.zeros(1, np.int64)}]).to(
            self.device
        )

    def compute_logprobs(
        self, rows: Sequence[Row], reference: bool = False
    ) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """Per-row logprob and entropy of each response token, under the policy or (reference=True) the frozen model.

        Every rank must call this at the same time (ranks may hold different numbers of rows, even none).
        """
        if reference and self.ref_engine is None:
            raise ValueError("reference logprobs need LearnerConfig.compute_ref=True")
        if self.config.head != "lm":
            raise ValueError(f"compute_logprobs needs a policy (head='lm'); this one has head={self.config.head!r}")
        scores = self._score(self.ref_engine if reference else self.engine, rows, MicroBatch.logprobs_and_entropy)
        return [lp for lp, _ in scores], [ent for _, ent in scores]

    def compute_values(self, rows: Sequence[Row]) -> list[np.ndarray]:
        """Per-row critic value before each response token (read where that token's logits would be); every rank
        must call this at the same time."""
        if self.config.head != "value":
            raise ValueError(f"compute_values needs a critic (head='value'); this one has head={self.config.head!r}")
        return [values for (values,) in self._score(self.engine, rows, lambda mb, out: (mb.values(out),))]

    def _micro_batches(self, rows: Sequence[Row]) -> tuple[list[list[int]], Callable[[Sequence[Row]], MicroBatch]]:
        """The micro-batches of `rows` (indices) and how each is laid out: packed without padding when the learners
        ask for it (padding_free) and no row is a token tree, else padded."""
        packed = self.config.learners.padding_free and not any("parents" in r for r in rows)
        batches = make_micro_batches([row_length(r) for r in rows], self.config.learners.token_budget, packed=packed)
        return batches, pack_rows if packed else pad_rows

    def _score(self, engine, rows: Sequence[Row], read) -> list[tuple[np.ndarray, ...]]:
        """Forward every micro-batch without gradients; `read(mb, logits)` gives [B, T] tensors, cut per row."""
        check_rows(rows)
        engine.eval()
        batches, layout = self._micro_batches(rows)
        results: list[tuple[np.ndarray, ...] | None] = [None] * len(rows)
        with torch.no_grad():
            for i in range(self._max_over_ranks(len(batches))):
                if i >= len(batches):
                    self._forward(engine, self._dummy_batch())
                    continue
                mb = layout([rows[j] for j in batches[i]]).to(self.device)
                logits = self._forward(engine, mb)
                per_row = zip(*(mb.split(t) for t in read(mb, logits)))
                for j, values in zip(batches[i], per_row):
                    results[j] = values
        return results

    def train_step(
        self,
        rows: Sequence[Row],
        loss_config: LossConfig,
        num_tokens: float,
        num_seqs: float,
        max_tokens: int | None = None,
    ) -> dict[str, float]:
        """Forward/backward every micro-batch of `rows`, then take exactly one optimizer step.

        num_tokens / num_seqs count the GLOBAL loss tokens and rows holding any (all ranks), so the
        micro-batch losses of all ranks sum to the step's mean loss. Every rank must call this at the same time.
        Returns this rank's sums (loss, loss metrics, tokens, rows, micro_batches, forward_passes) plus the
        step's grad_norm (before clipping), lr and step_s (this rank's seconds in the call: its compute, without
        the rows' trip to it).
        """
        start = time.perf_counter()
        has_ref = check_train_rows(rows, self.config.head, loss_config)
        corrected = self.config.head == "lm" and loss_config.off_policy_correction != "none"
        batches, layout = self._micro_batches(rows)
        num_passes = self._max_over_ranks(len(batches))
        self.engine.train()
        sums: dict[str, float] = {"loss": 0.0, "tokens": 0.0}
        for i in range(num_passes):
            if i < len(batches):
                mb_rows = [rows[j] for j in batches[i]]
                mb = layout(mb_rows).to(self.device)
                logits = self._forward(self.engine, mb)
                mask = (mb.response_values(mb_rows, "loss_mask").to(self.device) > 0).float() * mb.response_mask
                if self.config.head == "value":
                    loss, metrics = value_loss(
                        mb.values(logits),
                        mb.response_values(mb_rows, "old_values").to(self.device),
                        mb.response_values(mb_rows, "returns").to(self.device),
                        mask,
                        loss_config.value_clip,
                        num_tokens,
                    )
                else:
                    logprobs, entropy = mb.logprobs_and_entropy(logits, entropy_grad=loss_config.entropy_coef > 0)
                    loss, metrics = compute_loss(
                        loss_config,
                        logprobs,
                        mb.response_values(mb_rows, "old_logprobs").to(self.device),
                        mb.response_values(mb_rows, "advantages").to(self.device),
                        mask,
                        num_tokens,
                        num_seqs,
                        ref_logprobs=(mb.response_values(mb_rows, "ref_logprobs").to(self.device) if has_ref
                                      else None),
                        entropy=entropy,
                        max_tokens=max_tokens,
                        rollout_logprobs=(mb.response_values(mb_rows, "rollout_logprobs").to(self.device)
                                          if corrected else None),
                    )
                for key, value in metrics.items():
                    sums[key] = sums.get(key, 0.0) + value
                sums["loss"] += loss.item()
                sums["tokens"] += mask.sum().item()
            else:
                loss = self._forward(self.engine, self._dummy_batch()).sum() * 0.0
            # DeepSpeed averages gradients over ranks, but the loss is already a share of the global mean.
            self.engine.backward(loss * self.world_size)
        lr = float(self.engine.get_lr()[0])  # the rate this step uses: step() moves the schedule on
        self.engine.step()
        grad_norm = self.engine.get_global_grad_norm()
        sums.update(
            rows=float(len(rows)),
            micro_batches=float(len(batches)),
            forward_passes=float(num_passes),
            grad_norm=float(grad_norm) if grad_norm is not None else float("nan"),
            lr=lr,
            step_s=time.perf_counter() - start,
        )
        return sums

    def _named_parameters(self) -> list[tuple[str, torch.nn.Parameter]]:
        return list(self.engine.module.named_parameters())

    def weight_metas(self) -> list[TensorMeta]:
        """(HF name, full shape, dtype) of every parameter, in the order broadcast_weights sends them."""
        return [
            (name, tuple(getattr(p, "ds_shape", p.shape)), str(p.dtype).removeprefix("torch."))
            for name, p in self._named_parameters()
        ]

    def gather_state_dict_for_sync(self) -> dict[str, torch.Tensor] | None:
        """Full parameters with HF names, as CPU tensors on rank 0 (None elsewhere); every rank must call this."""
        import deepspeed

        state: dict[str, torch.Tensor] = {}
        # One parameter at a time: no rank ever holds the whole model on its device.
        for name, p in self._named_parameters():
            with deepspeed.zero.GatheredParameters([p], modifier_rank=None):
                if self.rank == 0:
                    state[name] = p.detach().to("cpu", copy=True)
        return state if self.rank == 0 else None

    def init_weight_sync(self, host: str, port: int, world_size: int, backend: str) -> None:
        """Rank 0 joins the weight-sync group as its rank 0 (engines are 1..world_size-1); other ranks do nothing."""
        if self.rank == 0:
            self._sync_pg = init_group(host, port, 0, world_size, backend, listener=self._take_listener())

    def broadcast_weights(self, version: int, bucket_bytes: int, keep: bool = False) -> dict[str, float]:
        """Gather parameters bucket by bucket and broadcast them from rank 0; every rank must call this. With `keep`,
        rank 0 also keeps a host-memory copy of what it sent (one model's weights), for `resend_kept_weights`.

        Returns the version, bytes sent (0 on ranks other than 0) and seconds taken.
        """
        import deepspeed

        if self.rank == 0 and self._sync_pg is None:
            raise RuntimeError("broadcast_weights needs init_weight_sync first")
        start = time.perf_counter()
        named = dict(self._named_parameters())
        sent = tag = 0
        kept, device = ([] if keep and self.rank == 0 else None), None
        # One bucket gathered at a time keeps peak memory at one bucket, not the whole model.
        for bucket in plan_buckets(self.weight_metas(), bucket_bytes):
            params = [named[name] for name, _, _ in bucket]
            with deepspeed.zero.GatheredParameters(params, modifier_rank=None):
                if self.rank == 0:  # sent before the gathered parameters are released
                    tensors = [named[name].data for name, _, _ in bucket]
                    sent += send_bucket(self._sync_pg, tensors, tag)
                    if kept is not None:
                        device = tensors[0].device
                        kept.append((tag, [t.detach().to("cpu", copy=True) for t in tensors]))
            tag += len(bucket)
        self._kept_weights = (version, kept, device) if kept is not None else None
        return {"version": float(version), "bytes": float(sent), "seconds": time.perf_counter() - start}

    def resend_kept_weights(self) -> dict[str, float]:
        """Broadcast again, bucket for bucket, the weights the last `broadcast_weights(keep=True)` sent (rank 0 only:
        engines that joined since get the version the others hold, though the learners have trained on)."""
        if self.rank != 0:
            raise RuntimeError("resend_kept_weights runs on learner rank 0, which keeps the copy")
        if self._kept_weights is None:
            raise RuntimeError("no weights kept: the last broadcast_weights was not called with keep=True")
        start = time.perf_counter()
        version, kept, device = self._kept_weights
        sent = sum(send_bucket(self._sync_pg, [t.to(device) for t in tensors], tag) for tag, tensors in kept)
        return {"version": float(version), "bytes": float(sent), "seconds": time.perf_counter() - start}

    def save_checkpoint(self, path: str) -> None:
        """DeepSpeed checkpoint of this rank's shard (weights, optimizer, step count); every rank must call this."""
        self.engine.save_checkpoint(path)

    def load_checkpoint(self, path: str) -> None:
        """Restore a save_checkpoint directory written by a group of the same size; every rank must call this."""
        load_path, _ = self.engine.load_checkpoint(path)
        if load_path is None:
            raise FileNotFoundError(f"no DeepSpeed checkpoint found in {path!r} (expected a 'latest' file there)")

    def save_hf(self, path: str) -> None:
        """Write a plain Hugging Face checkpoint (rank 0) that transformers and vLLM load; every rank must call this."""
        state_dict = self.gather_state_dict_for_sync()
        if self.rank != 0:
            return
        out = Path(path)
        out.mkdir(parents=True, exist_ok=True)
        for src in Path(self.config.model_path).iterdir():
            if src.is_file() and not src.name.endswith(_WEIGHT_SUFFIXES):
                shutil.copy2(src, out / src.name)
        self.engine.module.save_pretrained(out, state_dict=state_dict)


def check_train_rows(rows: Sequence[Row], head: str = "lm", loss_config: LossConfig | None = None) -> bool:
    """Raise a ValueError on a row unfit for a `head` learner's train_step under `loss_config`; return whether rows
    carry ref_logprobs."""
    with_ref = sum("ref_logprobs" in row for row in rows) if head == "lm" else 0
    if 0 < with_ref < len(rows):
        raise ValueError(f"{with_ref} of {len(rows)} training rows carry ref_logprobs; it must be all rows or none")
    corrected = head == "lm" and loss_config is not None and loss_config.off_policy_correction != "none"
    check_rows(rows, TRAIN_KEYS[head] + (("ref_logprobs",) if with_ref else ()) + (("rollout_logprobs",) if corrected
                                                                                    else ()))
    return with_ref > 0
