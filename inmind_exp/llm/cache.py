"""A persistent, content-addressed cache of LLM completions and embeddings.

One file per entry under ``<dir>/<kind>/<key[:2]>/<key>.json``, written to a temporary file and renamed into
place, so any number of processes (Ray workers on several nodes over a shared path included) can read and
write it at once without locks and without ever seeing a partial entry.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

CACHE_FORMAT_VERSION = 1


def cache_key(payload: dict[str, Any]) -> str:
    """sha256 of the canonical JSON of everything that changes the answer."""
    canonical = json.dumps({"v": CACHE_FORMAT_VERSION, **payload}, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


class CallCache:
    """Get/put JSON values by key; ``kind`` separates completions from embeddings."""

    def __init__(self, directory: str | Path):
        self.dir = Path(directory).expanduser().resolve()
        self.dir.mkdir(parents=True, exist_ok=True)

    def _path(self, kind: str, key: str) -> Path:
        return self.dir / kind / key[:2] / f"{key}.json"

    def get(self, kind: str, key: str) -> Any | None:
        path = self._path(kind, key)
        try:
            with open(path, encoding="utf-8") as f:
                return json.load(f)
        except FileNotFoundError:
            return None
        except (json.JSONDecodeError, UnicodeDecodeError):
            return None  # a corrupt entry (disk full, foreign writer) is a miss, not a crash

    def put(self, kind: str, key: str, value: Any) -> None:
        path = self._path(kind, key)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(value, f, ensure_ascii=False)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
            raise

    def count(self, kind: str) -> int:
        base = self.dir / kind
        return sum(1 for _ in base.glob("*/*.json")) if base.is_dir() else 0
