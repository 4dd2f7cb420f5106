"""MLflow logging through one writer (the driver): a parent run per sweep, one child run per configuration, found
again by tags on resume so a rerun never duplicates a run. The only module that imports mlflow.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from inmind_exp import env
from inmind_exp import tags as T

env.apply(env.MLFLOW)

import mlflow  # noqa: E402
from mlflow.entities import Metric, Param, RunTag  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[1]


def provenance_tags() -> dict[str, str]:
    """Git commit and dirty flag of the code that ran, and the package version."""
    from importlib.metadata import PackageNotFoundError, version

    tags: dict[str, str] = {}
    try:
        tags[T.VERSION] = version("inmind-exp")
    except PackageNotFoundError:
        tags[T.VERSION] = "unknown"
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=10)
        if commit.returncode == 0:
            tags[T.GIT_COMMIT] = commit.stdout.strip()
            tags[T.GIT_DIRTY] = str(bool(dirty.stdout.strip())).lower()
    except (OSError, subprocess.SubprocessError):
        pass
    return tags


def artifact_location(uri: str) -> str | None:
    """Artifacts beside a SQLite store (``<db dir>/mlruns``) rather than under whatever directory we run from."""
    if uri.startswith("sqlite:///"):
        db = Path(uri[len("sqlite:///"):]).expanduser().resolve()
        return (db.parent / "mlruns").as_uri()
    return None


class Tracker:
    """Creates or finds runs by their ``inmind.key`` tag and logs params, metrics and artifacts."""

    def __init__(self, uri: str, experiment: str):
        self.uri = uri
        mlflow.set_tracking_uri(uri)
        from inmind_exp.tracking_store import ensure_experiment, open_tracking_store

        self.client = open_tracking_store(uri)  # two processes creating one new SQLite store do not race
        self.experiment_id = ensure_experiment(self.client, experiment, artifact_location(uri))

    def find_run(self, key: str) -> str | None:
        runs = self.client.search_runs(
            [self.experiment_id], filter_string=f"tags.`{T.KEY}` = '{key}'", max_results=1, order_by=["start_time ASC"]
        )
        return runs[0].info.run_id if runs else None

    def get_or_create_run(self, key: str, name: str, tags: dict[str, str], parent_id: str | None = None) -> tuple[str, bool]:
        """The run with tag ``tags.KEY == key``, reopened if it exists; else a new one. Returns (run_id, created)."""
        run_id = self.find_run(key)
        all_tags = {T.KEY: key, **provenance_tags(), **tags}
        if parent_id:
            all_tags[T.PARENT_RUN] = parent_id
        if run_id is None:
            run = self.client.create_run(self.experiment_id, run_name=name, tags=all_tags)
            return run.info.run_id, True
        self.client.update_run(run_id, status="RUNNING")
        self.client.log_batch(run_id, tags=[RunTag(k, v) for k, v in all_tags.items()])
        return run_id, False

    def log_params(self, run_id: str, params: dict[str, str]) -> None:
        existing = self.client.get_run(run_id).data.params
        fresh = [Param(k, v[:6000]) for k, v in sorted(params.items()) if k not in existing]
        for i in range(0, len(fresh), 100):
            self.client.log_batch(run_id, params=fresh[i : i + 100])

    def log_metrics(self, run_id: str, metrics: dict[str, float], step: int = 0) -> None:
        import time

        ts = int(time.time() * 1000)
        items = [Metric(k, float(v), ts, step) for k, v in sorted(metrics.items())]
        for i in range(0, len(items), 500):
            self.client.log_batch(run_id, metrics=items[i : i + 500])

    def log_artifacts(self, run_id: str, paths: list[Path]) -> None:
        for p in paths:
            if p.exists():
                self.client.log_artifact(run_id, str(p))

    def finish(self, run_id: str, status: str = "FINISHED") -> None:
        self.client.set_terminated(run_id, status=status)

    def run_info(self, run_id: str) -> Any:
        return self.client.get_run(run_id)
