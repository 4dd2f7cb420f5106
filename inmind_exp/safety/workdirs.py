"""Worker temp directories that never pile up: each is named ``inmind-worker-<pid>-<random>``, held by its process
through an ``fcntl.flock`` on a lock file inside it, removed when the worker exits (``close`` or ``atexit``), and
removed by the next worker that starts if its owner was killed (the kernel drops a dead process's flock, so a free
lock means the owner is gone, whatever became of its pid).

A directory is only ever judged stale once its ``owner.json`` exists, which is written after the lock is held, so a
worker that is still starting is never removed; directories of the old ``mkdtemp`` layout (no lock file) are left alone.
"""

from __future__ import annotations

import atexit
import fcntl
import json
import logging
import os
import shutil
import socket
import tempfile
from pathlib import Path

from inmind_exp.safety.paths import inside

log = logging.getLogger(__name__)
PREFIX = "inmind-worker"
LOCK_FILE = ".owner.lock"
OWNER_FILE = "owner.json"


class WorkerDir:
    """A worker's private temp directory; ``close()`` (also run at exit) removes it."""

    def __init__(self, path: Path, fd: int):
        self.path, self._fd = path, fd
        atexit.register(self.close)

    def close(self) -> None:
        """Remove the directory and drop its lock; safe to call twice."""
        if self._fd is None:
            return
        try:
            shutil.rmtree(self.path, ignore_errors=True)
        finally:
            os.close(self._fd)  # closing the descriptor releases the flock
            self._fd = None
            atexit.unregister(self.close)

    @property
    def open(self) -> bool:
        return self._fd is not None

    def __enter__(self) -> "WorkerDir":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_worker_dir(base: str | Path | None = None, prefix: str = PREFIX, clean_stale: bool = True) -> WorkerDir:
    """Create ``<base>/<prefix>-<pid>-<random>`` (``base`` defaults to the system temp dir) and hold it; first remove
    the directories of dead workers when ``clean_stale``."""
    root = Path(base) if base is not None else Path(tempfile.gettempdir())
    root.mkdir(parents=True, exist_ok=True)
    if clean_stale:
        remove_stale(root, prefix)
    path = Path(tempfile.mkdtemp(prefix=f"{prefix}-{os.getpid()}-", dir=root))
    fd = os.open(path / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    (path / OWNER_FILE).write_text(json.dumps({"host": socket.gethostname(), "pid": os.getpid()}))
    return WorkerDir(path, fd)


def remove_stale(base: str | Path, prefix: str = PREFIX) -> list[Path]:
    """Remove every ``<prefix>-*`` directory under ``base`` whose owner has exited; returns what was removed."""
    removed = []
    for d in sorted(Path(base).glob(f"{prefix}-*")):
        if d.is_symlink() or not d.is_dir() or not (d / OWNER_FILE).is_file():
            continue
        try:
            fd = os.open(d / LOCK_FILE, os.O_RDWR | os.O_CLOEXEC)
        except OSError:
            continue  # removed meanwhile by another worker, or not ours to judge
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # its owner is alive
            shutil.rmtree(inside(Path(base), d), ignore_errors=True)
            removed.append(d)
        finally:
            os.close(fd)
    if removed:
        log.info("removed %d temp dir(s) left by killed workers under %s", len(removed), base)
    return removed
