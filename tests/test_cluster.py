"""Ray sizing and placement: a config whose actors cannot fit fails before any actor starts, naming what to change;
actors go to the nodes their custom resources name, on a real multi-node cluster (one machine) that survives losing
an engine node and a learner node."""

import pytest
import ray

from memrl.algorithms import DAPOConfig, PPOConfig


def _config(checkpoint, config=None):
    return ((config or DAPOConfig()).environment("memrl/Echo-v0")
            .learners(model_path=str(checkpoint), num_learners=1)
            .env_runners(engine="torch"))


def _live_placement_groups() -> set[str]:
    return {k for k, pg in ray.util.placement_group_table().items() if pg["state"] != "REMOVED"}


@pytest.mark.timeout(60)
def test_gpus_a_cpu_cluster_lacks_fail_at_once_naming_the_settings(ray_session, tiny_checkpoint):
    before = _live_placement_groups()
    with pytest.raises(RuntimeError, match=r"DAPOConfig needs 2 CPU, 1 GPU .*1 learners x \(1 CPU, 1 GPU\).*"
                                           r"has 8 CPU, 0 GPU.*num_gpus_per_learner"):
        _config(tiny_checkpoint).learners(num_gpus_per_learner=1).build()
    assert _live_placement_groups() == before  # nothing was placed


@pytest.mark.timeout(60)
def test_more_cpus_than_the_cluster_has_fail_at_once(ray_session, tiny_checkpoint):
    # PPO's critic doubles the learners: 2 x 3 learners + 3 engines = 9 CPUs on an 8-CPU instance.
    config = _config(tiny_checkpoint, PPOConfig()).learners(num_learners=3).env_runners(num_engines=3)
    assert config.resources()[0] == {"CPU": 9.0, "GPU": 0.0}
    with pytest.raises(RuntimeError, match=r"PPOConfig needs 9 CPU.*3 critic learners.*has 8 CPU"):
        config.build()
    assert config.debugging(check_resources=False).resources()[0]["CPU"] == 9.0


def test_cpus_per_actor_count_in_the_resources_and_are_checked(tiny_checkpoint):
    config = (_config(tiny_checkpoint).learners(num_learners=2, num_cpus_per_learner=3)
              .env_runners(num_cpus_per_engine=2))
    needs, parts = config.resources()
    assert needs == {"CPU": 8.0, "GPU": 0.0} and parts[0] == "2 learners x (3 CPU, 0 GPU)"
    with pytest.raises(RuntimeError, match=r"needs 8 CPU.*would have 4 CPU.*num_cpus_per_learner"):
        config.check_resources({"CPU": 4.0, "GPU": 0.0})
    for name, bad in (("learners.num_cpus_per_learner", _config(tiny_checkpoint).learners(num_cpus_per_learner=0)),
                      ("env_runners.num_cpus_per_engine", _config(tiny_checkpoint).env_runners(num_cpus_per_engine=0))):
        with pytest.raises(ValueError, match=rf"{name}=0 is not allowed; it must be an integer >= 1"):
            bad.validate()


@pytest.mark.slow
@pytest.mark.parametrize("verbose", [False, True])
def test_actor_output_reaches_the_console_only_when_asked_for(tmp_path, verbose):
    import os
    import subprocess
    import sys

    script = (
        "import ray\n"
        "from memrl.cluster import ensure_ray\n"
        "ensure_ray()\n"
        "@ray.remote\n"
        "def chatty():\n"
        "    print('library chatter from an actor', flush=True)\n"
        "    return 1\n"
        "assert ray.get(chatty.remote()) == 1\n"
        "@ray.remote\n"
        "def vllm_level():\n"
        "    import os\n"
        "    return os.environ.get('VLLM_LOGGING_LEVEL')\n"
        "print('vLLM level in actors:', ray.get(vllm_level.remote()))\n"
        "import time; time.sleep(2)  # give Ray's log monitor time to forward what it would\n"
    )
    env = {**os.environ, "MEMRL_VERBOSE": "1" if verbose else "0"}
    env.pop("RAY_ADDRESS", None)
    env.pop("VLLM_LOGGING_LEVEL", None)
    proc = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert ("library chatter from an actor" in proc.stdout + proc.stderr) == verbose
    assert f"vLLM level in actors: {None if verbose else 'WARNING'}" in proc.stdout  # vLLM quiet unless asked


