"""LongMemEval, LoCoMo and MemoryAgentBench files, written here in each benchmark's released format, read into chunks
and questions."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from memrl_envs.memory_benchmarks import (BenchmarkChunk, BenchmarkInstance, BenchmarkQuestion, chunk_context,
                                          load_benchmark, load_locomo, load_longmemeval, load_memoryagentbench)

def write_json(path, records):
    path.write_text(json.dumps(records, ensure_ascii=False, indent=2), encoding="utf-8")
    return path


def test_longmemeval_sessions_become_dated_chunks_and_abstention_is_read_from_the_id(tmp_path, benchmark_records):
    longmemeval = benchmark_records["longmemeval"]
    instances = load_longmemeval(write_json(tmp_path / "longmemeval_s.json", longmemeval))
    first, second = instances
    assert first.benchmark == "longmemeval" and first.instance_id == "7a3c51e2"
    assert first.chunks == (
        BenchmarkChunk("user: Can you suggest a name for a bakery in Malmö?\n\n"
                       "assistant: How about “Söta Hörnet” – the sweet corner?",
                       "2023/05/20 (Sat) 02:21", "sharegpt_Qx81_0"),
        BenchmarkChunk("user: I just bought an espresso machine for the café.\n\n"
                       "assistant: Congratulations! Descale it monthly.", "2023/05/24 (Wed) 10:05",
                       "answer_7a3c51e2_1"),
        BenchmarkChunk("user: The café opened today!\n\nassistant: Wonderful news.", "2023/05/27 (Sat) 18:30",
                       "answer_7a3c51e2_2"))
    assert first.questions == (BenchmarkQuestion(
        question_id="7a3c51e2", question="How many days before the café opening did I buy the espresso machine?",
        answers=("3",), category="temporal-reasoning", date="2023/05/30 (Tue) 23:40",
        evidence=("answer_7a3c51e2_1", "answer_7a3c51e2_2"), abstention=False),)
    (question,) = second.questions
    assert question.abstention and question.category == "single-session-user"
    assert question.answers == ("The information provided is not enough. You mentioned your dog Björn but not a cat.",)
    assert second.chunks == (BenchmarkChunk("user: My dog Björn loves the snow.\n\nassistant: Björn sounds like a "
                                            "happy dog!", "2023/06/01 (Thu) 20:00", "answer_c4f09d11_abs_1"),)
    # The Hugging Face copies are named without a suffix; JSONL as the authors' scripts also accept.
    assert load_benchmark("longmemeval", write_json(tmp_path / "longmemeval_oracle", longmemeval)) == instances
    (tmp_path / "lme.jsonl").write_text("\n".join(json.dumps(r) for r in longmemeval), encoding="utf-8")
    assert load_longmemeval(tmp_path / "lme.jsonl") == instances


def test_locomo_sessions_keep_speakers_dates_and_the_adversarial_answer(tmp_path, benchmark_records):
    locomo = benchmark_records["locomo"]
    conv, other = load_locomo(write_json(tmp_path / "locomo10.json", locomo))
    assert isinstance(conv, BenchmarkInstance) and (conv.benchmark, conv.instance_id) == ("locomo", "conv-26")
    assert conv.chunks == (  # the empty session_3 has nothing to read
        BenchmarkChunk('Caroline said, "I went to a pottery class yesterday!"\n\nMelanie said, "Nice – what did you '
                       'make?"', "1:56 pm on 8 May, 2023", "session_1"),
        BenchmarkChunk('Melanie said, "Look at the sunrise I painted in 2022."\n and shared a painting of a sunrise.\n'
                       'Caroline said, "It’s beautiful."', "7:03 pm on 25 May, 2023", "session_2"))
    assert conv.questions == (
        BenchmarkQuestion("conv-26#0", "What did Caroline do the day before 8 May 2023?", ("pottery class",), 4,
                          evidence=("D1:1",)),
        BenchmarkQuestion("conv-26#1", "When did Melanie paint a sunrise?", ("2022",), 2, evidence=("D2:1",)),
        BenchmarkQuestion("conv-26#2", "What did Caroline paint in 2022?", ("a sunrise",), 5, evidence=("D2:1",),
                          abstention=True))
    assert other.chunks == (BenchmarkChunk('Jon said, "I lost my job at the bank."', "4:04 pm on 20 January, 2023",
                                           "session_1"),)
    assert [q.answers for q in other.questions] == [("a bank",)]
    # Sessions are read in number order whatever the key order, session_10 after session_9.
    sample = {"sample_id": "s", "qa": [],
              "conversation": {f"session_{n}": [{"speaker": "A", "dia_id": f"D{n}:1", "text": str(n)}]
                               for n in (10, 2, 9)} | {f"session_{n}_date_time": f"day {n}" for n in (10, 2, 9)}}
    (instance,) = load_locomo(write_json(tmp_path / "order.json", [sample]))
    assert [c.session_id for c in instance.chunks] == ["session_2", "session_9", "session_10"]


def test_locomo_category_5_with_both_answer_keys_reads_the_adversarial_one(tmp_path, benchmark_records):
    locomo = benchmark_records["locomo"]
    sample = json.loads(json.dumps(locomo[1]))
    sample["qa"].append({"question": "Where did Gina work?", "answer": "Not mentioned", "adversarial_answer": "a bank",
                         "evidence": [], "category": 5})
    (instance,) = load_locomo(write_json(tmp_path / "locomo10.json", [sample]))
    assert instance.questions[1].answers == ("a bank",) and instance.questions[1].abstention


def test_memoryagentbench_rows_chunk_the_context_at_sentence_ends(tmp_path, benchmark_records):
    schema = benchmark_records["memoryagentbench_schema"]
    mab = benchmark_records["memoryagentbench"]
    pq.write_table(pa.Table.from_pylist(mab, schema=schema),
                   tmp_path / "Accurate_Retrieval-00000-of-00001.parquet")
    rows, lme = load_memoryagentbench(tmp_path / "Accurate_Retrieval-00000-of-00001.parquet", chunk_tokens=8)
    assert (rows.benchmark, rows.instance_id) == ("memoryagentbench", "ruler_qa1_197K#0")
    # 6 + 5 words overflow 8, the 8-word sentence fills a chunk, the last two sentences share one (newline kept).
    assert rows.chunks == tuple(BenchmarkChunk(t) for t in (
        "Ghost is based in New York.", "The studio moved in 2019!", "Lindström lives in Malmö – by the sea.",
        "Is it far?\nYes."))
    assert rows.questions == (BenchmarkQuestion("q-0", "Where is Ghost based?", ("New York", "NYC")),
                              BenchmarkQuestion("q-1", "Where does Lindström live?", ("Malmö",)),
                              BenchmarkQuestion("q-2", "When did it move?", ("2019",)))
    assert lme.questions == (BenchmarkQuestion("c4f09d11_abs", "What is my cat's name?",
                                               ("You never mentioned a cat.",), "single-session-user",
                                               "2023/06/02 (Fri) 09:12", abstention=True),)
    assert lme.chunks == (BenchmarkChunk("user: My dog is Björn.\nassistant: Lovely name."),)
    write_json(tmp_path / "rows.json", mab)
    assert load_benchmark("memoryagentbench", tmp_path / "rows.json", chunk_tokens=8) == (rows, lme)


def test_memoryagentbench_reads_a_lone_question_and_unnumbered_questions_as_its_repo_does(tmp_path):
    row = {"context": "One. Two.", "questions": "Which numbers?", "answers": ["one", "two"],
           "metadata": {"source": "infbench_sum"}}
    (instance,) = load_memoryagentbench(write_json(tmp_path / "rows.json", [row]))
    assert instance.chunks == (BenchmarkChunk("One. Two."),)
    assert instance.questions == (BenchmarkQuestion("infbench_sum#0#0", "Which numbers?", ("one", "two")),)


def test_chunk_context_packs_whole_sentences_and_keeps_an_overlong_one_alone(benchmark_records):
    context = benchmark_records["memoryagentbench"][0]["context"]
    mab = benchmark_records["memoryagentbench"]
    assert chunk_context(context, 100) == (context,)
    assert chunk_context(context, 4) == ("Ghost is based in New York.", "The studio moved in 2019!",
                                         "Lindström lives in Malmö – by the sea.", "Is it far?\nYes.")
    assert chunk_context('He said "Stop." Then he left', 3) == ('He said "Stop."', "Then he left")
    with pytest.raises(ValueError, match="chunk_tokens must be at least 1"):
        chunk_context(context, 0)


def test_a_missing_key_names_the_file_the_record_and_the_key(tmp_path, benchmark_records):
    longmemeval = benchmark_records["longmemeval"]
    locomo = benchmark_records["locomo"]
    mab = benchmark_records["memoryagentbench"]
    broken = json.loads(json.dumps(longmemeval))
    del broken[1]["answer"]
    path = write_json(tmp_path / "longmemeval_s.json", broken)
    with pytest.raises(ValueError, match=r"longmemeval_s\.json row 1 \(question_id 'c4f09d11_abs'\): no 'answer' key"):
        load_longmemeval(path)
    broken[1]["answer"], broken[1]["haystack_dates"] = "x", []
    with pytest.raises(ValueError, match=r"row 1 .*must be parallel lists, got lengths 1, 0, 1"):
        load_longmemeval(write_json(path, broken))
    del broken[0]["haystack_sessions"][0][1]["role"]
    with pytest.raises(ValueError, match=r"row 0 .* haystack_sessions\[0\] turn 1: no 'role' key"):
        load_longmemeval(write_json(path, broken))

    broken = json.loads(json.dumps(locomo))
    del broken[0]["conversation"]["session_2_date_time"]
    path = write_json(tmp_path / "locomo10.json", broken)
    with pytest.raises(ValueError, match=r"locomo10\.json row 0 \(sample_id 'conv-26'\) conversation: no "
                                         r"'session_2_date_time' key"):
        load_locomo(path)
    broken = json.loads(json.dumps(locomo))
    del broken[0]["qa"][2]["adversarial_answer"]
    with pytest.raises(ValueError, match=r"row 0 \(sample_id 'conv-26'\) qa 2: no 'answer' key \(category 5: "
                                         r"'adversarial_answer' or 'answer'"):
        load_locomo(write_json(path, broken))

    broken = json.loads(json.dumps(mab))
    del broken[1]["questions"]
    with pytest.raises(ValueError, match=r"rows\.json row 1 \(source 'longmemeval_s\*'\): no 'questions' key"):
        load_memoryagentbench(write_json(tmp_path / "rows.json", broken))
    broken[1]["questions"] = ["a?", "b?"]
    with pytest.raises(ValueError, match=r"row 1 .*'answers' must hold one entry per question \(2\), got 1"):
        load_memoryagentbench(write_json(tmp_path / "rows.json", broken))
    with pytest.raises(ValueError, match="unknown benchmark 'locomo10'; allowed: longmemeval, locomo, memoryagent"):
        load_benchmark("locomo10", path)


def test_chunks_are_shown_as_each_benchmarks_answer_prompt_lays_out_its_history():
    from memrl_envs.memory_benchmarks import chunk_text

    chunk = BenchmarkChunk("user: hi\n\nassistant: hello", "2023/05/20 (Sat) 02:21", "s1")
    assert chunk_text("longmemeval", chunk, 0) == ("### Session 1:\nSession Date: 2023/05/20 (Sat) 02:21\nSession "
                                                   "Content:\n\n\nuser: hi\n\nassistant: hello")
    assert chunk_text("locomo", BenchmarkChunk('A said, "x"', "1:56 pm on 8 May, 2023"), 3) == (
        'DATE: 1:56 pm on 8 May, 2023\nCONVERSATION:\nA said, "x"')
    assert chunk_text("memoryagentbench", BenchmarkChunk("Some text."), 5) == "Some text."
    with pytest.raises(ValueError, match="unknown benchmark 'lme'"):
        chunk_text("lme", chunk, 0)


def test_memoryagentbench_questions_are_asked_in_the_template_of_their_sub_dataset():
    from memrl_envs.memory_benchmarks import question_text

    q = BenchmarkQuestion("q-0", "Where is Ghost based?", ("New York",))
    long_context = question_text("memoryagentbench", q, "ruler_qa1_197K")
    assert long_context.startswith("Answer the question based on the memorized documents. Only give me the answer")
    assert long_context.endswith("\n\nQuestion: Where is Ghost based? \n\n Answer:")
    assert question_text("memoryagentbench", q, "ruler_qa1_197K", reader="rag").endswith(
        "\n\n Now Answer the Question: Where is Ghost based?")
    label = question_text("memoryagentbench", BenchmarkQuestion("i", "bank card lost", ("3",)),
                          "icl_banking77_5900shot_balance")
    assert 'Only output "label: {label}" and nothing else. \n\nbank card lost \n\n label:' in label
    assert "Based on the provided Knowledge Pool, Where is Ghost based? \nAnswer:" in question_text(
        "memoryagentbench", q, "factconsolidation_sh_6k")
    with pytest.raises(ValueError, match="no question template for source 'booksum'"):
        question_text("memoryagentbench", q, "booksum")
