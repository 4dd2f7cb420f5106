"""Prefix snapshots as bytes: a memory system's snapshot directory packed into a gzip tarball, so it can cross Ray
as one object and be kept on disk (``Plan.prefix_path``) for every later run with the same prefix identity."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path


def pack(directory: Path) -> bytes:
    """The directory's files, in sorted order, as a gzip tarball."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for p in sorted(directory.rglob("*")):
            tar.add(p, arcname=str(p.relative_to(directory)), recursive=False)
    return buf.getvalue()


def unpack(blob: bytes, directory: Path) -> None:
    """Extract a tarball made by ``pack`` (regular files and directories only: tarfile's ``data`` filter)."""
    directory.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(blob), mode="r:gz") as tar:
        tar.extractall(directory, filter="data")


def save(path: Path, blob: bytes) -> None:
    """Write atomically: a reader sees the whole snapshot or none."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(blob)
    tmp.replace(path)
