"""Process groups meet on a socket memrl binds: loopback on one machine, a port held from the moment it is picked."""

import errno
import os

import pytest
import ray

from memrl import rendezvous


def test_group_host_is_loopback_only_when_every_member_shares_the_masters_machine():
    assert rendezvous.group_host("10.0.0.1", ["10.0.0.1", "10.0.0.1"]) == rendezvous.LOOPBACK
    assert rendezvous.group_host("10.0.0.1", []) == rendezvous.LOOPBACK
    assert rendezvous.group_host("10.0.0.1", ["10.0.0.1", "10.0.0.2"]) == "10.0.0.1"


def test_a_listening_socket_holds_its_port_and_the_store_serves_on_it_alone(listening):
    listener = rendezvous.listen(rendezvous.LOOPBACK)
    port = listener.getsockname()[1]
    with pytest.raises(OSError, match=f"cannot listen on 127.0.0.1:{port}") as caught:
        rendezvous.listen(rendezvous.LOOPBACK, port)  # nobody else can take it meanwhile
    assert caught.value.errno == errno.EADDRINUSE
    before = set(listening(os.getpid()))
    store = rendezvous.open_store(rendezvous.LOOPBACK, port, 0, 2, timeout_s=30, listener=listener)
    client = rendezvous.open_store(rendezvous.LOOPBACK, port, 1, 2, timeout_s=30)
    client.set("k", "v")
    assert store.get("k") == b"v"
    assert set(listening(os.getpid())) - before == set()  # no socket besides the one handed over
    assert (rendezvous.LOOPBACK, port) in before


@pytest.mark.slow
def test_a_runs_sockets_listen_on_loopback_only(ray_session, tiny_checkpoint, listening, exposed_ports):
    """Two learner ranks (DeepSpeed's store, gloo's mesh between them) and the torch engine after a broadcast; the vLLM
    engine's own sockets are checked in tests/engines/test_vllm_engine.py."""
    from memrl.algorithms import DAPOConfig

    algo = (DAPOConfig()
            .environment("memrl/Echo-v0", env_config={"num_turns": 1})
            .env_runners(num_env_runners=1, num_envs_per_env_runner=2, max_tokens=4)
            .learners(model_path=str(tiny_checkpoint), num_learners=2, token_budget=256)
            .training(tasks_per_iteration=1, group_size=2, dynamic_sampling=False)
            .build())
    try:
        algo.train()  # DeepSpeed's group, the weight-sync group and a broadcast have all run
        actors = {**{f"learner {i}": a for i, a in enumerate(algo.learner_group.learners)},
                  **{f"engine {i}": e for i, e in enumerate(algo.engines)}}
        learner_pid = ray.get(actors["learner 0"].__ray_call__.remote(lambda self: os.getpid()))
        assert any(ip == rendezvous.LOOPBACK for ip, _ in listening(learner_pid))  # the stores are there
        for name, actor in actors.items():
            assert exposed_ports(actor) == [], name
    finally:
        algo.stop()
