"""Shared fixtures: one local Ray instance and one tiny checkpoint per test session, and what a process listens on;
and the order test files are handed to `make test`'s workers in: the longest first, by tests/durations.json."""

import json
import os
import time
from collections import defaultdict
from pathlib import Path

# OpenMP threads that wait passively, in the test processes and in every process they start (subprocesses and Ray
# actors inherit it): on two cores shared by three workers and their actors, a thread spinning for work between
# parallel regions burns the CPU another process needs. Set before torch loads OpenMP.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import pyarrow as pa  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

DURATIONS = Path(__file__).with_name("durations.json")
"""Seconds each test file took in a whole run (setup, call and teardown of its tests), written by
`pytest --store-durations`."""
NEW_FILE_S = 60.0
"""What a file missing from DURATIONS is taken to last: new files go early rather than make the run's tail."""

os.environ.setdefault("WANDB_MODE", "offline")
# One torch thread in each test process, as Ray gives its 1-CPU actors: three workers on two cores with two threads
# each would spin on cores the others need. (Not OMP_NUM_THREADS: the actors they start would inherit it, where Ray
# sets it to the CPUs each actor reserves.)
torch.set_num_threads(1)
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def pytest_addoption(parser):
    parser.addoption("--store-durations", action="store_true",
                     help=f"write each test file's seconds in this run to {DURATIONS.name} (run the whole suite)")


