import numpy as np
import pyarrow as pa
import pytest

from memrl.episode import SCHEMA, SCHEMA_VERSION, Conversation, Trajectory, concat, from_arrow, to_arrow


def _traj(traj_id: str, num_convs: int, seed: int) -> Trajectory:
    rng = np.random.default_rng(seed)
    convs = []
    for i in range(num_convs):
        n = int(rng.integers(1, 9))
        convs.append(
            Conversation(
                prompt_ids=rng.integers(0, 1000, int(rng.integers(1, 20))),
                response_ids=rng.integers(0, 1000, n),
                logprobs=rng.normal(size=n).astype(np.float32) - 3,
                loss_mask=rng.integers(0, 2, n),
                spans={"mem": [(0, n // 2)], "answer": [(n // 2, n)]} if i % 2 else {},
                probes={"memory": [7, 8, 9], "answer": [4]} if i % 2 else {},
                reward=float(rng.normal()),
                finish_reason="stop" if i % 3 else "length",
                weight_version=i,
            )
        )
    return Trajectory(convs, reward=float(rng.normal()), group_id=f"g{seed % 2}", traj_id=traj_id,
                      metrics={"em": 1.0, "peak_context_tokens": 123.0})


def _assert_same(a: Trajectory, b: Trajectory) -> None:
    assert (a.traj_id, a.group_id, a.reward, a.metrics) == (b.traj_id, b.group_id, b.reward, b.metrics)
    assert len(a.conversations) == len(b.conversations)
    for x, y in zip(a.conversations, b.conversations):
        for f in ("prompt_ids", "response_ids", "logprobs", "loss_mask"):
            assert getattr(x, f).dtype == getattr(y, f).dtype
            np.testing.assert_array_equal(getattr(x, f), getattr(y, f))
        assert x.probes.keys() == y.probes.keys()
        assert all(np.array_equal(x.probes[k], y.probes[k]) and y.probes[k].dtype == np.int32 for k in x.probes)
        assert (x.spans, x.reward, x.finish_reason, x.weight_version) == (y.spans, y.reward, y.finish_reason,
                                                                          y.weight_version)


def test_round_trip_is_lossless():
    trajs = [_traj(f"t{i}", num_convs=i + 1, seed=i) for i in range(5)]
    batch = to_arrow(trajs)
    assert batch.num_rows == 1 + 2 + 3 + 4 + 5
    assert batch.schema.equals(SCHEMA, check_metadata=True)
    back = from_arrow(batch)
    assert len(back) == 5
    for a, b in zip(trajs, back):
        _assert_same(a, b)


def test_round_trip_through_ipc_and_concat():
    b1, b2 = to_arrow([_traj("a", 2, 0)]), to_arrow([_traj("b", 3, 1)])
    sink = pa.BufferOutputStream()
    table = concat([b1, b2])
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    read = pa.ipc.open_stream(sink.getvalue()).read_all()
    assert [t.traj_id for t in from_arrow(read)] == ["a", "b"]


def test_readable_by_pandas():
    df = to_arrow([_traj("a", 3, 0)]).to_pandas()
    assert list(df["conv_index"]) == [0, 1, 2]
    assert df["traj_id"].unique().tolist() == ["a"]


def test_travels_through_ray_object_store(ray_session):
    trajs = [_traj("a", 3, 0), _traj("b", 1, 1)]
    ref = ray_session.put(to_arrow(trajs))
    for a, b in zip(trajs, from_arrow(ray_session.get(ref))):
        _assert_same(a, b)


def test_weight_version_is_the_oldest():
    assert _traj("a", 3, 0).weight_version == 0


def test_bad_inputs_are_named():
    with pytest.raises(ValueError, match="same length"):
        Conversation(prompt_ids=[1], response_ids=[1, 2], logprobs=[0.0])
    with pytest.raises(ValueError, match="span 'mem'"):
        Conversation(prompt_ids=[1], response_ids=[1, 2], logprobs=[0.0, 0.0], spans={"mem": [(1, 3)]})
    with pytest.raises(ValueError, match="no conversations"):
        to_arrow([Trajectory([], traj_id="empty")])
    batch = to_arrow([_traj("a", 2, 0)])
    old = batch.replace_schema_metadata({b"memrl.schema_version": b"0"})
    with pytest.raises(ValueError, match="schema version"):
        from_arrow(old)
    with pytest.raises(ValueError, match="missing columns"):
        from_arrow(batch.drop_columns(["spans"]).replace_schema_metadata(SCHEMA.metadata))
    with pytest.raises(ValueError, match="num_convs"):
        from_arrow(batch.slice(0, 1))
    shuffled = batch.take([1, 0])
    with pytest.raises(ValueError, match="out of order"):
        from_arrow(shuffled)


def test_schema_version_is_in_metadata():
    assert SCHEMA.metadata[b"memrl.schema_version"] == str(SCHEMA_VERSION).encode()


def test_sliced_and_chunked_batches_read_back():
    trajs = [_traj(f"t{i}", num_convs=2, seed=i) for i in range(4)]
    batch = to_arrow(trajs)
    for got, want in zip(from_arrow(batch.slice(4, 4)), trajs[2:]):  # rows 4..7 = trajectories 2 and 3
        _assert_same(got, want)
    table = concat([to_arrow(trajs[:1]), to_arrow(trajs[1:])])
    assert table.column("prompt_ids").num_chunks == 2
    for got, want in zip(from_arrow(table), trajs):
        _assert_same(got, want)


def test_batches_name_their_tokenizer_and_decode_without_memrl(tiny_checkpoint):
    from transformers import AutoTokenizer

    from memrl.episode import tokenizer_metadata

    tokenizer = AutoTokenizer.from_pretrained(tiny_checkpoint)
    text = "Question: où est Zürich – near the lake?"
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    traj = Trajectory([Conversation(prompt_ids=ids, response_ids=ids[:3], logprobs=[0.0] * 3)], traj_id="t")
    sink = pa.BufferOutputStream()
    batch = to_arrow([traj], tokenizer_metadata(tokenizer))
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    read = pa.ipc.open_stream(sink.getvalue()).read_all()
    meta = {k.decode(): v.decode() for k, v in read.schema.metadata.items()}
    assert meta["memrl.schema_version"] == str(SCHEMA_VERSION)
    again = AutoTokenizer.from_pretrained(meta["memrl.tokenizer"])  # what a user without memrl does
    assert tokenizer_metadata(again) == {k: v for k, v in meta.items() if k.startswith("memrl.tokenizer")}
    assert again.decode(read.column("prompt_ids")[0].as_py()) == text
    assert from_arrow(read)[0].conversations[0].prompt_ids.tolist() == ids
    assert concat([batch, batch]).schema.metadata == batch.schema.metadata
    with pytest.raises(ValueError, match="different schema metadata"):
        concat([batch, to_arrow([traj])])


def test_a_metric_that_is_not_a_number_is_named_with_its_trajectory():
    traj = _traj("t7", 1, 0)
    traj.metrics["verdict"] = "good"
    with pytest.raises(TypeError, match="trajectory 't7': metric 'verdict' = 'good' is not a number"):
        to_arrow([traj])
