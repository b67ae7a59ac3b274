"""Per-process set-up: importing memrl changes no environment variable and no warning filter; the set-ups do."""

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

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


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the loaded OpenMP library from /proc")
def test_a_thread_that_runs_torch_computes_on_the_threads_set_for_the_process():
    import ctypes
    import threading

    import torch

    # The count of torch's own OpenMP library, per thread (torch.get_num_threads reports the process's, whatever a
    # thread uses; DeepSpeed's CPU op may have loaded the system's OpenMP beside it).
    torch_lib = str(Path(torch.__file__).parent / "lib")
    found = [line.split()[-1] for line in open("/proc/self/maps") if torch_lib in line and "omp" in line]
    if not found:
        pytest.skip("this torch build has no OpenMP library of its own")
    library = found[0]
    max_threads = ctypes.CDLL(library).omp_get_max_threads
    set_here = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        counts = []

        def run(set_up: bool) -> None:
            if set_up:
                process.torch_threads_as_set()
            counts.append(max_threads())

        for set_up in (False, True):
            thread = threading.Thread(target=run, args=(set_up,))
            thread.start()
            thread.join()
        assert counts[1] == 1
        if "OMP_NUM_THREADS" not in os.environ:  # without the set-up: OpenMP's default, every core
            assert counts[0] == len(os.sched_getaffinity(0))
    finally:
        torch.set_num_threads(set_here)
