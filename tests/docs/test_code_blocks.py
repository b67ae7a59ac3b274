"""The README's and the documentation's code blocks run as written: each Python block is executed in a fresh process
(no Ray yet, as a user's script), with only paths and the number of iterations swapped for small local ones, and
every `make` command is a target of the Makefile."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
"""Every Markdown file a user reads: the README and the documentation's pages."""


def blocks(language: str) -> list[str]:
    """The code blocks of one language in every page."""
    return [b for page in PAGES for b in re.findall(rf"```{language}\n(.*?)```", page.read_text(), flags=re.S)]


def block(starting: str, language: str = "python") -> str:
    """The one block of the pages that starts with `starting` (a page may repeat another's block word for word)."""
    found = sorted({b for b in blocks(language) if b.startswith(starting)})
    assert len(found) == 1, f"the pages hold {len(found)} {language} blocks starting with {starting!r}"
    return found[0]


def _python_blocks() -> list[str]:
    return blocks("python")


def _bash_blocks() -> list[str]:
    return blocks("bash")


def _block(starting: str) -> str:
    return block(starting)


@pytest.mark.slow
def test_using_it_trains_and_saves_from_a_fresh_process(tiny_checkpoint, tmp_path):
    code = _block("from memrl.algorithms import DAPOConfig")
    # One iteration of two groups: the block's engine, two learners and two runners all take part in it.
    for old, new in [("/path/to/hf-checkpoint", str(tiny_checkpoint)), ("range(10)", "range(1)"),
                     ("tasks_per_iteration=16", "tasks_per_iteration=2")]:
        assert old in code
        code = code.replace(old, new)
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    printed = [line.split() for line in proc.stdout.splitlines() if re.fullmatch(r"\S+ \S+", line)]
    reward, loss = printed[-1]
    assert 0 <= float(reward) <= 1 and float(loss) == float(loss)
    assert (tmp_path / "checkpoints" / "run1" / "algorithm_state.json").is_file()


def test_resum_blocks_check_their_configs_and_components(tiny_checkpoint, tmp_path):
    # ReSum's page: the policy summarizing (components loaded), then a summary model as a side service.
    code = ""
    for start in ("from memrl.algorithms import GRPOConfig\n\nconfig",
                  "from memrl.algorithms import GRPOConfig\n\nsummarizer"):
        block_code = _block(start)
        assert "/path/to/hf-checkpoint" in block_code
        code += block_code.replace("/path/to/hf-checkpoint", str(tiny_checkpoint))
        code += "print(config.env_runners_cfg.workflow, config.env_runners_cfg.workflow_config.get('summarizer'))\n"
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["resum", "None", "resum", "actor:summarizer"]


def test_memory_r1_block_validates_the_manager_config(tiny_checkpoint, tmp_path):
    code = _block("from memrl.algorithms import GRPOConfig\n\nmanager").replace("/path/to/hf-checkpoint",
                                                                              str(tiny_checkpoint))
    code += "print(manager.environment_cfg.env_config['role'], manager.env_runners_cfg.workflow)\n"
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["manager", "last_observation"]


def test_search_env_block_runs_against_a_local_qa_file_and_retrieval_server(tmp_path):
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Retrieve(BaseHTTPRequestHandler):
        """Search-R1's POST /retrieve, answering every query with one fixed passage."""

        def log_message(self, *args):
            pass

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            hit = {"document": {"id": "0", "contents": "Kema\nKema was born in Hulport."}, "score": 1.0}
            data = json.dumps({"result": [[hit] for _ in body["queries"]]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    (tmp_path / "nq_test.jsonl").write_text("".join(
        json.dumps({"question": f"where was person {i} born?", "golden_answers": ["Hulport"]}) + "\n"
        for i in range(4)))
    server = ThreadingHTTPServer(("127.0.0.1", 0), Retrieve)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    code = _block("import gymnasium")
    assert "127.0.0.1:8000" in code
    code = code.replace("127.0.0.1:8000", f"127.0.0.1:{server.server_address[1]}")
    code += "\nprint(repr(obs))\nprint(repr(env.step('<search>Kema</search>')[0]))\n"
    try:
        proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    finally:
        server.shutdown()
        server.server_close()
    assert proc.returncode == 0, proc.stderr[-3000:]
    first, searched = proc.stdout.strip().splitlines()[-2:]
    assert "where was person" in first and "Kema was born in Hulport" in searched


@pytest.mark.slow
def test_sft_block_trains_until_done_and_saves_the_model(tmp_path):
    code = _block("from memrl.algorithms import SFTConfig")
    for old, new in [("steps=100, steps_per_iteration=50, num_train_tasks=200", "steps=4, steps_per_iteration=2, "
                      "num_train_tasks=20"), ("evaluation_num_tasks=32", "evaluation_num_tasks=4")]:
        assert old in code
        code = code.replace(old, new)
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert [line.split()[0] for line in proc.stdout.splitlines() if re.fullmatch(r"\d+ \S+", line)] == ["2"]
    assert (tmp_path / "runs" / "echo-sft" / "model.safetensors").is_file()


@pytest.mark.slow
def test_sft_command_writes_the_model_and_its_summary(tmp_path):
    (command,) = [line for line in _bash_blocks()
                  if line.startswith("python -m memrl sft")]
    args = command.split()[4:]
    args[args.index("--steps") + 1] = "2"
    args[args.index("--model") + 1] = str(ROOT / args[args.index("--model") + 1])
    args += ["--num-train-tasks", "20", "--num-eval-tasks", "4"]
    proc = subprocess.run([sys.executable, "-m", "memrl", "sft", *args], cwd=tmp_path, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "final (step 2)" in proc.stdout
    assert (tmp_path / "runs" / "echo-sft" / "sft_summary.json").is_file()


def test_webshop_block_buys_with_the_scripted_expert(tmp_path):
    code = _block("import memrl_envs  # registers memrl/WebShop-v0")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    asin, reward = proc.stdout.split()[-2:]
    assert asin.startswith("B0") and len(asin) == 10 and 0 < float(reward) <= 1


def test_cluster_placement_block_prints_what_it_says():
    code = _block("# Learners where")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    expected = re.search(r"print\(config.resources\(\)\[0\]\)  # (.*)", code).group(1)
    assert proc.stdout.strip() == expected


def test_every_make_command_of_the_pages_is_a_target_of_the_makefile():
    commands = {line.split()[1] for block in _bash_blocks()
                for line in block.splitlines() if line.startswith("make ")}
    assert {"train", "test", "test-quick", "gpu-test", "docs"} <= commands
    makefile = (ROOT / "Makefile").read_text()
    targets = set(re.findall(r"^([\w-]+):", makefile, flags=re.M))
    assert commands <= targets, sorted(commands - targets)
    # The quick subset is the suite without the tests marked slow, through the same venv.
    assert re.search(r'^test-quick: setup\n\t\$\(PY\) -m pytest -m "not slow"$', makefile, flags=re.M)


RUN_BLOCKS = ("from memrl.algorithms import DAPOConfig", "import gymnasium", "from memrl.algorithms import SFTConfig",
              "from memrl.algorithms import GRPOConfig",
              "import memrl_envs  # registers memrl/WebShop-v0", "# Learners where",
              "# my_memory/my_memory/__init__.py", "from pathlib import Path\n\nfrom ray import tune\n")
"""How each python block of the pages starts, as the tests that run it find it (the last two: test_extending)."""


def test_every_python_block_of_the_pages_is_run_by_a_test():
    unrun = [block.splitlines()[0] for block in _python_blocks() if not block.startswith(RUN_BLOCKS)]
    assert unrun == []
