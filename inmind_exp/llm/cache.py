"""A persistent, content-addressed cache of LLM completions and embeddings.

One file per entry under ``<dir>/<kind>/<key[:2]>/<key>.json``, written to a temporary file and renamed into
place, so any number of processes (Ray workers on several nodes over a shared path included) can read and
write it at once without locks and without ever seeing a partial entry. An entry that cannot be used (truncated,
not JSON, or JSON of the wrong shape for its kind) is a miss: the caller computes the value again and ``put``
overwrites the entry; ``CallCache.invalid`` counts such entries so a run can report them.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
import threading
from pathlib import Path
from typing import Any, Callable

from inmind_exp.llm.inflight import SingleFlight

CACHE_FORMAT_VERSION = 1
log = logging.getLogger(__name__)


def is_count(v: Any) -> bool:
    """A token count as the cache accepts it (on write as on read): an int ≥ 0."""
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _valid_chat(v: Any) -> bool:
    """A completion as ``Completion.to_cache`` writes it: a text, a list of tool calls, token counts."""
    if not isinstance(v, dict) or not isinstance(v.get("text"), str):
        return False
    if not isinstance(v.get("tool_calls") or [], list):
        return False
    return all(is_count(v.get(k, 0)) for k in ("prompt_tokens", "completion_tokens"))


def _valid_embed(v: Any) -> bool:
    """An embedding: a non-empty list of numbers under ``vector`` (``tokens``, when present, a count)."""
    if not isinstance(v, dict) or not isinstance(v.get("vector"), list) or not v["vector"]:
        return False
    if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v["vector"]):
        return False
    return is_count(v.get("tokens", 0))


#: Shape checks per kind; a kind without one accepts any JSON value.
VALIDATORS: dict[str, Callable[[Any], bool]] = {"chat": _valid_chat, "embed": _valid_embed}


def cache_key(payload: dict[str, Any]) -> str:
    """sha256 of the canonical JSON of everything that changes the answer."""
    canonical = json.dumps({"v": CACHE_FORMAT_VERSION, **payload}, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


class CallCache:
    """Get/put JSON values by key; ``kind`` separates completions from embeddings."""

    def __init__(self, directory: str | Path):
        self.dir = Path(directory).expanduser().resolve()
        self.dir.mkdir(parents=True, exist_ok=True)
        #: Entries found unusable by this process (corrupt or of the wrong shape), per kind; each was a miss.
        self.invalid: dict[str, int] = {}
        #: the requests this process's callers of this cache have in flight (``inmind_exp.llm.inflight``)
        self.flights: Any = SingleFlight()
        self._last = threading.local()  # whether this thread's last ``get`` met an unusable entry

    def _path(self, kind: str, key: str) -> Path:
        return self.dir / kind / key[:2] / f"{key}.json"

    def get(self, kind: str, key: str) -> Any | None:
        self._last.invalid = False
        path = self._path(kind, key)
        try:
            with open(path, encoding="utf-8") as f:
                value = json.load(f)
        except FileNotFoundError:
            return None
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            return self._miss(kind, path, type(e).__name__)  # a corrupt entry (disk full, foreign writer): a miss
        check = VALIDATORS.get(kind)
        if check is not None and not check(value):
            return self._miss(kind, path, "wrong shape")  # valid JSON of the wrong shape (older format): a miss too
        return value

    def invalid_here(self) -> bool:
        """Whether this thread's last ``get`` was a miss because the entry was unusable."""
        return bool(getattr(self._last, "invalid", False))

    def _miss(self, kind: str, path: Path, why: str) -> None:
        self._last.invalid = True
        self.invalid[kind] = self.invalid.get(kind, 0) + 1
        log.warning(f"[inmind] cache entry {path} is unusable ({why}); asked again and rewritten")
        return None

    @property
    def invalid_entries(self) -> int:
        """How many unusable entries this process met (each was treated as a miss and is rewritten by ``put``)."""
        return sum(self.invalid.values())

    def put(self, kind: str, key: str, value: Any) -> None:
        """Store ``value``; ValueError for one ``get`` would refuse (checked the same way on write as on read)."""
        check = VALIDATORS.get(kind)
        if check is not None and not check(value):
            raise ValueError(f"a {kind} entry of the wrong shape is not cached")
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
