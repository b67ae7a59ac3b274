"""Ray for memrl: start a local instance that fits the actors, or check that a running cluster does, in seconds;
and the deadlines and failure budgets every remote wait keeps (FaultToleranceConfig, get, FailureBudget).

Every memrl actor that does real work reserves one CPU (learners, engines) and its GPUs; env runners reserve
none, as they mostly wait on an engine. On a small CPU machine those actors spend most of their time waiting on
each other, so a local Ray gets at least as many logical CPUs as the actors reserve, more than the cores.
"""

from __future__ import annotations

import logging
import os
import time
from collections import deque
from dataclasses import dataclass

import ray
from ray.exceptions import GetTimeoutError

from memrl import process
from memrl.console import verbose

MIN_LOCAL_CPUS = 8
"""Logical CPUs of a local Ray instance at the least (room for evaluation engines and retrieval actors beside the
training actors)."""


def ensure_ray(num_cpus: int = 0) -> None:
    """Start Ray unless this process already joined it: the cluster at RAY_ADDRESS if that is set, else a local
    instance on loopback (`start_local_ray`) with enough logical CPUs for `num_cpus` reserved by actors (and never
    fewer than the cores).

    Unless `verbose()`, actors' output stays in Ray's log files (/tmp/ray/session_latest/logs) and vLLM logs at
    WARNING (on a local Ray, unless VLLM_LOGGING_LEVEL is set); errors still reach the caller as exceptions."""
    if ray.is_initialized():
        return
    loud = verbose()
    quiet = {} if loud else {"log_to_driver": False, "logging_level": logging.WARNING}
    if not loud:  # Ray's notice that token authentication is on (its default) on every start
        logging.getLogger("ray._private.authentication.authentication_token_setup").setLevel(logging.ERROR)
    if os.environ.get("RAY_ADDRESS"):  # a running cluster's workers do not see this process's environment
        env = {} if loud else {"runtime_env": {"env_vars": {"VLLM_LOGGING_LEVEL": "WARNING"}}}
        ray.init(include_dashboard=False, **quiet, **env)
        return
    if not loud:
        process.quiet_local_workers()
    start_local_ray(num_cpus=int(planned_resources(num_cpus)["CPU"]), include_dashboard=False, **quiet)


def start_local_ray(**init_options) -> None:
    """`ray.init(**init_options)` for a new Ray instance of this machine alone, its servers on loopback.

    A new one even while a cluster started by `ray start` runs on the machine: `ray.init()` without an address
    would join that cluster instead (the one /tmp/ray/ray_current_cluster names), and refuse the CPUs asked for.
    Ray gives a node started on Linux the machine's network address, and its GCS, raylet, workers and agents then
    listen on every interface; a local instance never needs that. Ray's local-only mode (its default on macOS and
    Windows) gives the node 127.0.0.1 instead, so every one of them listens on loopback only. A cluster joined
    through RAY_ADDRESS or `ray start` keeps what its own start-up chose."""
    from ray._private import ray_constants

    ray_constants.ENABLE_RAY_CLUSTER = False  # read when the node's address is chosen, in this process only
    ray.init(**{"address": "local", **init_options})


@dataclass
class FaultToleranceConfig:
    """Deadlines of every remote wait, and how many failures a run survives."""

    episode_retries: int = 2
    """Times a failed episode (its env or workflow raised, e.g. a retrieval server that is down) is run again on a
    fresh env instance before its sampling round fails; its siblings carry on meanwhile. Counted in
    counters.episodes_retried."""
    failed_iterations_to_stop: int = 1
    """Iterations in a row in which every episode failed (an env's service is down: its retriever, its answerer)
    that stop the run, with AllEpisodesFailed naming the first failure: a run that cannot sample trains nothing, and
    should say so rather than go on. Raise it to ride out a service that comes back."""
    max_actor_failures: int = 3
    """Failures tolerated within failure_window_s, for env runners and for engines each: a runner that dies or stalls
    is replaced by a new actor and its tasks resubmitted; an engine that dies or stalls is replaced, rejoined to the
    weight sync with the current weights, and its round run again. One failure more stops the run, naming the
    actor."""
    failure_window_s: float = 3600.0
    """The window max_actor_failures counts in: older failures are forgiven, so a long run is not ended by rare
    ones."""
    actor_start_timeout_s: float = 900.0
    """Deadline for actors to start: learners (their placement group included), engines, env runners."""
    engine_call_timeout_s: float = 600.0
    """Deadline of one engine call (a batch of generations); past it the engine counts as stalled and the round
    fails, naming it."""
    sample_timeout_s: float = 3600.0
    """Deadline of one env runner's share of a sampling round (training or held-out)."""
    learner_timeout_s: float = 3600.0
    """Deadline of one learner call: a train step, a logprob pass, a checkpoint save or load."""
    weight_sync_timeout_s: float = 600.0
    """Deadline of the weight-sync group's set-up and of each broadcast of the weights to the engines."""
    checkpoint_frequency: int = 0
    """Every this many iterations train() saves a checkpoint to checkpoint_dir (0: never). With one saved, a learner
    that dies or stalls is recovered: the learner groups start anew from the newest checkpoint and the iterations
    since are run again, with the figures they had. Without one, such a failure stops the run, naming the learner."""
    checkpoint_dir: str | None = None
    """Where the periodic checkpoints go (iteration_000010, ...): one directory per run, needed with
    checkpoint_frequency."""
    keep_checkpoints: int = 2
    """Periodic checkpoints kept; older ones are removed once a newer one is complete."""
    checkpoint_checksums: bool = True
    """Record every checkpoint file's sha256 in its manifest and check it before loading (sizes are always checked).
    Hashing reads the checkpoint once more at save and at restore, about 1 s per GB."""


