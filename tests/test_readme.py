"""The README's Python examples run as written: each is executed in a fresh process (no Ray yet, as a user's
script), with only paths and the number of iterations swapped for small local ones."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def _python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def _block(starting: str) -> str:
    found = [b for b in _python_blocks() if b.startswith(starting)]
    assert len(found) == 1, f"README has {len(found)} python blocks starting with {starting!r}"
    return found[0]


@pytest.mark.slow
def test_using_it_trains_and_saves_from_a_fresh_process(tiny_checkpoint, tmp_path):
    code = _block("from memrl.algorithms import DAPOConfig")
    for old, new in [("/path/to/hf-checkpoint", str(tiny_checkpoint)), ("range(10)", "range(1)")]:
        assert old in code
        code = code.replace(old, new)
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    printed = [line.split() for line in proc.stdout.splitlines() if re.fullmatch(r"\S+ \S+", line)]
    reward, loss = printed[-1]
    assert 0 <= float(reward) <= 1 and float(loss) == float(loss)
    assert (tmp_path / "checkpoints" / "run1" / "algorithm_state.json").is_file()
