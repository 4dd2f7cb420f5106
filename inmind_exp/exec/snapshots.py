"""Prefix snapshots as bytes: a memory system's snapshot directory packed into a gzip tarball, so it can cross Ray
as one object and be kept on disk (``Plan.prefix_path``) for every later run with the same prefix identity."""

from __future__ import annotations

import io
import logging
import tarfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from inmind_exp.plan.plan import Plan

log = logging.getLogger(__name__)


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


def saved_prefix(plan: Plan) -> bytes | None:
    """The plan's prefix snapshot if a run with the same prefix identity built it before."""
    return plan.prefix_path.read_bytes() if plan.prefix_path.is_file() else None


def save_prefix(plan: Plan, blob: bytes, seconds: float) -> None:
    save(plan.prefix_path, blob)
    log.info(f"[inmind] {plan.name}: prefix snapshot ready ({len(blob) / 1024:.0f} KiB, {seconds:.1f}s)")


def prefix_blob(plan: Plan, build: Callable[[], bytes]) -> bytes:
    """The prefix snapshot: from ``plan.prefix_path`` if built before, else built now and saved."""
    blob = saved_prefix(plan)
    if blob is not None:
        return blob
    t = time.perf_counter()
    log.info(f"[inmind] {plan.name}: ingesting the {plan.session_index} prefix session(s) once ...")
    blob = build()
    save_prefix(plan, blob, time.perf_counter() - t)
    return blob