def get(refs, timeout_s: float, what: str, setting: str):
    """`ray.get(refs)` with a deadline. Past it: a TimeoutError naming what was waited for (the actor and the step)
    and the setting that sets the deadline. An actor's own error comes through as raised."""
    try:
        return ray.get(refs, timeout=timeout_s)
    except GetTimeoutError:
        raise TimeoutError(f"{what} did not finish within {timeout_s:g} s; if it needs longer, raise {setting}") \
            from None


class FailureBudget:
    """How many failures of one kind of actor a run takes within a sliding window: rare failures in a long run are
    forgiven, a burst ends it."""

    def __init__(self, max_failures: int, window_s: float, kind: str):
        self.max_failures, self.window_s, self.kind = max_failures, window_s, kind
        self._times: deque[float] = deque()

    def spend(self, what: str) -> None:
        """Count one failure (`what` says which); raise RuntimeError when the window holds more than allowed."""
        now = time.monotonic()
        self._times.append(now)
        while self._times and self._times[0] < now - self.window_s:
            self._times.popleft()
        if len(self._times) > self.max_failures:
            raise RuntimeError(f"{what}: {len(self._times)} {self.kind} failures within {self.window_s:g} s, more "
                               f"than fault_tolerance.max_actor_failures={self.max_failures}; giving up")


def planned_resources(num_cpus: int = 0) -> dict[str, float] | None:
    """The totals of the local Ray instance `ensure_ray(num_cpus)` would start, or None when it would start none
    (Ray runs in this process already, or RAY_ADDRESS names a cluster). Lets a shortfall fail before Ray starts."""
    if ray.is_initialized() or os.environ.get("RAY_ADDRESS"):
        return None
    import torch

    return {"CPU": float(max(MIN_LOCAL_CPUS, num_cpus, os.cpu_count() or 1)), "GPU": float(torch.cuda.device_count())}


def trial_placement_group(config):
    """The Ray Tune trial placement group this process runs in, when it holds the bundles `config.trial_bundles()`
    asks for (Algorithm.default_resource_request): the algorithm then puts its learners and engines in it. None
    otherwise (no trial, or a group made for something else): they reserve their own."""
    from ray.util import get_current_placement_group

    group = get_current_placement_group()
    if group is None:
        return None
    want, have = config.trial_bundles()[0], group.bundle_specs

    def same(w: dict, h: dict) -> bool:
        return set(w) == {k for k, v in h.items() if v} and all(abs(w[k] - h[k]) < 1e-9 for k in w)

    return group if len(want) == len(have) and all(map(same, want, have)) else None


def check_resources(needs: dict[str, float], owner: str, parts: list[str], settings: list[str],
                    total: dict[str, float] | None = None) -> None:
    """Raise at once when the Ray cluster's totals (or `total`, e.g. planned_resources()) cannot hold `needs`
    ({"CPU": n, "GPU": m}).

    The message names `owner` (e.g. "DAPOConfig"), how the needs add up (`parts`, e.g. "2 learners x 1 CPU") and
    the `settings` that lower them. Waiting instead would hang until some later deadline: Ray queues an actor it
    cannot place without complaint."""
    where = "the Ray cluster has" if total is None else "a local Ray on this machine would have"
    total = ray.cluster_resources() if total is None else total
    short = {k: v for k, v in needs.items() if v > total.get(k, 0.0) + 1e-9}
    if not short:
        return
    have = ", ".join(f"{total.get(k, 0.0):g} {k}" for k in needs)
    want = ", ".join(f"{v:g} {k}" for k, v in needs.items())
    custom = sorted(k for k in short if k not in ("CPU", "GPU"))
    nodes = (f" Custom resources ({', '.join(custom)}) come from the nodes that offer them: "
             "`ray start --resources='{\"NAME\": AMOUNT}'` on each, or ray.init(resources=...).") if custom else ""
    raise RuntimeError(
        f"{owner} needs {want} for its actors ({' + '.join(parts)}), but {where} {have}. "
        f"Lower {', '.join(settings)}, or start Ray with more (e.g. ray.init(num_cpus=...), or let memrl start it: "
        f"call build() before ray.init()).{nodes} On an autoscaling cluster whose nodes come only when asked for, "
        "set debugging(check_resources=False).")
