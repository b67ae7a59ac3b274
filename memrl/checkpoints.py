"""Durable checkpoint directories: a manifest written last, fsync, atomic replacement, fallback and orphan cleanup.

A directory is a complete checkpoint when its manifest (MANIFEST_FILE) lists every file with its size and, by default,
its sha256, and nothing else is there (but Ray's FOREIGN_FILES); `seal` writes it after everything else is on disk
and `verify` checks it before anything is loaded.
`staging_dir` + `commit` put a finished directory at a path: the previous checkpoint is renamed aside (`backup_path`),
the new one renamed in, then the previous removed, so a crash at any moment leaves one complete checkpoint that
`resolve` finds. Staging directories of saves that were killed are removed by the next save to the same path.

Checkpoints are trusted input: DeepSpeed's loader unpickles the optimizer states. The manifest catches torn, cut or
altered files; it is no defence against a checkpoint crafted together with its manifest.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

MANIFEST_FILE = "memrl_manifest.json"
_FORMAT = 1
FOREIGN_FILES = frozenset({".metadata.json"})
"""Files at a checkpoint's top level that `verify` lets pass unlisted: Ray's own metadata (Checkpoint.set_metadata
writes it into directories Ray Train and Tune manage). memrl never reads it. Any other unlisted file is an error."""


class CheckpointError(RuntimeError):
    """A checkpoint directory is missing, incomplete or does not match its manifest, or a save could not be written."""


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.rglob("*") if p.is_file() and p.name != MANIFEST_FILE)


def _digest(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def seal(directory: str | os.PathLike, checksums: bool = True) -> None:
    """Flush every file under `directory` to disk, then write its manifest (sizes and, with `checksums`, sha256)."""
    directory = Path(directory)
    entries = {}
    files = _files(directory)
    for path in files:
        _fsync(path)
        entry = {"bytes": path.stat().st_size}
        if checksums:
            entry["sha256"] = _digest(path)
        entries[path.relative_to(directory).as_posix()] = entry
    for sub in sorted({p.parent for p in files} | {directory}, reverse=True):
        _fsync(sub)  # the directory entries of the files, deepest first
    manifest = directory / MANIFEST_FILE
    tmp = manifest.with_name(manifest.name + ".tmp")
    with open(tmp, "w") as f:
        json.dump({"format": _FORMAT, "files": entries}, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    tmp.replace(manifest)
    _fsync(directory)


def verify(directory: str | os.PathLike) -> None:
    """Raise CheckpointError naming the first file that is missing, differs from the manifest, or is not in it
    (a file added after the save; FOREIGN_FILES excepted)."""
    directory = Path(directory)
    manifest = directory / MANIFEST_FILE
    if not manifest.is_file():
        raise CheckpointError(f"{directory} is not a complete memrl checkpoint: it has no {MANIFEST_FILE} (the save "
                              f"did not finish, or the directory was not written by memrl's save_to_path)")
    try:
        files = json.loads(manifest.read_text())["files"]
    except (ValueError, KeyError, TypeError) as e:
        raise CheckpointError(f"{manifest} is unreadable: {e}") from e
    for name, entry in files.items():
        path = directory / name
        if not path.is_file():
            raise CheckpointError(f"checkpoint {directory} lacks {name}, which its manifest lists")
        if path.stat().st_size != entry["bytes"]:
            raise CheckpointError(f"checkpoint file {path} has {path.stat().st_size} bytes, its manifest says "
                                  f"{entry['bytes']}: it was cut or changed after the save")
        if "sha256" in entry and _digest(path) != entry["sha256"]:
            raise CheckpointError(f"checkpoint file {path} does not match the sha256 in its manifest: it was "
                                  f"changed after the save")
    for path in _files(directory):
        name = path.relative_to(directory).as_posix()
        if name not in files and name not in FOREIGN_FILES:
            raise CheckpointError(f"checkpoint {directory} holds {name}, which its manifest does not list: it was "
                                  f"added after the save (remove it, or save the checkpoint again)")


def backup_path(path: Path) -> Path:
    """Where `commit` keeps the previous checkpoint while the new one is renamed in."""
    return path.with_name(f".{path.name}.old")


def _staging_prefix(path: Path, pid: int | str) -> str:
    return f".{path.name}.tmp-{pid}-"


def remove_orphans(path: Path) -> list[Path]:
    """Remove staging directories left at `path`'s parent by saves whose process is gone; returns them."""
    removed = []
    if not path.parent.is_dir():
        return removed
    for entry in path.parent.glob(_staging_prefix(path, "*") + "*"):
        pid = entry.name[len(f".{path.name}.tmp-"):].split("-", 1)[0]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_own_staging(path: Path) -> list[Path]:
    """Remove this process's staging directories for `path` (those of a save that failed and whose writers are
    gone); returns them. Only for when no save of this process to `path` is under way."""
    removed = sorted(path.parent.glob(_staging_prefix(path, os.getpid()) + "*")) if path.parent.is_dir() else []
    for entry in removed:
        shutil.rmtree(entry, ignore_errors=True)
    return removed


