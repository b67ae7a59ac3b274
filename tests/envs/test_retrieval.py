import json
import os
import signal
import socket
import time
from http.server import BaseHTTPRequestHandler
from typing import ClassVar

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from memrl_envs.retrieval import (
    NO_RESULTS,
    ActorRetriever,
    BM25Retriever,
    HTTPRetriever,
    Passage,
    format_information,
    load_corpus,
    passage_from_row,
    start_retrieval_server,
)

PASSAGES = [
    Passage("0", "Hulport", "Hulport is a harbour city in the Norvale region."),
    Passage("1", "Kema", "Kema was born in Hulport and works for Quovex."),
    Passage("2", "Quovex", "Quovex is a company founded in Gerford."),
    Passage("3", "Gerford", "Gerford is an inland city known for its mills."),
    Passage("4", "Trorum", "Trorum is a company founded in Hulport by Dulia."),
]


def test_bm25_ranks_matching_passages_and_drops_non_matches():
    retriever = BM25Retriever(PASSAGES)
    hits = retriever.search(["Kema", "Quovex founded", "the of", "zebra"], 3)
    assert [h["id"] for h in hits[0]] == ["1"]
    assert hits[0][0] == {"id": "1", "title": "Kema", "text": PASSAGES[1].text, "score": hits[0][0]["score"]}
    assert hits[0][0]["score"] > 0
    assert hits[1][0]["id"] == "2" and len(hits[1]) <= 3
    assert [s["score"] for s in hits[1]] == sorted((s["score"] for s in hits[1]), reverse=True)
    assert hits[2] == [] and hits[3] == []  # stopwords only / unknown word: no hits, not arbitrary passages
    assert len(retriever.search(["Hulport"], 50)[0]) == 3  # top_k above the corpus size is fine
    assert retriever.search([], 3) == []


def test_bad_search_arguments_are_named():
    retriever = BM25Retriever(PASSAGES)
    with pytest.raises(TypeError, match="queries must be a list of strings"):
        retriever.search("Kema", 3)
    with pytest.raises(TypeError, match="queries must be a list of strings"):
        retriever.search([1], 3)
    with pytest.raises(ValueError, match="top_k must be an int >= 1, got 0"):
        retriever.search(["Kema"], 0)
    with pytest.raises(ValueError, match="at least one passage"):
        BM25Retriever([])


def test_format_information_is_search_r1_style():
    hits = BM25Retriever(PASSAGES).search(["Quovex"], 2)[0]
    text = format_information(hits, "You have 2 turns left.")
    assert text == (
        "<information>You have 2 turns left.\n"
        "Doc 1(Title: Quovex) Quovex is a company founded in Gerford.\n"
        "Doc 2(Title: Kema) Kema was born in Hulport and works for Quovex.</information>"
    )
    assert format_information([]) == f"<information>{NO_RESULTS}</information>"
    odd = [{"id": "x", "title": "Malmö", "text": "line one\nline two " + "long " * 50, "score": 1.0}]
    line = format_information(odd, max_doc_chars=40)
    assert line == "<information>Doc 1(Title: Malmö) line one line two lo</information>"  # Unicode kept
    with pytest.raises(ValueError, match="max_doc_chars must be an int >= 1"):
        format_information(odd, max_doc_chars=0)


def test_corpus_files(tmp_path):
    rows = [{"id": 7, "contents": '"Hulport"\nHulport is a city.'}, {"title": "Kema", "text": "Kema is a person."}]
    path = tmp_path / "wiki.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    expected = [Passage("7", '"Hulport"', "Hulport is a city."), Passage("1", "Kema", "Kema is a person.")]
    assert load_corpus(path) == expected
    pq.write_table(pa.Table.from_pylist([{"id": "a", "contents": "T\nx"}]), tmp_path / "wiki.parquet")
    assert load_corpus(tmp_path / "wiki.parquet") == [Passage("a", "T", "x")]


@pytest.mark.parametrize(
    "content, message",
    [
        ('{"id": 1, "body": "x"}\n', r"line 1: a passage needs 'contents' .* found keys \['body', 'id'\]"),
        ('{"id": 1, "contents": 5}\n', "line 1: 'contents' must be a string"),
        ('{"id": 1, "contents": "T\\nx"}\n{oops\n', "line 2: not valid JSON"),
        ("\n\n", "holds no rows"),
        ("[1]\n", "line 1: a passage must be an object, got list"),
    ],
)
def test_bad_corpus_files_are_named(tmp_path, content, message):
    path = tmp_path / "wiki.jsonl"
    path.write_text(content)
    with pytest.raises((ValueError, TypeError), match=message):
        load_corpus(path)


