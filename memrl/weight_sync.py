"""Bucketed broadcast of model weights from learner rank 0 to inference engines.

The group lives outside DeepSpeed's world: rank 0 is the learner, ranks 1..N are engines.
NCCL where every rank holds a GPU of its own, gloo otherwise (CPUs, or CUDA tensors of ranks sharing a GPU, which
gloo moves through host memory); the same three calls on both sides.
"""

from __future__ import annotations

import socket
from collections.abc import Iterable, Iterator
from datetime import timedelta

import torch
import torch.distributed as dist

from memrl import rendezvous

TensorMeta = tuple[str, tuple[int, ...], str]
"""(HF parameter name, shape, dtype name such as "float32")."""

BACKENDS = ("gloo", "nccl")


def init_group(host: str, port: int, rank: int, world_size: int, backend: str, timeout_s: float = 300.0,
               listener: socket.socket | None = None):
    """Join (rank 0 creates) a standalone process group over a TCPStore at host:port.

    Rank 0 serves the store on `listener` (memrl.rendezvous.listen) or, without one, on a socket bound to host:port.
    A group meeting on loopback keeps its connections there too."""
    if backend not in BACKENDS:
        raise ValueError(f"weight sync backend {backend!r} is not supported; allowed: {BACKENDS}")
    timeout = timedelta(seconds=timeout_s)
    rendezvous.use_interface(host)
    store = rendezvous.open_store(host, port, rank, world_size, timeout_s, listener)
    if backend == "gloo":
        opts = dist.ProcessGroupGloo._Options()
        opts._timeout = timeout
        local = host == rendezvous.LOOPBACK
        opts._devices = [dist.ProcessGroupGloo.create_device(hostname=host) if local
                         else dist.ProcessGroupGloo.create_default_device()]
        return dist.ProcessGroupGloo(store, rank, world_size, opts)
    opts = dist.ProcessGroupNCCL.Options()
    opts._timeout = timeout
    return dist.ProcessGroupNCCL(store, rank, world_size, opts)


def metas_of(named_tensors: Iterable[tuple[str, torch.Tensor]]) -> list[TensorMeta]:
    """Describe tensors so the receiving side can allocate matching buffers."""
    return [(name, tuple(t.shape), str(t.dtype).removeprefix("torch.")) for name, t in named_tensors]


def plan_buckets(metas: list[TensorMeta], bucket_bytes: int) -> list[list[TensorMeta]]:
    """Split tensors, in order, into buckets of one dtype and at most `bucket_bytes` each.

    A tensor larger than `bucket_bytes` gets a bucket of its own.
    """
    if bucket_bytes <= 0:
        raise ValueError(f"bucket_bytes must be > 0, got {bucket_bytes}")
    buckets: list[list[TensorMeta]] = []
    size = 0
    for meta in metas:
        nbytes = _numel(meta[1]) * _dtype(meta[2]).itemsize
        if buckets and buckets[-1][0][2] == meta[2] and size + nbytes <= bucket_bytes:
            buckets[-1].append(meta)
            size += nbytes
        else:
            buckets.append([meta])
            size = nbytes
    return buckets


class BucketSender:
    """Rank 0's side of the bucketed broadcast: each bucket is copied into one of two staging buffers and its broadcast
    left in flight while the next bucket is staged, so copying and sending overlap.

    The buffers are kept from call to call: a fresh buffer of a bucket's size costs more in first-touch page faults
    than the copy itself (on a CPU host, about 40 ms per 64 MiB against 4 ms)."""

    def __init__(self, pg):
        self.pg = pg
        self._buffers: list[torch.Tensor | None] = [None, None]
        self._work: list = [None, None]
        self._slot = 0

    def send(self, tensors: list[torch.Tensor]) -> int:
        """Broadcast one bucket (tensors of one dtype and device, in plan order); returns its bytes. The tensors may
        change once this returns: they are copied first."""
        slot, self._slot = self._slot, 1 - self._slot
        if self._work[slot] is not None:
            self._work[slot].wait()  # that buffer's last broadcast is done: it may be overwritten
        numel = sum(t.numel() for t in tensors)
        flat = _staging(self._buffers, slot, numel, tensors[0].dtype, tensors[0].device)
        torch.cat([t.detach().reshape(-1) for t in tensors], out=flat)
        self._work[slot] = self.pg.broadcast(flat, 0)
        return numel * flat.element_size()

    def finish(self) -> None:
        """Wait until every bucket sent has left."""
        for slot, work in enumerate(self._work):
            if work is not None:
                work.wait()
                self._work[slot] = None


