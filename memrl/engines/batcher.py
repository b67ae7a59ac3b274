"""Continuous batching: one engine serving the generate calls of many env runners at once.

Without it an engine actor takes one call at a time: a runner's batch waits for the batch of the runner before it,
and each batch for its longest reply. With it (env_runners(continuous_batching=True), the default for engines on
GPUs) the actor takes calls concurrently and `ContinuousBatcher` hands every call's prompts to the engine as soon
as they arrive (`InferenceEngine.submit`), while one thread steps the engine (`step`) as long as any request is
unfinished: a call returns as soon as its own requests are done, and requests arriving meanwhile join the running
batch (vLLM schedules them token by token; the torch engine generates what is queued at each step as one batch).

Which requests share a step then depends on timing, so runs are not repeatable; the one-call-at-a-time mode stays
the default on CPU and in tests.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future

from memrl import process
from memrl.engines.base import GenerationOutput, InferenceEngine, SamplingConfig


class _Call:
    def __init__(self, num_requests: int):
        self.future: Future = Future()
        self.outputs: list[GenerationOutput | None] = [None] * num_requests
        self.left = num_requests


class ContinuousBatcher:
    """Serves `generate` from many threads on one engine. `lock` is held while the engine steps; whatever else
    touches the engine (a weight load, a score) takes it too, so it never runs between a step's parts."""

    def __init__(self, engine: InferenceEngine):
        self.engine = engine
        self.lock = threading.Lock()
        self.max_requests = 0
        """The most requests one step advanced (how many callers' requests were in flight together)."""
        self._wake = threading.Condition()
        self._paused = False
        self._queued: list[tuple[list[list[int]], SamplingConfig, _Call]] = []
        self._owners: dict[str, tuple[_Call, int]] = {}
        self._thread = threading.Thread(target=self._serve, name="continuous-batcher", daemon=True)
        self._thread.start()

    def generate(self, prompts: list[list[int]], sampling: SamplingConfig) -> list[GenerationOutput]:
        """One response per prompt, returned once all of them are done (other calls' requests share the steps)."""
        if not prompts:
            return []
        call = _Call(len(prompts))
        with self._wake:
            self._queued.append((prompts, sampling, call))
            self._wake.notify()
        return call.future.result()

    def pause(self) -> None:
        """Hold every step until `resume`; calls made meanwhile queue and join the first step after it. Refused
        while requests are in flight: an engine that frees its memory (vLLM's sleep) would lose them."""
        with self.lock, self._wake:
            if self._owners:
                raise RuntimeError(f"cannot pause the engine with {len(self._owners)} requests in flight; pause it "
                                   "between sampling rounds")
            self._paused = True

    def resume(self) -> None:
        with self._wake:
            self._paused = False
            self._wake.notify()

    def queued_requests(self) -> int:
        """Requests waiting for their first step."""
        with self._wake:
            return sum(len(prompts) for prompts, _, _ in self._queued)

    def _serve(self) -> None:
        process.torch_threads_as_set()
        while True:
            with self._wake:
                while self._paused or (not self._queued and not self._owners):
                    self._wake.wait()
            with self.lock:
                with self._wake:  # everything queued by now, also while a weight load held the lock
                    queued, self._queued = self._queued, []
                start = time.perf_counter()
                for prompts, sampling, call in queued:
                    try:
                        ids = self.engine.submit(prompts, sampling)
                    except Exception as exc:  # a bad prompt fails its own call only
                        call.future.set_exception(exc)
                        continue
                    for index, request_id in enumerate(ids):
                        self._owners[request_id] = (call, index)
                self.max_requests = max(self.max_requests, len(self._owners))
                try:
                    if not self._owners:  # every call queued was refused
                        finished = []
                    elif not self.engine.has_unfinished():  # requests it dropped would be waited on forever
                        raise RuntimeError(f"the engine holds none of the {len(self._owners)} requests in flight")
                    else:
                        finished = self.engine.step()
                except Exception as exc:  # the engine failed: every call in flight fails with it
                    self._fail_all(exc)
                    continue
                finally:
                    self.engine.generate_seconds += time.perf_counter() - start
                for request_id, output in finished:  # under the lock: `pause` sees no finished request
                    owner = self._owners.pop(request_id, None)
                    if owner is None:  # a request of a call that failed with an earlier step
                        continue
                    call, index = owner
                    call.outputs[index] = output
                    call.left -= 1
                    if call.left == 0:
                        call.future.set_result(call.outputs)

    def _fail_all(self, exc: Exception) -> None:
        calls = {id(call): call for call, _ in self._owners.values()}
        self._owners.clear()
        for call in calls.values():
            if not call.future.done():
                call.future.set_exception(exc)
