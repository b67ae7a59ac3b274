"""Process groups meet on a socket memrl binds: loopback on one machine, a port held from the moment it is picked."""

import errno
import ipaddress
import os

import psutil
import pytest
import ray
import ray._private.state as ray_state

from memrl import rendezvous


def _listening(pid: int) -> list[tuple[str, int]]:
    """(address, port) of every listening TCP socket of a process and its live children (a child that exits while
    they are read, such as one of Ray's short-lived workers, listens on nothing any more)."""
    found = set()
    for process in [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]:
        try:
            connections = process.net_connections("inet")
        except psutil.NoSuchProcess:
            if process.pid == pid:
                raise
            continue
        found |= {(c.laddr.ip, c.laddr.port) for c in connections if c.status == psutil.CONN_LISTEN}
    return sorted(found)


def _exposed(pid: int) -> list[tuple[str, int]]:
    return [(ip, port) for ip, port in _listening(pid) if not ipaddress.ip_address(ip).is_loopback]


def test_group_host_is_loopback_only_when_every_member_shares_the_masters_machine():
    assert rendezvous.group_host("10.0.0.1", ["10.0.0.1", "10.0.0.1"]) == rendezvous.LOOPBACK
    assert rendezvous.group_host("10.0.0.1", []) == rendezvous.LOOPBACK
    assert rendezvous.group_host("10.0.0.1", ["10.0.0.1", "10.0.0.2"]) == "10.0.0.1"


def test_a_listening_socket_holds_its_port_and_the_store_serves_on_it_alone():
    listener = rendezvous.listen(rendezvous.LOOPBACK)
    port = listener.getsockname()[1]
    with pytest.raises(OSError, match=f"cannot listen on 127.0.0.1:{port}") as caught:
        rendezvous.listen(rendezvous.LOOPBACK, port)  # nobody else can take it meanwhile
    assert caught.value.errno == errno.EADDRINUSE
    before = set(_listening(os.getpid()))
    store = rendezvous.open_store(rendezvous.LOOPBACK, port, 0, 2, timeout_s=30, listener=listener)
    client = rendezvous.open_store(rendezvous.LOOPBACK, port, 1, 2, timeout_s=30)
    client.set("k", "v")
    assert store.get("k") == b"v"
    assert set(_listening(os.getpid())) - before == set()  # no socket besides the one handed over
    assert (rendezvous.LOOPBACK, port) in before


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["torch", "vllm"])
def test_a_runs_sockets_listen_on_loopback_only(ray_session, tiny_checkpoint, engine):
    from memrl.algorithms import DAPOConfig

    def pid(actor) -> int:
        return ray.get(actor.__ray_call__.remote(lambda self: os.getpid()))

    def ray_port(actor) -> int:
        """The port of the actor's own Ray worker server: Ray opens it on every interface, outside memrl's reach."""
        return ray_state.actors(actor._actor_id.hex())["Address"]["Port"]

    engine_config = {"kv_cache_bytes": 64 * 1024**2} if engine == "vllm" else {}
    algo = (DAPOConfig()
            .environment("memrl/Echo-v0", env_config={"num_turns": 1})
            .env_runners(num_env_runners=1, num_envs_per_env_runner=2, engine=engine, engine_config=engine_config,
                         max_tokens=4)
            # Two ranks once (DeepSpeed's store and gloo's mesh between them); the torch engine's run needs only the
            # weight-sync group.
            .learners(model_path=str(tiny_checkpoint), num_learners=2 if engine == "vllm" else 1, token_budget=256)
            .training(tasks_per_iteration=1, group_size=2, dynamic_sampling=False)
            .build())
    try:
        algo.train()  # DeepSpeed's group, the weight-sync group and a broadcast have all run
        actors = {**{f"learner {i}": a for i, a in enumerate(algo.learner_group.learners)},
                  **{f"engine {i}": e for i, e in enumerate(algo.engines)}}
        listening = {name: _listening(pid(a)) for name, a in actors.items()}
        assert any(port for ip, port in listening["learner 0"] if ip == rendezvous.LOOPBACK)  # the stores are there
        for name, actor in actors.items():
            own = ray_port(actor)
            assert [port for _, port in _exposed(pid(actor)) if port != own] == [], (name, own, listening[name])
    finally:
        algo.stop()
