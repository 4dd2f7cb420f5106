"""``python -m inmind_exp.data fetch`` against a local HTTP server laid out like raw.githubusercontent.com (a temporary
copy of the release, arranged at run time: nothing of the release is stored in the tests), and from a directory:
every file verified, the tasks under both their names, the release's own ``validate_release.py`` run on the copy, a
tampered file refused naming its source, the completion marker written last, and nothing partial (nor a copy without
the marker) taken by a run for a release."""

from __future__ import annotations

import functools
import hashlib
import http.server
import json
import os
import shutil
import threading
from pathlib import Path

import pytest

from inmind_exp.data import __main__ as cli
from inmind_exp.data.fetch import DEFAULT_REF, FILE_REFS, fetch_release
from inmind_exp.data.release import (COMPLETE_MARKER, FETCHED, MANIFEST, PINNED_SHA256, PROMPTS, SHA256SUMS, TASKS,
                                     TASKS_OLD_NAME, ReleaseError, find_release, sha256_file)


class Server:
    """``http.server`` on 127.0.0.1 serving ``root``; ``requests`` lists the paths asked for."""

    def __init__(self, root: Path):
        self.requests: list[str] = []
        seen = self.requests

        class Handler(http.server.SimpleHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                seen.append(self.path)
                super().do_GET()

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=str(root)))
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> "Server":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def layout(release_root: Path, web: Path, ref: str | None = None, old_tasks_name: bool = False) -> Path:
    """``web/<ref>/<path>`` for every fetched file: each at its pinned commit (``ref`` None) or all at ``ref``."""
    for rel in FETCHED:
        name = TASKS_OLD_NAME if rel == TASKS and old_tasks_name else rel
        dst = web / (ref or FILE_REFS[name]) / name
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(release_root / rel, dst)
    return web


def tamper(path: Path) -> None:
    path.write_bytes(path.read_bytes() + b"\nA changed upstream line.\n")


def leftovers(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir()) if parent.exists() else []


