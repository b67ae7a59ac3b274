"""A data-parallel group of DeepSpeed learners as Ray actors: splits rows over ranks and merges their results."""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import ray
from ray.exceptions import RayActorError, RayTaskError
from ray.util.placement_group import PlacementGroup, placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from memrl import checkpoints, rendezvous
from memrl.cluster import get
from memrl.learner.batching import Row, check_rows, row_length
from memrl.learner.learner import Learner, check_train_rows, cpu_comm_op_dir
from memrl.config import FaultToleranceConfig
from memrl.learner.learner_config import LearnerConfig
from memrl.learner.losses import LossConfig
from memrl.weight_sync import TensorMeta

SAME_ON_ALL_RANKS = ("grad_norm", "lr")
"""train_step metrics every rank reports identically; the group takes rank 0's."""
SLOWEST = ("step_s",)
"""train_step metrics the group takes from its slowest rank (the step ends with it). All others are summed."""


def split_rows(lengths: Sequence[int], num_ranks: int) -> list[list[int]]:
    """Assign row indices to ranks so their token totals are balanced; deterministic.

    Longest rows first, each to the rank with the fewest tokens so far (lowest rank on ties);
    each rank's indices come back in ascending order.
    """
    if num_ranks < 1:
        raise ValueError(f"num_ranks must be >= 1, got {num_ranks}")
    parts: list[list[int]] = [[] for _ in range(num_ranks)]
    totals = [0] * num_ranks
    for i in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        r = min(range(num_ranks), key=lambda r: (totals[r], r))
        parts[r].append(i)
        totals[r] += lengths[i]
    return [sorted(p) for p in parts]


def _cpu_comm_op_built() -> bool:
    """Whether DeepSpeed's CPU communication op is already compiled; the first CPU learner on a machine builds it,
    silently, for about a minute."""
    return (cpu_comm_op_dir() / "deepspeed_shm_comm.so").is_file()


def _raised(ref) -> bool:
    """Whether the Ray call `ref` is done and raised an error."""
    if not ray.wait([ref], timeout=0)[0]:
        return False
    try:
        ray.get(ref, timeout=0)
    except RayTaskError:
        return True
    except RayActorError:  # died rather than raised
        pass
    return False


class LearnerFailed(RuntimeError):
    """A learner died or did not answer within its deadline: the group's collectives cannot go on without it."""


def step_counts(rows: Sequence[Row]) -> tuple[float, float]:
    """(loss tokens, sequences) of a step: the denominators of its token and sequence means. A row without any loss
    token is no sequence of the mean ("mean over sequences of the per-sequence token mean" has nothing of it to
    average), so it is left out of the count rather than diluting every other row's share."""
    per_row = [int(np.count_nonzero(np.asarray(r["loss_mask"]))) for r in rows]
    return float(sum(per_row)), float(sum(1 for n in per_row if n > 0))