def test_missing_or_unsupported_corpus_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such data file"):
        load_corpus(tmp_path / "absent.jsonl")
    with pytest.raises(ValueError, match="unsupported file type '.tsv'"):
        load_corpus(tmp_path / "wiki.tsv")
    with pytest.raises(TypeError, match="'title' and 'text' must be strings"):
        passage_from_row({"title": "x", "text": None}, "row 0")


class _Handler(BaseHTTPRequestHandler):
    """A tiny retrieval server answering over a real BM25 index, in the Search-R1 and FlashRAG shapes."""

    retriever = BM25Retriever(PASSAGES)
    requests: ClassVar[list] = []

    def log_message(self, *args):  # keep test output clean
        pass

    def _answer(self, payload, status=200, raw=None):
        data = raw if raw is not None else json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.requests.append((self.path, body))
        if self.path == "/retrieve":
            hits = self.retriever.search(body["queries"], body["topk"])
            result = [[{"document": {"id": h["id"], "contents": f"{h['title']}\n{h['text']}"}, "score": h["score"]}
                       for h in row] for row in hits]
            self._answer({"result": result})
        elif self.path == "/search":
            hits = self.retriever.search([body["query"]], body["top_n"])[0]
            self._answer([[{"id": h["id"], "contents": f"{h['title']}\n{h['text']}"} for h in hits],
                          [h["score"] for h in hits]])
        elif self.path == "/retrieve_plain":  # MEM1's web-search servers: documents, no scores, more than asked
            hits = self.retriever.search(body["queries"], 6)
            self._answer({"result": [[{"id": h["id"], "contents": f"{h['title']}\n{h['text']}"} for h in row]
                                     for row in hits]})
        elif self.path == "/retrieve_unscored":
            hits = self.retriever.search(body["queries"], body["topk"])
            self._answer({"result": [[{"document": {"id": h["id"], "text": h["text"]}} for h in row] for row in hits]})
        elif self.path == "/search_docs":
            hits = self.retriever.search([body["query"]], 6)[0]
            self._answer([{"id": h["id"], "contents": f"{h['title']}\n{h['text']}"} for h in hits])
        elif self.path == "/search_many":
            hits = self.retriever.search([body["query"]], 6)[0]
            self._answer([[{"id": h["id"], "contents": f"{h['title']}\n{h['text']}"} for h in hits],
                          [h["score"] for h in hits]])
        elif self.path == "/nan_score":
            self._answer(None, raw=b'{"result": [[{"document": {"id": 1, "contents": "T\\nx"}, "score": NaN}]]}')
        elif self.path == "/not_json":
            self._answer(None, raw=b"<html>oops</html>")
        elif self.path == "/wrong_shape":
            self._answer({"results": []})
        elif self.path == "/bad_hit":
            self._answer({"result": [[{"document": {"id": 1, "body": "x"}, "score": 1.0}]]})
        elif self.path == "/bad_score":
            self._answer({"result": [[{"document": {"id": 1, "contents": "T\nx"}, "score": "high"}]]})
        elif self.path == "/flashrag_wrong":
            self._answer([[{"id": "1", "contents": "T\nx"}], []])
        else:
            self._answer({"detail": "Not Found"}, status=404)


@pytest.fixture(scope="module")
def server_url(serve_http):
    return serve_http(_Handler)


def test_http_search_r1_shape(server_url):
    retriever = HTTPRetriever(server_url + "/retrieve")
    queries = ["Kema", "Quovex founded", "zebra"]
    assert retriever.search(queries, 2) == BM25Retriever(PASSAGES).search(queries, 2)
    path, body = _Handler.requests[-1]
    assert (path, body) == ("/retrieve", {"queries": queries, "topk": 2, "return_scores": True})


def test_http_flashrag_shape(server_url):
    retriever = HTTPRetriever(server_url + "/search", api="flashrag")
    queries = ["Hulport", "Gerford mills"]
    assert retriever.search(queries, 3) == BM25Retriever(PASSAGES).search(queries, 3)
    assert _Handler.requests[-2:] == [
        ("/search", {"query": "Hulport", "top_n": 3, "return_score": True}),
        ("/search", {"query": "Gerford mills", "top_n": 3, "return_score": True}),
    ]


