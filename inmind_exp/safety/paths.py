"""Filesystem paths built from identifiers: never from raw input. A directory for a task, a configuration or any
other named unit is named by a hash of its id, and every path is checked to stay inside its parent before it is
created or removed."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path


class UnsafePathError(ValueError):
    """A path would leave the directory it must stay in."""


def hashed_name(prefix: str, raw_id: str, length: int = 16) -> str:
    """``<prefix>-<sha256(raw_id)[:length]>``: a directory name that no id can turn into a path traversal."""
    if not prefix.replace("-", "").replace("_", "").isalnum():
        raise UnsafePathError(f"prefix {prefix!r} must be alphanumeric (with - or _)")
    return f"{prefix}-{hashlib.sha256(raw_id.encode('utf-8')).hexdigest()[:length]}"


def inside(parent: Path, path: Path) -> Path:
    """``path`` resolved, after checking that it lies strictly inside ``parent`` (symlinks resolved)."""
    p, root = Path(path).resolve(), Path(parent).resolve()
    if p == root or root not in p.parents:
        raise UnsafePathError(f"{path} is not inside {parent}")
    return p


def child_dir(parent: Path, prefix: str, raw_id: str) -> Path:
    """The directory for unit ``raw_id`` under ``parent``, named by a hash of the id and checked to stay inside."""
    return inside(parent, Path(parent) / hashed_name(prefix, raw_id))


def remove_tree(parent: Path, path: Path) -> None:
    """``shutil.rmtree(path)`` only if ``path`` lies inside ``parent``; anything else is refused, never deleted."""
    target = inside(parent, path)
    shutil.rmtree(target, ignore_errors=True)