class BucketReceiver:
    """Ranks > 0: the buckets of a `BucketSender`, each received while the one before is read.

    With `reuse`, two buffers are kept from call to call and a yielded view is valid only until the bucket after next
    is received: for consumers that copy each tensor as it comes (an engine loading its parameters). Without it,
    every bucket gets a fresh buffer and views stay valid."""

    def __init__(self, pg, device: str | torch.device = "cpu", reuse: bool = True):
        self.pg, self.device, self.reuse = pg, torch.device(device), reuse
        self._buffers: list[torch.Tensor | None] = [None, None]

    def receive(self, metas: list[TensorMeta], bucket_bytes: int) -> Iterator[tuple[str, torch.Tensor]]:
        """Yield (name, tensor) for every tensor of `metas`, in order, as rank 0 broadcasts them."""
        buckets = plan_buckets(metas, bucket_bytes)

        def post(i: int):
            numel = sum(_numel(shape) for _, shape, _ in buckets[i])
            dtype = _dtype(buckets[i][0][2])
            flat = (_staging(self._buffers, i % 2, numel, dtype, self.device) if self.reuse
                    else torch.empty(numel, dtype=dtype, device=self.device))
            return flat, self.pg.broadcast(flat, 0)

        pending = post(0) if buckets else None
        for i, bucket in enumerate(buckets):
            flat, work = pending
            work.wait()
            # The buffer of bucket i - 1, whose views the consumer is done with, now takes bucket i + 1.
            pending = post(i + 1) if i + 1 < len(buckets) else None
            offset = 0
            for name, shape, _ in bucket:
                n = _numel(shape)
                yield name, flat[offset : offset + n].view(shape)
                offset += n


@torch.no_grad()
def into_buckets(params: dict[str, torch.Tensor], metas: list[TensorMeta], bucket_bytes: int) -> list[torch.Tensor]:
    """Move `params` (name -> parameter, values kept) into one flat tensor per bucket of `plan_buckets(metas,
    bucket_bytes)`, each parameter becoming a view of its bucket: a broadcast received into the flat tensors then lands
    in the parameters with no copy. Every name in `metas` must be a parameter of the same shape and dtype; a parameter
    not in `metas` is left as it is."""
    flats = []
    for bucket in plan_buckets(metas, bucket_bytes):
        members = []
        for name, shape, dtype in bucket:
            param = params.get(name)
            if param is None:
                raise KeyError(f"weight sync: unknown parameter name {name!r}; the model has {len(params)} parameters "
                               f"named like: {', '.join(list(params)[:5])}, ...")
            if tuple(param.shape) != tuple(shape) or param.dtype != _dtype(dtype):
                raise ValueError(f"weight sync: parameter {name!r} is {tuple(param.shape)} {param.dtype}, the sender "
                                 f"sends {tuple(shape)} {dtype}")
            members.append(param)
        flat = torch.empty(sum(p.numel() for p in members), dtype=members[0].dtype, device=members[0].device)
        offset = 0
        for param in members:
            view = flat[offset : offset + param.numel()].view(param.shape)
            view.copy_(param)
            param.data = view
            offset += param.numel()
        flats.append(flat)
    return flats


def broadcast_send(pg, tensors: dict[str, torch.Tensor], metas: list[TensorMeta], bucket_bytes: int,
                   sender: BucketSender | None = None) -> int:
    """Rank 0: broadcast `tensors` bucket by bucket in `metas` order through `sender` (one of its own when None, so
    its staging buffers last this call only); returns bytes sent."""
    sender = sender or BucketSender(pg)
    sent = sum(sender.send([tensors[name] for name, _, _ in bucket]) for bucket in plan_buckets(metas, bucket_bytes))
    sender.finish()
    return sent


def broadcast_recv(
    pg, metas: list[TensorMeta], bucket_bytes: int, device: str | torch.device = "cpu"
) -> Iterator[tuple[str, torch.Tensor]]:
    """Ranks > 0: receive the buckets of `broadcast_send` and yield (name, tensor) views.

    Each bucket gets a fresh buffer, so yielded tensors stay valid after the next bucket arrives.
    """
    return BucketReceiver(pg, device, reuse=False).receive(metas, bucket_bytes)


def _staging(buffers: list[torch.Tensor | None], slot: int, numel: int, dtype: torch.dtype,
             device: torch.device) -> torch.Tensor:
    """The first `numel` elements of buffers[slot], replaced by a larger one (or one of another dtype) when needed."""
    buffer = buffers[slot]
    if buffer is None or buffer.numel() < numel or buffer.dtype != dtype or buffer.device != device:
        buffer = buffers[slot] = torch.empty(numel, dtype=dtype, device=device)
    return buffer[:numel]


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _dtype(name: str) -> torch.dtype:
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"unknown tensor dtype {name!r} in weight-sync metadata")
    return dtype