def test_custom_resources_count_in_the_needs_and_are_checked(tiny_checkpoint):
    config = (_config(tiny_checkpoint).learners(num_learners=2, resources_per_learner={"learner_node": 1})
              .env_runners(num_engines=2, num_env_runners=4, resources_per_engine={"engine_node": 1},
                           resources_per_env_runner={"head": 0.25}))
    needs, parts = config.resources()
    assert needs == {"CPU": 4.0, "GPU": 0.0, "learner_node": 2.0, "engine_node": 2.0, "head": 1.0}
    assert parts == ["2 learners x (1 CPU, 0 GPU, 1 learner_node)", "2 engines x (1 CPU, 0 GPU, 1 engine_node)",
                     "4 env runners x (0 CPU, 0 GPU, 0.25 head)"]
    with pytest.raises(RuntimeError, match=r"needs 4 CPU, 0 GPU, 2 learner_node.*have 8 CPU, 0 GPU, 0 learner_node.*"
                                           r"resources_per_learner.*Custom resources \(learner_node\) come from the "
                                           r"nodes that offer them: `ray start --resources="):
        config.check_resources({"CPU": 8.0, "GPU": 0.0, "engine_node": 2.0, "head": 1.0})
    config.check_resources({"CPU": 8.0, "GPU": 0.0, "learner_node": 2.0, "engine_node": 2.0, "head": 1.0})
    for bad, message in ((_config(tiny_checkpoint).learners(resources_per_learner={"GPU": 1}),
                          r"learners.resources_per_learner has the key 'GPU'; its keys are custom resource names"),
                         (_config(tiny_checkpoint).env_runners(resources_per_engine={"engine_node": 0}),
                          r"env_runners.resources_per_engine\['engine_node'\]=0 is not allowed; it must be a number "
                          r"> 0")):
        with pytest.raises(ValueError, match=message):
            bad.validate()


_MULTINODE = """
import json, os, sys, threading, time
import ray
from ray.cluster_utils import Cluster
from memrl_envs.retrieval import Passage, start_retrieval_server
from memrl.algorithms import DAPOConfig

# A head for the driver and env runners, two learner nodes and two engine nodes: separate raylets on one machine.
cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "resources": {"head": 1}})
learner_nodes = [cluster.add_node(num_cpus=2, resources={"learner_node": 2}) for _ in range(2)]
engine_nodes = [cluster.add_node(num_cpus=2, resources={"engine_node": 1}) for _ in range(2)]
cluster.wait_for_nodes()
os.environ["RAY_ADDRESS"] = cluster.address  # build() joins the running cluster, as under `ray submit`
config = (DAPOConfig()
          .environment("memrl/Echo-v0", env_config={"num_turns": 2, "reward": "similarity", "step_delay_s": 0.3})
          .env_runners(num_env_runners=2, num_envs_per_env_runner=4, engine="torch", max_tokens=6,
                       resources_per_engine={"engine_node": 1}, resources_per_env_runner={"head": 0.1})
          .learners(model_path=sys.argv[1], num_learners=1, token_budget=256,
                    resources_per_learner={"learner_node": 1})
          .training(lr=1e-3, tasks_per_iteration=3, group_size=4, dynamic_sampling=False)
          .fault_tolerance(engine_call_timeout_s=10, learner_timeout_s=30, checkpoint_frequency=1,
                           checkpoint_dir=sys.argv[2], keep_checkpoints=1)
          .debugging(seed=3, progress_bars=False))
algo = config.build()


def node_of(actor):
    return ray.get(actor.__ray_call__.remote(lambda self: ray.get_runtime_context().get_node_id()), timeout=60)


def placement():
    return {"learners": [node_of(a) for a in algo.learner_group.learners],
            "engines": [node_of(e) for e in algo.engines],
            "runners": [node_of(r) for r in algo.env_runner_group.runners]}


def engine_state():  # the engine's weight version, and whether its weights are the learner's
    state = algo.learner_group.gather_state_dict()
    version, sums = ray.get(algo.engines[0].__ray_call__.remote(lambda self: (
        self.engine.weight_version,
        {n: p.double().sum().item() for n, p in self.engine.model.named_parameters()})), timeout=60)
    return version, all(abs(t - state[n].double().sum().item()) < 1e-9 for n, t in sums.items())


retrieval = start_retrieval_server([Passage("0", "Kema", "Kema was born in Hulport.")], num_cpus=0,
                                   resources={"learner_node": 0.5})
out = {"head": cluster.head_node.node_id, "learner_nodes": [n.node_id for n in learner_nodes],
       "engine_nodes": [n.node_id for n in engine_nodes], "placed": placement(), "results": [algo.train()],
       "retrieval": [node_of(retrieval.actor), retrieval.search(["Kema"], 1)[0][0]["title"]]}
out["engine_state"] = [engine_state()]


def remove_while_sampling(node) -> None:
    thread = threading.Thread(target=lambda: out["results"].append(algo.train()))
    thread.start()
    time.sleep(1.0)
    cluster.remove_node(node)
    thread.join(timeout=600)
    out["engine_state"].append(engine_state())


# The node of the only engine goes away while the second iteration samples, then the learner's in the third.
remove_while_sampling(next(n for n in engine_nodes if n.node_id == out["placed"]["engines"][0]))
out["after_engine_node"] = placement()
remove_while_sampling(next(n for n in learner_nodes if n.node_id == out["placed"]["learners"][0]))
out["after_learner_node"] = placement()
out["results"] = [{"counters": r["counters"], "version": r["weight_sync"]["version"]} for r in out["results"]]

algo.stop()
ray.shutdown()
# A script on this machine that starts Ray for itself while this cluster runs (and /tmp/ray/ray_current_cluster
# names it) gets an instance of its own.
import subprocess
probe = subprocess.run([sys.executable, "-c", "import ray; from memrl.cluster import ensure_ray; ensure_ray(); "
                        "print('GCS', ray.get_runtime_context().gcs_address)"],
                       env={k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}, capture_output=True, text=True,
                       timeout=300)
out["own_instance"] = {"returncode": probe.returncode, "cluster": cluster.address, "stderr": probe.stderr[-2000:],
                       "gcs": [line[4:] for line in probe.stdout.splitlines() if line.startswith("GCS ")]}
print("RESULT " + json.dumps(out))
cluster.shutdown()
"""


