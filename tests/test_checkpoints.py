"""Durable checkpoint directories on plain files: manifest, verification, crash-safe replacement, orphans."""

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from memrl import checkpoints
from memrl.checkpoints import MANIFEST_FILE, CheckpointError


def _write(directory, files: dict[str, bytes], checksums: bool = True):
    directory.mkdir(parents=True)
    for name, data in files.items():
        (directory / name).parent.mkdir(parents=True, exist_ok=True)
        (directory / name).write_bytes(data)
    checkpoints.seal(directory, checksums=checksums)
    return directory


def _dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def _save(path, files: dict[str, bytes]):
    """What Algorithm.save_to_path does around its writes."""
    checkpoints.check_target(path, "algorithm_state.json")
    staged = checkpoints.staging_dir(path)
    staged.rmdir()
    checkpoints.commit(_write(staged, files), path)


def test_seal_lists_every_file_and_verify_names_what_changed(tmp_path):
    ckpt = _write(tmp_path / "c", {"state.json": b"{}", "learner/rank0/model_states.pt": b"x" * 1000})
    manifest = json.loads((ckpt / MANIFEST_FILE).read_text())
    assert set(manifest["files"]) == {"state.json", "learner/rank0/model_states.pt"}
    assert manifest["files"]["learner/rank0/model_states.pt"]["bytes"] == 1000
    checkpoints.verify(ckpt)

    shard = ckpt / "learner/rank0/model_states.pt"
    shard.write_bytes(b"y" * 1000)  # same size, other bytes: only the checksum sees it
    with pytest.raises(CheckpointError, match="model_states.pt does not match the sha256"):
        checkpoints.verify(ckpt)
    shard.write_bytes(b"x" * 10)
    with pytest.raises(CheckpointError, match="model_states.pt has 10 bytes, its manifest says 1000"):
        checkpoints.verify(ckpt)
    shard.unlink()
    with pytest.raises(CheckpointError, match="lacks learner/rank0/model_states.pt"):
        checkpoints.verify(ckpt)
    (ckpt / MANIFEST_FILE).unlink()
    with pytest.raises(CheckpointError, match=f"no {MANIFEST_FILE}"):
        checkpoints.verify(ckpt)


def test_a_file_the_manifest_does_not_list_fails_verify(tmp_path):
    ckpt = _write(tmp_path / "c", {"state.json": b"{}", "learner/rank0/model_states.pt": b"x"})
    (ckpt / ".metadata.json").write_text("{}")  # Ray's own, allowed by rule
    checkpoints.verify(ckpt)
    (ckpt / "learner/rank0/extra_optim_states.pt").write_bytes(b"z")
    with pytest.raises(CheckpointError, match="holds learner/rank0/extra_optim_states.pt, which its manifest does not"):
        checkpoints.verify(ckpt)
    (ckpt / "learner/rank0/extra_optim_states.pt").unlink()
    (ckpt / "learner/.metadata.json").write_text("{}")  # the rule is for the top level only
    with pytest.raises(CheckpointError, match="holds learner/.metadata.json"):
        checkpoints.verify(ckpt)


def test_without_checksums_sizes_are_still_checked(tmp_path):
    ckpt = _write(tmp_path / "c", {"a.bin": b"abc"}, checksums=False)
    assert "sha256" not in json.loads((ckpt / MANIFEST_FILE).read_text())["files"]["a.bin"]
    (ckpt / "a.bin").write_bytes(b"abd")
    checkpoints.verify(ckpt)
    (ckpt / "a.bin").write_bytes(b"ab")
    with pytest.raises(CheckpointError, match="has 2 bytes"):
        checkpoints.verify(ckpt)


def test_save_replaces_the_checkpoint_and_leaves_nothing_beside_it(tmp_path):
    path = tmp_path / "ckpt"
    _save(path, {"v": b"1"})
    _save(path, {"v": b"2"})
    assert (path / "v").read_bytes() == b"2" and checkpoints.resolve(path) == path
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]


@pytest.mark.parametrize("at", [1, 2])
def test_a_save_killed_while_replacing_leaves_a_complete_checkpoint(tmp_path, killed_commit, at):
    path = tmp_path / "ckpt"
    _save(path, {"v": b"1"})
    staged = _write(tmp_path / f".ckpt.tmp-{_dead_pid()}-x", {"v": b"2"})
    killed_commit(staged, path, at)  # 1: before the old one moves aside; 2: between the two renames
    found = checkpoints.resolve(path)
    checkpoints.verify(found)
    assert (found / "v").read_bytes() == b"1"
    assert found == (path if at == 1 else checkpoints.backup_path(path))
    _save(path, {"v": b"3"})  # the next save goes through and tidies up
    assert checkpoints.resolve(path) == path and (path / "v").read_bytes() == b"3"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]


def test_staging_directories_of_killed_saves_are_removed(tmp_path):
    path = tmp_path / "ckpt"
    script = ("import os, signal, sys; from pathlib import Path; from memrl import checkpoints; "
              "d = checkpoints.staging_dir(Path(sys.argv[1])); (d / 'shard').write_bytes(bytes(10**6)); "
              "os.kill(os.getpid(), signal.SIGKILL)")
    done = subprocess.run([sys.executable, "-c", script, str(path)], timeout=60)
    assert done.returncode == -signal.SIGKILL
    (orphan,) = tmp_path.iterdir()
    mine = checkpoints.staging_dir(path)  # a live save's directory is left alone
    assert not orphan.exists() and mine.is_dir()
    checkpoints.staging_dir(path)
    assert mine.is_dir()


def test_restore_and_save_refuse_what_is_not_a_checkpoint(tmp_path):
    with pytest.raises(CheckpointError, match="does not exist, and there is no previous checkpoint"):
        checkpoints.resolve(tmp_path / "none")
    (tmp_path / "half").mkdir()
    with pytest.raises(CheckpointError, match=f"has no {MANIFEST_FILE}"):
        checkpoints.resolve(tmp_path / "half")
    data = tmp_path / "data"
    data.mkdir()
    (data / "notes.txt").write_text("mine")
    with pytest.raises(CheckpointError, match="exists and is not a memrl checkpoint"):
        checkpoints.check_target(data, "algorithm_state.json")
    with pytest.raises(CheckpointError, match="exists and is not a memrl checkpoint"):
        checkpoints.check_target(data / "notes.txt", "algorithm_state.json")
    checkpoints.check_target(tmp_path / "half", "algorithm_state.json")  # empty: fine


def test_portable_writes_paths_under_the_root_relative_and_leaves_the_rest():
    from memrl.checkpoints import portable

    root = Path("/work/project")
    record = {"out": "/work/project/runs/a", "model": "/elsewhere/model", "steps": 3,
              "stages": [{"init": "/work/project"}, "plain text"], "where": "/work/projectile"}
    assert portable(record, root) == {"out": "runs/a", "model": "/elsewhere/model", "steps": 3,
                                      "stages": [{"init": "."}, "plain text"], "where": "/work/projectile"}
