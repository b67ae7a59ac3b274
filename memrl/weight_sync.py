"""Bucketed broadcast of model weights from learner rank 0 to inference engines.

The group lives outside DeepSpeed's world: rank 0 is the learner, the other ranks are the engines' workers that hold
weights (one for the torch engine, a tensor-parallel vLLM engine's TP x PP workers; `group_layout`), each of which
receives the whole tensors and keeps its own shard of them. Every tensor travels on its
own, with no staging copy; a bucket is how much the learner gathers from its ZeRO-3 shards at a time and how much a
receiver that copies (a GPU vLLM worker's reload) stages at a time. A receiver on a CPU keeps a buffer per tensor
from one sync to the next instead (`StagingReceiver`): fresh host memory is faulted in page by page.
NCCL where every rank holds a GPU of its own, gloo otherwise (CPUs, or CUDA tensors of ranks sharing a GPU, which
gloo moves through host memory); the same three calls on both sides. On NCCL a tensor's trip is a broadcast; on gloo
it is a send to each engine, which is what gloo's broadcast does too, but without its queue of asynchronous work,
a fixed cost per tensor whatever its size (the benchmarks page has the figures).
"""

from __future__ import annotations

import socket
from collections.abc import Iterable, Iterator, Sequence
from datetime import timedelta
from itertools import accumulate

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


def group_layout(ranks_per_engine: Sequence[int]) -> tuple[int, list[int]]:
    """The weight-sync group of learner rank 0 and engines that take `ranks_per_engine[i]` ranks each: its world size
    and each engine's first rank. Engine i's workers take first[i], first[i] + 1, ... in the engine's own worker order,
    so no two workers of different engines share a rank whatever their tensor-parallel sizes."""
    bad = [n for n in ranks_per_engine if isinstance(n, bool) or not isinstance(n, int) or n < 1]
    if bad:
        raise ValueError(f"an engine takes at least one weight-sync rank (one per worker holding weights), got {bad}")
    firsts = list(accumulate(ranks_per_engine, initial=1))
    return firsts[-1], firsts[:-1]


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


def transfer(pg, tensor: torch.Tensor, tag: int) -> list:
    """Start one tensor's trip from rank 0 to every other rank (rank 0 sends `tensor`, the others receive into it);
    the works to wait on. `tag` tells a transfer's tensors apart on gloo: the n-th tensor of a transfer has tag n.
    gloo sends and receives host memory only, so a CUDA tensor goes by way of a host copy on either side (as gloo's
    own broadcast of one does), whatever the other side's device."""
    if not isinstance(pg, dist.ProcessGroupGloo):
        return [pg.broadcast(tensor, 0)]
    if pg.rank() == 0:
        host = tensor.cpu()  # the send keeps it alive until it has left
        return [pg.send([host], peer, tag) for peer in range(1, pg.size())]
    if not tensor.is_cuda:
        return [pg.recv([tensor], 0, tag)]
    host = torch.empty(tensor.shape, dtype=tensor.dtype)
    return [_CopiedOnArrival(pg.recv([host], 0, tag), host, tensor)]


class _CopiedOnArrival:
    """A receive into host memory whose wait also copies the bytes to the device tensor they are for."""

    def __init__(self, work, host: torch.Tensor, target: torch.Tensor):
        self.work, self.host, self.target = work, host, target

    def wait(self) -> None:
        self.work.wait()
        self.target.copy_(self.host)


