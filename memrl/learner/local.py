"""A learner in the caller's own process (`learners(num_learners=0)`), reached as a learner actor is.

One learner of world size 1 runs on a thread of its own in this process: `learner.method.remote(*args)` hands the
call to that thread and returns a `LocalCall` at once, so the learner group waits on it as on an actor's reference
(with its deadline) and the algorithm can start an engine's receive while rank 0 broadcasts. A CPU run then has no
learner process to start (the imports of torch, transformers and DeepSpeed and the model load happen once, here),
and a debugger stops inside the learner too.

The learner's process set-up (memrl.process.learner_process) then applies to this process; DeepSpeed's world of one
rank is made once per process and shared by every learner here (a policy and a critic, one after another's
recovery), its rendezvous variables are put back as they were once it is formed (LOCAL_RANK=0 stays: ZeRO-3 reads it
at every step), and the learner's seed does not reach this process's random generator.
"""

from __future__ import annotations

import concurrent.futures
from typing import Any, Callable


class LocalCall:
    """The pending result of one call on the learner's thread (what `ray.get` gives for an actor's reference)."""

    def __init__(self, future: concurrent.futures.Future, method: str):
        self.future = future
        self.method = method

    def result(self, timeout_s: float) -> Any:
        """The call's return value, or the error it raised; TimeoutError when it is not done within `timeout_s`."""
        try:
            return self.future.result(timeout=timeout_s)
        except concurrent.futures.TimeoutError:
            raise TimeoutError(f"the learner's {self.method} did not finish within {timeout_s:g} s") from None


class _Method:
    def __init__(self, pool: concurrent.futures.ThreadPoolExecutor, method: Callable, name: str):
        self._pool, self._method, self._name = pool, method, name

    def remote(self, *args, **kwargs) -> LocalCall:
        return LocalCall(self._pool.submit(self._method, *args, **kwargs), self._name)


class LocalLearner:
    """memrl.learner.learner.Learner (rank 0 of 1) in this process, behind an actor's calls. `close()` frees it, where
    an actor would be killed; calls run one at a time, in the order they were made."""

    def __init__(self, config):
        from memrl.learner.learner import Learner

        from memrl.process import torch_threads_as_set

        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="memrl-learner",
                                                           initializer=torch_threads_as_set)
        self._learner = self._pool.submit(Learner, config, 0, 1, own_process=False).result()

    def __getattr__(self, name: str) -> _Method:
        if name.startswith("_"):
            raise AttributeError(name)
        return _Method(self._pool, getattr(self._learner, name), name)

    def close(self) -> None:
        """Drop the learner and its DeepSpeed engines once the calls already made are done; a call after this fails."""
        self._pool.submit(self.__dict__.pop, "_learner", None)
        self._pool.shutdown(wait=False)
