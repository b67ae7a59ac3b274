import multiprocessing as mp
import socket
import threading

import pytest
import torch

from memrl.weight_sync import (
    BucketReceiver,
    StagingReceiver,
    broadcast_recv,
    broadcast_send,
    group_layout,
    init_group,
    metas_of,
    plan_buckets,
    receive_into,
    send_bucket,
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tensors() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {
        "a.weight": torch.randn(7, 5, generator=g),
        "b.bias": torch.randn(3, generator=g),
        "e.big": torch.randn(512, 520, generator=g),  # over 1 MB
        "c.weight": torch.randn(11, 4, generator=g),
        "d.int": torch.arange(6, dtype=torch.int64).reshape(2, 3),
    }


def _arrays(tensors) -> dict:
    """Copies as numpy arrays, to pass between processes: torch would share a tensor's storage by a file descriptor
    that is gone once the sending process exits, which it may do before the receiver reads the queue."""
    return {name: t.numpy().copy() for name, t in tensors}


def _tensors_of(arrays: dict) -> dict[str, torch.Tensor]:
    return {name: torch.from_numpy(a) for name, a in arrays.items()}


def _receiver(port: int, metas, bucket_bytes: int, queue) -> None:
    pg = init_group("127.0.0.1", port, 1, 2, "gloo", timeout_s=60)
    queue.put(_arrays(broadcast_recv(pg, metas, bucket_bytes)))


def _reusing_receiver(port: int, metas, bucket_bytes: int, transfers: int, queue) -> None:
    pg = init_group("127.0.0.1", port, 1, 2, "gloo", timeout_s=60)
    receiver = BucketReceiver(pg)
    for _ in range(transfers):  # copied as they come, as an engine loads its parameters
        queue.put(_arrays(receiver.receive(metas, bucket_bytes)))


def _with_receiver(target, *args):
    """A spawned receiver running target(port, *args, queue), and this process's rank-0 group with it."""
    port = free_port()
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=target, args=(port, *args, queue))
    proc.start()
    return init_group("127.0.0.1", port, 0, 2, "gloo", timeout_s=60), proc, queue


def test_plan_buckets_splits_by_size_and_dtype():
    metas = metas_of(_tensors().items())
    buckets = plan_buckets(metas, bucket_bytes=64 * 4)  # a+b = 152 bytes fit; e and c (176) do not
    assert [[m[0] for m in b] for b in buckets] == [["a.weight", "b.bias"], ["e.big"], ["c.weight"], ["d.int"]]
    # one bucket per tensor when the budget is smaller than any tensor
    assert len(plan_buckets(metas, 1)) == 5


def test_plan_buckets_rejects_bad_size():
    with pytest.raises(ValueError, match="bucket_bytes"):
        plan_buckets([], 0)


@pytest.mark.parametrize("bucket_bytes", [16, 1 << 20, 8 << 20])  # 8 MiB: a, b, e and c share a bucket
def test_gloo_broadcast_round_trip(bucket_bytes):
    tensors = _tensors()
    metas = metas_of(tensors.items())
    pg, proc, queue = _with_receiver(_receiver, metas, bucket_bytes)
    sent = broadcast_send(pg, tensors, metas, bucket_bytes)
    received = _tensors_of(queue.get(timeout=60))
    proc.join(timeout=30)
    assert sent == sum(t.numel() * t.element_size() for t in tensors.values())
    assert received.keys() == tensors.keys()
    for name, t in tensors.items():
        assert received[name].dtype == t.dtype
        assert torch.equal(received[name], t)


def test_unknown_backend_is_named():
    with pytest.raises(ValueError, match="allowed"):
        init_group("127.0.0.1", free_port(), 0, 1, "mpi")