def test_http_answers_without_scores_or_with_too_many_hits(server_url):
    bm25 = BM25Retriever(PASSAGES)
    queries = ["Kema", "Quovex founded"]
    wanted = [[{**h, "score": None} for h in row] for row in bm25.search(queries, 2)]
    assert max(len(row) for row in bm25.search(queries, 6)) > 2  # the servers below send more than asked
    assert HTTPRetriever(server_url + "/retrieve_plain").search(queries, 2) == wanted
    unscored = HTTPRetriever(server_url + "/retrieve_unscored").search(queries, 2)
    assert unscored == [[{**h, "title": ""} for h in row] for row in wanted]  # {"id", "text"}: no title
    for path in ("/search_docs", "/search_many"):
        got = HTTPRetriever(server_url + path, api="flashrag").search(queries, 2)
        assert [[h["id"] for h in row] for row in got] == [[h["id"] for h in row] for row in wanted]


@pytest.mark.parametrize(
    "path, api, error, message",
    [
        ("/nan_score", "search_r1", ValueError, "result 0 hit 0 has a score that is not a finite number: nan"),
        ("/not_json", "search_r1", ValueError, "did not answer JSON: b'<html>oops</html>'"),
        ("/wrong_shape", "search_r1", ValueError, r"should answer \{'result': \[a list of hits per query\]\} for 1"),
        ("/bad_hit", "search_r1", ValueError, "result 0 hit 0: a passage needs 'contents'"),
        ("/bad_score", "search_r1", ValueError, "result 0 hit 0 has a score that is not a number: 'high'"),
        ("/flashrag_wrong", "flashrag", ValueError, r"should answer \[documents, scores\] \(two lists of equal"),
        ("/missing", "search_r1", RuntimeError, "answered HTTP 404"),
    ],
)
def test_http_malformed_answers_are_named(server_url, path, api, error, message):
    with pytest.raises(error, match=message):
        HTTPRetriever(server_url + path, api=api).search(["Kema"], 3)


def test_http_unreachable_server_is_named():
    with socket.socket() as s:  # a port that nothing listens on once this closes
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/retrieve"
    with pytest.raises(ConnectionError, match=f"cannot reach the retrieval server at {url}"):
        HTTPRetriever(url, timeout_s=2).search(["Kema"], 3)


def test_http_bad_config_is_named():
    with pytest.raises(ValueError, match="url must start with http:// or https://"):
        HTTPRetriever("localhost:8000/retrieve")
    with pytest.raises(ValueError, match="api='faiss' is not allowed"):
        HTTPRetriever("http://localhost:8000/retrieve", api="faiss")


def test_ray_actor_serves_concurrent_clients(ray_session):
    ray = ray_session
    client = start_retrieval_server(PASSAGES, name="test-retrieval-index")
    # Get-or-create: a second start with the same name reaches the first index, not a new one.
    again = start_retrieval_server(PASSAGES[:1], name="test-retrieval-index")
    assert again.search(["Kema"], 3) == client.search(["Kema"], 3) != []

    @ray.remote(num_cpus=0)
    def worker(i):
        found = ActorRetriever.by_name("test-retrieval-index")
        return [found.search([query], 2) for query in ("Kema", "Quovex founded", "Hulport", "zebra") * (i + 1)]

    queries = ["Kema", "Quovex founded", "Hulport", "zebra"]
    local = [BM25Retriever(PASSAGES).search([q], 2) for q in queries]
    results = ray.get([worker.remote(i) for i in range(8)])
    assert all(result == local * (i + 1) for i, result in enumerate(results))
    ray.kill(client.actor)
    with pytest.raises(ValueError, match="no Ray actor named 'absent-index' is running"):
        ActorRetriever.by_name("absent-index")


def test_a_killed_retrieval_actor_is_restarted_and_searches_asked_again(ray_session):
    ray = ray_session
    client = start_retrieval_server(PASSAGES, name="test-retrieval-restarts")
    want = client.search(["Kema", "Quovex founded"], 2)
    pid = ray.get(client.actor.__ray_call__.remote(lambda self: os.getpid()))
    pending = [client.actor.search.remote(["Kema", "Quovex founded"], 2) for _ in range(20)]
    ray.kill(client.actor, no_restart=False)  # dies like a crashed process: Ray restarts it
    assert ray.get(pending, timeout=120) == [want] * 20  # searches it was serving are asked again
    assert client.search(["Kema", "Quovex founded"], 2) == want
    assert ray.get(client.actor.__ray_call__.remote(lambda self: os.getpid())) != pid
    ray.kill(client.actor)


def test_a_stalled_retrieval_actor_fails_the_search_within_its_deadline(ray_session):
    ray = ray_session
    client = ActorRetriever(start_retrieval_server(PASSAGES).actor, timeout_s=2)
    pid = ray.get(client.actor.__ray_call__.remote(lambda self: os.getpid()))
    os.kill(pid, signal.SIGSTOP)
    try:
        start = time.monotonic()
        with pytest.raises(TimeoutError, match=r"no answer within 2 s \(SearchConfig.actor_timeout_s\)"):
            client.search(["Kema"], 2)
        assert time.monotonic() - start < 10
    finally:
        os.kill(pid, signal.SIGCONT)
        ray.kill(client.actor)


