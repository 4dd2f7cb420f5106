"""The driver hands records to recorders: an extra recorder given to ``run_plan`` sees the plan start, every record
as it arrives and the finished configuration, and what it leaves on the ``Finished`` record (a file, a metric, a
tag) reaches the MLflow run beside the built-in outputs."""

from __future__ import annotations

import json
import time
from pathlib import Path

from inmind_exp.exec.executor import InProcessExecutor
from inmind_exp.plan.plan import Plan, plan_config
from inmind_exp.records import TaskRecord
from inmind_exp.run.driver import run_plan
from inmind_exp.run.recorders import Finished, Recorder
from inmind_exp.run.resources import Resources
from inmind_exp.tracking.writer import MlflowClient
from tests.fake_openai import FakeOpenAI
from tests.exec.test_runner_ray import compose


class Tally(Recorder):
    """Counts what it is handed and leaves one file, one metric and one tag for MLflow."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.seen: list[str] = []

    def start(self, plan: Plan) -> None:
        self.calls.append(f"start {plan.config_hash}")

    def record(self, rec: TaskRecord) -> None:
        self.seen.append(rec.task_id)
        time.sleep(0.4)  # the configuration takes a measurable time: 4 tasks, >= 1.6 s

    def finish(self, run: Finished) -> None:
        self.calls.append(f"finish {run.status} {len(run.records)}")
        path = run.plan.job_dir / "tally.txt"
        path.write_text(" ".join(sorted(self.seen)) + "\n")
        run.files.append(path)
        run.metrics["tally"] = float(len(self.seen))
        run.tags["inmind.tally"] = "yes"


def test_an_extra_recorder_is_handed_every_record_and_its_outputs_reach_mlflow(tmp_path):
    tally = Tally()
    with FakeOpenAI() as fake:
        cfg = compose(tmp_path, fake.base_url, "system=backbone", "embedding=bm25")
        plan = plan_config(cfg, tmp_path / "root", tmp_path / "job")
        result = run_plan(plan, executor=InProcessExecutor(), resources=Resources(), extra=[tally])
    assert tally.calls == [f"start {plan.config_hash}", "finish FINISHED 4"]
    assert sorted(tally.seen) == [r.task_id for r in result.records] == ["t1", "t2", "t3", "t4"]
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    run = client.get_run(result.run_id)
    assert run.data.tags["inmind.tally"] == "yes"
    # a recorder's own metric is among every value in metrics.json (the run charts the rates, counts, time, cost)
    every = json.loads(Path(client.download_artifacts(result.run_id, "metrics.json", str(tmp_path / "m"))).read_text())
    assert every["tally"] == 4.0 and "tally" not in run.data.metrics and every["wall_s"] == run.data.metrics["wall_s"]
    # the run is opened at the end but starts when the configuration did: MLflow's duration is its wall time
    wall_ms = run.data.metrics["wall_s"] * 1000
    assert wall_ms >= 1600 and run.info.end_time - run.info.start_time >= wall_ms  # and the logging after it
    assert {"tally.txt", "records.jsonl", "results.md", "fidelity.json"} <= {
        a.path for a in client.list_artifacts(result.run_id)}
    assert (tmp_path / "job" / "tally.txt").read_text() == "t1 t2 t3 t4\n"


def test_a_run_whose_cluster_never_started_opens_no_mlflow_run(tmp_path):
    """Ray did not start, no task ran: the error is raised, no recorder finishes and the MLflow store is never
    opened (a run would be left FAILED or RUNNING for nothing)."""
    import pytest

    from inmind_exp.errors import ClusterStartError

    class NoStore(Resources):
        def tracker(self, tracking):
            raise AssertionError("the MLflow store was opened")

    class NoCluster:
        def run(self, plan, remaining, report, progress):
            raise ClusterStartError("node timed out during startup")

    tally = Tally()
    with FakeOpenAI() as fake:
        plan = plan_config(compose(tmp_path, fake.base_url, "system=backbone", "embedding=bm25"), tmp_path / "root",
                           tmp_path / "job")
        with pytest.raises(ClusterStartError):
            run_plan(plan, parent_key="sweep:k", executor=NoCluster(), resources=NoStore(), extra=[tally])
    assert tally.calls == [f"start {plan.config_hash}"]
