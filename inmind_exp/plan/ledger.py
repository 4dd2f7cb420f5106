"""The durable per-configuration ledger: an append-only, fsynced JSONL of task records, ``<root>/ledger/<hash>.jsonl``.

Resume reads it back: the last record of a task wins, and a line that is no record (cut short by a killed writer,
invalid UTF-8, a field of the wrong shape) is skipped with a warning naming ``file:line`` (its task simply runs
again): one bad line never blocks its configuration.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from inmind_exp.errors import InmindError
from inmind_exp.records import TaskRecord

log = logging.getLogger(__name__)


class LedgerWriteError(InmindError, OSError):
    """A record could not be appended (disk full, read-only, gone): dispatch stops; finished records stay."""


def free_space(path: Path) -> str:
    """The free space of the filesystem holding ``path`` (its nearest existing ancestor), e.g. ``"0 B"``."""
    import shutil

    p = Path(path)
    while not p.exists() and p != p.parent:
        p = p.parent
    try:
        n = float(shutil.disk_usage(p).free)
    except OSError:
        return "unknown"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return "unknown"


def read_records(path: Path) -> dict[str, TaskRecord]:
    """Task records of a JSONL file (a ledger, or a job's ``records.jsonl``) by task id, the last record of a task
    winning and ordered by when it was written. A line that is no record is skipped with one warning naming
    ``file:line``: cut short by a killed writer (and ended by the next append, so it may sit mid-file), invalid
    UTF-8, or JSON of the wrong shape (``"verdicts": []``); its task simply runs again."""
    out: dict[str, TaskRecord] = {}
    with open(path, "rb") as f:
        for n, raw in enumerate(f, 1):
            try:
                rec = TaskRecord.from_dict(json.loads(raw.decode("utf-8")))
                if not isinstance(rec.task_id, str):
                    raise TypeError(f"task_id {rec.task_id!r} is not a string")
            except Exception as e:  # noqa: BLE001 - any bad line: a record that runs again, never a blocked run
                if raw.strip():
                    log.warning(f"[inmind] {path}:{n}: not a task record ({type(e).__name__}: "
                                f"{str(e)[:120]}); skipped, its task runs again")
                continue
            out.pop(rec.task_id, None)
            out[rec.task_id] = rec
    return out


class Ledger:
    """Append-only JSONL of task records for one configuration; the last record of a task wins."""

    def __init__(self, path: Path):
        self.path = path

    def load(self) -> dict[str, TaskRecord]:
        """Records by task id (none when the file does not exist yet); see ``read_records``."""
        return read_records(self.path) if self.path.is_file() else {}

    def append(self, record: TaskRecord) -> None:
        """Append and fsync one record; ``LedgerWriteError`` naming the path and the free space when it fails (a
        partial line it leaves is skipped on resume and ended by the next append)."""
        line = json.dumps(record.to_dict(), ensure_ascii=False, sort_keys=True) + "\n"
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a", encoding="utf-8") as f:
                if f.tell() > 0:
                    self._repair_tail()
                f.write(line)
                f.flush()
                os.fsync(f.fileno())
        except OSError as e:
            raise LedgerWriteError(f"cannot append to the ledger {self.path}: {e.strerror or e} "
                                   f"({free_space(self.path)} free on its filesystem); the results before this one "
                                   f"are kept: free space and rerun the same command") from None

    def _repair_tail(self) -> None:
        """A writer killed mid-line leaves a partial last line: end it so the next record starts on its own line."""
        with open(self.path, "rb+") as f:
            f.seek(-1, os.SEEK_END)
            if f.read(1) != b"\n":
                f.write(b"\n")
