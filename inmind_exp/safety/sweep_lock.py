"""One driver per sweep: an exclusive lock on the sweep directory, taken before any work and held until the driver
exits, with a record of who holds it.

The lock is ``fcntl.flock`` on ``<sweep dir>/.sweep.lock``; the kernel drops it when the holder's process ends, by
``kill -9`` included, so a killed driver never blocks the next launch. The holder record (host, pid, start time,
command; secrets redacted) is written into the same file once the lock is held and cleared on a clean release, so a
record found under a free lock is the trace of a driver that died: it is reported and taken over. flock works on local
file systems and on NFS (Linux emulates it with POSIX locks there); it does not cover two hosts on a file system
without lock support.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import shlex
import socket
import sys
import time
from dataclasses import asdict, dataclass
from datetime import datetime, UTC
from pathlib import Path
from typing import Any

from inmind_exp.safety.redact import redact_overrides

log = logging.getLogger(__name__)
LOCK_NAME = ".sweep.lock"


@dataclass(frozen=True)
class LockHolder:
    """Who holds (or held) a sweep lock."""

    host: str
    pid: int
    started: str
    command: str

    def __str__(self) -> str:
        return f"pid {self.pid} on host {self.host} (started {self.started}; command: {self.command})"

    def short(self) -> str:
        """Who, without the command: ``pid 123 on host h, started 2026-01-01T10:00:00+00:00``."""
        return f"pid {self.pid} on host {self.host}, started {self.started}"

    @classmethod
    def current(cls, command: str | None = None) -> "LockHolder":
        cmd = command if command is not None else shlex.join(redact_overrides([sys.executable, *sys.argv]))
        return cls(host=socket.gethostname(), pid=os.getpid(),
                   started=datetime.now(UTC).isoformat(timespec="seconds"), command=cmd)

    @classmethod
    def parse(cls, text: str) -> "LockHolder | None":
        try:
            d = json.loads(text)
            return cls(host=str(d["host"]), pid=int(d["pid"]), started=str(d["started"]), command=str(d["command"]))
        except (ValueError, KeyError, TypeError):
            return None

    def alive_here(self) -> bool | None:
        """Whether the holder's process still exists: None when it ran on another host (cannot tell from here)."""
        if self.host != socket.gethostname():
            return None
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True


class SweepLockedError(RuntimeError):
    """Another driver holds the sweep's lock."""

    def __init__(self, directory: Path, holder: LockHolder | None, waited_s: float | None = None):
        self.directory, self.holder = directory, holder
        who = str(holder) if holder else "a process that has not written its record yet"
        if holder is not None and holder.alive_here() is False:
            who += ("; that process is gone but a child it started still holds the lock file open: stop the "
                    "child (see `fuser " + str(directory / LOCK_NAME) + "`)")
        head = f"timed out after {waited_s:.0f} s waiting for" if waited_s is not None else "cannot take"
        super().__init__(f"{head} the lock on sweep directory {directory}: it is held by {who}. Only one driver may "
                         f"run a sweep; wait for it to finish, stop it, or pass run.wait_for_lock=true to wait.")


class SweepLock:
    """``with SweepLock(sweep_dir).acquire(): ...`` holds the sweep for the block; ``stale`` is the record of a dead
    driver that was taken over (None if the lock was clean)."""

    def __init__(self, directory: str | Path, command: str | None = None):
        self.directory = Path(directory)
        self.path = self.directory / LOCK_NAME
        self.command = command
        self.stale: LockHolder | None = None
        self.holder: LockHolder | None = None
        self._fd: int | None = None

    def acquire(self, wait: bool = False, timeout_s: float | None = None, poll_s: float = 1.0) -> "SweepLock":
        """Take the lock, or raise ``SweepLockedError`` naming the holder; with ``wait``, poll every ``poll_s`` until
        the lock is free (forever, or until ``timeout_s``)."""
        if self._fd is not None:
            raise RuntimeError(f"{self.path} is already held by this object")
        self.directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        t0 = time.monotonic()
        announced = False
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    holder = self.read_holder()
                    waited = time.monotonic() - t0
                    if not wait:
                        raise SweepLockedError(self.directory, holder) from None
                    if timeout_s is not None and waited >= timeout_s:
                        raise SweepLockedError(self.directory, holder, waited) from None
                    if not announced:
                        log.warning("waiting for the lock on %s, held by %s", self.directory, holder)
                        announced = True
                    time.sleep(poll_s if timeout_s is None else max(0.0, min(poll_s, timeout_s - waited)))
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        self.stale = LockHolder.parse(_read(fd))  # the caller says so (once): launch.hold_lock
        self.holder = LockHolder.current(self.command)
        _write(fd, json.dumps(asdict(self.holder), sort_keys=True) + "\n")
        return self

    def release(self) -> None:
        """Clear the holder record and drop the lock (the file stays: removing it would race with a new taker)."""
        if self._fd is None:
            return
        try:
            _write(self._fd, "")
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def read_holder(self) -> LockHolder | None:
        """The current record in the lock file (a live holder's, or a dead one's if the lock is free)."""
        try:
            return LockHolder.parse(self.path.read_text(encoding="utf-8"))
        except OSError:
            return None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def __enter__(self) -> "SweepLock":
        if self._fd is None:
            self.acquire()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()


def _read(fd: int) -> str:
    os.lseek(fd, 0, os.SEEK_SET)
    chunks = []
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)
    return b"".join(chunks).decode("utf-8", errors="replace")


def _write(fd: int, text: str) -> None:
    os.lseek(fd, 0, os.SEEK_SET)
    os.ftruncate(fd, 0)
    os.write(fd, text.encode("utf-8"))
    os.fsync(fd)