def size_bytes(directory: Path) -> int:
    """Bytes of every file under `directory`."""
    return sum(p.stat().st_size for p in Path(directory).rglob("*") if p.is_file())


def free_bytes(path: str | os.PathLike) -> tuple[Path, int]:
    """(the nearest existing folder above `path`, the bytes free on its filesystem)."""
    folder = Path(path).absolute().parent
    while not folder.exists():
        folder = folder.parent
    return folder, shutil.disk_usage(folder).free


def check_room(path: Path, needed: int) -> None:
    """Raise CheckpointError when the filesystem `path` goes on has fewer than `needed` bytes free (a save that runs
    out of room halfway costs the learners their state: see LearnerGroup.save_checkpoint)."""
    folder, free = free_bytes(path)
    if free < needed:
        raise CheckpointError(f"not enough disk for the checkpoint at {path}: it needs about {needed:,} bytes (the "
                              f"size of the last one), and {folder} has {free:,} free; free some space or point "
                              f"the checkpoints elsewhere")


def staging_dir(path: Path) -> Path:
    """A fresh directory beside `path` to write a checkpoint into before `commit` (orphans of killed saves go first)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_orphans(path)
    return Path(tempfile.mkdtemp(prefix=_staging_prefix(path, os.getpid()), dir=path.parent))


def _is_checkpoint(path: Path) -> bool:
    return (path / MANIFEST_FILE).is_file()


def check_target(path: Path, state_file: str) -> None:
    """Refuse to save over something that is not a checkpoint: a save replaces what is at its path."""
    if not path.exists():
        return
    if path.is_dir() and (_is_checkpoint(path) or (path / state_file).is_file() or not any(path.iterdir())):
        return
    raise CheckpointError(f"{path} exists and is not a memrl checkpoint; save_to_path replaces what is at its path, "
                          f"so give it a new or empty directory, or one it wrote before")


def commit(staged: Path, path: Path) -> None:
    """Rename the sealed directory `staged` to `path`, replacing the checkpoint there without a moment with none."""
    old = backup_path(path)
    if path.exists():
        if _is_checkpoint(path):
            shutil.rmtree(old, ignore_errors=True)
            path.rename(old)
        else:  # empty, or a checkpoint without a manifest: nothing that resolve() would load
            shutil.rmtree(path)
        _fsync(path.parent)
    staged.rename(path)
    _fsync(path.parent)
    shutil.rmtree(old, ignore_errors=True)


def resolve(path: str | os.PathLike) -> Path:
    """The complete checkpoint for `path`: the directory itself, or the previous one a crash left aside."""
    path = Path(path).absolute()
    if _is_checkpoint(path):
        return path
    old = backup_path(path)
    if _is_checkpoint(old):
        return old
    what = "does not exist" if not path.exists() else f"has no {MANIFEST_FILE}"
    raise CheckpointError(f"no complete memrl checkpoint at {path}: it {what}, and there is no previous checkpoint "
                          f"at {old} to fall back to")


def portable(value, root: Path | None = None):
    """`value` (JSON data: dicts, lists, strings, numbers) with each absolute path under `root` (default: the working
    directory) written relative to it, so a summary saved beside a checkpoint names no machine's directories; other
    values are unchanged."""
    root = Path.cwd() if root is None else Path(root)
    if isinstance(value, dict):
        return {key: portable(item, root) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [portable(item, root) for item in value]
    if isinstance(value, str) and value.startswith("/"):
        path = Path(value)
        if path.is_relative_to(root):
            return str(path.relative_to(root)) or "."
    return value
