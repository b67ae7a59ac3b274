"""Ray sizing: a config whose actors cannot fit fails before any actor starts, naming what to change."""

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
        "import time; time.sleep(2)  # give Ray's log monitor time to forward what it would\n"
    )
    env = {**os.environ, "MEMRL_VERBOSE": "1" if verbose else "0"}
    env.pop("RAY_ADDRESS", None)
    proc = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert ("library chatter from an actor" in proc.stdout + proc.stderr) == verbose
