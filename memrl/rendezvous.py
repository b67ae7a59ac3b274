"""Where the process groups meet (DeepSpeed's learners, the weight sync): a TCPStore listening on one interface.

torch's TCPStore server listens on every interface, and env:// rendezvous needs a port picked in advance, which
another process can take before it is bound. memrl binds the listening socket itself, to loopback when every member
of a group runs on one machine and to the master's node address otherwise, keeps it bound from the moment its port is
chosen, and hands it to the store. Gloo's (and NCCL's) own connections use the same interface.
"""

from __future__ import annotations

import socket
from collections.abc import Iterable
from datetime import timedelta

import torch.distributed as dist

from memrl import process

LOOPBACK = "127.0.0.1"


def group_host(master_ip: str, member_ips: Iterable[str]) -> str:
    """The address a group meets at: loopback when all its members are on the master's machine."""
    return LOOPBACK if all(ip == master_ip for ip in member_ips) else master_ip


def node_ip() -> str:
    """This process's node address as Ray sees it (what group_host compares)."""
    import ray

    return ray.util.get_node_ip_address()


def listen(host: str, port: int = 0) -> socket.socket:
    """A socket listening on host:port (0: a free port, read back with getsockname); it holds the port until used."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    try:
        sock.bind((host, port))
        sock.listen(128)
    except OSError as e:
        sock.close()
        raise OSError(e.errno, f"cannot listen on {host}:{port} for a process group's rendezvous: {e.strerror}") from e
    return sock


def use_interface(host: str) -> None:
    """Make this process's gloo and NCCL connections go over loopback when the group meets there."""
    if host == LOOPBACK:
        process.use_loopback(_loopback_interface())


def _loopback_interface() -> str:
    import psutil

    for name, addresses in psutil.net_if_addrs().items():
        if any(a.family == socket.AF_INET and a.address == LOOPBACK for a in addresses):
            return name
    raise RuntimeError(f"no network interface has {LOOPBACK}; a group on one machine meets over loopback")


def open_store(host: str, port: int, rank: int, world_size: int, timeout_s: float,
               listener: socket.socket | None = None) -> dist.TCPStore:
    """The group's store: rank 0 serves it on `listener` (bound to host:port here when not given), others join it."""
    timeout = timedelta(seconds=timeout_s)
    if rank != 0:
        return dist.TCPStore(host, port, world_size, is_master=False, timeout=timeout)
    listener = listener or listen(host, port)
    port = listener.getsockname()[1]
    # The store's server takes the socket's descriptor over (and closes it), so Python must let go of it. Members
    # are awaited by the process group built on the store, within its own timeout.
    return dist.TCPStore(host, port, world_size, is_master=True, timeout=timeout, wait_for_workers=False,
                         master_listen_fd=listener.detach())