class LearnerGroup:
    """N Learner actors forming one DeepSpeed data-parallel world, or with num_learners=0 one learner in this process
    (memrl.learner.local), called the same way."""

    def __init__(self, config: LearnerConfig, *, faults: FaultToleranceConfig | None = None,
                 placement: tuple[PlacementGroup, list[int]] | None = None):
        """config.learners sizes and places the group (num_learners, CPUs, GPUs and custom resources each);
        `faults` gives the deadlines: learner_timeout_s bounds every call on the learners (a step, a logprob pass, a
        save), actor_start_timeout_s their placement and start (None: FaultToleranceConfig's defaults). `placement`
        (a placement group and one bundle index per rank, e.g. a Tune trial's) puts the learners there; without it
        the group reserves a placement group of its own."""
        learn, faults = config.learners, faults or FaultToleranceConfig()
        num_learners, num_gpus_per_learner = learn.num_learners, learn.num_gpus_per_learner
        num_cpus_per_learner, start_timeout_s = learn.num_cpus_per_learner, faults.actor_start_timeout_s
        if not Path(learn.model_path or "").is_dir():
            raise ValueError(f"learners.model_path {learn.model_path!r} is not a local checkpoint directory")
        self.config = config
        self.local = num_learners == 0
        self.num_learners = max(num_learners, 1)  # the ranks rows are split over
        self.call_timeout_s = faults.learner_timeout_s
        self.start_timeout_s = start_timeout_s
        self.learners: list = []
        self._pg = None
        if not num_gpus_per_learner and not _cpu_comm_op_built():
            print("Building DeepSpeed's CPU communication op (first run on this machine only, about a minute)...",
                  file=sys.stderr, flush=True)
        if self.local:
            self._start_here(config)
            return
        # Ray sets each actor's OMP_NUM_THREADS to its CPUs, so torch trains on that many threads.
        bundle = {"CPU": num_cpus_per_learner, **({"GPU": num_gpus_per_learner} if num_gpus_per_learner else {}),
                  **learn.resources_per_learner}
        if placement is not None and len(placement[1]) != num_learners:
            raise ValueError(f"placement names {len(placement[1])} bundles for {num_learners} learners")
        self._owns_pg = placement is None
        self._pg = placement[0] if placement else placement_group([dict(bundle) for _ in range(num_learners)],
                                                                   strategy="PACK")
        indices = placement[1] if placement else list(range(num_learners))
        try:
            get(self._pg.ready(), start_timeout_s, f"placing {num_learners} learners ({bundle} each; the cluster has "
                f"{ray.cluster_resources()})",
                "fault_tolerance.actor_start_timeout_s")
        except TimeoutError:
            self.shutdown()
            raise
        actor_cls = ray.remote(Learner)
        self.learners = [
            actor_cls.options(
                num_cpus=num_cpus_per_learner,
                num_gpus=num_gpus_per_learner,
                scheduling_strategy=PlacementGroupSchedulingStrategy(self._pg,
                                                                     placement_group_bundle_index=indices[rank]),
            ).remote(config, rank, num_learners)
            for rank in range(num_learners)
        ]
        what = "fault_tolerance.actor_start_timeout_s"
        ips = get([a.node_ip.remote() for a in self.learners], start_timeout_s, f"starting {num_learners} learners",
                  what)
        host = rendezvous.group_host(ips[0], ips)
        port = get(self.learners[0].listen.remote(host), start_timeout_s, "learner rank 0's rendezvous socket", what)
        get([a.start.remote(host, port) for a in self.learners], start_timeout_s,
            f"{num_learners} learners joining their DeepSpeed group at {host}:{port} and loading the model", what)

    def _start_here(self, config: LearnerConfig) -> None:
        """The one learner of num_learners=0, in this process, on loopback."""
        from memrl.learner.local import LocalLearner

        self.learners = [LocalLearner(config)]
        what = "fault_tolerance.actor_start_timeout_s"
        port = self.wait(self.learners[0].listen.remote(rendezvous.LOOPBACK), "listen", self.start_timeout_s, what)
        self.wait(self.learners[0].start.remote(rendezvous.LOOPBACK, port), "start (loading the model)",
                  self.start_timeout_s, what)

    def node_ip(self) -> str:
        """Learner rank 0's node address: the weight-sync group's master runs there."""
        return self.wait(self.learners[0].node_ip.remote(), "node_ip")

    def listen_weight_sync(self, host: str) -> int:
        """Rank 0 binds a socket on host for the weight-sync group and holds it until init_weight_sync; its port."""
        return self.wait(self.learners[0].listen.remote(host), "listen")

    def _call(self, method: str, *args: Any, per_rank_args: list[tuple] | None = None, wait: bool = True):
        """Run a method on every learner at once (collectives need all ranks); results in rank order."""
        refs = [
            getattr(actor, method).remote(*(per_rank_args[rank] if per_rank_args else args))
            for rank, actor in enumerate(self.learners)
        ]
        return self.wait(refs, method) if wait else refs

    def wait(self, refs, step: str, timeout_s: float | None = None,
             setting: str = "fault_tolerance.learner_timeout_s"):
        """The learners' results of `refs` (one ref or a list, a call named `step`) within `timeout_s` (default: the
        call deadline, set by `setting`). A learner that dies or stalls raises LearnerFailed at once (its peers would
        wait in a collective); an error a learner raised comes through as raised."""
        timeout_s = self.call_timeout_s if timeout_s is None else timeout_s
        if self.local:
            return self._wait_here(refs, step, timeout_s, setting)
        ranks = {ref: rank for rank, ref in enumerate(refs if isinstance(refs, list) else [refs])}
        pending, deadline = list(ranks), time.monotonic() + timeout_s
        while pending:
            done, pending = ray.wait(pending, num_returns=1, timeout=max(0.0, deadline - time.monotonic()))
            if not done:
                late = ", ".join(str(ranks[ref]) for ref in pending)  # a rank stuck in a collective looks late too
                raise LearnerFailed(f"learners {late} did not finish {step} within {timeout_s:g} s (one stalled?); "
                                    f"if it needs longer, raise {setting}")
            try:
                ray.get(done[0], timeout=timeout_s)  # done already: raises its error, if any, at once
            except RayTaskError:
                raise  # the learner is alive and raised: not a failure of the actor
            except RayActorError as exc:
                raise LearnerFailed(f"learner {ranks[done[0]]} died during {step} ({type(exc).__name__})") from None
        return ray.get(refs, timeout=timeout_s)  # every one is done

    @staticmethod
    def _wait_here(refs, step: str, timeout_s: float, setting: str):
        """`wait` for the learner in this process: its error comes through as raised; past the deadline (a stalled
        learner) LearnerFailed."""
        from memrl.learner.local import LocalCall

        calls = refs if isinstance(refs, list) else [refs]
        deadline = time.monotonic() + timeout_s
        results = []
        for call in calls:
            if not isinstance(call, LocalCall):
                raise TypeError(f"a learner group in this process waits on its own calls, not {type(call).__name__}")
            try:
                results.append(call.result(max(0.0, deadline - time.monotonic())))
            except TimeoutError:
                raise LearnerFailed(f"the learner did not finish {step} within {timeout_s:g} s (stalled?); if it "
                                    f"needs longer, raise {setting}") from None
        return results if isinstance(refs, list) else results[0]

    def compute_logprobs(
        self, rows: Sequence[Row], reference: bool = False
    ) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """Per-row response-token logprobs and entropies, in the order of `rows` (reference=True: frozen model)."""
        pairs = self._per_row("compute_logprobs", rows, reference, merge=lambda lp, ent: list(zip(lp, ent)))
        return [lp for lp, _ in pairs], [ent for _, ent in pairs]

    def compute_values(self, rows: Sequence[Row]) -> list[np.ndarray]:
        """Per-row critic values before each response token, in the order of `rows` (a head='value' group)."""
        return self._per_row("compute_values", rows)

    def _per_row(self, method: str, rows: Sequence[Row], *args: Any, merge=None) -> list:
        """Split rows over the ranks, run `method(part, *args)` on each, and put the per-row results back in order."""
        # Bad rows are refused here: a rank that failed mid-call would leave the others waiting in a collective.
        check_rows(rows)
        parts = split_rows([row_length(r) for r in rows], self.num_learners)
        results = self._call(method, per_rank_args=[([rows[i] for i in part], *args) for part in parts])
        out: list = [None] * len(rows)
        for part, result in zip(parts, results):
            for i, value in zip(part, merge(*result) if merge else result, strict=True):
                out[i] = value
        return out

    def train_step(
        self, rows: Sequence[Row], loss_config: LossConfig, max_tokens: int | None = None
    ) -> dict[str, float]:
        """One optimizer step on all `rows`, split over the ranks; returns merged metrics.

        Loss metrics, tokens, rows and passes are summed over ranks (losses are shares of the global mean,
        so their sum is the step's value); grad_norm and lr are the same on every rank; step_s, the learners'
        seconds in the step, is the slowest rank's.
        """
        if not rows:
            raise ValueError("train_step needs at least one row")
        check_train_rows(rows, self.config.head, loss_config)
        num_tokens, num_seqs = step_counts(rows)
        if num_tokens == 0:
            raise ValueError(f"train_step got {len(rows)} rows but none has a loss token (every loss_mask is 0)")
        parts = split_rows([row_length(r) for r in rows], self.num_learners)
        results = self._call(
            "train_step",
            per_rank_args=[([rows[i] for i in part], loss_config, num_tokens, num_seqs, max_tokens) for part in parts],
        )
        merged: dict[str, float] = {}
        for result in results:
            for key, value in result.items():
                if key not in SAME_ON_ALL_RANKS + SLOWEST:
                    merged[key] = merged.get(key, 0.0) + value
        for key in SAME_ON_ALL_RANKS:
            merged[key] = results[0][key]
        for key in SLOWEST:
            merged[key] = max(result[key] for result in results)
        return merged

    def weight_metas(self) -> list[TensorMeta]:
        """(HF name, shape, dtype) of every parameter, in broadcast order (what engines allocate to receive)."""
        return self.wait(self.learners[0].weight_metas.remote(), "weight_metas")

    def gather_state_dict(self) -> dict:
        """Full parameters with HF names (CPU tensors), gathered by all ranks and returned from rank 0."""
        return self._call("gather_state_dict_for_sync")[0]

    def init_weight_sync(self, host: str, port: int, world_size: int, backend: str, wait: bool = True):
        """Learner rank 0 joins the weight-sync group as rank 0, serving it on the socket of listen_weight_sync when
        that was called, else on one it binds to host:port.

        Joining blocks until every engine has joined too: pass wait=False to get Ray refs, start the engines'
        joins, then ray.get the refs.
        """
        return self._call("init_weight_sync", host, port, world_size, backend, wait=wait)

    def broadcast_weights(self, version: int, bucket_bytes: int = 64 << 20, wait: bool = True, keep: bool = False):
        """Broadcast all weights from rank 0; returns rank 0's {"version", "bytes", "seconds"}. With `keep`, rank 0
        keeps a host copy of them for `resend_kept_weights`.

        The engines must receive at the same time: pass wait=False to get Ray refs (rank order), start the
        engines' receives, then ray.get the refs.
        """
        refs = self._call("broadcast_weights", version, bucket_bytes, keep, wait=False)
        return self.wait(refs, "broadcast_weights")[0] if wait else refs

    def resend_kept_weights(self, wait: bool = True):
        """Send the weights of the last broadcast made with keep=True again (rank 0's copy; the engines receive at
        the same time, as for broadcast_weights)."""
        refs = [self.learners[0].resend_kept_weights.remote()]
        return self.wait(refs, "resend_kept_weights")[0] if wait else refs

    def save_checkpoint(self, path: str) -> None:
        """DeepSpeed checkpoint (weights, optimizer, step) of every rank under `path` (a directory all ranks see).

        A rank that cannot write its part (a full disk, say) raises while its peers wait for it in the save's
        barrier, where they would stay until the process group's timeout. So the group is stopped at once and a
        CheckpointError names the path, the rank's error and the room left; the learners' state is lost with them
        (the Trainer starts them anew from the newest periodic checkpoint)."""
        refs = self._call("save_checkpoint", path, wait=False)
        try:
            self.wait(refs, "save_checkpoint")
        except (LearnerFailed, TimeoutError):
            raise
        except Exception as error:  # the learner is alive and raised
            if not self.local and not isinstance(error, RayTaskError):
                raise
            ranks = "0" if self.local else ", ".join(str(rank) for rank, ref in enumerate(refs) if _raised(ref))
            cause = error.cause if isinstance(error, RayTaskError) and error.cause is not None else error
            self.shutdown()
            folder, free = checkpoints.free_bytes(path)
            waiting = "" if self.local else ": its other ranks were left waiting for it in the save's barrier"
            raise checkpoints.CheckpointError(
                f"learner {ranks} could not write its part of the checkpoint at {path} ({type(cause).__name__}: "
                f"{cause}); {folder} has {free:,} bytes free. The learner group is stopped{waiting}") from None

    def load_checkpoint(self, path: str) -> None:
        """Restore a save_checkpoint directory written by a group with the same number of learners."""
        self._call("load_checkpoint", path)

    def save_hf(self, path: str) -> None:
        """Write a plain Hugging Face checkpoint (tokenizer files copied from model_path) to `path`."""
        self._call("save_hf", path)

    def shutdown(self) -> None:
        """Stop the learner actors (or close the learner in this process) and free their placement group (not one
        it was given); safe to call twice."""
        for actor in self.learners:
            if self.local:
                actor.close()
            else:
                ray.kill(actor)
        self.learners = []
        if self._pg is not None and self._owns_pg:
            remove_placement_group(self._pg)
        self._pg = None
