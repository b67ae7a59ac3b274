import dataclasses
import json
import os
import signal
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import numpy as np
import pytest
import ray
from transformers import AutoTokenizer

from memrl_envs.encyclopedia import EncyclopediaConfig, make_world
from memrl_envs.retrieval import BM25Retriever
from memrl.cluster import FaultToleranceConfig
from memrl.engines import start_engine, stop_engine
from memrl.engines.base import GenerationOutput, SamplingConfig
from memrl.engines.torch_engine import TorchEngine
from memrl.episode import from_arrow
from memrl.rollout import EngineFailed, EnvRunner, EnvRunnerGroup, EnvRunnerSpec, EpisodeFailed, Task, run_sync


@pytest.fixture(scope="module")
def engine(ray_session, tiny_checkpoint):
    actor = start_engine(str(tiny_checkpoint), "torch", num_cpus=0)
    yield actor
    ray.kill(actor)


def _spec(tiny_checkpoint, faults: FaultToleranceConfig | None = None, **env_config) -> EnvRunnerSpec:
    return EnvRunnerSpec(env="memrl/Echo-v0", env_config={"num_turns": 2, **env_config}, workflow="last_observation",
                         workflow_config={}, tokenizer_path=str(tiny_checkpoint),
                         sampling=SamplingConfig(max_tokens=8), num_envs=4, max_calls=64, continuous_batching=False,
                         faults=faults or FaultToleranceConfig())


@pytest.fixture(scope="module")
def _runner_pair(engine, tiny_checkpoint):
    group = EnvRunnerGroup(_spec(tiny_checkpoint), [engine], num_runners=2)
    yield group
    group.shutdown()


@pytest.fixture()
def runners(_runner_pair, tiny_checkpoint) -> EnvRunnerGroup:
    """Two runner actors over the module's engine, shared by the tests that neither kill, stall nor replace a runner
    (each starts them on `_spec`'s settings): a runner actor's start is seconds of imports."""
    _runner_pair.configure(_spec(tiny_checkpoint))
    return _runner_pair