class _Misbehaving(BaseHTTPRequestHandler):
    """A retrieval server that fails in the ways real ones do: 500 on every other request, trickled bytes,
    answers cut short, and answers far too large."""

    calls: ClassVar[dict] = {}

    def log_message(self, *args):
        pass

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        count = self.calls[self.path] = self.calls.get(self.path, 0) + 1
        good = json.dumps({"result": [[{"document": {"id": "1", "contents": "T\nx"}, "score": 1.0}]]}).encode()
        if self.path == "/flaky" and count % 2 == 1:
            self.send_response(500)
            self.send_header("Content-Length", "4")
            self.end_headers()
            self.wfile.write(b"oops")
            return
        if self.path == "/always_500":
            self.send_response(503)
            self.send_header("Content-Length", "4")
            self.end_headers()
            self.wfile.write(b"busy")
            return
        self.send_response(200)
        size = 10**7 if self.path == "/huge" else len(good)
        self.send_header("Content-Length", str(size))
        self.end_headers()
        if self.path == "/trickle":
            try:
                for byte in good:
                    self.wfile.write(bytes([byte]))
                    self.wfile.flush()
                    time.sleep(0.05)
            except (BrokenPipeError, ConnectionResetError):  # the client gives up at its deadline
                pass
        elif self.path == "/truncated":
            self.wfile.write(good[:10])
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)
        elif self.path == "/huge":
            try:
                self.wfile.write(b"[" * size)
            except (BrokenPipeError, ConnectionResetError):  # the client stops reading at its cap
                pass
        else:
            self.wfile.write(good)


@pytest.fixture(scope="module")
def bad_server_url(serve_http):
    return serve_http(_Misbehaving)


def test_http_flaky_server_is_asked_again(bad_server_url):
    retriever = HTTPRetriever(bad_server_url + "/flaky", retries=1)
    for _ in range(3):
        assert retriever.search(["x"], 1)[0][0]["id"] == "1"
    assert _Misbehaving.calls["/flaky"] == 6  # each search: one 500, then the answer
    with pytest.raises(RuntimeError, match=f"retrieval server {bad_server_url}/flaky answered HTTP 500"):
        HTTPRetriever(bad_server_url + "/flaky", retries=0).search(["x"], 1)
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match="answered HTTP 503: b'busy'"):
        HTTPRetriever(bad_server_url + "/always_500", retries=3).search(["x"], 1)
    assert _Misbehaving.calls["/always_500"] == 4 and time.monotonic() - t0 < 3


def test_http_deadline_covers_the_whole_answer(bad_server_url):
    # Each byte arrives well within the timeout, the whole answer does not: the deadline still holds.
    t0 = time.monotonic()
    with pytest.raises(ConnectionError, match=r"did not answer within 1 s \(HTTPRetriever timeout_s\)"):
        HTTPRetriever(bad_server_url + "/trickle", timeout_s=1, retries=0).search(["x"], 1)
    assert time.monotonic() - t0 < 1.5


def test_http_cut_and_oversized_answers_are_named(bad_server_url):
    with pytest.raises(ConnectionError, match=f"{bad_server_url}/truncated or it broke the connection"):
        HTTPRetriever(bad_server_url + "/truncated", retries=0).search(["x"], 1)
    with pytest.raises(ValueError, match="answered more than max_answer_bytes=1000000 bytes"):
        HTTPRetriever(bad_server_url + "/huge", max_answer_bytes=10**6).search(["x"], 1)
    with pytest.raises(ValueError, match="retries must be an int >= 0"):
        HTTPRetriever(bad_server_url, retries=-1)


def test_a_retrieval_actor_lost_for_good_is_looked_up_again_by_name(ray_session):
    ray = ray_session
    name = "test-retrieval-replaced"
    client = start_retrieval_server(PASSAGES, name=name)
    want = client.search(["Kema", "Quovex founded"], 2)
    ray.kill(client.actor, no_restart=True)  # gone for good: Ray does not restart it
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # the name is freed once Ray has seen the actor die
        try:
            ray.get_actor(name)
            time.sleep(0.1)
        except ValueError:
            break
    with pytest.raises(ValueError, match=f"no Ray actor named '{name}' is running; start one with"):
        client.search(["Kema"], 2)
    replacement = start_retrieval_server(PASSAGES, name=name)  # whoever serves it starts it again
    assert client.search(["Kema", "Quovex founded"], 2) == want
    assert client.actor._actor_id == replacement.actor._actor_id
    ray.kill(replacement.actor)
