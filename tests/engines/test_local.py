"""An engine in the test's own process answers an actor's calls: references to its results, the same replies as an
engine actor of the same seed, errors raised at the call, and nothing left once closed."""

import threading

import pytest
import ray

from memrl.engines import start_engine, stop_engine
from memrl.engines.base import SamplingConfig
from memrl.engines.local import LocalEngine

pytestmark = pytest.mark.slow


def test_a_local_engine_is_called_as_an_engine_actor_is(ray_session, tiny_checkpoint):
    local = LocalEngine("torch", str(tiny_checkpoint), seed=5)
    actor = start_engine(str(tiny_checkpoint), "torch", seed=5, num_cpus=0)
    prompts, sampling = [[1, 87, 85, 2], [1, 261, 2]], SamplingConfig(max_tokens=6, temperature=1.0)
    try:
        ref = local.generate_batch.remote(prompts, sampling, 11)
        assert isinstance(ref, ray.ObjectRef)  # what ray.get, ray.wait and await take
        mine = ray.get(ref, timeout=60)
        theirs = ray.get(actor.generate_batch.remote(prompts, sampling, 11), timeout=120)
        assert [o.token_ids for o in mine] == [o.token_ids for o in theirs]
        assert ray.get(local.max_model_len.remote()) == ray.get(actor.max_model_len.remote(), timeout=60)
        ready, _ = ray.wait([local.__ray_ready__.remote()], timeout=5)
        assert ready
        # __ray_call__ runs a function on the engine's shell here, in this thread.
        assert ray.get(local.__ray_call__.remote(lambda shell: threading.get_ident())) == threading.get_ident()
        with pytest.raises(ValueError, match="outside the vocabulary"):
            local.score.remote([1, 10**6], [2])  # raised at the call: there is no process to carry it
        with pytest.raises(AttributeError):
            local.no_such_method  # noqa: B018
    finally:
        stop_engine(actor)
        stop_engine(local)
    with pytest.raises(AttributeError):
        local.max_model_len.remote()  # closed: the engine is gone