def _tasks(n: int, group_size: int = 2) -> list[Task]:
    return [Task(seed=i // group_size, group_id=f"g{i // group_size}", traj_id=f"t{i}") for i in range(n)]


def test_runner_returns_every_trajectory_batched(engine, runners, tiny_checkpoint):
    batch, stats = ray.get(runners.runners[0].sample.remote(_tasks(6), engine))
    trajs = from_arrow(batch)
    assert [t.traj_id for t in trajs] == [f"t{i}" for i in range(6)]
    tok = AutoTokenizer.from_pretrained(tiny_checkpoint)
    for t in trajs:
        assert len(t.conversations) == 2
        assert t.metrics["num_calls"] == 2
        assert "Say: " in tok.decode(t.conversations[0].prompt_ids)
        for c in t.conversations:
            assert 1 <= len(c.response_ids) <= 8
            assert np.all(c.logprobs <= 0)
            assert c.finish_reason in ("stop", "length")
        assert t.reward in (0.0, 0.5, 1.0)
    # groups share the env seed, so both members saw the same first prompt
    assert np.array_equal(trajs[0].conversations[0].prompt_ids, trajs[1].conversations[0].prompt_ids)
    # 6 trajectories but only 4 envs: the first round batches 4 requests, never one per call
    assert stats["calls"] == 12
    assert stats["batches"] < stats["calls"]


@pytest.mark.slow
def test_under_continuous_batching_the_engine_batches_the_requests_of_every_runner(ray_session, tiny_checkpoint):
    # Each episode's request goes out on its own and the engine steps whatever has queued. Paused, it holds the
    # first requests of both runners (4 envs each) until they are all queued, and its first step then runs all 8.
    engine = start_engine(str(tiny_checkpoint), "torch", num_cpus=0, continuous_batching=True)
    spec = dataclasses.replace(_spec(tiny_checkpoint, num_turns=2), continuous_batching=True)
    group = EnvRunnerGroup(spec, [engine], num_runners=2)
    group.sample(_tasks(4))  # both runners up
    ray.get(engine.pause_generation.remote())
    tasks, result = _tasks(16), {}
    thread = threading.Thread(target=lambda: result.update(out=group.sample(tasks)))
    thread.start()
    deadline = time.monotonic() + 120
    while ray.get(engine.queued_requests.remote()) < 2 * spec.num_envs:
        assert time.monotonic() < deadline, "the runners' first requests never reached the engine"
        time.sleep(0.05)
    ray.get(engine.resume_generation.remote())
    thread.join(timeout=300)
    table, stats = result["out"]
    trajs = from_arrow(table)
    assert sorted(t.traj_id for t in trajs) == sorted(t.traj_id for t in tasks)
    assert stats["calls"] == stats["batches"] == 32  # one call per request: 16 episodes of 2 turns
    assert ray.get(engine.max_requests_in_flight.remote()) == 2 * spec.num_envs  # both runners' requests at once
    assert ray.get(engine.pop_generate_seconds.remote()) > 0
    group.shutdown()
    ray.kill(engine)


@pytest.mark.slow
def test_group_survives_a_runner_killed_mid_sample(engine, tiny_checkpoint):
    group = EnvRunnerGroup(_spec(tiny_checkpoint, step_delay_s=0.5), [engine], num_runners=2)
    tasks = _tasks(8)
    result = {}
    thread = threading.Thread(target=lambda: result.update(out=group.sample(tasks)))
    thread.start()
    time.sleep(0.6)  # runners are mid-trajectory: each step sleeps 0.5 s, 2 steps per trajectory
    ray.kill(group.runners[0], no_restart=False)
    thread.join(timeout=120)
    table, _ = result["out"]
    trajs = from_arrow(table)
    assert sorted(t.traj_id for t in trajs) == sorted(t.traj_id for t in tasks)
    assert group.counters["runner_failures"] == 1
    assert group.counters["resubmitted"] == 4
    assert group.counters["tasks_submitted"] == group.counters["trajectories_returned"] == 8
    group.shutdown()


def test_same_seed_same_trajectories(runners):
    group = runners
    tasks = _tasks(6)
    first, _ = group.sample(tasks, seed=7)
    again, _ = group.sample(tasks, seed=7)
    other, _ = group.sample(tasks, seed=8)
    assert first.equals(again)
    assert not first.column("response_ids").equals(other.column("response_ids"))


def test_envs_that_step_in_threads_give_the_same_trajectories_whatever_their_timing(engine, tiny_checkpoint):
    # Each step waits a random time in a thread, so steps end in another order on every run; the batches go out in
    # rounds in task order (8 tasks on 4 envs: later tasks take the envs freed in between), so the samples repeat.
    group = EnvRunnerGroup(_spec(tiny_checkpoint, io_jitter_s=0.05), [engine], num_runners=1)
    tasks = _tasks(8)
    first, stats = group.sample(tasks, seed=7)
    again, _ = group.sample(tasks, seed=7)
    assert first.equals(again)
    assert stats["batches"] == 4  # two rounds of 4 episodes of two calls each
    group.shutdown()


def test_runners_take_a_new_spec_in_place_and_keep_their_tokenizer(runners, tiny_checkpoint, tmp_path):
    group = runners
    ids = [r._actor_id for r in group.runners]
    tasks = _tasks(6)
    first, _ = group.sample(tasks, seed=7)
    group.configure(_spec(tiny_checkpoint, num_turns=3))
    assert [len(t.conversations) for t in from_arrow(group.sample(tasks, seed=7)[0])] == [3] * 6
    group.configure(_spec(tiny_checkpoint))
    again, _ = group.sample(tasks, seed=7)
    assert again.equals(first) and [r._actor_id for r in group.runners] == ids  # the same processes throughout
    other = dataclasses.replace(_spec(tiny_checkpoint), tokenizer_path=str(tmp_path))
    with pytest.raises(ValueError, match="keeps its tokenizer"):
        group.configure(other)


def test_runners_in_this_process_sample_what_runner_actors_sample(engine, runners, tiny_checkpoint):
    # Two local runners (one per engine given, here the same engine twice) run in one event loop; under the same
    # seed they give what two runner actors on that engine give, as do two in_process runners on one engine (the
    # layout of held-out runs with evaluation_num_env_runners=0).
    actors = runners
    here = EnvRunnerGroup(_spec(tiny_checkpoint), [engine, engine], num_runners=0)
    assert here.local and len(here.runners) == 2 and isinstance(here.runners[0], EnvRunner)
    mirror = EnvRunnerGroup(_spec(tiny_checkpoint), [engine], num_runners=2, in_process=True)
    assert mirror.local and len(mirror.runners) == 2 and mirror.engines == [engine, engine]
    tasks = _tasks(8)
    reference, _ = actors.sample(tasks, seed=7)
    table, stats = here.sample(tasks, seed=7)
    assert table.equals(reference) and mirror.sample(tasks, seed=7)[0].equals(reference)
    assert stats["trajectories"] == 8 and stats["calls"] == 16
    here.configure(_spec(tiny_checkpoint, num_turns=3))
    assert [len(t.conversations) for t in from_arrow(here.sample(tasks, seed=7)[0])] == [3] * 8
    assert here.counters["tasks_submitted"] == here.counters["trajectories_returned"] == 16
    here.shutdown()
    mirror.shutdown()


def test_a_local_round_past_its_deadline_is_cancelled_and_named(engine, tiny_checkpoint):
    group = EnvRunnerGroup(_spec(tiny_checkpoint, FaultToleranceConfig(sample_timeout_s=0.6), step_delay_s=0.5),
                           [engine], num_runners=0)
    t0 = time.monotonic()
    with pytest.raises(TimeoutError, match=r"the env runners in this process did not finish their 4 tasks within "
                                           r"0.6 s; if they need longer, raise fault_tolerance.sample_timeout_s"):
        group.sample(_tasks(4))
    assert time.monotonic() - t0 < 5 and group.counters["failed_rounds"] == 1
    group.sample_timeout_s = 60.0  # the cancelled round left the runner ready for the next
    assert sorted(t.traj_id for t in from_arrow(group.sample(_tasks(4))[0])) == [f"t{i}" for i in range(4)]
    group.shutdown()


def test_runners_in_this_process_place_no_actors(engine, tiny_checkpoint):
    with pytest.raises(ValueError, match="resources_per_runner=.* places runner actors; with num_runners 0"):
        EnvRunnerGroup(_spec(tiny_checkpoint), [engine], num_runners=0, resources_per_runner={"head": 0.1})
    with pytest.raises(ValueError, match="num_runners must be >= 0"):
        EnvRunnerGroup(_spec(tiny_checkpoint), [engine], num_runners=-1)


def test_memagent_episodes_through_a_runner(engine, runners, tiny_checkpoint):
    spec = EnvRunnerSpec(env="memrl/ChunkStream-v0",
                         env_config={"task": "multihop", "chunk_tokens": 24, "tokenizer_path": str(tiny_checkpoint)},
                         workflow="memagent", workflow_config={"memory_tokens": 16},
                         tokenizer_path=str(tiny_checkpoint), sampling=SamplingConfig(max_tokens=16), num_envs=4,
                         max_calls=64, continuous_batching=False)
    runners.configure(spec)
    batch, _ = ray.get(runners.runners[0].sample.remote(_tasks(4), engine, 0))
    assert batch.schema.metadata[b"memrl.tokenizer"] == str(tiny_checkpoint).encode()  # what decodes its ids
    for t in from_arrow(batch):
        # one memory call per chunk, then the answer call
        assert len(t.conversations) >= 2
        assert [list(c.spans) for c in t.conversations] == [["memory"]] * (len(t.conversations) - 1) + [["answer"]]
        assert {"em", "f1", "sub_em", "format_ok"} <= set(t.metrics)
        assert t.reward == t.metrics["is_equiv"]  # ChunkStream-v0's default reward
        # constant context: no call sees more than the template, the question, a chunk and a capped memory
        assert t.metrics["peak_context_tokens"] < 400
        assert t.metrics["dependency"] == sum((2 * len(c.response_ids) + len(c.prompt_ids)) * len(c.response_ids) / 2
                                              for c in t.conversations)


def _short_context_copy(tiny_checkpoint, tmp_path, window: int):
    """A copy of the tiny checkpoint whose context holds `window` tokens."""
    import json
    import shutil

    out = tmp_path / f"window{window}"
    shutil.copytree(tiny_checkpoint, out)
    config = json.loads((out / "config.json").read_text())
    (out / "config.json").write_text(json.dumps({**config, "max_position_embeddings": window}))
    return out


def test_history_that_outgrows_the_context_ends_the_episode(ray_session, tiny_checkpoint, tmp_path):
    # The runner and the engine in this process: what ends the episode is the runner's loop, wherever it runs.
    path = _short_context_copy(tiny_checkpoint, tmp_path, 320)
    engine = start_engine(str(path), "torch", in_process=True)
    # ReAct keeps the whole history, and the untrained model never answers: the prompt grows every turn.
    spec = EnvRunnerSpec(env="memrl/Search-v0", env_config={"num_objectives": 2, "max_turns": 30},
                         workflow="react", workflow_config={}, tokenizer_path=str(path),
                         sampling=SamplingConfig(max_tokens=24), num_envs=4, max_calls=64, continuous_batching=False)
    group = EnvRunnerGroup(spec, [engine], num_runners=0)
    trajs = from_arrow(group.sample(_tasks(4), seed=0)[0])
    assert [t.traj_id for t in trajs] == [f"t{i}" for i in range(4)]
    overflowed = [t for t in trajs if t.metrics["context_overflow"] == 1.0]
    assert overflowed
    for t in overflowed:
        assert t.metrics["truncated"] == 1.0 and t.reward == 0.0
        assert all(len(c.prompt_ids) < 320 for c in t.conversations)
        assert t.metrics["num_calls"] == len(t.conversations) < 30
    group.shutdown()
    stop_engine(engine)


def test_a_first_prompt_longer_than_the_context_is_named(ray_session, tiny_checkpoint, tmp_path):
    path = _short_context_copy(tiny_checkpoint, tmp_path, 16)
    engine = start_engine(str(path), "torch", in_process=True)
    runner = EnvRunner(_spec(tiny_checkpoint))  # in this process, as runner actors and held-out runners run it
    with pytest.raises(EpisodeFailed, match=r"task t0 \(seed 0\): the first prompt has \d+ tokens.*holds 16"):
        run_sync(runner.sample(_tasks(1), engine))
    stop_engine(engine)


class _FlakyRetrieval(BaseHTTPRequestHandler):
    """A retrieval server over the synthetic encyclopedia in the shape MEM1's web-search servers answer: documents
    without scores, twice as many as asked. It answers HTTP 500 to the requests numbered in `failing` (all of them
    when it is None) and holds the requests numbered in `slow` for `delay_s` first. A request whose body failed before
    is a retry: answered and not numbered, so the same requests fail however the episodes interleave, and a client
    that retries once never meets two failures in a row."""

    retriever = BM25Retriever(make_world(EncyclopediaConfig()).passages)
    failing: set | None = {2, 5, 9}
    """Request numbers (from 1) answered with HTTP 500; tests set it."""
    slow: ClassVar[set] = set()
    """Request numbers answered after `delay_s`."""
    delay_s = 2.0
    requests = 0
    failed: ClassVar[set] = set()
    """Bodies answered with HTTP 500 so far."""
    numbering = threading.Lock()
    log: ClassVar[list] = []
    """(request number or 0 for a retry, time it arrived, time it was answered)."""

    def log_message(self, *args):
        pass

    def do_POST(self):
        arrived = time.monotonic()
        raw = self.rfile.read(int(self.headers["Content-Length"]))
        body = json.loads(raw)
        with self.numbering:  # the server answers requests on threads of their own
            retry = raw in self.failed
            if not retry:
                type(self).requests += 1
            number = 0 if retry else self.requests
        if number in self.slow:
            time.sleep(self.delay_s)
        if self.failing is None or number in self.failing:
            self.failed.add(raw)
            data, status = b"overloaded", 500
        else:
            hits = self.retriever.search(body["queries"], 2 * body["topk"])
            result = [[{"id": h["id"], "contents": f"{h['title']}\n{h['text']}"} for h in row] for row in hits]
            data, status = json.dumps({"result": result}).encode(), 200
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        self.log.append((number, arrived, time.monotonic()))


@pytest.fixture()
def flaky_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _FlakyRetrieval)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _FlakyRetrieval.failing, _FlakyRetrieval.slow, _FlakyRetrieval.requests = {2, 5, 9}, set(), 0
    _FlakyRetrieval.log, _FlakyRetrieval.failed = [], set()
    yield f"http://127.0.0.1:{server.server_address[1]}/retrieve"
    server.shutdown()
    server.server_close()


def _search_spec(tiny_checkpoint, url, http_retries: int = 0, **fields) -> EnvRunnerSpec:
    return EnvRunnerSpec(env="memrl/Search-v0",
                         env_config={"num_objectives": 1, "max_turns": 3, "top_k": 2, "retriever": url,
                                     "http_retries": http_retries},
                         workflow="react", workflow_config={}, tokenizer_path=str(tiny_checkpoint),
                         sampling=SamplingConfig(max_tokens=12), num_envs=4, max_calls=64, continuous_batching=False,
                         **fields)


class _Searcher(TorchEngine):
    """A torch engine that always replies with a search (the untrained model rarely writes a valid action): of Kema
    and a number read off the prompt, so different calls search different strings and the same call the same one."""

    def __init__(self, model_path, **kwargs):
        super().__init__(model_path, **kwargs)
        self.tokenizer = AutoTokenizer.from_pretrained(model_path)

    def generate(self, prompts, sampling):
        outputs = []
        for prompt in prompts:
            reply = f"<search>Kema {zlib.crc32(repr(list(prompt)).encode())}</search>"
            ids = self.tokenizer.encode(reply, add_special_tokens=False) + [sampling.stop_token_ids[0]]
            outputs.append(GenerationOutput(token_ids=ids, logprobs=[0.0] * len(ids), finish_reason="stop",
                                            weight_version=self.weight_version))
        return outputs


def _scripted_search_engine(tiny_checkpoint):
    return ray.remote(num_cpus=0)(_Searcher).remote(str(tiny_checkpoint), seed=0)


@pytest.mark.slow
def test_a_failed_search_ends_only_its_episode_and_a_slow_one_holds_up_no_other_search(ray_session, tiny_checkpoint,
                                                                                         flaky_server):
    # Requests 2 and 5 fail (no retry: http_retries=0); request 1, the first of the first round, takes 2 s.
    _FlakyRetrieval.failing, _FlakyRetrieval.slow = {2, 5}, {1}
    engine = _scripted_search_engine(tiny_checkpoint)
    group = EnvRunnerGroup(_search_spec(tiny_checkpoint, flaky_server), [engine], num_runners=1)
    tasks = _tasks(4)
    table, stats = group.sample(tasks, seed=0)
    trajs = {t.traj_id: t for t in from_arrow(table)}
    assert sorted(trajs) == sorted(t.traj_id for t in tasks)  # every episode comes back, the failed ones flagged
    failed = [t for t in trajs.values() if t.failure]
    assert len(failed) == 2 and all("answered HTTP 500" in t.failure for t in failed)
    # The others ran their course: three searches, then the env's turn limit ended them unanswered.
    assert all(t.metrics["num_searches"] == 3 and len(t.conversations) == 3 and t.metrics["truncated"] == 1
               for t in trajs.values() if not t.failure)
    assert stats["episodes_failed"] == group.counters["episodes_failed"] == 2
    assert group.counters["episodes_retried"] == group.counters["runner_failures"] == 0
    # While request 1 was held, the other episodes of its round searched beside it: steps run in threads and the
    # runner's loop was not blocked (the round's next engine batch waits for it, so the batches stay the same).
    (_, slow_start, slow_end), = [entry for entry in _FlakyRetrieval.log if entry[0] == 1]
    assert any(slow_start < arrived < slow_end for number, arrived, _ in _FlakyRetrieval.log if number != 1)
    group.shutdown()
    ray.kill(engine)


@pytest.mark.slow
def test_retries_with_backoff_absorb_a_flaky_server_and_a_dead_one_fails_episodes_not_the_round(
        ray_session, tiny_checkpoint, flaky_server):
    engine = _scripted_search_engine(tiny_checkpoint)
    # The runner in this process (num_runners=0): the server's failures, not runner actors, are the point.
    group = EnvRunnerGroup(_search_spec(tiny_checkpoint, flaky_server, http_retries=1), [engine], num_runners=0)
    # One episode per question: the only request that repeats a failed one's body is its retry.
    trajs = from_arrow(group.sample(_tasks(8, group_size=1), seed=0)[0])
    assert len(_FlakyRetrieval.failed) == 3  # requests 2, 5 and 9 failed
    assert len(trajs) == 8 and not any(t.failure for t in trajs)  # and each was asked again
    assert all(t.metrics["num_searches"] == 3 for t in trajs)
    _FlakyRetrieval.failing = None  # the server is down for good
    trajs = from_arrow(group.sample(_tasks(4), seed=1)[0])
    assert len(trajs) == 4 and all(t.failure.startswith("retrieval failed: RuntimeError: retrieval server "
                                                        "http://127.0.0.1:") for t in trajs)
    assert group.counters["episodes_failed"] == 4 and group.counters["failed_rounds"] == 0
    group.shutdown()
    ray.kill(engine)


@pytest.mark.slow
def test_a_retrieval_actor_killed_during_a_round_costs_nothing(ray_session, tiny_checkpoint):
    import threading

    from memrl_envs.encyclopedia import EncyclopediaConfig, make_world
    from memrl_envs.retrieval import start_retrieval_server

    server = start_retrieval_server(make_world(EncyclopediaConfig()).passages, name="test-runner-retrieval")
    engine = _scripted_search_engine(tiny_checkpoint)
    spec = _search_spec(tiny_checkpoint, "bm25")
    spec.env_config = {**spec.env_config, "retrieval_actor": "test-runner-retrieval"}
    group = EnvRunnerGroup(spec, [engine], num_runners=0)  # the runner here: the retrieval actor is the point
    tasks = _tasks(8)
    want = from_arrow(group.sample(tasks, seed=0)[0])
    pid = _pid(server.actor)
    out = {}
    thread = threading.Thread(target=lambda: out.update(table=group.sample(tasks, seed=0)[0]))
    thread.start()
    ray.kill(server.actor, no_restart=False)  # as the round starts: its searches meet a restarting actor
    thread.join(timeout=120)
    got = from_arrow(out["table"])
    assert _pid(server.actor) != pid
    assert [t.reward for t in got] == [t.reward for t in want]
    assert [[c.prompt_ids.tolist() for c in t.conversations] for t in got] == \
        [[c.prompt_ids.tolist() for c in t.conversations] for t in want]  # the same passages came back
    assert group.counters["episodes_retried"] == group.counters["runner_failures"] == 0
    group.shutdown()
    ray.kill(engine)
    ray.kill(server.actor)


def _pid(actor) -> int:
    return ray.get(actor.__ray_call__.remote(lambda self: os.getpid()))


@pytest.mark.parametrize("num_runners", [2, 0])
def test_a_dead_engine_is_named_and_no_runner_is_blamed(ray_session, tiny_checkpoint, num_runners):
    engine = start_engine(str(tiny_checkpoint), "torch", num_cpus=0)
    group = EnvRunnerGroup(_spec(tiny_checkpoint, step_delay_s=0.3), [engine], num_runners=num_runners)
    result = {}

    def run():
        try:
            group.sample(_tasks(8))
        except Exception as exc:  # noqa: BLE001  (the test inspects it)
            result["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    time.sleep(0.5)
    ray.kill(engine)
    thread.join(timeout=60)
    assert isinstance(result["error"], EngineFailed)
    assert "inference engine 0 died" in str(result["error"])
    assert group.counters["runner_failures"] == 0 and group.counters["failed_rounds"] == 1
    group.shutdown()


@pytest.mark.slow
def test_a_stalled_engine_fails_the_round_within_its_deadline(ray_session, tiny_checkpoint):
    engine = start_engine(str(tiny_checkpoint), "torch", num_cpus=0)
    ray.get(engine.max_model_len.remote(), timeout=120)  # up before the 3 s deadline applies
    spec = _spec(tiny_checkpoint, FaultToleranceConfig(engine_call_timeout_s=3.0))
    group = EnvRunnerGroup(spec, [engine], num_runners=1)
    group.sample(_tasks(2))  # warm: the engine answers
    pid = _pid(engine)
    os.kill(pid, signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        with pytest.raises(EngineFailed, match=r"inference engine 0 did not answer .* within 3 s \(stalled\?\); "
                                               r"if it needs longer, raise fault_tolerance.engine_call_timeout_s"):
            group.sample(_tasks(2))
        assert time.monotonic() - t0 < 15
    finally:
        os.kill(pid, signal.SIGCONT)
    group.shutdown()
    ray.kill(engine)


@pytest.mark.slow
def test_a_stalled_runner_is_replaced_and_its_tasks_resubmitted(engine, tiny_checkpoint):
    # A healthy runner's chunk takes about 2 s; the deadline leaves it room on a busy machine.
    group = EnvRunnerGroup(_spec(tiny_checkpoint, FaultToleranceConfig(sample_timeout_s=10.0), step_delay_s=0.2),
                           [engine], num_runners=2)
    reference, _ = group.sample(_tasks(8), seed=3)
    os.kill(_pid(group.runners[1]), signal.SIGSTOP)  # killed by the group when it replaces the runner
    table, _ = group.sample(_tasks(8), seed=3)
    assert table.equals(reference)  # the replacement reruns the same chunk under the same seed
    assert group.counters["runner_failures"] == 1 and group.counters["resubmitted"] == 4
    group.shutdown()


@pytest.mark.slow
def test_runner_failures_beyond_the_budget_stop_the_run(engine, tiny_checkpoint):
    group = EnvRunnerGroup(_spec(tiny_checkpoint, FaultToleranceConfig(max_actor_failures=1), step_delay_s=0.3),
                           [engine], num_runners=1)
    for expected in (None, "2 env runner failures within 3600 s, more than fault_tolerance.max_actor_failures=1"):
        result = {}

        def run():
            try:
                result["out"] = group.sample(_tasks(4))
            except RuntimeError as exc:
                result["error"] = exc

        thread = threading.Thread(target=run)
        thread.start()
        time.sleep(0.5)
        ray.kill(group.runners[0])
        thread.join(timeout=120)
        if expected is None:
            assert "out" in result and group.counters["runner_failures"] == 1
        else:
            assert expected in str(result["error"])
    group._budget.window_s = 0.0  # forgiven: old failures leave the window
    group._replace(0, "test", {})
    assert len(from_arrow(group.sample(_tasks(2))[0])) == 2
    group.shutdown()
