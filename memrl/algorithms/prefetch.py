"""The sampling pipeline's pieces: a sampled batch (kept in checkpoints as Arrow), the thread that samples batches
ahead while the learner trains (asynchronous training), what an iteration samples ahead, and its phase clock.

With training.max_staleness = k >= 1 an Algorithm trains iteration i on the batch sampled for it k iterations
before, and meanwhile starts `Prefetch` for the batch of iteration i + k under the weights of iteration i; that batch
is collected before the new weights are broadcast, so each batch comes from exactly one weight version, which keeps
runs reproducible and resumable (with partial_rollouts the broadcast goes first and episodes in flight carry on
under the new weights, which is not reproducible).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from memrl import process
from memrl.episode import Trajectory, from_arrow

logger = logging.getLogger(__name__)

PREFETCHED_DIR = "prefetched"
"""A checkpoint's batches sampled ahead, one subdirectory each (iteration_NNNNNN)."""
BATCH_FILE = "batch.arrow"
"""Every trajectory sampled for the batch's iteration, in Arrow IPC."""
BATCH_STATE_FILE = "batch.json"
"""The batch's iteration, kept trajectory ids, runner stats and sampling seconds."""


@dataclass
class SampledBatch:
    """One iteration's sampling: every trajectory (failed and dropped ones too), those kept for training, stats."""

    iteration: int
    """The iteration these trajectories were sampled for (their tasks and seeds follow from it)."""
    table: pa.Table
    """Every trajectory of the iteration's sampling rounds, as the env runners shipped them."""
    trajectories: list[Trajectory]
    """`table` as trajectories, in order."""
    kept: list[Trajectory]
    """The trajectories to train on: finished ones of the groups dynamic sampling kept."""
    stats: dict[str, float] = field(default_factory=dict)
    """Env runner figures summed over the rounds (calls, new tokens, env seconds, ...)."""
    seconds: float = 0.0
    """Wall-clock seconds the sampling took."""

    def save(self, directory: str | Path) -> None:
        """Write the batch into `directory` (created; a checkpoint's caller seals it)."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        with pa.OSFile(str(directory / BATCH_FILE), "wb") as sink, pa.ipc.new_file(sink, self.table.schema) as writer:
            writer.write_table(self.table)
        state = {"iteration": self.iteration, "kept": [t.traj_id for t in self.kept], "stats": self.stats,
                 "seconds": self.seconds}
        (directory / BATCH_STATE_FILE).write_text(json.dumps(state))

    @classmethod
    def load(cls, directory: str | Path) -> SampledBatch | None:
        """The batch `save` wrote into `directory`, or None when it holds none."""
        directory = Path(directory)
        if not (directory / BATCH_STATE_FILE).exists():
            return None
        state = json.loads((directory / BATCH_STATE_FILE).read_text())
        with pa.memory_map(str(directory / BATCH_FILE), "r") as source:
            table = pa.ipc.open_file(source).read_all()
        trajectories = from_arrow(table)
        kept_ids = set(state["kept"])
        kept = [t for t in trajectories if t.traj_id in kept_ids]
        if len(kept) != len(kept_ids):
            raise ValueError(f"{directory / BATCH_FILE} lacks {len(kept_ids) - len(kept)} of the trajectories its "
                             f"{BATCH_STATE_FILE} keeps for training")
        return cls(state["iteration"], table, trajectories, kept, state["stats"], state["seconds"])


def save_batches(batches, checkpoint_dir: str | Path) -> None:
    """Write batches sampled ahead into a checkpoint directory."""
    for batch in batches:
        batch.save(Path(checkpoint_dir) / PREFETCHED_DIR / f"iteration_{batch.iteration:06d}")


def load_batches(checkpoint_dir: str | Path) -> dict[int, SampledBatch]:
    """The batches `save_batches` wrote into a checkpoint directory, by iteration (none in a synchronous run's)."""
    batches = [SampledBatch.load(d) for d in sorted((Path(checkpoint_dir) / PREFETCHED_DIR).glob("iteration_*"))]
    return {batch.iteration: batch for batch in batches if batch is not None}


class Prefetch:
    """`sample()` run in a background thread; `result` waits for it and returns its value or raises its error.

    Ray calls release the GIL, so the driver's learner calls and the sampling calls proceed side by side."""

    def __init__(self, sample: Callable[[], Any], name: str):
        self.name = name
        self._out: dict[str, Any] = {}
        self._thread = threading.Thread(target=self._run, args=(sample,), name=name, daemon=True)
        self._thread.start()

    def _run(self, sample: Callable[[], Any]) -> None:
        try:
            process.torch_threads_as_set()  # an engine in this process samples here
            self._out["value"] = sample()
        except BaseException as exc:  # handed to the caller of result()
            self._out["error"] = exc

    def result(self, timeout_s: float, setting: str) -> Any:
        """The sampled value, waiting at most `timeout_s` (the `setting` that sets it is named in the error)."""
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            raise TimeoutError(f"{self.name} did not finish within {timeout_s:g} s ({setting})")
        if "error" in self._out:
            raise self._out["error"]
        return self._out["value"]

    def discard(self, timeout_s: float) -> None:
        """Wait (at most `timeout_s`) until the sampling ended and drop what it made, error or batch: the iteration it
        was for will be sampled again."""
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            logger.warning("%s is still running after %g s; leaving it behind", self.name, timeout_s)


@dataclass
class SamplingAhead:
    """The batches an asynchronous iteration samples while its learner trains: which iterations they are for, those
    done so far, and the thread sampling them."""

    targets: list[int]
    """The iterations whose batches are sampled, in order."""
    ready: list[SampledBatch] = field(default_factory=list)
    """The batches done so far (a failure later on leaves them sampled and counted once)."""
    prefetch: Prefetch | None = None
    """The sampling thread."""


class PhaseClock:
    """When each phase of an iteration ended (perf_counter marks from "start"), and the spans between them."""

    def __init__(self):
        self.marks = {"start": time.perf_counter()}

    def mark(self, name: str) -> None:
        """The phase `name` ends now."""
        self.marks[name] = time.perf_counter()

    def span(self, start: str, end: str) -> float:
        """Seconds from mark `start` to mark `end`."""
        return self.marks[end] - self.marks[start]