def test_receiver_buffers_are_reused_across_transfers_without_mixing_them():
    """Three transfers from one sender into one receiver that keeps two staging buffers: every transfer arrives whole
    and exact, though the sender changes its tensors as soon as each bucket's send returns and buckets differ in size
    and dtype (so the buffers grow and change dtype)."""
    tensors = _tensors()
    metas = metas_of(tensors.items())
    bucket_bytes = 64 * 4  # four buckets: [a, b], [e], [c], [d]
    pg, proc, queue = _with_receiver(_reusing_receiver, metas, bucket_bytes, 3)
    expected = []
    for version in range(3):
        live = {name: t * (version + 1) if t.is_floating_point() else t + version for name, t in tensors.items()}
        expected.append({name: t.clone() for name, t in live.items()})
        tag = 0  # the n-th tensor of a transfer travels with tag n
        for bucket in plan_buckets(metas, bucket_bytes):
            send_bucket(pg, [live[name] for name, _, _ in bucket], tag)
            tag += len(bucket)
            for name, _, _ in bucket:
                live[name].fill_(-1)  # the bucket has left when send_bucket returns: changing it now must not matter
    received = [_tensors_of(queue.get(timeout=60)) for _ in range(3)]
    proc.join(timeout=30)
    for want, got in zip(expected, received):
        assert got.keys() == want.keys()
        for name, t in want.items():
            assert got[name].dtype == t.dtype and torch.equal(got[name], t), name


def _staging_receiver(port: int, transfers: list, queue) -> None:
    pg = init_group("127.0.0.1", port, 1, 2, "gloo", timeout_s=60)
    receiver = StagingReceiver(pg)
    for metas in transfers:
        held = list(receiver.receive(metas))  # every tensor held to the end, as vLLM's reload may hold a layer's
        queue.put((_arrays(held), {name: t.data_ptr() for name, t in held}))


def test_staging_receiver_keeps_each_tensor_s_buffer_across_transfers_and_every_held_tensor_exact():
    """Three transfers into one StagingReceiver whose consumer holds every tensor until the transfer ends: each
    arrives exact although the sender changes its tensors once they have left; the second lands in the first one's
    buffers; in the third a tensor of a new shape gets a buffer of its own, the others keep theirs."""
    tensors = _tensors()
    third = {**tensors, "c.weight": torch.randn(4, 11)}
    transfers = [metas_of(tensors.items())] * 2 + [metas_of(third.items())]
    pg, proc, queue = _with_receiver(_staging_receiver, transfers)
    expected = []
    for version, (source, metas) in enumerate(zip([tensors, tensors, third], transfers)):
        live = {name: t * (version + 1) if t.is_floating_point() else t + version for name, t in source.items()}
        expected.append({name: t.clone() for name, t in live.items()})
        broadcast_send(pg, live, metas, bucket_bytes=64 * 4)
        for t in live.values():
            t.fill_(-1)  # every tensor has left when broadcast_send returns
    received = [queue.get(timeout=60) for _ in range(3)]
    proc.join(timeout=30)
    for want, (arrays, _) in zip(expected, received):
        got = _tensors_of(arrays)
        assert got.keys() == want.keys()
        for name, t in want.items():
            assert got[name].dtype == t.dtype and torch.equal(got[name], t), name
    (_, first), (_, second), (_, last) = received
    assert second == first
    assert last["c.weight"] != first["c.weight"]
    assert {n: p for n, p in last.items() if n != "c.weight"} == {n: p for n, p in first.items() if n != "c.weight"}


def _receiver_into(port: int, metas, queue) -> None:
    pg = init_group("127.0.0.1", port, 1, 2, "gloo", timeout_s=60)
    targets = {name: torch.zeros(shape, dtype=getattr(torch, dtype)) for name, shape, dtype in metas}
    pointers = {name: t.data_ptr() for name, t in targets.items()}
    receive_into(pg, targets, metas)
    queue.put((_arrays(targets.items()),
               all(t.data_ptr() == pointers[name] for name, t in targets.items())))


@pytest.mark.parametrize("bucket_bytes", [64 * 4, 8 << 20])  # however the sender buckets them
def test_receive_into_fills_the_given_tensors_in_place(bucket_bytes):
    tensors = _tensors()
    metas = metas_of(tensors.items())
    pg, proc, queue = _with_receiver(_receiver_into, metas)
    broadcast_send(pg, tensors, metas, bucket_bytes)
    arrays, in_place = queue.get(timeout=60)
    received = _tensors_of(arrays)
    proc.join(timeout=30)
    assert in_place
    for name, t in tensors.items():
        assert torch.equal(received[name], t), name


