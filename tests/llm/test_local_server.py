"""The embedded local model: parts are joined once and verified, a mismatching file is refused, and the real
llama.cpp server runs one task end to end through launch.py (this is the test that needs the [local] extra)."""

from __future__ import annotations

import hashlib
import sys
import types

import pytest

from inmind_exp.llm import local_server
from inmind_exp.llm.local_server import LocalModelError, packaged_model_path
from tests.launch_helpers import REPO, env, mlflow_runs, write_small_data


@pytest.fixture
def fake_parts(tmp_path, monkeypatch):
    blobs = [b"GGUF" + bytes([i]) * 1000 for i in range(3)]
    names = []
    for i, blob in enumerate(blobs):
        f = tmp_path / f"part{i}.bin"
        f.write_bytes(blob)
        name = f"fake_model_part{i}"
        mod = types.ModuleType(name)
        mod.get_part_path = (lambda f=f: str(f))
        monkeypatch.setitem(sys.modules, name, mod)
        names.append(name)
    monkeypatch.setattr(local_server, "PART_PACKAGES", tuple(names))
    whole = b"".join(blobs)
    return whole


def test_parts_joined_once_and_verified(fake_parts, tmp_path, monkeypatch):
    monkeypatch.setattr(local_server, "MODEL_BYTES", len(fake_parts))
    monkeypatch.setattr(local_server, "MODEL_SHA256", hashlib.sha256(fake_parts).hexdigest())
    path = packaged_model_path(tmp_path / "cache")
    assert path.read_bytes() == fake_parts
    mtime = path.stat().st_mtime_ns
    assert packaged_model_path(tmp_path / "cache") == path and path.stat().st_mtime_ns == mtime  # not joined again


def test_mismatching_parts_are_refused(fake_parts, tmp_path, monkeypatch):
    monkeypatch.setattr(local_server, "MODEL_BYTES", len(fake_parts))
    monkeypatch.setattr(local_server, "MODEL_SHA256", "0" * 64)
    with pytest.raises(LocalModelError, match="refusing"):
        packaged_model_path(tmp_path / "cache")
    assert not list((tmp_path / "cache").glob("*.gguf"))


def test_missing_part_package_says_how_to_install(tmp_path, monkeypatch):
    monkeypatch.setattr(local_server, "PART_PACKAGES", ("no_such_model_part_pkg",))
    with pytest.raises(LocalModelError, match=r"pip install -e '\.\[local\]'"):
        packaged_model_path(tmp_path / "cache")


@pytest.mark.local_llm
def test_real_local_llm_runs_one_task_end_to_end(tmp_path):
    """launch.py with the default llm=local: starts llama.cpp on loopback, answers and judges one task, stops it."""
    import subprocess

    write_small_data(tmp_path / "data", n_tasks=1)
    cmd = [sys.executable, str(REPO / "launch.py"), "system=backbone", "llm=local", "llm.max_tokens=48",
           f"dataset.path={tmp_path / 'data' / 'tasks.jsonl'}", "dataset.limit=1",
           f"trace.path={tmp_path / 'data' / 'longmemeval_s_small.json'}", "injection.user_turn=5",
           f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}", "tracking.experiment=test",
           f"hydra.run.dir={tmp_path / 'run'}", f"run.cache_dir={tmp_path / 'cache'}", "cluster.workers=1"]
    p = subprocess.run(cmd, cwd=REPO, env=env(), capture_output=True, text=True, timeout=1500)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "local LLM ready at http://127.0.0.1:" in p.stdout
    (run,) = [r for r in mlflow_runs(tmp_path) if r.data.tags.get("inmind.kind") == "config"]
    m = run.data.metrics
    assert m["n_tasks"] == 1
    assert m["answerer_calls"] == 1 and m["judge_calls"] >= 3  # one answer, three judges (the backbone has no naive)
    import json

    (rec,) = [json.loads(x) for x in (tmp_path / "run" / "records.jsonl").read_text().splitlines()]
    assert rec["indirect"]["text"].strip()
    # every verdict is either a parsed 0/1 or an explicit error: never a silent score
    for v in rec["verdicts"].values():
        assert (v["score"] in (0, 1) and v["error"] is None) or (v["score"] is None and v["error"])
    # the server was stopped with the run
    import re

    port = re.search(r"local LLM ready at http://127\.0\.0\.1:(\d+)/v1", p.stdout).group(1)
    procs = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert not any("llama_cpp.server" in line and f"--port {port}" in line for line in procs.splitlines())
