"""Bucketed broadcast of model weights from learner rank 0 to inference engines.

The group lives outside DeepSpeed's world: rank 0 is the learner, ranks 1..N are engines.
gloo on CPU, NCCL on GPU; the same three calls on both sides.
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


def broadcast_send(pg, tensors: dict[str, torch.Tensor], metas: list[TensorMeta], bucket_bytes: int) -> int:
    """Rank 0: broadcast `tensors` bucket by bucket in `metas` order; returns bytes sent."""
    sent = 0
    for bucket in plan_buckets(metas, bucket_bytes):
        flat = torch.cat([tensors[name].detach().reshape(-1) for name, _, _ in bucket])
        pg.broadcast(flat, 0).wait()
        sent += flat.numel() * flat.element_size()
    return sent


def broadcast_recv(
    pg, metas: list[TensorMeta], bucket_bytes: int, device: str | torch.device = "cpu"
) -> Iterator[tuple[str, torch.Tensor]]:
    """Ranks > 0: receive the buckets of `broadcast_send` and yield (name, tensor) views.

    Each bucket gets a fresh buffer, so yielded tensors stay valid after the next bucket arrives.
    """
    for bucket in plan_buckets(metas, bucket_bytes):
        total = sum(_numel(shape) for _, shape, _ in bucket)
        flat = torch.empty(total, dtype=_dtype(bucket[0][2]), device=device)
        pg.broadcast(flat, 0).wait()
        offset = 0
        for name, shape, _ in bucket:
            n = _numel(shape)
            yield name, flat[offset : offset + n].view(shape)
            offset += n


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
