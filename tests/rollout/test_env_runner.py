import threading
import time

import numpy as np
import pytest
import ray
from transformers import AutoTokenizer

from memrl.engines.base import SamplingConfig
from memrl.engines.torch_engine import TorchEngine
from memrl.episode import from_arrow
from memrl.rollout import EnvRunner, EnvRunnerGroup, EnvRunnerSpec, Task


@pytest.fixture(scope="module")
def engine(ray_session, tiny_checkpoint):
    actor = ray.remote(num_cpus=0)(TorchEngine).remote(str(tiny_checkpoint), seed=0)
    yield actor
    ray.kill(actor)


def _spec(tiny_checkpoint, **env_config) -> EnvRunnerSpec:
    return EnvRunnerSpec(env="memrl/Echo-v0", env_config={"num_turns": 2, **env_config}, workflow="last_observation",
                         workflow_config={}, tokenizer_path=str(tiny_checkpoint),
                         sampling=SamplingConfig(max_tokens=8), num_envs=4)


def _tasks(n: int, group_size: int = 2) -> list[Task]:
    return [Task(seed=i // group_size, group_id=f"g{i // group_size}", traj_id=f"t{i}") for i in range(n)]


def test_runner_returns_every_trajectory_batched(engine, tiny_checkpoint):
    runner = ray.remote(num_cpus=0)(EnvRunner).remote(_spec(tiny_checkpoint))
    batch, stats = ray.get(runner.sample.remote(_tasks(6), engine))
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
    ray.kill(runner)


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


def test_same_seed_same_trajectories(engine, tiny_checkpoint):
    group = EnvRunnerGroup(_spec(tiny_checkpoint), [engine], num_runners=2)
    tasks = _tasks(6)
    first, _ = group.sample(tasks, seed=7)
    again, _ = group.sample(tasks, seed=7)
    other, _ = group.sample(tasks, seed=8)
    assert first.equals(again)
    assert not first.column("response_ids").equals(other.column("response_ids"))
    group.shutdown()


def test_memagent_episodes_through_a_runner(engine, tiny_checkpoint):
    spec = EnvRunnerSpec(env="memrl/ChunkStream-v0",
                         env_config={"task": "multihop", "chunk_tokens": 24, "tokenizer_path": str(tiny_checkpoint)},
                         workflow="memagent", workflow_config={"memory_tokens": 16},
                         tokenizer_path=str(tiny_checkpoint), sampling=SamplingConfig(max_tokens=16), num_envs=4)
    runner = ray.remote(num_cpus=0)(EnvRunner).remote(spec)
    batch, _ = ray.get(runner.sample.remote(_tasks(4), engine, 0))
    for t in from_arrow(batch):
        # one memory call per chunk, then the answer call
        assert len(t.conversations) >= 2
        assert [list(c.spans) for c in t.conversations] == [["memory"]] * (len(t.conversations) - 1) + [["answer"]]
        assert {"em", "f1", "sub_em", "format_ok"} <= set(t.metrics)
        assert t.reward == t.metrics["em"]
        # constant context: no call sees more than the template, the question, a chunk and a capped memory
        assert t.metrics["peak_context_tokens"] < 400
        assert t.metrics["dependency"] == sum((2 * len(c.response_ids) + len(c.prompt_ids)) * len(c.response_ids) / 2
                                              for c in t.conversations)
    ray.kill(runner)


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
    path = _short_context_copy(tiny_checkpoint, tmp_path, 320)
    engine = ray.remote(num_cpus=0)(TorchEngine).remote(str(path), seed=0)
    # ReAct keeps the whole history, and the untrained model never answers: the prompt grows every turn.
    spec = EnvRunnerSpec(env="memrl/Search-v0", env_config={"num_objectives": 2, "max_turns": 30},
                         workflow="react", workflow_config={}, tokenizer_path=str(path),
                         sampling=SamplingConfig(max_tokens=24), num_envs=4)
    runner = ray.remote(num_cpus=0)(EnvRunner).remote(spec)
    trajs = from_arrow(ray.get(runner.sample.remote(_tasks(4), engine, 0))[0])
    assert [t.traj_id for t in trajs] == [f"t{i}" for i in range(4)]
    overflowed = [t for t in trajs if t.metrics["context_overflow"] == 1.0]
    assert overflowed
    for t in overflowed:
        assert t.metrics["truncated"] == 1.0 and t.reward == 0.0
        assert all(len(c.prompt_ids) < 320 for c in t.conversations)
        assert t.metrics["num_calls"] == len(t.conversations) < 30
    ray.kill(runner)
    ray.kill(engine)


def test_a_first_prompt_longer_than_the_context_is_named(ray_session, tiny_checkpoint, tmp_path):
    path = _short_context_copy(tiny_checkpoint, tmp_path, 16)
    engine = ray.remote(num_cpus=0)(TorchEngine).remote(str(path), seed=0)
    runner = ray.remote(num_cpus=0)(EnvRunner).remote(_spec(tiny_checkpoint))
    with pytest.raises(ValueError, match=r"task t0 \(seed 0\): the first prompt has \d+ tokens.*holds 16"):
        ray.get(runner.sample.remote(_tasks(1), engine))
    ray.kill(runner)
    ray.kill(engine)