def _file(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def pytest_collection_modifyitems(config, items):
    """Test files longest first, each file's tests in their own order. `make test` gives whole files to three workers
    in this order (--dist loadfile --no-loadscope-reorder), so the last files to finish are short ones and every
    worker stays busy to the end."""
    known = json.loads(DURATIONS.read_text()) if DURATIONS.is_file() else {}
    first_seen = {}
    for i, item in enumerate(items):
        first_seen.setdefault(_file(item.nodeid), i)
    items.sort(key=lambda item: (-known.get(_file(item.nodeid), NEW_FILE_S), first_seen[_file(item.nodeid)]))


_seconds: dict[str, float] = defaultdict(float)


def pytest_runtest_logreport(report):
    _seconds[_file(report.nodeid)] += report.duration


def pytest_sessionfinish(session):
    if session.config.getoption("store_durations") and not hasattr(session.config, "workerinput"):
        DURATIONS.write_text(json.dumps({k: round(v, 1) for k, v in sorted(_seconds.items())}, indent=0) + "\n")


@pytest.fixture
def actor_gone(ray_session):
    """`actor_gone(name)`: whether no Ray actor runs as `name` within 30 s (a killed actor leaves Ray's directory
    shortly after)."""

    def gone(name: str, deadline_s: float = 30.0) -> bool:
        end = time.monotonic() + deadline_s
        while time.monotonic() < end:
            try:
                ray_session.get_actor(name)
            except ValueError:
                return True
            time.sleep(0.2)
        return False

    return gone


@pytest.fixture(scope="session")
def ray_session():
    """A local Ray instance shared by every test that needs actors."""
    import ray

    from memrl.cluster import start_local_ray

    # Logical CPUs above the 2 physical cores so tests can place several 1-CPU actors at once. Actors' output stays
    # in Ray's log files (an actor's error still reaches its caller as an exception), as in a run that is not verbose.
    start_local_ray(num_cpus=8, include_dashboard=False, log_to_driver=False, configure_logging=False)
    # Ray's log monitor forwards actors' output to the driver, which asks for none of it here; it re-reads the
    # session's log folder ten times a second, and the hundreds of actors a worker's tests start fill that folder.
    ray._private.worker._global_node.kill_log_monitor()
    yield ray
    ray.shutdown()


@pytest.fixture(scope="session")
def serve_http():
    """Starts loopback HTTP servers for a test session: `serve_http(handler_class)` gives the server's base URL
    (http://127.0.0.1:PORT); every server stops when the session ends."""
    import threading
    from http.server import ThreadingHTTPServer

    servers = []

    def start(handler) -> str:
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def vllm_chat_server(tiny_checkpoint, tmp_path_factory):
    """vLLM's own OpenAI-compatible server on loopback serving the tiny checkpoint as model "tiny", for the module
    that uses it (an idle server's engine keeps polling: it does not outlive its tests): its API base
    (http://127.0.0.1:PORT/v1)."""
    import socket
    import subprocess
    import sys
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log_path = tmp_path_factory.mktemp("vllm-server") / "server.log"
    env = {**os.environ, "VLLM_LOGGING_LEVEL": "WARNING", "VLLM_CPU_KVCACHE_SPACE": "1"}
    with open(log_path, "w") as log:
        server = subprocess.Popen(
            [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(tiny_checkpoint),
             "--served-model-name", "tiny", "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32",
             "--enforce-eager", "--max-model-len", "4096"], stdout=log, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 420
        while True:
            try:
                with urllib.request.urlopen(url + "/models", timeout=5):
                    break
            except OSError:
                assert server.poll() is None, log_path.read_text()[-3000:]
                assert time.monotonic() < deadline, "vLLM's server did not start within 420 s"
                time.sleep(2)
        yield url
    finally:
        server.terminate()
        server.wait(timeout=60)


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory):
    """Path of a freshly built tiny Qwen2 checkpoint (tokenizer included)."""
    from memrl.models.tiny import build_tiny_checkpoint

    return build_tiny_checkpoint(tmp_path_factory.mktemp("tiny") / "model")


_KILLED_SAVE = """
import os, signal, sys
from pathlib import Path
from memrl import checkpoints

real_rename, renames = Path.rename, []

def rename(self, target):
    renames.append(self)
    if len(renames) == int(sys.argv[3]):
        os.kill(os.getpid(), signal.SIGKILL)
    return real_rename(self, target)

Path.rename = rename
checkpoints.commit(Path(sys.argv[1]), Path(sys.argv[2]))
"""


@pytest.fixture
def killed_commit():
    """commit(staged, path) in a process SIGKILLed just before its `at`-th rename, leaving the disk as a crash does."""
    import signal
    import subprocess
    import sys

    def run(staged, path, at: int) -> None:
        done = subprocess.run([sys.executable, "-c", _KILLED_SAVE, str(staged), str(path), str(at)], timeout=120)
        assert done.returncode == -signal.SIGKILL

    return run


def _listening(pid: int) -> list[tuple[str, int]]:
    """(address, port) of every listening TCP socket of a process and its live children (a child that exits while
    they are read, such as one of Ray's short-lived workers, listens on nothing any more)."""
    import psutil

    found = set()
    for process in [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]:
        try:
            connections = process.net_connections("inet")
        except psutil.NoSuchProcess:
            if process.pid == pid:
                raise
            continue
        found |= {(c.laddr.ip, c.laddr.port) for c in connections if c.status == psutil.CONN_LISTEN}
    return sorted(found)


@pytest.fixture(scope="session")
def listening():
    """`listening(pid)`: (address, port) of every listening TCP socket of the process and its live children."""
    return _listening


@pytest.fixture(scope="session")
def exposed_ports(ray_session):
    """`exposed_ports(actor)`: the (address, port) an actor's process and its children listen on beyond loopback,
    leaving out the port of the actor's own Ray worker server (Ray opens it on every interface, outside memrl's
    reach)."""
    import ipaddress

    import ray._private.state as ray_state

    def exposed(actor) -> list[tuple[str, int]]:
        pid = ray_session.get(actor.__ray_call__.remote(lambda self: os.getpid()))
        own = ray_state.actors(actor._actor_id.hex())["Address"]["Port"]
        return [(ip, port) for ip, port in _listening(pid)
                if not ipaddress.ip_address(ip).is_loopback and port != own]

    return exposed


# Records in the released formats of LongMemEval, LoCoMo and MemoryAgentBench, small and hand-made: the loaders' tests
# read them, the benchmark harness's tests score policies on them.
_LONGMEMEVAL = [
    {"question_id": "7a3c51e2", "question_type": "temporal-reasoning",
     "question": "How many days before the café opening did I buy the espresso machine?", "answer": 3,
     "question_date": "2023/05/30 (Tue) 23:40",
     "haystack_session_ids": ["sharegpt_Qx81_0", "answer_7a3c51e2_1", "answer_7a3c51e2_2"],
     "haystack_dates": ["2023/05/20 (Sat) 02:21", "2023/05/24 (Wed) 10:05", "2023/05/27 (Sat) 18:30"],
     "haystack_sessions": [
         [{"role": "user", "content": "Can you suggest a name for a bakery in Malmö?"},
          {"role": "assistant", "content": "How about “Söta Hörnet” – the sweet corner?\n"}],
         [{"role": "user", "content": "I just bought an espresso machine for the café.", "has_answer": True},
          {"role": "assistant", "content": "Congratulations! Descale it monthly."}],
         [{"role": "user", "content": "  The café opened today!  ", "has_answer": True},
          {"role": "assistant", "content": "Wonderful news."}]],
     "answer_session_ids": ["answer_7a3c51e2_1", "answer_7a3c51e2_2"]},
    {"question_id": "c4f09d11_abs", "question_type": "single-session-user",
     "question": "What is the name of my cat?",
     "answer": "The information provided is not enough. You mentioned your dog Björn but not a cat.",
     "question_date": "2023/06/02 (Fri) 09:12",
     "haystack_session_ids": ["answer_c4f09d11_abs_1"], "haystack_dates": ["2023/06/01 (Thu) 20:00"],
     "haystack_sessions": [[{"role": "user", "content": "My dog Björn loves the snow."},
                            {"role": "assistant", "content": "Björn sounds like a happy dog!"}]],
     "answer_session_ids": ["answer_c4f09d11_abs_1"]},
]

_LOCOMO = [
    {"sample_id": "conv-26",
     "conversation": {
         "speaker_a": "Caroline", "speaker_b": "Melanie",
         "session_1_date_time": "1:56 pm on 8 May, 2023",
         "session_1": [{"speaker": "Caroline", "dia_id": "D1:1", "text": "I went to a pottery class yesterday!"},
                       {"speaker": "Melanie", "dia_id": "D1:2", "text": "Nice – what did you make?"}],
         "session_2_date_time": "7:03 pm on 25 May, 2023",
         "session_2": [{"speaker": "Melanie", "dia_id": "D2:1", "text": "Look at the sunrise I painted in 2022.",
                        "img_url": ["https://example.com/sunrise.jpg"], "blip_caption": "a painting of a sunrise",
                        "query": "sunrise painting"},
                       {"speaker": "Caroline", "dia_id": "D2:2", "text": "It’s beautiful."}],
         "session_3_date_time": "10:00 am on 1 June, 2023", "session_3": []},
     "qa": [{"question": "What did Caroline do the day before 8 May 2023?", "answer": "pottery class",
             "evidence": ["D1:1"], "category": 4},
            {"question": "When did Melanie paint a sunrise?", "answer": 2022, "evidence": ["D2:1"], "category": 2},
            {"question": "What did Caroline paint in 2022?", "adversarial_answer": "a sunrise", "evidence": ["D2:1"],
             "category": 5}],
     "observation": {"session_1_observation": {"Caroline": [["Caroline went to a pottery class.", "D1:1"]]}},
     "session_summary": {"session_1_summary": "Caroline tells Melanie about pottery."},
     "event_summary": {"events_session_1": {"Caroline": ["goes to a pottery class"], "Melanie": [],
                                            "date": "8 May, 2023"}}},
    {"sample_id": "conv-30",
     "conversation": {"speaker_a": "Jon", "speaker_b": "Gina", "session_1_date_time": "4:04 pm on 20 January, 2023",
                      "session_1": [{"speaker": "Jon", "dia_id": "D1:1", "text": "I lost my job at the bank."}]},
     "qa": [{"question": "Where did Jon work?", "answer": "a bank", "evidence": ["D1:1"], "category": 1}]},
]

_CONTEXT = ("Ghost is based in New York. The studio moved in 2019! Lindström lives in Malmö – by the sea. "
           "Is it far?\nYes.")
_MEMORYAGENTBENCH = [
    {"context": _CONTEXT, "questions": ["Where is Ghost based?", "Where does Lindström live?", "When did it move?"],
     "answers": [["New York", "NYC"], ["Malmö"], ["2019"]],
     "metadata": {"source": "ruler_qa1_197K", "question_ids": ["q-0", "q-1", "q-2"]}},
    {"context": "user: My dog is Björn.\nassistant: Lovely name.", "questions": ["What is my cat's name?"],
     "answers": [["You never mentioned a cat."]],
     "metadata": {"source": "longmemeval_s*", "question_ids": ["c4f09d11_abs"], "qa_pair_ids": ["lme-0"],
                  "question_types": ["single-session-user"], "question_dates": ["2023/06/02 (Fri) 09:12"],
                  "haystack_sessions": [[[{"role": "user", "content": "My dog is Björn.", "has_answer": True},
                                         {"role": "assistant", "content": "Lovely name.", "has_answer": False}]]]}},
]

_TURN = pa.struct([("content", pa.string()), ("has_answer", pa.bool_()), ("role", pa.string())])
_MAB_SCHEMA = pa.schema([  # the features of ai-hyz/MemoryAgentBench's dataset card
    ("context", pa.string()), ("questions", pa.list_(pa.string())), ("answers", pa.list_(pa.list_(pa.string()))),
    ("metadata", pa.struct([
        ("demo", pa.string()), ("haystack_sessions", pa.list_(pa.list_(pa.list_(_TURN)))),
        *((key, pa.list_(pa.string())) for key in ("keypoints", "previous_events", "qa_pair_ids", "question_dates",
                                                   "question_ids", "question_types")),
        ("source", pa.string())]))])


@pytest.fixture
def benchmark_records():
    """A fresh copy of the records of each benchmark ("longmemeval", "locomo", "memoryagentbench") and the parquet
    schema of MemoryAgentBench's files ("memoryagentbench_schema")."""
    import copy

    return {"longmemeval": copy.deepcopy(_LONGMEMEVAL), "locomo": copy.deepcopy(_LOCOMO),
            "memoryagentbench": copy.deepcopy(_MEMORYAGENTBENCH), "memoryagentbench_schema": _MAB_SCHEMA}