@pytest.fixture(scope="module")
def multinode(tiny_checkpoint, tmp_path_factory) -> dict:
    """One run on a five-node cluster (head, two learner nodes, two engine nodes): where each actor went, an
    iteration, then one during which the engine's node is removed, then one during which the learner's is."""
    import json
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    checkpoints = tmp_path_factory.mktemp("periodic")
    done = subprocess.run([sys.executable, "-c", _MULTINODE, str(tiny_checkpoint), str(checkpoints)],
                          capture_output=True, text=True, timeout=900, env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(next(line for line in done.stdout.splitlines() if line.startswith("RESULT "))[7:])


@pytest.mark.slow
@pytest.mark.timeout(1000)
def test_actors_are_placed_on_the_nodes_their_resources_name(multinode):
    placed = multinode["placed"]
    assert placed["learners"][0] in multinode["learner_nodes"]
    assert placed["engines"][0] in multinode["engine_nodes"]
    assert placed["runners"] == [multinode["head"]] * 2
    assert multinode["retrieval"][0] in multinode["learner_nodes"] and multinode["retrieval"][1] == "Kema"
    # Weights crossed from the learner's node to the engine's by the broadcast group; episodes came back by the
    # object store; every one sampled was trained on.
    first = multinode["results"][0]
    assert first["version"] == 1 and multinode["engine_state"][0] == [1, True]
    assert first["counters"]["tasks_submitted"] == first["counters"]["trajectories_returned"] == 12
    assert first["counters"]["trajectories_sampled"] == first["counters"]["trajectories_trained"] == 12


@pytest.mark.slow
@pytest.mark.timeout(1000)
def test_a_removed_engine_node_is_survived_like_a_dead_engine(multinode):
    before, after = multinode["placed"], multinode["after_engine_node"]
    assert {before["engines"][0], after["engines"][0]} == set(multinode["engine_nodes"])  # on the other engine node
    assert after["learners"] == before["learners"] and after["runners"] == before["runners"]
    second = multinode["results"][1]
    assert second["counters"]["engine_restarts"] == 1
    assert second["counters"]["trajectories_sampled"] == second["counters"]["trajectories_trained"] == 24
    assert second["version"] == 2 and multinode["engine_state"][1] == [2, True]


@pytest.mark.slow
@pytest.mark.timeout(1000)
def test_a_removed_learner_node_is_survived_like_a_dead_learner(multinode):
    before, after = multinode["after_engine_node"], multinode["after_learner_node"]
    assert {before["learners"][0], after["learners"][0]} == set(multinode["learner_nodes"])  # on the other one
    third = multinode["results"][2]
    # Started anew from the checkpoint of iteration 2, iteration 3 ran again: counted once.
    assert third["counters"]["learner_restarts"] == 1
    assert third["counters"]["trajectories_sampled"] == third["counters"]["trajectories_trained"] == 36
    assert third["version"] == 3 and multinode["engine_state"][2] == [3, True]


@pytest.mark.slow
@pytest.mark.timeout(1000)
def test_a_script_that_starts_ray_beside_a_running_cluster_gets_an_instance_of_its_own(multinode):
    probe = multinode["own_instance"]
    assert probe["returncode"] == 0, probe["stderr"]
    (gcs,) = probe["gcs"]
    assert gcs != probe["cluster"] and gcs.startswith("127.0.0.1:")


def test_a_local_ray_listens_on_loopback_only(ray_session):
    """Every server of the session's local Ray (GCS, raylet, agents, the workers of a live actor) is bound to
    loopback: none listens on the machine's network address or on all interfaces."""
    import ipaddress

    import psutil

    @ray.remote(num_cpus=0)
    class Probe:
        def pid(self) -> int:
            import os

            return os.getpid()

    probe = Probe.remote()
    ray.get(probe.pid.remote(), timeout=60)
    me = psutil.Process()
    ours = {me.pid} | {p.pid for p in me.children(recursive=True)}
    listening = [(c.laddr.ip, c.laddr.port, c.pid) for c in psutil.net_connections(kind="inet")
                 if c.status == psutil.CONN_LISTEN and c.pid in ours]
    assert len(listening) >= 3  # the GCS, the raylet and the actor's worker at least
    names = {pid: psutil.Process(pid).name() for _, _, pid in listening}
    exposed = [(ip, port, names[pid]) for ip, port, pid in listening
               if not ipaddress.ip_address(ip.removeprefix("::ffff:")).is_loopback]
    assert not exposed
    assert ray.nodes()[0]["NodeManagerAddress"] == "127.0.0.1"
    ray.kill(probe)
