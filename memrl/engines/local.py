"""An inference engine in the caller's own process, reached as an engine actor is (`env_runners(num_engines=0)`).

`engine.method.remote(*args)` runs the engine's method at once in the calling thread, one call at a time (as an engine
actor without continuous batching takes them), and returns a Ray reference to its result; an error is raised at the
call. The algorithm, its runners in the same process and the weight sync therefore call it exactly as they call an
actor, and a CPU run has no engine process to start and feed: a debugger stops inside the engine too.

The caller must start what the engine waits on before it calls: the weight sync starts learner rank 0's broadcast
(not waited on) before the engine's receive, which then runs here until the last bucket arrives.
"""

from __future__ import annotations

import threading
from typing import Any, Callable


class _Call:
    """`remote(*args)`: run the method here and now, under the engine's lock; a reference to what it returned."""

    def __init__(self, method: Callable, lock: threading.Lock):
        self._method = method
        self._lock = lock

    def remote(self, *args, **kwargs):
        import ray

        with self._lock:
            return ray.put(self._method(*args, **kwargs))


class LocalEngine:
    """The engine named `engine` (memrl.engines.ENGINES) on `model_path`, in this process, behind an actor's calls.

    Its methods are those of memrl.engines.actor.EngineActor (the shell an engine actor runs), plus Ray's
    `__ray_ready__` and `__ray_call__(fn)` (fn gets the shell). `close()` frees it, where an actor would be killed."""

    def __init__(self, engine: str, model_path: str, seed: int = 0, **engine_config):
        from memrl.engines.actor import EngineActor

        self._shell = EngineActor(engine, model_path, seed=seed, **engine_config)
        self._lock = threading.Lock()
        self.__ray_ready__ = _Call(lambda: True, self._lock)
        self.__ray_call__ = _Call(lambda fn, *args, **kwargs: fn(self._shell, *args, **kwargs), self._lock)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return _Call(getattr(self._shell, name), self._lock)

    def close(self) -> None:
        """Drop the engine and its weights; a call after this fails."""
        self.__dict__.pop("_shell", None)