def send_bucket(pg, tensors: list[torch.Tensor], first_tag: int) -> int:
    """Rank 0: send one bucket (tensors of one dtype and device, in plan order; the first one the transfer's
    `first_tag`-th tensor), each tensor as it is: no staging copy, which on a CPU host costs about as much as the
    transfer itself. Returns the bucket's bytes once every tensor has left, so the tensors may change (or be
    released, as ZeRO-3 releases gathered parameters) after."""
    works = [w for i, t in enumerate(tensors) for w in transfer(pg, t.detach().contiguous(), first_tag + i)]
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
        first_tags = list(accumulate((len(bucket) for bucket in buckets), initial=0))

        def post(i: int):
            numel = sum(_numel(shape) for _, shape, _ in buckets[i])
            dtype = _dtype(buckets[i][0][2])
            flat = (_staging(self._buffers, i % 2, numel, dtype, self.device) if self.reuse
                    else torch.empty(numel, dtype=dtype, device=self.device))
            shapes = [shape for _, shape, _ in buckets[i]]
            views = [part.view(shape) for part, shape in zip(flat.split([_numel(s) for s in shapes]), shapes)]
            return views, [w for j, view in enumerate(views) for w in transfer(self.pg, view, first_tags[i] + j)]

        pending = post(0) if buckets else None
        for i, bucket in enumerate(buckets):
            views, works = pending
            for work in works:
                work.wait()
            # The buffer of bucket i - 1, whose views the consumer is done with, now takes bucket i + 1.
            pending = post(i + 1) if i + 1 < len(buckets) else None
            for (name, _, _), view in zip(bucket, views):
                yield name, view


class StagingReceiver:
    """Ranks > 0: the tensors of `broadcast_send`, each received into a buffer of its own that is kept from one
    transfer to the next, for a consumer that copies them into a model of another layout and may hold some until it
    has more (vLLM's reload gathers a layer's weights before loading the layer). Every receive is posted at once and
    each tensor is yielded as soon as it has arrived, so the consumer's copy of one overlaps the arrival of the next;
    a yielded tensor stays valid until the next `receive`.

    On a CPU, fresh buffers for every transfer (`BucketReceiver` without reuse) come as fresh pages from the OS, each
    faulted in and zeroed as the bytes land: kept buffers skip that, at the cost of one copy of the weights held
    between transfers. A GPU's caching allocator serves fresh buffers from memory it holds, so there the bucketed
    receive keeps the smaller footprint."""

    def __init__(self, pg, device: str | torch.device = "cpu"):
        self.pg, self.device = pg, torch.device(device)
        self._buffers: dict[str, torch.Tensor] = {}

    def receive(self, metas: list[TensorMeta]) -> Iterator[tuple[str, torch.Tensor]]:
        """Yield (name, tensor) for every tensor of `metas`, in order, as rank 0 broadcasts them."""
        kept, self._buffers = self._buffers, {}
        for name, shape, dtype in metas:
            buffer = kept.get(name)
            if buffer is None or tuple(buffer.shape) != tuple(shape) or buffer.dtype != _dtype(dtype):
                buffer = torch.empty(shape, dtype=_dtype(dtype), device=self.device)
            self._buffers[name] = buffer
        works = [transfer(self.pg, self._buffers[name], tag) for tag, (name, _, _) in enumerate(metas)]
        for (name, _, _), tensor_works in zip(metas, works):
            for work in tensor_works:
                work.wait()
            yield name, self._buffers[name]


def receive_into(pg, tensors: dict[str, torch.Tensor], metas: list[TensorMeta]) -> None:
    """Ranks > 0: receive every tensor of `metas` straight into `tensors[name]` (contiguous, of the sent shape and
    dtype, e.g. an engine's parameters), with no copy. Checks every name, shape and dtype before receiving any."""
    for name, shape, dtype in metas:
        target = tensors.get(name)
        if target is None:
            raise KeyError(f"weight sync: unknown parameter name {name!r}; the model has {len(tensors)} parameters "
                           f"named like: {', '.join(list(tensors)[:5])}, ...")
        if tuple(target.shape) != tuple(shape) or target.dtype != _dtype(dtype) or not target.is_contiguous():
            raise ValueError(f"weight sync: parameter {name!r} is {tuple(target.shape)} {target.dtype}, the sender "
                             f"sends {tuple(shape)} {dtype}")
    works = [w for tag, (name, _, _) in enumerate(metas) for w in transfer(pg, tensors[name], tag)]
    for work in works:
        work.wait()


def broadcast_send(pg, tensors: dict[str, torch.Tensor], metas: list[TensorMeta], bucket_bytes: int) -> int:
    """Rank 0: send `tensors` bucket by bucket in `metas` order; returns bytes sent."""
    sent = tag = 0
    for bucket in plan_buckets(metas, bucket_bytes):
        sent += send_bucket(pg, [tensors[name] for name, _, _ in bucket], tag)
        tag += len(bucket)
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
