"""Plugins: the modules of the memrl.plugins entry points load once per process, and envs are made by id after."""

import json
import os
import subprocess
import sys

from memrl.plugins import load_plugins, make_env


def test_the_sample_envs_are_a_plugin_and_bare_or_module_ids_make_envs():
    assert load_plugins() == ["memrl_envs"]
    assert load_plugins() == ["memrl_envs"]  # once per process
    assert make_env("memrl/Echo-v0").unwrapped.spec.id == "memrl/Echo-v0"
    assert make_env("memrl_envs:memrl/Copy-v0", {"answer_chars": 3}).unwrapped.answer_chars == 3


def _distribution(tmp_path, plugin_source: str):
    """A directory holding an installed-looking distribution `extra` whose `extra_plugin` module is a plugin."""
    (tmp_path / "extra_plugin.py").write_text(plugin_source)
    info = tmp_path / "extra-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: extra\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[memrl.plugins]\nextra = extra_plugin\n")
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}


def test_another_packages_plugin_registers_its_env_in_a_fresh_process(tmp_path):
    env = _distribution(tmp_path, "import gymnasium\ngymnasium.register(id='extra/Echo-v0', "
                                  "entry_point='memrl_envs.echo:EchoEnv')\n")
    code = ("import json\nfrom memrl.plugins import load_plugins, make_env\n"
            "names = load_plugins()\nprint(json.dumps([names, make_env('extra/Echo-v0').unwrapped.spec.id]))")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.splitlines()[-1]) == [["extra_plugin", "memrl_envs"], "extra/Echo-v0"]


def test_a_plugin_that_fails_to_import_is_named(tmp_path):
    env = _distribution(tmp_path, "raise RuntimeError('no licence file')\n")
    code = "from memrl.plugins import load_plugins\nload_plugins()"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode != 0
    assert "memrl plugin 'extra' = 'extra_plugin' (declared by extra" in out.stderr and "no licence file" in out.stderr
