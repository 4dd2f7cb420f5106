"""A full disk or an unwritable store says so and loses nothing: a ledger append that fails (``/dev/full``: ENOSPC)
stops dispatch with one ``LedgerWriteError`` naming the path and the free space, the MLflow run ends FAILED, and the
results appended before stay; an unwritable ``tracking.uri`` is a planning error naming the path (exit 2)."""

from __future__ import annotations

import os

import pytest

from inmind_exp.errors import PlanError
from inmind_exp.plan.ledger import Ledger
from inmind_exp.plan.plan import plan_config
from inmind_exp.run.driver import run_plan
from inmind_exp.exec.executor import InProcessExecutor
from inmind_exp.plan.ledger import LedgerWriteError
from inmind_exp.run.resources import Resources
from tests.fake_openai import FakeOpenAI
from tests.launch_helpers import launch_cmd, run, write_small_data
from tests.exec.test_runner_ray import compose


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_a_full_disk_under_the_ledger_stops_the_run_failed_naming_the_path(tmp_path):
    with FakeOpenAI() as fake:
        cfg = compose(tmp_path, fake.base_url, "system=backbone", "embedding=bm25")
        plan = plan_config(cfg, tmp_path / "root", tmp_path / "job")
        plan.ledger_path.parent.mkdir(parents=True)
        os.symlink("/dev/full", plan.ledger_path)  # every write: ENOSPC
        res = Resources()
        with pytest.raises(LedgerWriteError) as e:
            run_plan(plan, executor=InProcessExecutor(), resources=res)
        text = str(e.value)
        assert str(plan.ledger_path) in text and "No space left on device" in text and "free on its filesystem" in text
        assert len(fake.chat_requests()) < 4 * 5  # dispatch stopped at the first task's record
        run_info = res.tracker(plan.tracking).run_info(res.tracker(plan.tracking).find_run(
            __import__("inmind_exp.config.identity", fromlist=["identity_hash"]).identity_hash(
                {"root": str(plan.root.resolve()), "config": plan.config_hash})))
        assert run_info.info.status == "FAILED"


def test_a_ledger_append_keeps_earlier_records(tmp_path):
    from inmind_exp.data import load_tasks
    from inmind_exp.protocol.task import failed_record

    tasks, _ = write_small_data(tmp_path / "data")
    rec = failed_record(load_tasks(str(tasks))[0], config_hash="h", system_name="s", session_index=0, error="x",
                        attempts=1)
    ledger = Ledger(tmp_path / "l.jsonl")
    ledger.append(rec)
    (tmp_path / "l.jsonl").chmod(0o444)
    os.symlink("/dev/full", tmp_path / "full.jsonl")
    with pytest.raises(LedgerWriteError):
        Ledger(tmp_path / "full.jsonl").append(rec)
    assert list(ledger.load()) == ["t1"]


def test_an_unwritable_tracking_uri_is_a_plan_error(tmp_path):
    (tmp_path / "afile").write_text("not a directory")
    with FakeOpenAI() as fake:
        cfg = compose(tmp_path, fake.base_url, "system=backbone", "embedding=bm25",
                      f"tracking.uri=sqlite:///{tmp_path / 'afile' / 'mlflow.db'}")
        with pytest.raises(PlanError, match=r"tracking.uri=.*afile/mlflow.db: .*afile is not a directory"):
            plan_config(cfg, tmp_path / "root", tmp_path / "job")


@pytest.mark.slow
def test_an_unwritable_tracking_uri_exits_2(tmp_path):
    write_small_data(tmp_path / "data")
    (tmp_path / "afile").write_text("not a directory")
    p = run(launch_cmd(tmp_path, "http://127.0.0.1:9/v1", "system=backbone", "embedding=bm25",
                       f"tracking.uri=sqlite:///{tmp_path / 'afile' / 'mlflow.db'}", multirun=False), timeout=300)
    assert p.returncode == 2, p.stderr[-3000:]
    assert "afile/mlflow.db" in p.stderr and "Traceback" not in p.stderr


def test_a_failing_mlflow_store_is_one_tracking_error_and_the_results_are_kept(tmp_path):
    """A store MLflow cannot use (here a damaged database file; a full one fails the same way) ended a run with a
    129-line traceback and exit 1: it is one ``TrackingError`` naming the store and the ledger (exit 3), and the
    finished results are in the ledger, for a rerun to log without a call."""
    from inmind_exp.errors import TrackingError

    with FakeOpenAI() as fake:
        cfg = compose(tmp_path, fake.base_url, "system=backbone", "embedding=bm25", "dataset.limit=2")
        plan = plan_config(cfg, tmp_path / "root", tmp_path / "job")
        (tmp_path / "mlflow.db").write_bytes(b"this is no sqlite database" * 100)
        with pytest.raises(TrackingError) as e:
            run_plan(plan, executor=InProcessExecutor(), resources=Resources())
    msg = str(e.value)
    assert "\n" not in msg and f"the MLflow store sqlite:///{tmp_path / 'mlflow.db'} failed" in msg
    assert str(plan.ledger_path) in msg and "a rerun logs them" in msg
    assert len(Ledger(plan.ledger_path).load()) == 2


def test_a_new_store_that_cannot_be_made_leaves_no_store_behind(tmp_path, monkeypatch):
    """MLflow creating a store on a full disk left a database without its tables (every later open failed): the
    store is made under a temporary name and renamed into place, so a failure leaves nothing."""
    from inmind_exp.tracking import store

    monkeypatch.setenv("INMIND_CACHE_HOME", str(tmp_path / "no-template"))  # the slow path: MLflow makes it
    real = store._touch

    def full_disk(db):
        real(db)  # the tables are made in the temporary file...
        raise OSError(28, "No space left on device")  # ...then the disk is full

    monkeypatch.setattr(store, "_touch", full_disk)
    db = tmp_path / "mlflow.db"
    with pytest.raises(OSError):
        store.new_store(db)
    assert not db.exists() and [p.name for p in tmp_path.iterdir() if "mlflow" in p.name] == []
    monkeypatch.setattr(store, "_touch", real)
    store.new_store(db)
    assert db.is_file()
