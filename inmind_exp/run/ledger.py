"""The durable per-configuration ledger: an append-only, fsynced JSONL of task records, ``<root>/ledger/<hash>.jsonl``.

Resume reads it back: the last record of a task wins, and a line cut short by a killed writer is skipped (its task
simply runs again).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from inmind_exp.records import TaskRecord


class Ledger:
    """Append-only JSONL of task records for one configuration; the last record of a task wins."""

    def __init__(self, path: Path):
        self.path = path

    def load(self) -> dict[str, TaskRecord]:
        """Records by task id; a line cut short by a killed writer is skipped (its task simply runs again)."""
        if not self.path.is_file():
            return {}
        out: dict[str, TaskRecord] = {}
        with open(self.path, encoding="utf-8") as f:
            for line in f:
                try:
                    rec = TaskRecord.from_dict(json.loads(line))
                except (json.JSONDecodeError, KeyError, TypeError):
                    continue
                out[rec.task_id] = rec
        return out

    def append(self, record: TaskRecord) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        line = json.dumps(record.to_dict(), ensure_ascii=False, sort_keys=True) + "\n"
        with open(self.path, "a", encoding="utf-8") as f:
            if f.tell() > 0:
                self._repair_tail()
            f.write(line)
            f.flush()
            os.fsync(f.fileno())

    def _repair_tail(self) -> None:
        """A writer killed mid-line leaves a partial last line: end it so the next record starts on its own line."""
        with open(self.path, "rb+") as f:
            f.seek(-1, os.SEEK_END)
            if f.read(1) != b"\n":
                f.write(b"\n")
