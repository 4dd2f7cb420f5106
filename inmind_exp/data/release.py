"""The official InMind release (GitHub ``imlrz/InMind``), read at run time from a release directory.

The release is the authors' data and has no licence yet, so nothing of it (tasks, trace, prompts) is copied into
this project: a run reads it from ``dataset.release_dir`` or ``$INMIND_RELEASE`` (or the cache ``python -m
inmind_exp.data fetch`` fills), and every file it reads is checked against a SHA-256 first: the tasks against the
release's ``benchmark/dataset/SHA256SUMS``, the background trace against ``evaluation/background/manifest.json``, and
the prompts, schema and manifest against the hashes pinned here, so a changed upstream file is refused, not used.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inmind_exp.errors import InmindError

RELEASE_ENV = "INMIND_RELEASE"
FETCH_COMMAND = "python -m inmind_exp.data fetch"

TASKS = "benchmark/dataset/inmind_en.jsonl"
#: the tasks' name before the release's rename (same bytes, same SHA-256); used when ``inmind_en.jsonl`` is absent
TASKS_OLD_NAME = "benchmark/dataset/inmind.jsonl"
SHA256SUMS = "benchmark/dataset/SHA256SUMS"
BACKGROUND = "evaluation/background/lme_s_background.jsonl"
MANIFEST = "evaluation/background/manifest.json"
SCHEMA = "evaluation/schema/submission.schema.json"
PROMPTS = {
    "answer": "evaluation/prompts/answer_system.txt",
    "naive": "evaluation/prompts/judge_naive.txt",
    "application": "evaluation/prompts/judge_application.txt",
    "target_recall": "evaluation/prompts/judge_target_recall.txt",
    "answer_only": "evaluation/prompts/judge_answer_only.txt",
}
#: the release's own stdlib scripts: not read by runs, fetched so tests can run them against this project's output
SCRIPTS = {
    "build_timeline": "evaluation/scripts/build_timeline.py",
    "build_judge_payloads": "evaluation/scripts/build_judge_payloads.py",
    "validate_release": "evaluation/scripts/validate_release.py",
    "validate_submission": "evaluation/scripts/validate_submission.py",
}

#: SHA-256 of every release file this project reads whose hash the release does not publish itself (the tasks'
#: hash comes from SHA256SUMS, the background's from the manifest, both also pinned here as a second check).
PINNED_SHA256: dict[str, str] = {
    TASKS: "4e27c56047d1f7c3eaf21ad5b6662f638f81a434034546be08b85e09876675a4",
    BACKGROUND: "aef51e8a4e606a3ac5ceafdc64d875a7f1f41a051dafd68dce45f9c90d626da1",
    MANIFEST: "14d30226edf82c823b7438bd3943847c1127503204d637ef074f04d815898125",
    SCHEMA: "65fa74c6e6c04056a371110bf00170ff9ae3ca71eb5467009e534b927c152baf",
    PROMPTS["answer"]: "43b42e53b64c754478b8b17e0ceda6ed2476367e3133766239c97c07ed8eba54",
    PROMPTS["naive"]: "3fa007ac801223bc3fe070e1c511cfb44e03839280843342ce0900a18e8a0cca",
    PROMPTS["application"]: "d45cc35770befb8b8526454a48b745fdd07e067234b1d98262177a9445b5f64c",
    PROMPTS["target_recall"]: "af55e9eacb13adfc5163cb137509194b3fd8bfdfbade869d0c6afecb44158f1d",
    PROMPTS["answer_only"]: "70c074e55438e037dc3e83b1c3d24fe0d4ee6b22b01b3f3089464fd6b4339ea2",
    SCRIPTS["build_timeline"]: "b36d810148de0b0d5b49347d8582c7c991a4b8e9b786865ea98f530ad4720b46",
    SCRIPTS["build_judge_payloads"]: "3ef58ca76dfb824b17909974055e25c5ec1e633b4257fb5f852b074e439f3584",
    SCRIPTS["validate_release"]: "bea0ca0eed3a84b6f722242825e47f60d91f08a7b707c7dab27c1a3dce2dc853",
    SCRIPTS["validate_submission"]: "e9b96b52bf3ece2ba7d30f6da875c6b1fc6179bbf474814ad0ef403779d32e1a",
}
PINNED_SHA256[TASKS_OLD_NAME] = PINNED_SHA256[TASKS]
#: written last by ``python -m inmind_exp.data fetch``, once every file is verified and the release's own
#: ``validate_release.py`` passed: a cache directory without it (an interrupted fetch, or a copy fetched before the
#: marker existed) is never taken for a release
COMPLETE_MARKER = ".inmind-fetch-complete.json"
#: every file ``python -m inmind_exp.data fetch`` puts in a release directory (SHA256SUMS is checked by its line for
#: the tasks, not by its own hash: its versions differ in which task files they list, not in the tasks' hash)
FETCHED: tuple[str, ...] = (TASKS, SHA256SUMS, BACKGROUND, MANIFEST, SCHEMA, *PROMPTS.values(), *SCRIPTS.values())


class ReleaseError(InmindError, ValueError):
    """The release is missing, incomplete, or a file does not match its published or pinned SHA-256."""


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def missing_message(where: str) -> str:
    """What to do when no release is found: the fetch command and the variable."""
    return (f"the official InMind release is needed ({where}) but none was found: run `{FETCH_COMMAND}` "
            f"(or `{FETCH_COMMAND} --from DIR_OR_URL`), or point ${RELEASE_ENV} or dataset.release_dir at a copy")


@dataclass(frozen=True)
class Release:
    """A release directory; every file is hash-checked the first time it is read through this object."""

    root: Path

    def path(self, rel: str) -> Path:
        """The checked path of one release file (``TASKS`` falls back to its pre-rename name)."""
        p = self.root / rel
        if rel == TASKS and not p.is_file() and (self.root / TASKS_OLD_NAME).is_file():
            rel, p = TASKS_OLD_NAME, self.root / TASKS_OLD_NAME
        if not p.is_file():
            raise ReleaseError(f"{p}: release file missing (release directory {self.root})")
        want = PINNED_SHA256.get(rel)
        if want is not None:
            got = sha256_file(p)
            if got != want:
                raise ReleaseError(f"{p}: sha256 {got} does not match the pinned {want}; refusing a changed "
                                   f"release file (re-fetch with `{FETCH_COMMAND}`)")
        return p

    def text(self, rel: str) -> str:
        return self.path(rel).read_text(encoding="utf-8")

    def prompt(self, name: str) -> str:
        """A release prompt by name (``answer``, ``naive``, ``application``, ``target_recall``, ``answer_only``),
        exactly as the file holds it."""
        return self.text(PROMPTS[name])

    def manifest(self) -> dict[str, Any]:
        return json.loads(self.text(MANIFEST))

    def schema(self) -> dict[str, Any]:
        return json.loads(self.text(SCHEMA))

    def script(self, name: str) -> Path:
        """The checked path of one of the release's scripts (``build_timeline``, ``validate_submission``, ...)."""
        return self.path(SCRIPTS[name])

    def verify(self) -> None:
        """Check every file the project reads (raises ``ReleaseError`` naming the first bad file)."""
        for rel in (TASKS, BACKGROUND, MANIFEST, SCHEMA, *PROMPTS.values()):
            self.path(rel)

    def verify_published(self) -> None:
        """Check the tasks against the release's ``SHA256SUMS`` and the background against its ``manifest.json``
        (the hashes the authors publish), on top of the pins; raises ``ReleaseError`` naming the file."""
        tasks = self.path(TASKS)
        sums_path = self.path(SHA256SUMS)
        listed = parse_sha256sums(sums_path.read_text(encoding="utf-8"))
        name = tasks.relative_to(self.root).as_posix()
        # a SHA256SUMS version lists the tasks under the name it had then; the release states both names' bytes agree
        want = listed.get(name) or listed.get(TASKS_OLD_NAME if name == TASKS else TASKS)
        if want is None:
            raise ReleaseError(f"{sums_path}: lists no checksum for {name} (nor {TASKS_OLD_NAME})")
        got = sha256_file(tasks)
        if got != want:
            raise ReleaseError(f"{tasks}: sha256 {got} does not match {want} published in {sums_path}")
        bg = self.path(BACKGROUND)
        want = str(self.manifest().get("sha256", ""))
        got = sha256_file(bg)
        if got != want:
            raise ReleaseError(f"{bg}: sha256 {got} does not match {want!r} published in {self.root / MANIFEST}")


