"""Several processes opening one new SQLite MLflow store at once all succeed and agree on one experiment (raw
``MlflowClient`` use fails here with ``duplicate column name`` or an alembic ``CommandError``)."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from inmind_exp.tracking.store import ensure_experiment, open_tracking_store, sqlite_path
from tests.launch_helpers import REPO, env

OPEN = """
import sys, time
from inmind_exp.tracking.store import ensure_experiment, open_tracking_store
uri, start = sys.argv[1], float(sys.argv[2])
while time.time() < start:
    pass
client = open_tracking_store(uri)
eid = ensure_experiment(client, "sweep")
run = client.create_run(eid, tags={"inmind.key": "k"})
client.set_terminated(run.info.run_id)
print("experiment", eid, flush=True)
"""


@pytest.mark.slow
def test_concurrent_first_open_of_a_new_store(tmp_path):
    uri = f"sqlite:///{tmp_path / 'new.db'}"
    start = time.time() + 4.0  # every process has imported mlflow before any touches the store
    procs = [subprocess.Popen([sys.executable, "-c", OPEN, uri, str(start)], cwd=REPO, env=env(),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(3)]
    results = [p.communicate(timeout=300) for p in procs]
    for p, (_out, err) in zip(procs, results):
        assert p.returncode == 0, err[-2000:]
    assert {out.split()[-1] for out, _ in results} == {"1"}  # one experiment, found by all
    client = open_tracking_store(uri)
    assert len(client.search_runs([ensure_experiment(client, "sweep")])) == 3
    assert (tmp_path / "new.db.lock").exists()


def test_non_sqlite_uris_take_no_lock(tmp_path):
    assert sqlite_path("http://localhost:5000") is None
    assert sqlite_path(f"sqlite:///{tmp_path}/a.db") == tmp_path / "a.db"


def _dump(db) -> list[str]:
    """The store's SQL dump with its millisecond timestamps blanked (creation times differ between two stores)."""
    import re
    import sqlite3

    with sqlite3.connect(db) as con:
        return [re.sub(r"\b\d{13}\b", "T", line) for line in con.iterdump()]


def test_a_new_store_copied_from_the_cached_empty_store_is_the_store_mlflow_makes(tmp_path, monkeypatch):
    """The first new store of an MLflow version is made by MLflow and kept (without experiments) as the template;
    later ones are copies in which MLflow makes the Default experiment on first open, here under the new cwd."""
    from inmind_exp.tracking.store import new_store, template_path

    monkeypatch.setenv("INMIND_CACHE_HOME", str(tmp_path / "cache"))
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    monkeypatch.chdir(tmp_path / "a")
    new_store(tmp_path / "a" / "mlflow.db")  # made by MLflow
    assert template_path().is_file() and template_path().parent == tmp_path / "cache"
    monkeypatch.chdir(tmp_path / "b")
    new_store(tmp_path / "b" / "mlflow.db")  # a copy
    a, b = _dump(tmp_path / "a" / "mlflow.db"), _dump(tmp_path / "b" / "mlflow.db")
    assert [line.replace(str(tmp_path / "a"), "<cwd>") for line in a] == \
        [line.replace(str(tmp_path / "b"), "<cwd>") for line in b]
    default = [line for line in b if "'Default'" in line and "experiments" in line]
    assert default and str(tmp_path / "b" / "mlruns" / "0") in default[0]  # the copy's own artifact location
    client = open_tracking_store(f"sqlite:///{tmp_path / 'b' / 'mlflow.db'}")
    assert ensure_experiment(client, "sweep") == "1"


def test_a_damaged_template_is_not_used(tmp_path, monkeypatch):
    from inmind_exp.tracking.store import template_path

    monkeypatch.setenv("INMIND_CACHE_HOME", str(tmp_path / "cache"))
    template_path().parent.mkdir(parents=True)
    template_path().write_bytes(b"not a database")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = open_tracking_store(uri)  # made by MLflow instead; the template is made again
    assert [e.name for e in client.search_experiments()] == ["Default"]
    assert _dump(template_path()) and not any("'Default'" in line for line in _dump(template_path()))
