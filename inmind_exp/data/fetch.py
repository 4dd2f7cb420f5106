"""``python -m inmind_exp.data fetch``: put a verified copy of the official InMind release in the user cache.

The files the project uses (``release.FETCHED``: tasks, SHA256SUMS, background trace and manifest, the five prompts,
the submission schema and the release's four scripts) are downloaded from GitHub (``<base>/<ref>/<path>``, base
``https://raw.githubusercontent.com/imlrz/InMind``; ``--from URL`` names a mirror or a local server with the same
layout) or copied from a clone (``--from DIR``), into a hidden temporary directory beside the destination. Every file
is verified there (the tasks against the downloaded ``SHA256SUMS``, the background against ``manifest.json``, and
everything against the hashes pinned in ``inmind_exp.data.release``). The tasks are written under both their names
(``inmind_en.jsonl``, and ``inmind.jsonl``, which the release's own scripts read; same bytes, same pin), the
release's ``validate_release.py`` is run on the copy, and the completion marker (``release.COMPLETE_MARKER``: each
file's source and SHA-256) is written last; only then is the directory renamed to ``~/.cache/inmind/release/<ref>/``.
A refused or interrupted fetch leaves no directory a run would take for a release, and its error names the file's
source (the URL or the --from path), not the temporary copy it deleted.

Default ref: the release's files live at several commits (``SOURCE.md`` of the reference copy lists them) and the
tasks file exists in two versions, so no single commit is known to hold every pinned file. Without ``--ref``, each
file is fetched at the commit its pinned bytes were read at (``FILE_REFS``); the cache directory is named
``pinned-<digest of that table>``. ``--ref main`` (or any commit) fetches every file at one ref, still verified
against the same pins, so a changed upstream file is refused rather than used.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from inmind_exp.data.release import (BACKGROUND, COMPLETE_MARKER, FETCHED, MANIFEST, PROMPTS, SCHEMA, SCRIPTS,
                                     SHA256SUMS, TASKS, TASKS_OLD_NAME, Release, ReleaseError, default_cache_root,
                                     sha256_file)

DEFAULT_BASE_URL = "https://raw.githubusercontent.com/imlrz/InMind"
#: The commit each file's pinned bytes were read at (full SHA-1s from the reference copy's SOURCE.md): c8f75874 first
#: release, d3d74d22 / 3a74c450 the evaluation package (still naming ``inmind.jsonl``), 1c018c82 / 8ee1e80c the split
#: into ``inmind_en.jsonl``. ``inmind.jsonl`` is taken from d3d74d22, whose README still names it.
_D3D, _3A7 = "d3d74d22f58a63223d0949f20ff3cf893db20376", "3a74c450fc150e5d7941347c44f3e0b93835769b"
FILE_REFS: dict[str, str] = {
    TASKS: "8ee1e80c0c967f321c74e7cd91978782fff02e25",
    TASKS_OLD_NAME: _D3D,
    SHA256SUMS: "1c018c82604d47bbe4c22c8b19bcfa78fd332977",
    BACKGROUND: _3A7,
    MANIFEST: _D3D,
    SCHEMA: _3A7,
    PROMPTS["answer"]: _3A7,
    PROMPTS["naive"]: _D3D,
    PROMPTS["application"]: _3A7,
    PROMPTS["target_recall"]: _3A7,
    PROMPTS["answer_only"]: _3A7,
    SCRIPTS["build_timeline"]: _D3D,
    SCRIPTS["build_judge_payloads"]: _3A7,
    SCRIPTS["validate_release"]: _3A7,
    SCRIPTS["validate_submission"]: _D3D,
}
DEFAULT_REF = "pinned-" + hashlib.sha256(json.dumps(FILE_REFS, sort_keys=True).encode()).hexdigest()[:12]
#: a ref as a path component: a branch, tag or commit; no ``..``, no leading ``.`` or ``/``
_REF = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._/-]{0,199}")
#: the largest file accepted from a server (the largest release file is ~0.6 MB)
MAX_BYTES = 64 << 20
TIMEOUT_S = 60.0
#: how long the release's ``validate_release.py`` may take on the copy (it reads ~0.8 MB; well under a second)
VALIDATE_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class Fetched:
    """A verified release directory and, per file written (by its path in the release), where it came from."""

    release: Release
    sources: dict[str, str]


def fetch_release(ref: str | None = None, source: str | None = None, dest: str | Path | None = None,
                  *, log: Callable[[str], None] = print) -> Fetched:
    """Fetch, verify and install a release; raises ``ReleaseError`` naming the file on any failure or mismatch."""
    label = ref or DEFAULT_REF
    if not _REF.fullmatch(label) or ".." in label.split("/"):
        raise ReleaseError(f"--ref {label!r}: not a branch, tag or commit name")
    dest_path = Path(dest).expanduser() if dest else default_cache_root() / label.replace("/", "_")
    dest_path = dest_path.resolve()
    dest_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest_path.name}.partial-", dir=dest_path.parent))
    sources: dict[str, str] = {}
    try:
        if source and not _is_url(source):
            sources = _copy_all(Path(source).expanduser(), tmp)
        else:
            sources = _download_all((source or DEFAULT_BASE_URL).rstrip("/"), ref, tmp)
        _both_task_names(tmp, sources)
        check_hashes(Release(tmp))
        checked = validate_release(tmp, sources)
        _write_marker(tmp, label, sources, checked)  # last: the directory is a release from here on
        _install(tmp, dest_path)
    except ReleaseError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise ReleaseError(_name_sources(str(e), tmp, sources)) from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    for rel, where in sources.items():
        log(f"  {rel}  <- {where}")
    log(f"  {Path(SCRIPTS['validate_release']).name}: {checked}")
    return Fetched(Release(dest_path), sources)


def _name_sources(message: str, tmp: Path, sources: dict[str, str]) -> str:
    """``message`` with every path inside the (deleted) temporary copy replaced by where that file came from."""
    for rel in sorted(sources, key=len, reverse=True):
        message = message.replace(str(tmp / rel), sources[rel])
    return message.replace(str(tmp), "the fetched copy")


def _both_task_names(tmp: Path, sources: dict[str, str]) -> None:
    """The tasks under both names: ``inmind_en.jsonl`` (the release's current name) and ``inmind.jsonl`` (what its
    scripts read); the one fetched is copied to the other (``check_hashes`` pins both to the same SHA-256)."""
    have, other = (TASKS, TASKS_OLD_NAME) if (tmp / TASKS).is_file() else (TASKS_OLD_NAME, TASKS)
    if not (tmp / other).is_file():
        shutil.copyfile(tmp / have, tmp / other)
        why = "its scripts read" if other == TASKS_OLD_NAME else "it has now"
        sources[other] = f"{sources[have]} (copied to the name {why})"


def validate_release(root: Path, sources: dict[str, str] | None = None) -> str:
    """Run the release's own ``validate_release.py`` on the copy at ``root`` (it reads ``inmind.jsonl``, the
    background, its manifest, the prompts and the schema); its OK line, or ``ReleaseError`` with its failure."""
    script = Release(root).script("validate_release")
    rel = SCRIPTS["validate_release"]
    try:
        done = subprocess.run([sys.executable, "-I", str(script)], cwd=root, capture_output=True, text=True,
                              timeout=VALIDATE_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ReleaseError(f"{(sources or {}).get(rel, script)}: the release's own check could not run: {e}") from None
    out = (done.stdout + done.stderr).strip()
    if done.returncode != 0:
        tail = "\n".join(out.splitlines()[-3:])
        raise ReleaseError(f"the release's own check {(sources or {}).get(rel, script)} failed on the fetched files "
                           f"(exit {done.returncode}): {tail}")
    return out.splitlines()[-1] if out else "OK"


def _write_marker(tmp: Path, label: str, sources: dict[str, str], checked: str) -> None:
    marker = {"ref": label, "completed": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "validate_release": checked,
              "files": {rel: {"sha256": sha256_file(tmp / rel), "source": where}
                        for rel, where in sorted(sources.items())}}
    path = tmp / COMPLETE_MARKER
    with open(path, "w", encoding="utf-8") as f:
        f.write(json.dumps(marker, indent=1, sort_keys=True) + "\n")
        f.flush()
        os.fsync(f.fileno())


def _is_url(source: str) -> bool:
    return source.startswith(("http://", "https://"))


def _install(tmp: Path, dest: Path) -> None:
    """Rename the verified ``tmp`` to ``dest``; an older copy at ``dest`` is moved aside first, then removed."""
    old = None
    if dest.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{dest.name}.old-", dir=dest.parent))
        os.rmdir(old)
        dest.rename(old)
    tmp.rename(dest)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _copy_all(src: Path, tmp: Path) -> dict[str, str]:
    if not src.is_dir():
        raise ReleaseError(f"{src}: --from directory not found (a clone of imlrz/InMind, or a URL)")
    out: dict[str, str] = {}
    for rel in FETCHED:
        name = rel
        if rel == TASKS and not (src / rel).is_file() and (src / TASKS_OLD_NAME).is_file():
            name = TASKS_OLD_NAME
        p = src / name
        if not p.is_file():
            raise ReleaseError(f"{p}: release file missing in --from directory {src}")
        (tmp / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(p, tmp / name)
        out[name] = str(p)
    return out


def _download_all(base: str, ref: str | None, tmp: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    for rel in FETCHED:
        name = rel
        url = f"{base}/{ref or FILE_REFS[rel]}/{rel}"
        data = _get(url, missing_ok=rel == TASKS)
        if data is None:  # the tasks before the release's rename: same bytes, same SHA-256
            name = TASKS_OLD_NAME
            url = f"{base}/{ref or FILE_REFS[name]}/{name}"
            data = _get(url)
        assert data is not None
        (tmp / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp / name).write_bytes(data)
        out[name] = url
    return out


def _get(url: str, missing_ok: bool = False) -> bytes | None:
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as r:  # noqa: S310  (http(s) only, checked above)
            data = r.read(MAX_BYTES + 1)
    except urllib.error.HTTPError as e:
        if e.code == 404 and missing_ok:
            return None
        raise ReleaseError(f"{url}: HTTP {e.code} {e.reason}") from None
    except (urllib.error.URLError, OSError) as e:
        raise ReleaseError(f"{url}: download failed: {getattr(e, 'reason', e)}") from None
    if len(data) > MAX_BYTES:
        raise ReleaseError(f"{url}: larger than {MAX_BYTES} bytes; not a release file")
    return data


def check_hashes(release: Release) -> None:
    """Every fetched file of ``release`` against its pin (the tasks under each name present), then the tasks and the
    background against the checksums the release publishes."""
    for rel in (*FETCHED, TASKS_OLD_NAME):
        if rel != SHA256SUMS and (rel != TASKS_OLD_NAME or (release.root / rel).is_file()):
            release.path(rel)
    release.verify_published()

