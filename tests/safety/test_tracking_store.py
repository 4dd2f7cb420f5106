"""Several processes opening one new SQLite MLflow store at once all succeed and agree on one experiment (raw
``MlflowClient`` use fails here with ``duplicate column name`` or an alembic ``CommandError``)."""

from __future__ import annotations

import subprocess
import sys
import time

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


def test_concurrent_first_open_of_a_new_store(tmp_path):
    uri = f"sqlite:///{tmp_path / 'new.db'}"
    start = time.time() + 4.0  # every process has imported mlflow before any touches the store
    procs = [subprocess.Popen([sys.executable, "-c", OPEN, uri, str(start)], cwd=REPO, env=env(),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(3)]
    results = [p.communicate(timeout=300) for p in procs]
    for p, (out, err) in zip(procs, results):
        assert p.returncode == 0, err[-2000:]
    assert {out.split()[-1] for out, _ in results} == {"1"}  # one experiment, found by all
    client = open_tracking_store(uri)
    assert len(client.search_runs([ensure_experiment(client, "sweep")])) == 3
    assert (tmp_path / "new.db.lock").exists()


def test_non_sqlite_uris_take_no_lock(tmp_path):
    assert sqlite_path("http://localhost:5000") is None
    assert sqlite_path(f"sqlite:///{tmp_path}/a.db") == tmp_path / "a.db"
