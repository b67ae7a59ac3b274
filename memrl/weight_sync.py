"""Bucketed broadcast of model weights from learner rank 0 to inference engines.

The group lives outside DeepSpeed's world: rank 0 is the learner, ranks 1..N are engines. A large tensor travels as
one broadcast of its own bytes, and each run of small neighbours as one broadcast of them packed together (one
broadcast's fixed cost outweighs copying a small tensor); a bucket is how much the learner gathers from its ZeRO-3
shards at a time and how much a receiver that copies (vLLM's reload) stages at a time.
NCCL where every rank holds a GPU of its own, gloo otherwise (CPUs, or CUDA tensors of ranks sharing a GPU, which
gloo moves through host memory); the same three calls on both sides.
"""

from __future__ import annotations

import socket
from collections.abc import Iterable, Iterator
from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist

from memrl import rendezvous

TensorMeta = tuple[str, tuple[int, ...], str]
"""(HF parameter name, shape, dtype name such as "float32")."""

BACKENDS = ("gloo", "nccl")

PACK_BYTES = 1 << 20
"""Tensors smaller than this travel packed: on loopback a gloo broadcast costs about 0.3 ms whatever its size, more
than copying such a tensor in and out of a packed buffer (51 tensors of 4.7 MB: 14-20 ms one by one, 2.5 ms packed)."""


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


def pieces(sizes: list[int]) -> list[range]:
    """How a bucket's tensors (their sizes in bytes, in order) travel: one broadcast per piece, each tensor of
    PACK_BYTES or more a piece of its own and each run of smaller neighbours one piece."""
    out: list[range] = []
    for i, size in enumerate(sizes):
        if size < PACK_BYTES and out and sizes[out[-1][-1]] < PACK_BYTES:
            out[-1] = range(out[-1].start, i + 1)
        else:
            out.append(range(i, i + 1))
    return out


def send_bucket(pg, tensors: list[torch.Tensor]) -> int:
    """Rank 0: broadcast one bucket (tensors of one dtype and device, in plan order): a large tensor as it is, with no
    staging copy (on a CPU host that costs about as much as the broadcast itself), small neighbours packed. Returns
    the bucket's bytes once every tensor has left, so the tensors may change (or be released, as ZeRO-3 releases
    gathered parameters) after."""
    works = []
    for piece in pieces([t.numel() * t.element_size() for t in tensors]):
        if len(piece) == 1:
            buffer = tensors[piece.start].detach().contiguous()
        else:
            buffer = torch.cat([tensors[i].detach().reshape(-1) for i in piece])
        works.append(pg.broadcast(buffer, 0))
    for work in works:
        work.wait()
    return sum(t.numel() * t.element_size() for t in tensors)


class BucketReceiver:
    """Ranks > 0: the tensors of `send_bucket`, landing in one flat buffer per bucket, each bucket received while the
    one before is read.

    With `reuse`, two buffers are kept from call to call and a yielded view is valid only until the bucket after next
    is received: for consumers that copy each tensor as it comes (an engine loading its parameters). Without it,
    every bucket gets a fresh buffer and views stay valid. A receiver that holds tensors of the right shapes and
    dtype already (an engine's parameters) can skip the buffers: `receive_into`."""

    def __init__(self, pg, device: str | torch.device = "cpu", reuse: bool = True):
        self.pg, self.device, self.reuse = pg, torch.device(device), reuse
        self._buffers: list[torch.Tensor | None] = [None, None]

    def receive(self, metas: list[TensorMeta], bucket_bytes: int) -> Iterator[tuple[str, torch.Tensor]]:
        """Yield (name, tensor) for every tensor of `metas`, in order, as rank 0 broadcasts them."""
        buckets = plan_buckets(metas, bucket_bytes)

        def post(i: int):
            numels = [_numel(shape) for _, shape, _ in buckets[i]]
            dtype = _dtype(buckets[i][0][2])
            flat = (_staging(self._buffers, i % 2, sum(numels), dtype, self.device) if self.reuse
                    else torch.empty(sum(numels), dtype=dtype, device=self.device))
            starts = np.cumsum([0, *numels])  # tensors lie back to back, so a piece is one slice of the buffer
            views = [flat[starts[j] : starts[j + 1]].view(shape) for j, (_, shape, _) in enumerate(buckets[i])]
            works = [self.pg.broadcast(flat[starts[p.start] : starts[p.stop]], 0)
                     for p in pieces([n * dtype.itemsize for n in numels])]
            return views, works

        pending = post(0) if buckets else None
        for i, bucket in enumerate(buckets):
            views, works = pending
            for work in works:
                work.wait()
            # The buffer of bucket i - 1, whose views the consumer is done with, now takes bucket i + 1.
            pending = post(i + 1) if i + 1 < len(buckets) else None
            for (name, _, _), view in zip(bucket, views):
                yield name, view


def receive_into(pg, tensors: dict[str, torch.Tensor], metas: list[TensorMeta], bucket_bytes: int) -> None:
    """Ranks > 0: receive every tensor of `metas` straight into `tensors[name]` (contiguous, of the sent shape and
    dtype, e.g. an engine's parameters): a large one with no copy, small ones by way of their packed piece. Checks
    every name, shape and dtype before receiving any."""
    for name, shape, dtype in metas:
        target = tensors.get(name)
        if target is None:
            raise KeyError(f"weight sync: unknown parameter name {name!r}; the model has {len(tensors)} parameters "
                           f"named like: {', '.join(list(tensors)[:5])}, ...")
        if tuple(target.shape) != tuple(shape) or target.dtype != _dtype(dtype) or not target.is_contiguous():
            raise ValueError(f"weight sync: parameter {name!r} is {tuple(target.shape)} {target.dtype}, the sender "
                             f"sends {tuple(shape)} {dtype}")
    works, packed = [], []
    for bucket in plan_buckets(metas, bucket_bytes):
        targets = [tensors[name] for name, _, _ in bucket]
        for piece in pieces([t.numel() * t.element_size() for t in targets]):
            if len(piece) == 1:
                works.append(pg.broadcast(targets[piece.start], 0))
                continue
            buffer = torch.empty(sum(targets[i].numel() for i in piece), dtype=targets[0].dtype,
                                 device=targets[0].device)
            works.append(pg.broadcast(buffer, 0))
            packed.append((buffer, [targets[i] for i in piece]))
    for work in works:
        work.wait()
    for buffer, targets in packed:
        for target, part in zip(targets, buffer.split([t.numel() for t in targets])):
            target.copy_(part.view_as(target))


def broadcast_send(pg, tensors: dict[str, torch.Tensor], metas: list[TensorMeta], bucket_bytes: int) -> int:
    """Rank 0: broadcast `tensors` bucket by bucket in `metas` order; returns bytes sent."""
    buckets = plan_buckets(metas, bucket_bytes)
    return sum(send_bucket(pg, [tensors[name] for name, _, _ in bucket]) for bucket in buckets)


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
