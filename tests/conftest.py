"""Shared fixtures: one local Ray instance and one tiny checkpoint per test session, and what a process listens on;
and the order test files are handed to `make test`'s workers in: the longest first, by tests/durations.json."""

import json
import os
import time
from collections import defaultdict
from pathlib import Path

import pytest

DURATIONS = Path(__file__).with_name("durations.json")
"""Seconds each test file took in a whole run (setup, call and teardown of its tests), written by
`pytest --store-durations`."""
NEW_FILE_S = 60.0
"""What a file missing from DURATIONS is taken to last: new files go early rather than make the run's tail."""

os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def pytest_addoption(parser):
    parser.addoption("--store-durations", action="store_true",
                     help=f"write each test file's seconds in this run to {DURATIONS.name} (run the whole suite)")


def _file(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def pytest_collection_modifyitems(config, items):
    """Test files longest first, each file's tests in their own order. `make test` gives whole files to two workers
    in this order (--dist loadfile --no-loadscope-reorder), so the last files to finish are short ones and both
    workers stay busy to the end."""
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