@pytest.mark.slow
def test_download_at_pinned_refs_verifies_every_file(release, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("INMIND_RELEASE", raising=False)
    with Server(layout(release.root, tmp_path / "web")) as srv:
        done = fetch_release(source=srv.url, log=lambda _: None)
    dest = tmp_path / "cache" / "inmind" / "release" / DEFAULT_REF
    assert done.release.root == dest.resolve()
    assert sorted(srv.requests) == sorted(f"/{FILE_REFS[rel]}/{rel}" for rel in FETCHED)
    for rel in FETCHED:
        assert sha256_file(dest / rel) == sha256_file(release.root / rel), rel
    # the tasks also under the name the release's scripts read, so they run in the fetched copy as they are
    assert sha256_file(dest / TASKS_OLD_NAME) == sha256_file(release.root / TASKS)
    assert leftovers(dest.parent) == [DEFAULT_REF]  # no temporary directory left beside it
    assert find_release().root == dest.resolve()  # a run finds the fetched copy with no variable set
    marker = json.loads((dest / COMPLETE_MARKER).read_text())
    assert marker["validate_release"].startswith("OK: 125 tasks; 47 sessions; 486 turns")
    answer = PROMPTS["answer"]
    assert marker["files"][answer] == {"sha256": sha256_file(dest / answer),
                                       "source": f"{srv.url}/{FILE_REFS[answer]}/{answer}"}
    assert set(marker["files"]) == {*FETCHED, TASKS_OLD_NAME}
    # written last: no file of the copy is newer than the marker
    last = (dest / COMPLETE_MARKER).stat().st_mtime_ns
    assert all(p.stat().st_mtime_ns <= last for p in dest.rglob("*") if p.is_file())
    # the release's own script passes in the installed copy, run there as its README says
    import subprocess
    import sys
    done = subprocess.run([sys.executable, "evaluation/scripts/validate_release.py"], cwd=dest, capture_output=True,
                          text=True)
    assert done.returncode == 0 and done.stdout.startswith("OK: 125 tasks"), done.stderr


def test_one_ref_and_the_pre_rename_tasks_name(release, tmp_path):
    """``--ref`` fetches every file at that ref; a ref without ``inmind_en.jsonl`` gives ``inmind.jsonl`` (same hash)."""
    with Server(layout(release.root, tmp_path / "web", ref="v1", old_tasks_name=True)) as srv:
        done = fetch_release(ref="v1", source=srv.url, dest=tmp_path / "rel", log=lambda _: None)
    assert f"/v1/{TASKS}" in srv.requests and f"/v1/{TASKS_OLD_NAME}" in srv.requests
    assert done.release.path(TASKS) == (tmp_path / "rel" / TASKS).resolve()  # written under the current name too
    assert sha256_file(tmp_path / "rel" / TASKS) == sha256_file(tmp_path / "rel" / TASKS_OLD_NAME)
    assert done.sources[TASKS_OLD_NAME] == f"{srv.url}/v1/{TASKS_OLD_NAME}"


@pytest.mark.parametrize("rel, says", [
    (PROMPTS["application"], "does not match the pinned"),
    (TASKS, "does not match the pinned"),
    ("evaluation/scripts/build_timeline.py", "does not match the pinned"),
])
def test_tampered_download_is_refused_naming_the_file_and_nothing_is_installed(release, tmp_path, rel, says):
    web = layout(release.root, tmp_path / "web")
    tamper(web / FILE_REFS[rel] / rel)
    dest = tmp_path / "cache" / "pinned"
    with Server(web) as srv, pytest.raises(ReleaseError) as err:
        fetch_release(source=srv.url, dest=dest, log=lambda _: None)
    # named by its source URL, not by the temporary copy the fetch has just deleted
    assert str(err.value).startswith(f"{srv.url}/{FILE_REFS[rel]}/{rel}: ") and says in str(err.value)
    assert ".partial-" not in str(err.value)
    assert leftovers(dest.parent) == []  # neither the release nor its temporary directory


def test_a_changed_sha256sums_is_refused(release, tmp_path):
    web = layout(release.root, tmp_path / "web")
    sums = web / FILE_REFS[SHA256SUMS] / SHA256SUMS
    sums.write_text(sums.read_text().replace(sha256_file(release.path(TASKS))[:8], "00000000"))
    with Server(web) as srv, pytest.raises(ReleaseError, match="published in .*SHA256SUMS"):
        fetch_release(source=srv.url, dest=tmp_path / "rel", log=lambda _: None)
    assert not (tmp_path / "rel").exists()


def test_a_missing_file_is_named(release, tmp_path):
    web = layout(release.root, tmp_path / "web")
    (web / FILE_REFS[PROMPTS["naive"]] / PROMPTS["naive"]).unlink()
    with Server(web) as srv, pytest.raises(ReleaseError, match=r"judge_naive\.txt: HTTP 404"):
        fetch_release(source=srv.url, dest=tmp_path / "rel", log=lambda _: None)
    assert leftovers(tmp_path) == ["web"]


def test_refetch_replaces_an_older_copy(release, tmp_path):
    dest = tmp_path / "rel"
    dest.mkdir()
    (dest / "stale.txt").write_text("old")
    fetch_release(source=str(release.root), dest=dest, log=lambda _: None)
    assert not (dest / "stale.txt").exists() and (dest / SHA256SUMS).is_file()
    assert leftovers(tmp_path) == ["rel"]


def test_from_a_directory_via_the_cli(release, tmp_path, capsys):
    assert cli.main(["fetch", "--from", str(release.root), "--dest", str(tmp_path / "rel")]) == 0
    assert "release verified and installed" in capsys.readouterr().out
    assert hashlib.sha256((tmp_path / "rel" / TASKS).read_bytes()).hexdigest() == sha256_file(release.path(TASKS))

    clone = tmp_path / "clone"
    shutil.copytree(release.root, clone)
    tamper(clone / PROMPTS["answer"])
    assert cli.main(["fetch", "--from", str(clone), "--dest", str(tmp_path / "rel2")]) == 2
    err = capsys.readouterr().err
    assert f"error: {clone / PROMPTS['answer']}: sha256 " in err and "refusing a changed release file" in err
    assert ".partial-" not in err
    assert not (tmp_path / "rel2").exists()


def test_a_failing_validate_release_refuses_the_fetch(release, tmp_path, monkeypatch):
    """A copy whose every file matches its pin but fails the release's own check (here a manifest that says 487
    turns, its pin moved along with it) is refused with the script's assertion, and nothing is installed."""
    clone = tmp_path / "clone"
    shutil.copytree(release.root, clone)
    manifest = clone / MANIFEST
    manifest.write_text(manifest.read_text().replace('"turns": 486', '"turns": 487'))
    monkeypatch.setitem(PINNED_SHA256, MANIFEST, sha256_file(manifest))
    with pytest.raises(ReleaseError) as err:
        fetch_release(source=str(clone), dest=tmp_path / "rel", log=lambda _: None)
    msg = str(err.value)
    assert f"the release's own check {clone / 'evaluation/scripts/validate_release.py'} failed" in msg
    assert "AssertionError" in msg and ".partial-" not in msg
    assert leftovers(tmp_path) == ["clone"]


def test_find_release_takes_only_completed_fetches(release, tmp_path, monkeypatch):
    """A partial directory newer than a good copy does not shadow it; a cache holding only copies without the marker
    (fetched before it existed) says to re-fetch."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("INMIND_RELEASE", raising=False)
    cache = tmp_path / "cache" / "inmind" / "release"
    good = fetch_release(source=str(release.root), dest=cache / "good", log=lambda _: None).release.root
    partial = cache / "zz-newer"
    (partial / MANIFEST).parent.mkdir(parents=True)
    shutil.copyfile(release.root / MANIFEST, partial / MANIFEST)
    os.utime(partial, (os.stat(good).st_mtime + 100,) * 2)
    assert find_release().root == good

    shutil.rmtree(good)
    with pytest.raises(ReleaseError) as err:
        find_release()
    assert str(partial) in str(err.value) and COMPLETE_MARKER in str(err.value)
    assert "re-fetch with `python -m inmind_exp.data fetch`" in str(err.value)
    # the marker names the copy complete; the newest completed fetch wins
    old = fetch_release(source=str(release.root), dest=cache / "old", log=lambda _: None).release.root
    new = fetch_release(source=str(release.root), dest=cache / "a-new", log=lambda _: None).release.root
    os.utime(old / COMPLETE_MARKER, (os.stat(new / COMPLETE_MARKER).st_mtime - 100,) * 2)
    assert find_release().root == new


def test_bad_ref_is_refused(tmp_path):
    with pytest.raises(ReleaseError, match="not a branch"):
        fetch_release(ref="../../etc", source=str(tmp_path), dest=tmp_path / "x")
