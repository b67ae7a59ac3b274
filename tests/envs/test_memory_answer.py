"""The answerer's prompt and the HTTP answerer against loopback servers that fail as real ones do (vLLM's own
OpenAI-compatible server is met in tests/tuned_examples/analyses/test_benchmark_eval.py)."""

import json
import time
from http.server import BaseHTTPRequestHandler
from typing import ClassVar

import pytest

from memrl_envs.memory_answer import (
    HTTPAnswerer,
    answer_messages,
    context_chunks,
    context_memory,
    memory_for,
    parse_verdict,
    render_memory,
)
from memrl_envs.memory_store import MemoryStore


def test_the_answerer_sees_core_and_items_ranked_for_the_question():
    store = MemoryStore()
    store.update("core", "The user shares news about friends.")
    for fact in ("Kema works for Quovex.", "Pasis lives in Colton.", "Horo works for Plixon."):
        store.insert("semantic", fact)
    store.insert("episodic", "At Day 1 09:00, Kema started at Quovex.")
    text = memory_for(store, "Which company does Kema work for?", top_k=1)
    assert "The user shares news about friends." in text
    assert "1. Kema works for Quovex." in text and "Pasis" not in text and "Horo" not in text
    assert "At Day 1 09:00, Kema started at Quovex." in text
    assert all(f in memory_for(store, "Kema", top_k=None) for f in ("Pasis", "Horo"))  # None: every item
    assert render_memory("", [], []).count("(empty)") == 3
    label = answer_messages(text, "Sample: river boat", "test_time_learning")[0]["content"]
    assert "\\boxed{n}" in label and "\\boxed" not in answer_messages(text, "q", "squad")[0]["content"]


def test_baselines_read_the_chunks_themselves_top_k_by_bm25_or_the_latest_that_fit():
    chunks = ["Kema works for Quovex.", "The weather is nice today.", "Quovex is based in Colton.", "Any idea?"]
    rag = context_chunks(chunks, "Where is the company Kema works for? Quovex", top_k=2)
    assert rag == ["Kema works for Quovex.", "Quovex is based in Colton."]
    assert context_chunks(chunks, "x", max_tokens=7) == ["Quovex is based in Colton.", "Any idea?"]
    assert context_chunks(chunks, "x") == chunks and context_chunks(chunks, "x", max_tokens=1) == []
    assert context_memory(rag) == "<context>\nKema works for Quovex.\n\nQuovex is based in Colton.\n</context>"
    assert context_memory([]) == "<context>\n(empty)\n</context>"


def test_verdicts_are_read_from_the_judges_json():
    assert parse_verdict('```json\n{"VALID": true, "ISSUES": [], "EXPLANATION": "ok"}\n```')
    assert not parse_verdict('{"VALID": false, "ISSUES": ["placeholder"], "EXPLANATION": "no"}')
    assert parse_verdict('<think>hmm</think> Result: "VALID": true, more text')
    assert not parse_verdict("I think it is valid.")  # no verdict: not valid
    assert not parse_verdict("[" * 10_000)


def test_bad_answerer_settings_are_named():
    with pytest.raises(ValueError, match="http"):
        HTTPAnswerer("localhost:8000", "m")
    with pytest.raises(ValueError, match="model"):
        HTTPAnswerer("http://127.0.0.1:8000/v1", "")
    assert HTTPAnswerer("http://h/v1/chat/completions", "m").base_url == "http://h/v1"


class _Flaky(BaseHTTPRequestHandler):
    """A chat endpoint that fails the first request of each chat with 503, then answers; "stall" waits 30 s."""

    seen: ClassVar[list[str]] = []

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        question = body["messages"][-1]["content"]
        type(self).seen.append(question)
        if question == "stall":
            time.sleep(30)
        if question == "trickle":  # headers, then one byte of the body every half second
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", "60")
            self.end_headers()
            try:
                for _ in range(60):
                    self.wfile.write(b" ")
                    self.wfile.flush()
                    time.sleep(0.5)
            except (BrokenPipeError, ConnectionResetError):  # the client gave up at its deadline
                pass
            return
        if type(self).seen.count(question) == 1:
            self.send_response(503)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        data = json.dumps({"id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                           "choices": [{"index": 0, "finish_reason": "stop",
                                        "message": {"role": "assistant", "content": f"re: {question}"}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def test_the_http_answerer_retries_what_may_pass_and_keeps_its_deadline(serve_http):
    url = serve_http(_Flaky) + "/v1"
    chats = [[{"role": "user", "content": q}] for q in ("a", "b")]
    assert HTTPAnswerer(url, "m", retries=1, timeout_s=10).answer(chats) == ["re: a", "re: b"]
    assert sorted(_Flaky.seen) == ["a", "a", "b", "b"]  # each failed once, then passed
    with pytest.raises(RuntimeError, match=r"answered HTTP 503"):
        HTTPAnswerer(url, "m", retries=0).answer([[{"role": "user", "content": "c"}]])
    for late in ("stall", "trickle"):  # no byte within the timeout; every byte within it, the whole answer not
        start = time.monotonic()
        with pytest.raises(ConnectionError, match=r"answerer http://127\.0\.0\.1:\d+/v1 .*within 1 s.*"
                                                  r"answerer_timeout_s"):
            HTTPAnswerer(url, "m", retries=0, timeout_s=1).answer([[{"role": "user", "content": late}]])
        assert time.monotonic() - start < 5


def test_items_that_share_no_word_with_the_question_fill_the_list_in_stored_order():
    store = MemoryStore()
    for fact in ("Kema works for Quovex.", "Pasis lives in Colton.", "Horo works for Plixon."):
        store.insert("semantic", fact)
    assert "1. Pasis lives in Colton.\n2. Kema works for Quovex." in memory_for(store, "Where is Colton?", top_k=2)
    unrelated = memory_for(store, "zzz qqq", top_k=2)  # BM25 scores all 0: the first two, as stored
    assert "1. Kema works for Quovex.\n2. Pasis lives in Colton.\n</semantic_memory>" in unrelated


def test_the_longmemeval_judge_asks_its_question_and_reads_yes_without_no():
    from memrl_envs.memory_answer import LME_JUDGE_PROMPT, LMEJudge

    class Replies:
        def __init__(self, reply):
            self.reply, self.seen = reply, []

        def answer(self, conversations):
            self.seen += conversations
            return [self.reply for _ in conversations]

    for reply, verdict in (("Yes.", 1.0), ("yes, but no", 0.0), ("<think>no</think>yes", 1.0), ("No", 0.0),
                           ("", 0.0)):
        answerer = Replies(reply)
        assert LMEJudge(answerer)("Q?", "rubric", "resp") == verdict
        (chat,) = answerer.seen
        assert chat == [{"role": "user", "content": LME_JUDGE_PROMPT.format(question="Q?", rubric="rubric",
                                                                              response="resp")}]
