"""The closing lines of a launch under its results table: where the records are (every job's path, never a
placeholder) and the MLflow address of the experiment's saved runs view (``tracking.runs_view_url``), with the
command that serves a local store. Computed, never raised: a store that cannot be read costs the address only."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Sequence

from inmind_exp.plan.plan import Plan

log = logging.getLogger(__name__)

#: where ``mlflow ui`` serves by default
LOCAL_UI = "http://127.0.0.1:5000"


def view_line(plan: Plan, resources: Any) -> str:
    """``MLflow view: <url>`` for the plan's experiment, from the launch's ``resources`` (``run.resources.Resources``:
    its tracker for the store); serving a file store needs ``mlflow ui``, named."""
    from inmind_exp.tracking import runs_view_url

    uri = str(plan.tracking.uri)
    try:
        experiment_id = resources.tracker(plan.tracking).experiment_id
    except Exception as e:  # noqa: BLE001 - the address is a convenience
        log.debug(f"saved view: {type(e).__name__}: {e}")
        return f"MLflow: {uri} (experiment {plan.tracking.experiment})"
    if uri.startswith(("http://", "https://")):
        return f"MLflow view: {runs_view_url(uri, experiment_id)}"
    return (f"MLflow view: {runs_view_url(LOCAL_UI, experiment_id)}  (serve it with: mlflow ui "
            f"--backend-store-uri {uri})")


def records_line(plans: Sequence[Plan], sweep_dir: Path | None = None) -> str:
    """The records of one run, or of a sweep's jobs: the first job's path and how many more sit beside it."""
    paths = [p.job_dir / "records.jsonl" for p in plans]
    if not paths:
        return ""
    if len(paths) == 1:
        return f"records: {paths[0]}"
    where = f" under {sweep_dir}" if sweep_dir is not None else ""
    return f"records: {paths[0]} and {len(paths) - 1} more job director{'y' if len(paths) == 2 else 'ies'}{where}"
