"""A method from outside memrl: the tutorial's package (docs/tutorial.md) (its own env, workflow and advantage estimator, registered with
the public decorators and found through its memrl.plugins entry point) is written to a directory outside the
repository, installed, and trained for two iterations through the public API and through a 2-trial Tune grid."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

TUTORIAL = Path(__file__).resolve().parents[1] / "docs" / "tutorial.md"

pytestmark = pytest.mark.slow


def _tutorial_block(language: str, first_line: str) -> str:
    blocks = [b for b in re.findall(rf"```{language}\n(.*?)```", TUTORIAL.read_text(), flags=re.S)
              if b.startswith(first_line)]
    assert len(blocks) == 1, f"the tutorial has {len(blocks)} {language} blocks starting with {first_line!r}"
    return blocks[0]


def test_a_package_of_ones_own_trains_through_the_api_and_a_tune_grid(tmp_path):
    package = tmp_path / "my_memory"
    (package / "my_memory").mkdir(parents=True)
    (package / "my_memory" / "__init__.py").write_text(_tutorial_block("python", "# my_memory/my_memory/__init__.py"))
    (package / "pyproject.toml").write_text(_tutorial_block("toml", "# my_memory/pyproject.toml"))
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "-q", "--target",
                    str(site), str(package)], check=True, capture_output=True, text=True, timeout=300)
    script = _tutorial_block("python", "from pathlib import Path\n\nfrom ray import tune\n")
    work = tmp_path / "work"
    work.mkdir()
    env = {**os.environ, "PYTHONPATH": str(site)}
    proc = subprocess.run([sys.executable, "-c", script], cwd=work, env=env, capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    figures = [float(line) for line in proc.stdout.splitlines() if re.fullmatch(r"[0-9.e+-]+", line.strip())]
    iterations = [line for line in proc.stdout.splitlines() if line.startswith("[")][-1]
    # The estimator's own figure came back from each iteration: the mean |centred rank| of groups of 4, which is
    # 1/3 whatever the rewards (ties are ranked in order), so exactly 1/3 proves the estimator gave the advantages.
    assert figures == [pytest.approx(1 / 3)] * 2, figures
    assert iterations == "[2, 2]"
    assert list((work / "runs" / "tune").iterdir())  # the grid's trials wrote their results where the script said