def parse_sha256sums(text: str) -> dict[str, str]:
    """``sha256sum`` output (``<hex>  <path>`` or ``<hex> *<path>``) as path -> hex."""
    out = {}
    for line in text.splitlines():
        parts = line.strip().split(None, 1)
        if len(parts) == 2 and len(parts[0]) == 64:
            out[parts[1].lstrip("*").strip()] = parts[0].lower()
    return out


def default_cache_root() -> Path:
    """Where ``fetch`` puts releases: ``$XDG_CACHE_HOME/inmind/release`` (``~/.cache/inmind/release``)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "inmind" / "release"


def find_release(release_dir: str | Path | None = None, *, where: str = "dataset=official") -> Release:
    """The release to read: ``release_dir`` if given, else ``$INMIND_RELEASE``, else the most recently completed
    fetch in the cache (a directory holding ``COMPLETE_MARKER``). Raises ``ReleaseError`` with the fetch command when
    none exists, naming cache directories that hold no completed fetch."""
    chosen = release_dir or os.environ.get(RELEASE_ENV) or None
    if chosen:
        root = Path(chosen).expanduser()
        if not root.is_dir():
            raise ReleaseError(f"{root}: release directory not found. " + missing_message(where))
        return Release(root.resolve())
    cache = default_cache_root()
    dirs = sorted(p for p in cache.iterdir() if p.is_dir() and not p.name.startswith(".")) if cache.is_dir() else []
    # ".name.partial-*": a fetch under way; a directory without the marker: interrupted, or fetched before the marker
    complete = [p for p in dirs if (p / COMPLETE_MARKER).is_file()]
    if complete:
        return Release(max(complete, key=lambda p: (p / COMPLETE_MARKER).stat().st_mtime).resolve())
    if dirs:
        raise ReleaseError(
            f"{', '.join(str(p) for p in dirs)}: no completed fetch ({COMPLETE_MARKER} missing: the fetch was "
            f"interrupted, or the copy was fetched by an older version of this project); re-fetch with "
            f"`{FETCH_COMMAND}`. " + missing_message(where))
    raise ReleaseError(missing_message(where))
