import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from memrl_envs.loaders import QATask, load_tasks

CONTEXT = ("Document 1:\nGhost\nGhost is based in New York.\n\n"
           "Document 2:\nMalmö\nLindström lives in Malmö – by the sea.")


def test_memagent_evaluation_files_read_input_as_the_question(tmp_path):
    # eval_{num_docs}.json as the authors' convert_to_eval writes it: a JSON list, "input" is the question.
    rows = [{"context": CONTEXT, "input": "Where is Ghost based?", "answers": ["New York"], "num_docs": 2, "index": 0},
            {"context": CONTEXT, "input": "Who lives in Malmö?", "answers": ["Lindström", "Ulf"], "num_docs": 2,
             "index": 1}]
    (tmp_path / "eval_2.json").write_text(json.dumps(rows, ensure_ascii=False, indent=4), encoding="utf-8")
    (tmp_path / "eval_2.jsonl").write_text("\n".join(json.dumps(r) for r in rows), encoding="utf-8")
    tasks = load_tasks(tmp_path / "eval_2.json")
    assert tasks[0] == QATask(question="Where is Ghost based?", documents=tuple(CONTEXT.split("\n")),
                              answers=("New York",))
    assert tasks[0].context == CONTEXT  # Unicode kept, en dash and accents included
    assert tasks[1].question == "Who lives in Malmö?" and tasks[1].answers == ("Lindström", "Ulf")
    assert load_tasks(tmp_path / "eval_2.jsonl") == tasks


def test_memagent_training_parquet_and_process_rows(tmp_path):
    # hotpotqa_train_process.parquet (verl): the question is the prompt, the answers the ground truth.
    verl = [{"data_source": "hotpotqa", "prompt": [{"role": "user", "content": "Where is Ghost based?"}],
             "context": CONTEXT, "ability": "memory", "reward_model": {"style": "rule", "ground_truth": ["New York"]},
             "extra_info": {"index": 0, "question": "Where is Ghost based?", "num_docs": 2}}]
    pq.write_table(pa.Table.from_pylist(verl), tmp_path / "hotpotqa_train_process.parquet")
    # dataset_process.py's rows: question, solution, context.
    process = [{"question": "Who lives in Malmö?", "solution": ["Lindström"], "context": CONTEXT}]
    pq.write_table(pa.Table.from_pylist(process), tmp_path / "hotpotqa_dev_process.parquet")
    (task,) = load_tasks(tmp_path / "hotpotqa_train_process.parquet")
    assert (task.question, task.answers, task.context) == ("Where is Ghost based?", ("New York",), CONTEXT)
    (task,) = load_tasks(tmp_path / "hotpotqa_dev_process.parquet")
    assert (task.question, task.answers) == ("Who lives in Malmö?", ("Lindström",))


def test_a_right_and_a_wrong_answer_score_on_a_memagent_file(tmp_path):
    from memrl_envs.chunk_stream import ChunkStreamEnv

    rows = [{"context": CONTEXT, "input": "Who lives in Malmö?", "answers": ["Lindström"], "num_docs": 2, "index": 0}]
    (tmp_path / "eval_2.json").write_text(json.dumps(rows, ensure_ascii=False), encoding="utf-8")
    env = ChunkStreamEnv(task="file", data_path=str(tmp_path / "eval_2.json"), chunk_tokens=8)
    for answer, reward in (("\\boxed{Lindström}", 1.0), ("\\boxed{Lindstrom}", 0.0)):
        obs, info = env.reset(seed=0)
        read = obs
        while info["phase"] == "memory":
            obs, _, _, _, info = env.step("memory")
            read += obs
        assert read == CONTEXT and info["question"] == "Who lives in Malmö?"
        assert env.step(answer)[1] == reward


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
        ({"context": "c", "answers": ["a"]}, r"line 2: no question key; allowed keys are 'question', 'query', 'input'"),
        ({"question": "q", "answers": ["a"]}, r"line 2: no context key; allowed keys are 'context', found"),
        ({"question": "q", "context": "c"}, r"line 2: no answers key; allowed keys are 'answers', 'answer', 'golden_"),
        ({"question": "q", "context": "c", "answers": []}, "line 2: answers must be a non-empty"),
        ({"question": "q", "context": "c", "answers": [3]}, "line 2: answers must be a non-empty"),
        ({"question": "", "context": "c", "answers": ["a"]}, "line 2: the question must be a non-empty string"),
        ({"question": "q", "context": ["c"], "answers": ["a"]}, "line 2: the context must be a string"),
        ([1, 2], "line 2: a row must be an object"),
        ({"prompt": "q", "reward_model": {"ground_truth": ["a"]}, "context": "c"}, "line 2: 'prompt' must be a chat"),
        ({"prompt": [{"role": "user", "content": "q"}], "reward_model": {}, "context": "c"},
         "line 2: 'reward_model' must hold ground_truth"),
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
    pq.write_table(pa.Table.from_pylist([{"question": "q", "context": "c"}]), tmp_path / "noans.parquet")
    with pytest.raises(ValueError, match=r"noans.parquet row 0: no answers key"):
        load_tasks(tmp_path / "noans.parquet")
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(ValueError, match="empty.jsonl: holds no rows"):
        load_tasks(tmp_path / "empty.jsonl")
    with pytest.raises(ValueError, match=r"unsupported file type '.csv'; allowed: .json, .jsonl, .parquet"):
        load_tasks(tmp_path / "data.csv")
    with pytest.raises(FileNotFoundError, match="missing.jsonl: no such data file"):
        load_tasks(tmp_path / "missing.jsonl")