def test_receive_into_names_a_missing_or_mismatched_tensor_before_receiving():
    metas = metas_of(_tensors().items())
    targets = {name: torch.zeros(shape, dtype=getattr(torch, dtype)) for name, shape, dtype in metas}
    with pytest.raises(KeyError, match="unknown parameter name 'a.weight'"):
        receive_into(None, {k: v for k, v in targets.items() if k != "a.weight"}, metas)
    with pytest.raises(ValueError, match=r"'c.weight' is \(4, 11\) torch.float32, the sender sends \(11, 4\)"):
        receive_into(None, {**targets, "c.weight": torch.zeros(4, 11)}, metas)


@pytest.mark.parametrize("tp", [1, 2, 4])
def test_engines_workers_take_ranks_after_the_learner_without_sharing_one(tp):
    world, firsts = group_layout([tp, tp, tp])
    assert world == 1 + 3 * tp and firsts == [1, 1 + tp, 1 + 2 * tp]
    ranks = [first + worker for first in firsts for worker in range(tp)]
    assert sorted(ranks) == list(range(1, world))  # every rank but the learner's 0, each once
    assert group_layout([1, 4, 2]) == (8, [1, 2, 6])  # engines of different sizes
    with pytest.raises(ValueError, match="at least one weight-sync rank"):
        group_layout([2, 0])


class _Broadcasting:
    """A gloo group seen as an NCCL one is: without gloo's point-to-point path, so every tensor's trip is
    `pg.broadcast(tensor, 0)`, the branch NCCL groups take on GPUs, here carried by gloo."""

    def __init__(self, pg):
        self.pg = pg

    def broadcast(self, tensor, root):
        return self.pg.broadcast(tensor, root)

    def rank(self):
        return self.pg.rank()

    def size(self):
        return self.pg.size()


def _fake_tp_engine(port: int, first: int, workers: int, world: int, metas, bucket_bytes: int, broadcast: bool,
                    queue) -> None:
    """One engine whose `workers` tensor-parallel workers (threads here) join at first, first + 1, ... and each
    receive every tensor, as a vLLM engine's workers do before each keeps its shard."""

    def worker(rank: int) -> None:
        pg = init_group("127.0.0.1", port, rank, world, "gloo", timeout_s=60)
        queue.put((rank, _arrays(broadcast_recv(_Broadcasting(pg) if broadcast else pg, metas, bucket_bytes))))

    threads = [threading.Thread(target=worker, args=(first + w,)) for w in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=90)


@pytest.mark.parametrize("workers, broadcast", [((2, 1), False), ((1, 2), True)], ids=["gloo-sends", "broadcasts"])
def test_every_worker_of_tensor_parallel_engines_receives_every_bucket(workers, broadcast):
    """Two engines of 1 and 2 workers in processes of their own; the learner's sends (gloo's path) or broadcasts
    (NCCL's path, carried by gloo) reach every worker whole, in buckets of mixed dtypes."""
    tensors = _tensors()
    metas = metas_of(tensors.items())
    bucket_bytes = 64 * 4
    world, firsts = group_layout(list(workers))
    port = free_port()
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_fake_tp_engine, args=(port, first, n, world, metas, bucket_bytes, broadcast, queue))
             for first, n in zip(firsts, workers)]
    for proc in procs:
        proc.start()
    pg = init_group("127.0.0.1", port, 0, world, "gloo", timeout_s=60)
    broadcast_send(_Broadcasting(pg) if broadcast else pg, tensors, metas, bucket_bytes)
    received = dict(queue.get(timeout=60) for _ in range(world - 1))
    for proc in procs:
        proc.join(timeout=30)
    assert sorted(received) == list(range(1, world))
    for rank, arrays in received.items():
        for name, t in tensors.items():
            assert torch.equal(_tensors_of(arrays)[name], t), (rank, name)
