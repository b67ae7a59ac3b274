import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from envs.loaders import QATask, load_tasks


def test_memagent_json_and_parquet_shapes(tmp_path):
    rows = [
        {"input": "Document 1: Ghost is based in New York.\nDocument 2: Other.", "query": "Where?",
         "answer": "New York"},
        {"input": "Document 1: Lindström lives in Malmö.", "query": "Who?", "answers": ["Lindström", "Ulf"]},
    ]
    (tmp_path / "hqa.json").write_text(json.dumps(rows))
    pq.write_table(pa.Table.from_pylist(rows[1:] + rows[1:]), tmp_path / "hqa.parquet")
    tasks = load_tasks(tmp_path / "hqa.json")
    assert tasks[0] == QATask(
        question="Where?",
        documents=("Document 1: Ghost is based in New York.", "Document 2: Other."),
        answers=("New York",),
    )
    assert tasks[0].context == rows[0]["input"]
    # Accents fold to the env's printable-ASCII charset, in the context and the answers alike.
    assert tasks[1].documents == ("Document 1: Lindstrom lives in Malmo.",) and tasks[1].answers == ("Lindstrom", "Ulf")
    assert load_tasks(tmp_path / "hqa.parquet") == [tasks[1], tasks[1]]


def test_plain_jsonl(tmp_path):
    lines = [{"question": f"q{i}", "context": f"c{i}\nmore", "answers": [f"a{i}"]} for i in range(3)]
    path = tmp_path / "qa.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines[:2]) + "\n\n" + json.dumps(lines[2]) + "\n")
    tasks = load_tasks(str(path))
    assert [t.question for t in tasks] == ["q0", "q1", "q2"] and tasks[2].answers == ("a2",)
    assert tasks[1].documents == ("c1", "more")


@pytest.mark.parametrize(
    "row, message",
    [
        ({"context": "c", "answers": ["a"]}, r"line 2: no question key; allowed keys are 'question', 'query'"),
        ({"question": "q", "answers": ["a"]}, r"line 2: no context key; allowed keys are 'context', 'input'"),
        ({"question": "q", "context": "c"}, r"line 2: no answers key; allowed keys are 'answers', 'answer'"),
        ({"question": "q", "context": "c", "answers": []}, "line 2: answers must be a non-empty"),
        ({"question": "q", "context": "c", "answers": [3]}, "line 2: answers must be a non-empty"),
        ({"question": "", "context": "c", "answers": ["a"]}, "line 2: the question must be a non-empty string"),
        ({"question": "q", "context": ["c"], "answers": ["a"]}, "line 2: the context must be a string"),
        ([1, 2], "line 2: a row must be an object"),
        ({"question": "q", "context": "c", "answers": ["\u6771\u4eac"]}, "line 2: answers .* no printable-ASCII text"),
    ],
)
def test_bad_rows_name_file_line_and_key(tmp_path, row, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"question": "q", "context": "c", "answers": ["a"]}) + "\n" + json.dumps(row) + "\n")
    with pytest.raises((ValueError, TypeError), match=message) as err:
        load_tasks(path)
    assert str(path) in str(err.value)


def test_bad_files_are_named(tmp_path):
    (tmp_path / "broken.jsonl").write_text('{"question": "q"\n')
    with pytest.raises(ValueError, match=r"broken.jsonl line 1: not valid JSON"):
        load_tasks(tmp_path / "broken.jsonl")
    (tmp_path / "obj.json").write_text('{"question": "q"}')
    with pytest.raises(ValueError, match=r"obj.json: a .json data file must hold a list of rows"):
        load_tasks(tmp_path / "obj.json")
    (tmp_path / "rows.json").write_text('[{"question": "q", "context": "c", "answers": "a"}, {"query": "q"}]')
    with pytest.raises(ValueError, match=r"rows.json row 1: no (context|answers) key"):
        load_tasks(tmp_path / "rows.json")
    pq.write_table(pa.Table.from_pylist([{"question": "q", "input": "c"}]), tmp_path / "noans.parquet")
    with pytest.raises(ValueError, match=r"noans.parquet row 0: no answers key"):
        load_tasks(tmp_path / "noans.parquet")
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(ValueError, match="empty.jsonl: holds no rows"):
        load_tasks(tmp_path / "empty.jsonl")
    with pytest.raises(ValueError, match=r"unsupported file type '.csv'; allowed: .json, .jsonl, .parquet"):
        load_tasks(tmp_path / "data.csv")
    with pytest.raises(FileNotFoundError, match="missing.jsonl: no such data file"):
        load_tasks(tmp_path / "missing.jsonl")
