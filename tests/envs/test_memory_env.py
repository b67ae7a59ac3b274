"""memrl/MemoryStore-v0 end to end: tool calls against the store, the answer phase over HTTP, the reward split."""

import json
from http.server import BaseHTTPRequestHandler

import gymnasium as gym
import pytest

import memrl_envs  # noqa: F401  (registers the envs)
from memrl_envs.memory_env import MemoryStoreEnv
from memrl_envs.memory_tasks import MemoryTask

FACT = ('\u273fFUNCTION\u273f: new_memory_insert\n'
        '\u273fARGS\u273f: {{"memory_type": "semantic_memory", "content": "{c}"}}\n')


class _Reader(BaseHTTPRequestHandler):
    """An OpenAI-compatible chat endpoint whose 'model' answers with the memory it was shown: the questions a memory
    holds are answered right, the others wrong. Subclasses answer otherwise (`reply`); each keeps its requests."""

    calls = []

    def reply(self, body: dict) -> str:
        return body["messages"][0]["content"]

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).calls.append((self.path, body))
        data = json.dumps({"choices": [{"message": {"role": "assistant", "content": self.reply(body)}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def reader_url(serve_http):
    return serve_http(_Reader) + "/v1"


def _facts_of(chunk: str) -> list[str]:
    return [line.split("Noted: ", 1)[1] for line in chunk.splitlines() if "Noted: " in line]


def test_an_episode_stores_what_the_calls_say_and_ends_with_rewards_per_row(reader_url):
    env = gym.make("memrl/MemoryStore-v0", num_chunks=3, num_questions=4, two_fact_share=0.0, answerer=reader_url,
                   answerer_model="reader")
    obs, info = env.reset(seed=2)
    assert info["phase"] == "memory" and info["chunk"] == 0 and info["num_chunks"] == 3
    assert env.unwrapped.metadata["blocking_io"]
    rewards = []
    for step in range(3):
        # Store every fact of the first two chunks; answer the third with text that calls nothing.
        reply = "".join(FACT.format(c=f) for f in _facts_of(obs)) if step < 2 else "I will remember."
        obs, reward, terminated, truncated, info = env.step(reply)
        rewards.append(reward)
        if step < 2:
            assert info["r_tool"] == 1.0 and info["r_content"] == 1.0 and all(c["ok"] for c in info["calls"])
            assert reward == pytest.approx(1.1) and not terminated
    assert terminated and not truncated and info["phase"] == "done"
    task = env.unwrapped.task
    stored = " ".join(info["memory"]["semantic"].values())
    held = [any(g in stored for g in q.answers) for q in task.questions]
    m = info["metrics"]
    assert m["r_acc"] == pytest.approx(sum(held) / 4) and 0 < m["r_acc"] < 1  # the third chunk's facts are lost
    assert m["r_compress"] == pytest.approx(1 - m["memory_tokens"] / m["chunk_tokens"])
    shared = m["r_acc"] + 0.05 * m["r_compress"]
    assert info["row_rewards"] == pytest.approx([shared + 1.1, shared + 1.1, shared])
    assert rewards[-1] == pytest.approx(shared)
    assert m["tool_success"] == 1.0 and m["r_tool"] == pytest.approx(2 / 3)
    assert len(info["answers"]) == 4 and info["golds"] == [list(q.answers) for q in task.questions]
    with pytest.raises(RuntimeError, match="after the episode ended"):
        env.step("more")


def test_the_answerer_sees_core_and_the_top_k_items_for_each_question(reader_url):
    _Reader.calls.clear()
    env = MemoryStoreEnv(num_chunks=1, num_questions=1, answerer=reader_url, answer_top_k=1)
    obs, _ = env.reset(seed=0)
    facts = _facts_of(obs)
    reply = "".join(FACT.format(c=f) for f in facts) + (
        '\u273fFUNCTION\u273f: memory_update\n\u273fARGS\u273f: {"memory_type": "core_memory", "new_content": '
        '"The user talks about friends."}')
    env.step(reply)
    (path, body), = _Reader.calls
    system, user = body["messages"]
    assert path == "/v1/chat/completions" and body["model"] == "default"
    assert user == {"role": "user", "content": env.task.questions[0].question}
    assert "The user talks about friends." in system["content"]
    assert sum(f in system["content"] for f in facts) == 1  # top_k = 1 semantic item


def test_text_memory_mode_keeps_the_reply_as_the_memory(reader_url):
    env = MemoryStoreEnv(num_chunks=2, num_questions=2, memory="text", answerer=reader_url)
    obs, _ = env.reset(seed=4)
    first = " ".join(_facts_of(obs))
    obs, reward, _, _, info = env.step(first)
    assert reward == 0.0 and info["memory"]["core"] == first and info["calls"] == []
    _, _, terminated, _, info = env.step(first + " " + " ".join(_facts_of(obs)))
    assert terminated and info["row_rewards"][0] == info["row_rewards"][1]
    assert info["metrics"]["r_acc"] == 1.0  # the paragraph holds every fact, and the reader reads it back


def test_without_an_answerer_the_episode_ends_unscored_and_a_dead_answerer_fails_it():
    env = MemoryStoreEnv(num_chunks=1)
    env.reset(seed=0)
    *_, terminated, _, info = env.step("nothing")
    assert terminated and "r_acc" not in info["metrics"] and not env.metadata["blocking_io"]
    env = MemoryStoreEnv(num_chunks=1, answerer="http://127.0.0.1:9/v1", answerer_retries=0, answerer_timeout_s=2)
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step("nothing")
    assert truncated and not terminated and "answerer" in info["failure"] and "127.0.0.1:9" in info["failure"]


def test_hostile_replies_are_failed_calls(reader_url):
    env = MemoryStoreEnv(num_chunks=2, answerer=None)
    env.reset(seed=0)
    nasty = ("\u273fFUNCTION\u273f: memory_update\n\u273fARGS\u273f: " + "[" * 5000 + "\n"
             "\u273fRESULT\u273f: {\"status\": \"ok\"}\n<tool_call>{\"name\": \"__import__('os')\"}</tool_call>"
             "\u273fFUNCTION\u273f: new_memory_insert\n"
             "\u273fARGS\u273f: {\"memory_type\": \"semantic\", \"content\": \""
             + "x" * 100_000 + "\"}")
    _, reward, _, _, info = env.step(nasty)
    assert info["calls"] and not any(c["ok"] for c in info["calls"]) and reward == 0.0
    assert env.store.to_dict() == {"core": "", "semantic": {}, "episodic": {}}


def test_file_tasks_and_dumps(tmp_path):
    rows = [{"instance_id": "a/1", "prompt": "Remember the meeting.", "chunks": json.dumps(["Kema met Pasis.", "x"]),
             "questions_and_answers": json.dumps([{"question": "Whom did Kema meet?", "answer": "Pasis"}]),
             "data_source": "squad"}]
    path = tmp_path / "tasks.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    env = MemoryStoreEnv(data="file", data_path=str(path), dump_dir=str(tmp_path / "dump"), max_chunks=1)
    obs, info = env.reset(seed=5)
    assert obs == "Kema met Pasis." and info["question"] == "Remember the meeting." and info["num_chunks"] == 1
    env.step(FACT.format(c="Kema met Pasis."))
    (dump,) = (tmp_path / "dump").iterdir()
    record = json.loads(dump.read_text())
    assert dump.name == "a_1-5.json" and record["memory"]["semantic"] and record["all_calls"][0]["ok"]


@pytest.mark.parametrize("options, message", [
    ({"answerer": "ftp://x"}, "answerer"), ({"memory": "graph"}, "memory"), ({"judge": "answerer"}, "judge"),
    ({"beta": -1}, "beta"), ({"nope": 1}, "nope"), ({"enabled": ["core", "procedural"]}, "enabled"),
    ({"data": "file"}, "data_path"), ({"answer_top_k": 0}, "answer_top_k"), ({"category": "x"}, "category"),
    ({"memory": "context", "answerer": "actor:a"}, "no writing phase"), ({"context_top_k": 0}, "context_top_k"),
])
def test_bad_options_are_named(options, message):
    with pytest.raises(ValueError, match=message):
        MemoryStoreEnv.check_options(options)


def test_the_task_record_is_what_generators_and_files_give():
    env = MemoryStoreEnv(category="test_time_learning", num_chunks=2)
    env.reset(seed=1)
    assert isinstance(env.task, MemoryTask) and env.task.data_source == "test_time_learning"


@pytest.mark.parametrize("category", ["accurate_retrieval", "test_time_learning", "long_range_understanding"])
def test_the_scripted_expert_makes_only_good_calls_and_a_memory_that_holds_the_answers(reader_url, category):
    env = MemoryStoreEnv(category=category, num_chunks=5, answerer=reader_url)
    env.reset(seed=11)
    terminated = False
    while not terminated:
        _, _, terminated, _, info = env.step(env.expert_action())
        assert info["r_tool"] == 1.0 and info["r_content"] == 1.0
    m = info["metrics"]
    assert m["tool_success"] == 1.0 and 0 < m["r_compress"] < 1
    if category == "test_time_learning":  # the rules name every label's words; reading them back is no label
        for label, words in (part.split(": ") for part in info["memory"]["core"].rstrip(".").split("; ")):
            assert label.split()[-1].isdigit() and words
    else:
        assert m["r_acc"] == 1.0  # the reader that reads the memory back answers everything


def test_an_expert_with_less_recall_makes_good_calls_that_answer_less(reader_url):
    def run(recall: float, seed: int = 4):
        env = MemoryStoreEnv(category="accurate_retrieval", num_chunks=4, num_questions=4, answerer=reader_url,
                             expert_recall=recall)
        env.reset(seed=seed)
        replies, terminated = [], False
        while not terminated:
            replies.append(env.expert_action())
            _, _, terminated, _, info = env.step(replies[-1])
            assert info["r_tool"] == 1.0 and info["r_content"] == 1.0  # small talk is filed as a dated event
        return replies, info

    (full, f), (none, n), (half, _) = run(1.0), run(0.0), run(0.5)
    assert f["metrics"]["r_acc"] == 1.0 and n["metrics"]["r_acc"] == 0.0
    assert n["memory"]["semantic"] == {} and len(n["memory"]["episodic"]) == 4
    assert half == run(0.5)[0] and half not in (full, none)  # the same task and chunk: the same choices
    with pytest.raises(ValueError, match=r"expert_recall must be a number in \[0, 1\]"):
        MemoryStoreEnv(expert_recall=2)


def test_the_text_mode_expert_writes_the_same_facts_as_one_paragraph(reader_url, tmp_path):
    env = MemoryStoreEnv(num_chunks=4, memory="text", answerer=reader_url)
    env.reset(seed=3)
    terminated = False
    while not terminated:
        _, reward, terminated, _, info = env.step(env.expert_action())
    assert info["metrics"]["r_acc"] == 1.0 and info["memory"]["semantic"] == {}
    with pytest.raises(RuntimeError, match="running episode"):
        env.expert_action()
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({"chunks": ["a b c"], "questions_and_answers": [{"question": "q", "answer": "a"}]}))
    env = MemoryStoreEnv(data="file", data_path=str(path))
    env.reset(seed=0)
    with pytest.raises(ValueError, match="synthetic"):
        env.expert_action()


def test_the_policy_can_answer_itself_seeing_what_an_answerer_would():
    env = MemoryStoreEnv(num_chunks=2, num_questions=3, answerer="policy")
    env.reset(seed=6)
    for _ in range(2):
        obs, reward, terminated, _, info = env.step(env.expert_action())
    assert not terminated and info["phase"] == "answer" and obs == env.task.questions[0].question
    assert info["answer_chat"] == env.answer_chat(0) and info["answer_chat"][1]["content"] == obs
    assert reward == pytest.approx(1.1) and not env.metadata["blocking_io"]
    answers = []
    while not terminated:
        answers.append(env.expert_action() if len(answers) != 1 else "no idea")
        obs, reward, terminated, _, info = env.step(answers[-1])
    assert info["answers"] == answers and info["metrics"]["r_acc"] == pytest.approx(2 / 3)
    shared = 2 / 3 + 0.05 * info["metrics"]["r_compress"]
    assert info["row_rewards"] == pytest.approx([shared + 1.1, shared + 1.1, shared, shared, shared])
    with pytest.raises(ValueError, match="frozen answerer"):
        MemoryStoreEnv.check_options({"answerer": "policy", "judge": "answerer"})


@pytest.mark.parametrize("options", [{}, {"context_top_k": 1}, {"context_tokens": 80}])
def test_context_mode_answers_from_the_chunks_themselves(options):
    """The long-context and RAG baselines: no writing phase, each question sees chunks, the memory is what it saw."""
    env = MemoryStoreEnv(memory="context", num_chunks=4, num_questions=2, answerer="policy", **options)
    obs, info = env.reset(seed=3)
    assert info["phase"] == "answer" and obs == env.task.questions[0].question
    chat = info["answer_chat"][0]["content"]
    shown = [c for c in env.task.chunks if c in chat]
    if options.get("context_top_k"):
        assert len(shown) == 1
    elif options.get("context_tokens"):
        assert shown == list(env.task.chunks[-len(shown):]) and 0 < len(shown) < 4
    else:
        assert shown == list(env.task.chunks)
    terminated = False
    while not terminated:
        obs, reward, terminated, _, info = env.step(env.expert_action())
    metrics = info["metrics"]
    assert metrics["r_acc"] == 1.0 and metrics["r_tool"] == 0.0 and len(info["row_rewards"]) == 2
    assert metrics["memory_tokens"] <= metrics["chunk_tokens"]
    assert (metrics["memory_tokens"] == metrics["chunk_tokens"]) == (not options)


def test_none_mode_answers_every_question_over_an_empty_store():
    """The empty-memory floor: nothing read or written, each question asked over the store as every episode starts."""
    env = MemoryStoreEnv(memory="none", num_chunks=4, num_questions=2, answerer="policy")
    obs, info = env.reset(seed=3)
    assert info["phase"] == "answer" and info["memory_mode"] == "none" and obs == env.task.questions[0].question
    before_any_write = MemoryStoreEnv(num_chunks=4, num_questions=2, answerer="policy")
    before_any_write.reset(seed=3)
    assert info["answer_chat"] == before_any_write.answer_chat(0)
    shown = " ".join(m["content"] for m in info["answer_chat"])
    assert not any(chunk in shown for chunk in env.task.chunks)
    terminated = False
    while not terminated:
        obs, reward, terminated, _, info = env.step(env.expert_action())
    metrics = info["metrics"]
    assert metrics["memory_tokens"] == 0.0 and metrics["r_compress"] == 1.0 and metrics["r_tool"] == 0.0
    assert metrics["r_acc"] == 1.0 and len(info["row_rewards"]) == 2  # the expert's answers, nothing to write
    with pytest.raises(ValueError, match="memory='none' has no writing phase"):
        MemoryStoreEnv.check_options({"memory": "none", "answerer": "http://127.0.0.1:1/v1"})
    with pytest.raises(ValueError, match="expert_writes needs"):
        MemoryStoreEnv.check_options({"memory": "none", "answerer": "policy", "expert_writes": True})


def test_reset_options_change_one_episode_and_name_what_is_fixed():
    env = MemoryStoreEnv(num_chunks=2, answerer="policy")
    obs, info = env.reset(seed=1, options={"memory": "context", "category": "long_range_understanding"})
    assert info["phase"] == "answer" and env.task.data_source == "long_range_understanding"
    obs, info = env.reset(seed=1)
    assert info["phase"] == "memory" and env.task.data_source == "accurate_retrieval" and len(env.task.chunks) == 2
    with pytest.raises(ValueError, match=r"\['answerer'\] are set once per env"):
        env.reset(seed=1, options={"answerer": None})
    with pytest.raises(ValueError, match="no option"):
        env.reset(seed=1, options={"colour": "red"})


@pytest.mark.parametrize("memory", ["tools", "text"])
def test_with_expert_writes_the_episode_starts_at_the_questions_over_the_experts_memory(memory):
    """The answerer's SFT data: the expert's memory is written in reset, the policy only answers."""
    env = MemoryStoreEnv(num_chunks=3, num_questions=2, answerer="policy", memory=memory, expert_writes=True)
    obs, info = env.reset(seed=4)
    assert info["phase"] == "answer" and obs == env.task.questions[0].question
    by_hand = MemoryStoreEnv(num_chunks=3, num_questions=2, memory=memory)
    by_hand.reset(seed=4)
    for _ in range(3):
        by_hand.step(by_hand.expert_action())
    assert info["memory"] == by_hand.store.to_dict() and info["answer_chat"] == by_hand.answer_chat(0)
    terminated = False
    while not terminated:
        obs, reward, terminated, _, info = env.step(env.expert_action())
    assert info["metrics"]["r_acc"] == 1.0 and len(info["row_rewards"]) == 2
    for bad in ({"memory": "context"}, {"data": "file", "data_path": "x.jsonl"}, {"answerer": "actor:a"}):
        with pytest.raises(ValueError, match="expert_writes needs"):
            MemoryStoreEnv.check_options({"expert_writes": True, **bad})


class _Judge(_Reader):
    """A LongMemEval judge endpoint: "yes" when the model response names the user's company, "no" otherwise."""

    calls = []

    def reply(self, body: dict) -> str:
        prompt = body["messages"][-1]["content"]
        response = prompt.split("Model Response: ", 1)[1].split("\n\nIs the model response correct?")[0]
        return "<think>no idea yet</think>Yes." if "Quovex" in response else "No."


def test_longmemeval_rows_are_scored_by_the_judge_with_its_prompt_and_need_one(serve_http, tmp_path):
    row = {"instance_id": "lme/1", "chunks": ["I started at Quovex this week."], "data_source": "lme_train",
           "questions_and_answers": [{"question": "Can you suggest a gift for my team?",
                                      "answer": "The user would prefer suggestions that fit their new job at Quovex."}]}
    path = tmp_path / "lme.jsonl"
    path.write_text(json.dumps(row))
    with pytest.raises(ValueError, match=r"\['lme_train'\].*answer_judge"):
        MemoryStoreEnv(data="file", data_path=str(path), answerer="policy")
    judge = serve_http(_Judge) + "/v1"
    scores = []
    for answer in ("A mug with the Quovex logo for your new colleagues.", "Flowers are always nice."):
        _Judge.calls.clear()
        env = MemoryStoreEnv(data="file", data_path=str(path), answerer="policy", answer_judge=judge)
        env.reset(seed=0)
        env.step("nothing to keep")
        *_, terminated, _, info = env.step(answer)
        assert terminated and "failure" not in info
        scores.append(info["metrics"]["r_acc"])
        ((_, body),) = _Judge.calls
        (message,) = body["messages"]
        assert message["role"] == "user" and message["content"].startswith("I will give you a question, a rubric")
        assert f"Rubric: {row['questions_and_answers'][0]['answer']}" in message["content"]
    assert scores == [1.0, 0.0]
    with pytest.raises(ValueError, match="answer_judge"):
        MemoryStoreEnv.check_options({"answer_judge": "ftp://x"})


class _BenchmarkJudge(_Reader):
    """LongMemEval's judge as an endpoint: "yes" when the response under judgment says three days."""

    calls = []

    def reply(self, body: dict) -> str:
        return "Yes" if "Model Response: 3 days" in body["messages"][0]["content"] else "No"


def _answer_all(env, replies, seed=0):
    obs, info = env.reset(seed=seed)
    chats = []
    for reply in replies:
        chats.append(info["answer_chat"])
        obs, _, terminated, _, info = env.step(reply)
    assert terminated and "failure" not in info
    return chats, info


def test_benchmark_files_are_shown_and_scored_as_each_benchmark_does(tmp_path, benchmark_records, serve_http):
    locomo = tmp_path / "locomo10.json"
    locomo.write_text(json.dumps(benchmark_records["locomo"]))
    env = MemoryStoreEnv(data="benchmark", benchmark="locomo", data_path=str(locomo), memory="context",
                         answerer="policy")
    env.reset(seed=0)
    options = "ab" if "(a) a sunrise" in env.task.questions[2].question else "ba"  # (a) is the wrong option or not
    chats, info = _answer_all(env, ["pottery class", "In 2022", options[1]])
    system, question = chats[1]
    assert "DATE: 1:56 pm on 8 May, 2023\nCONVERSATION:\nCaroline said" in system["content"]
    assert question["content"].endswith("Use DATE of CONVERSATION to answer with an approximate date.")
    assert "boxed" not in system["content"]  # no Mem-α instruction beside the benchmark's own wording
    assert [q["score"] for q in info["questions"]] == pytest.approx([1.0, 2 / 3, 1.0])
    assert [q["category"] for q in info["questions"]] == [4, 2, 5] and info["questions"][2]["abstention"]
    assert info["metrics"]["r_acc"] == pytest.approx((1 + 2 / 3 + 1) / 3)
    assert [info["metrics"][f"question_score_{i}"] for i in range(3)] == pytest.approx([1.0, 2 / 3, 1.0])
    assert env.reset(seed=1)[1]["answer_chat"][0]["content"].count("DATE: ") == 1  # the second conversation

    lme = tmp_path / "longmemeval_s.json"
    lme.write_text(json.dumps(benchmark_records["longmemeval"]))
    with pytest.raises(ValueError, match="holds LongMemEval questions, which its judge scores"):
        MemoryStoreEnv(data="benchmark", benchmark="longmemeval", data_path=str(lme), memory="context",
                       answerer="policy")
    env = MemoryStoreEnv(data="benchmark", benchmark="longmemeval", data_path=str(lme), memory="context",
                         answerer="policy", answer_judge=serve_http(_BenchmarkJudge) + "/v1")
    for reply, score in (("3 days", 1.0), ("a week", 0.0)):
        _BenchmarkJudge.calls.clear()
        chats, info = _answer_all(env, [reply])
        assert chats[0][1]["content"] == ("Current Date: 2023/05/30 (Tue) 23:40\nQuestion: How many days before the "
                                          "café opening did I buy the espresso machine?")
        assert "### Session 2:\nSession Date: 2023/05/24 (Wed) 10:05" in chats[0][0]["content"]
        assert info["questions"] == [{"question_id": "7a3c51e2", "category": "temporal-reasoning",
                                      "abstention": False, "score": score}]
        ((_, body),) = _BenchmarkJudge.calls
        assert body["temperature"] == 0.0 and body["max_tokens"] == 10  # as LongMemEval asks its judge
        assert "do not penalize off-by-one errors" in body["messages"][0]["content"]
    with pytest.raises(ValueError, match="data='benchmark' needs benchmark"):
        MemoryStoreEnv(data="benchmark", data_path=str(lme))


class _LocomoJudge(_Reader):
    """Mem0's LoCoMo judge as an endpoint: CORRECT when the generated answer is "pottery class"."""

    calls = []

    def reply(self, body: dict) -> str:
        right = "Generated answer: pottery class\n" in body["messages"][0]["content"]
        return 'Same activity. ```json\n{"label": "%s"}\n```' % ("CORRECT" if right else "WRONG")


def test_locomo_answers_also_get_the_llm_judges_label_when_a_judge_is_given(tmp_path, benchmark_records, serve_http):
    locomo = tmp_path / "locomo10.json"
    locomo.write_text(json.dumps(benchmark_records["locomo"]))
    env = MemoryStoreEnv(data="benchmark", benchmark="locomo", data_path=str(locomo), memory="context",
                         answerer="policy", answer_judge=serve_http(_LocomoJudge) + "/v1", answer_judge_model="j")
    _, info = _answer_all(env, ["pottery class", "In 2022", "a"])
    assert [q.get("judge") for q in info["questions"]] == [1.0, 0.0, None]  # adversarial questions are not judged
    assert info["metrics"]["question_judge_0"] == 1.0 and "question_judge_2" not in info["metrics"]
    bodies = [body for _, body in _LocomoJudge.calls]
    assert [b["model"] for b in bodies] == ["j", "j"] and bodies[0]["max_tokens"] == 512


def test_memoryagentbench_recommendation_rows_are_scored_against_the_catalogue_given(tmp_path):
    row = {"context": "User: I loved Heat. Recommender: Try Alien.", "questions": ["User: something scary?"],
           "answers": [["5", "4"]], "metadata": {"source": "recsys_redial_full"}}
    data = tmp_path / "Test_Time_Learning.json"
    data.write_text(json.dumps([row]))
    catalogue = tmp_path / "entity2id.json"
    catalogue.write_text(json.dumps({"<http://dbpedia.org/resource/Heat_(1995)>": 4, "Alien_(1979)": 5, "Up": 1}))
    env = MemoryStoreEnv(data="benchmark", benchmark="memoryagentbench", data_path=str(data), memory="context",
                         answerer="policy", entity_ids_path=str(catalogue))
    chats, info = _answer_all(env, ["Here you go:\n1. Alien\n2. Up\n3. Heat"])
    assert "Pretend you are a movie recommender system." in chats[0][1]["content"]
    assert info["questions"][0]["score"] == 1.0  # Recall@5: both gold movies in the first five
    with pytest.raises(ValueError, match=r"\['recsys_redial_full'\], scored against the benchmark's movie catalogue; "
                                         r"give entity_ids_path"):
        MemoryStoreEnv(data="benchmark", benchmark="memoryagentbench", data_path=str(data), memory="context",
                       answerer="policy")
