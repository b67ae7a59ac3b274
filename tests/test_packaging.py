"""What `pip install memrl` gives: a wheel of memrl's own top-level names, with its package data, that makes and runs
every shipped env from a directory outside the checkout with the checkout off the path."""

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TOP_LEVEL = {"memrl", "memrl_envs", "memrl_tuned_examples", "memrl_benchmarks"}
SHIPPED_ENVS = {"memrl/Echo-v0", "memrl/ChunkStream-v0", "memrl/Search-v0", "memrl/MemoryStore-v0",
                "memrl/MemoryBank-v0", "memrl/WebShop-v0", "memrl/Copy-v0"}

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel built from a copy of the sources (a build writes build/ and *.egg-info where it runs)."""
    source = tmp_path_factory.mktemp("source")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    skip = shutil.ignore_patterns("__pycache__", "checkpoints", "results", "*.tmp")
    for folder in ("memrl", "envs", "tuned_examples", "benchmarks"):
        shutil.copytree(ROOT / folder, source / folder, ignore=skip)
    out = tmp_path_factory.mktemp("dist")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out),
                    str(source)], check=True, capture_output=True, text=True, timeout=300)
    (path,) = out.glob("memrl-*.whl")
    return path


def test_the_wheel_holds_memrls_names_only_and_its_package_data(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    top = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
    assert top == TOP_LEVEL
    assert "memrl/models/tiny_tokenizer.json" in names
    shipped = {"memrl_envs/search.py", "memrl_tuned_examples/memagent_dapo.py", "memrl_tuned_examples/tasks/search.py",
               "memrl_tuned_examples/warm_starts/memagent_sft.py", "memrl_tuned_examples/analyses/memalpha_eval.py",
               "memrl_benchmarks/runtime.py"}
    assert shipped <= set(names)
    (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
    entries = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "[memrl.plugins]\nmemrl_envs = memrl_envs" in entries
    assert "[console_scripts]\nmemrl = memrl.cli:main" in entries
    assert "memalpha_grpo = memrl_tuned_examples.memalpha_grpo:main" in entries
    assert "memalpha_sft = memrl_tuned_examples.warm_starts.memalpha_sft:main" in entries


EPISODES = """
import json, math, sys
import gymnasium
from memrl.plugins import load_plugins, make_env
from memrl.models.tiny import default_tokenizer
from memrl.algorithms.sft import expert_episodes
import memrl, memrl_envs

site = sys.argv[1]
assert memrl.__file__.startswith(site) and memrl_envs.__file__.startswith(site), (memrl.__file__, memrl_envs.__file__)
assert load_plugins() == ["memrl_envs"]
returns = {}
for env_id in sorted(i for i in gymnasium.registry if i.startswith("memrl/")):
    env = make_env(env_id)
    env.reset(seed=0)
    total, done, steps = 0.0, False, 0
    while not done and steps < 200:
        _, reward, terminated, truncated, _ = env.step(env.unwrapped.expert_action())
        total, done, steps = total + float(reward), terminated or truncated, steps + 1
    assert done and math.isfinite(total), (env_id, steps, total)
    returns[env_id] = total
# The episode loop with a workflow and the packaged tokenizer, as an env runner drives it.
(episode,) = expert_episodes("memrl/Echo-v0", {}, "last_observation", {}, default_tokenizer(), 1, 0)
print(json.dumps({"returns": returns, "echo_calls": len(episode.conversations)}))
"""


def test_the_installed_wheel_runs_an_episode_of_each_shipped_env_outside_the_checkout(wheel, tmp_path):
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site), str(wheel)],
                   check=True, capture_output=True, text=True, timeout=300)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    # The installed copy comes first on the path; the checkout is not on it (the working directory is elsewhere,
    # and the editable install's finder is only asked for names the path does not hold).
    env = {**os.environ, "PYTHONPATH": str(site)}
    out = subprocess.run([sys.executable, "-c", EPISODES, str(site)], cwd=elsewhere, env=env, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert set(result["returns"]) == SHIPPED_ENVS
    assert result["echo_calls"] >= 1
