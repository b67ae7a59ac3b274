"""Continuous batching on the torch engine in this process: concurrent calls share the engine's steps, each gets its
own replies, a bad prompt fails only its call, and a failing engine fails every call in flight."""

import threading
import time

import pytest

from memrl.engines.base import SamplingConfig
from memrl.engines.batcher import ContinuousBatcher
from memrl.engines.torch_engine import TorchEngine

GREEDY = SamplingConfig(max_tokens=10, temperature=0)


@pytest.fixture(scope="module")
def torch_engine(tiny_checkpoint):
    return TorchEngine(str(tiny_checkpoint), seed=0)


def _concurrently(batcher, calls):
    """Each call's result (or exception), from one thread per call released together."""
    results, start = [None] * len(calls), threading.Barrier(len(calls))

    def run(i, prompts):
        start.wait()
        try:
            results[i] = batcher.generate(prompts, GREEDY)
        except Exception as exc:
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i, p)) for i, p in enumerate(calls)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    return results


def test_concurrent_calls_share_steps_and_each_gets_its_own_replies(torch_engine):
    calls = [[[10 + 7 * c + k, 200 + k, 300 + c] for k in range(c % 3 + 1)] for c in range(8)]
    batcher = ContinuousBatcher(torch_engine)
    results = _concurrently(batcher, calls)
    for prompts, got in zip(calls, results, strict=True):
        assert not isinstance(got, Exception), got
        want = torch_engine.generate(prompts, GREEDY)  # each call alone
        assert [o.token_ids for o in got] == [o.token_ids for o in want]
    assert batcher.max_requests > 3  # some step held requests of several calls
    assert torch_engine.pop_generate_seconds() > 0


def test_a_bad_prompt_fails_its_own_call_only(torch_engine):
    batcher = ContinuousBatcher(torch_engine)
    bad = [[10**9]]  # outside the vocabulary
    results = _concurrently(batcher, [[[5, 6, 7]], bad, [[8, 9]]])
    assert isinstance(results[1], ValueError) and "prompt 0" in str(results[1])
    assert [len(r) for r in (results[0], results[2])] == [1, 1]


def test_an_engine_failure_fails_every_call_in_flight_and_the_next_calls_are_served(torch_engine):
    class Failing(TorchEngine):
        fail = True

        def step(self):
            if self.fail:
                self.fail = False
                raise RuntimeError("the device went away")
            return super().step()

    engine = Failing.__new__(Failing)
    engine.__dict__.update(torch_engine.__dict__)
    batcher = ContinuousBatcher(engine)
    with batcher.lock:  # both calls are queued before the first step
        results = [None, None]
        threads = [threading.Thread(target=lambda i=i: results.__setitem__(i, _safe(batcher, [[5 + i, 6]])))
                   for i in range(2)]
        for t in threads:
            t.start()
        while len(batcher._queued) < 2:
            threading.Event().wait(0.01)
    for t in threads:
        t.join(timeout=120)
    assert all(isinstance(r, RuntimeError) and "went away" in str(r) for r in results)
    assert len(batcher.generate([[5, 6]], GREEDY)) == 1


def _safe(batcher, prompts):
    try:
        return batcher.generate(prompts, GREEDY)
    except Exception as exc:
        return exc


def test_calls_made_while_paused_share_the_first_step_after_resume(torch_engine):
    batcher = ContinuousBatcher(torch_engine)
    batcher.pause()
    results = [None] * 3
    threads = [threading.Thread(target=lambda i=i: results.__setitem__(i, _safe(batcher, [[5 + i, 6], [7, 8 + i]])))
               for i in range(3)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 60
    while batcher.queued_requests() < 6:
        assert time.monotonic() < deadline, "the calls never queued"
        time.sleep(0.01)
    time.sleep(0.2)
    assert results == [None] * 3 and batcher.max_requests == 0  # nothing stepped while paused
    batcher.resume()
    for t in threads:
        t.join(timeout=120)
    assert [len(r) for r in results] == [2, 2, 2]
    assert batcher.max_requests == 6  # all three calls in one step


def test_pause_is_refused_while_requests_are_in_flight(torch_engine):
    batcher = ContinuousBatcher(torch_engine)
    batcher._owners["0"] = None  # a request the engine is still running
    with pytest.raises(RuntimeError, match="1 requests in flight"):
        batcher.pause()
