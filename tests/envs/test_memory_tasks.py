"""Mem-α tasks from the files the authors and MemoryAgentBench publish, written here in their schemas."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from memrl_envs.memory_benchmarks import load_memoryagentbench
from memrl_envs.memory_tasks import MemoryQuestion, MemoryTask, load_memory_tasks

CHUNKS = ["At 2024/01/02 Kema said: I moved to Hulport.", "At 2024/01/05 Dulia said: Kema works for Quovex – früh."]
QAS = [{"question": "Where does Kema live?", "answer": "Hulport", "evidence_idx": [0]},
       {"question": "Which class is 'we randomised 40 patients'?", "answer": 2}]


def _authors_row(i: int, encoded: bool = True) -> dict:
    return {"instance_id": i, "prompt": "Remember the conversation for later questions.",
            "chunks": json.dumps(CHUNKS) if encoded else CHUNKS,
            "questions_and_answers": json.dumps(QAS) if encoded else QAS, "data_source": "perltqa",
            "metadata": json.dumps({"data_source": "perltqa"}), "num_chunks": 2, "num_questions": 2}


WANTED = MemoryTask(instance_id="0", prompt="Remember the conversation for later questions.", chunks=tuple(CHUNKS),
                    questions=(MemoryQuestion("Where does Kema live?", ("Hulport",), (0,)),
                               MemoryQuestion("Which class is 'we randomised 40 patients'?", ("2",))),
                    data_source="perltqa")


def test_authors_parquet_and_jsonl_rows(tmp_path):
    pq.write_table(pa.Table.from_pylist([_authors_row(0), _authors_row(1)]), tmp_path / "train.parquet")
    (tmp_path / "test.jsonl").write_text(json.dumps(_authors_row(0, encoded=False), ensure_ascii=False) + "\n",
                                         encoding="utf-8")
    tasks = load_memory_tasks(tmp_path / "train.parquet")
    assert tasks[0] == WANTED and tasks[1].instance_id == "1"
    assert load_memory_tasks(tmp_path / "test.jsonl") == (WANTED,)


def test_memoryagentbench_rows_are_chunked_by_the_loader(tmp_path):
    context = "\n".join(f"Line {i}: Kema visited city {i} on day {i}." for i in range(40))
    row = {"context": context, "questions": ["Which city on day 7?", "Which city on day 30?"],
           "answers": [["city 7"], ["city 30", "30"]], "metadata": {"source": "eventqa_full"}}
    (tmp_path / "mab.jsonl").write_text(json.dumps(row) + "\n")
    (task,) = load_memory_tasks(tmp_path / "mab.jsonl", chunk_tokens=20)
    # Packed by sentences as the benchmark harness packs them: consecutive pieces of the context.
    assert "\n".join(task.chunks) == context and len(task.chunks) > 10
    assert all(len(chunk.split()) <= 20 for chunk in task.chunks)
    assert task.chunks == tuple(c.text for c in load_memoryagentbench(tmp_path / "mab.jsonl", 20)[0].chunks)
    assert task.data_source == "eventqa_full" and task.instance_id == "eventqa_full#0"
    assert task.questions[1].answers == ("city 30", "30")


@pytest.mark.parametrize("row, message", [
    ({"chunks": "[1, 2", "questions_and_answers": "[]"}, r"row 0: 'chunks' is a string but not JSON"),
    ({"chunks": "[]", "questions_and_answers": json.dumps(QAS)}, r"row 0: 'chunks' must be a non-empty list"),
    ({"chunks": json.dumps(CHUNKS)}, r"row 0: no 'questions_and_answers' key"),
    ({"chunks": json.dumps(CHUNKS), "questions_and_answers": json.dumps([{"answer": "x"}])},
     r"row 0 question 0: no 'question' key"),
    ({"chunks": json.dumps(CHUNKS), "questions_and_answers": json.dumps([{"question": "q", "answer": {"a": 1}}])},
     r"row 0 question 0: 'answer' must be a string, a number or a list of them"),
    ({"context": "c", "questions": ["q1", "q2"], "answers": [["a"]]},
     r"row 0 \(source ''\): 'answers' must hold one entry per"),
    ({"context": "", "questions": ["q"], "answers": [["a"]]}, r"row 0: 'context' is empty"),
])
def test_bad_rows_name_file_row_and_key(tmp_path, row, message):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps([row]))
    with pytest.raises(ValueError, match=message) as caught:
        load_memory_tasks(path)
    assert str(path) in str(caught.value)


def test_a_file_is_read_once_per_process_and_again_when_it_changes(tmp_path):
    import json as _json
    import os

    from memrl_envs.memory_env import MemoryStoreEnv

    path = tmp_path / "tasks.jsonl"
    row = {"chunks": ["a b c"], "questions_and_answers": [{"question": "q", "answer": "a"}]}
    path.write_text(_json.dumps(row))
    first, second = (MemoryStoreEnv(data="file", data_path=str(path)) for _ in range(2))
    assert first._file_tasks is second._file_tasks
    path.write_text(_json.dumps({**row, "chunks": ["d e f"]}))
    os.utime(path, ns=(1, path.stat().st_mtime_ns + 10**9))
    assert MemoryStoreEnv(data="file", data_path=str(path))._file_tasks[0].chunks == ("d e f",)


def test_only_questions_without_a_gold_are_left_out_each_named_and_a_file_without_any_is_refused(tmp_path):
    rows = [{"chunks": CHUNKS, "questions_and_answers": [{"question": "q1", "answer": ""},
                                                        {"question": "q2", "answer": ["", "Quovex"]},
                                                        {"question": "q3", "answer": 3}]},
            {"chunks": CHUNKS, "questions_and_answers": [{"question": "q", "answer": " "}]},
            {"context": "a b c", "questions": ["q1", "q2"], "answers": [[""], ["x"]]}]
    path = tmp_path / "tasks.json"
    path.write_text(json.dumps(rows))
    with pytest.warns(UserWarning) as caught:
        tasks = load_memory_tasks(path)
    said = [str(w.message) for w in caught]
    assert any("row 0 question 0: no non-empty gold answer" in m for m in said)
    assert any("row 1: no question can be scored" in m for m in said)
    assert any("row 2 question 0" in m for m in said)
    assert [[q.question for q in t.questions] for t in tasks] == [["q2", "q3"], ["q2"]]
    assert tasks[0].questions[0].answers == ("Quovex",) and tasks[0].questions[1].answers == ("3",)
    path.write_text(json.dumps(rows[1:2]))
    with pytest.warns(UserWarning), pytest.raises(ValueError, match="none of its 1 rows has a question with a gold"):
        load_memory_tasks(path)
