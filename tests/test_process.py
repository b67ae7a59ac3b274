"""Per-process set-up: importing memrl changes no environment variable and no warning filter; the set-ups do."""

import json
import os
import subprocess
import sys
import warnings

from memrl import process

IMPORT_ALL = """
import json, os, sys, warnings
import gymnasium, numpy, pyarrow, ray, torch, torch.distributed, transformers  # what memrl's modules import
env, filters = dict(os.environ), list(warnings.filters)
import memrl.algorithms, memrl.cluster, memrl.engines.torch_engine, memrl.engines.vllm_engine
import memrl.learner.learner, memrl.learner.learner_group, memrl.rendezvous, memrl.rollout, memrl.weight_sync
import memrl.workflows, memrl_envs
changed = sorted(k for k in set(env) | set(os.environ) if env.get(k) != os.environ.get(k))
print(json.dumps([changed, [str(f) for f in warnings.filters if f not in filters]]))
"""


def test_importing_memrl_leaves_the_environment_and_the_warning_filters_alone():
    out = subprocess.run([sys.executable, "-c", IMPORT_ALL], capture_output=True, text=True, check=True, timeout=300)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [[], []]


def test_each_set_up_changes_what_it_says(monkeypatch):
    for name in ("DS_ACCELERATOR", "VLLM_ENABLE_V1_MULTIPROCESSING", "VLLM_LOGGING_LEVEL", "GLOO_SOCKET_IFNAME",
                 "NCCL_SOCKET_IFNAME"):
        monkeypatch.delenv(name, raising=False)
    with warnings.catch_warnings():
        process.learner_process(cuda=False)
        assert any("all_gather_into_tensor" in str(f[1]) for f in warnings.filters)
    process.vllm_engine_process()
    process.quiet_local_workers()
    process.use_loopback("lo")
    assert (os.environ["DS_ACCELERATOR"], os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"],
            os.environ["VLLM_LOGGING_LEVEL"], os.environ["GLOO_SOCKET_IFNAME"], os.environ["NCCL_SOCKET_IFNAME"]) \
        == ("cpu", "0", "WARNING", "lo", "lo")
