"""The MLflow source of runs: an experiment's configuration runs (``load_experiment``: config runs tagged
``inmind.kind = config``, their flattened-config params and the ``records.jsonl`` artifact, one run per
configuration), the store check made before any read, and the list of sweeps and runs (``list_runs``). MLflow is
reached through ``inmind_exp.tracking``, the one module that imports it."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inmind_exp import tags as T
from inmind_exp.official.fidelity import FILE_NAME as FIDELITY_FILE

from analysis.load import LoadError, NoRecordsError, RunConfig, RunSet, make_runs, read_fidelity, read_records

EMPTY_RECORDS = "records.jsonl is empty"


def check_store(tracking_uri: str) -> None:
    """Refuse a local tracking store that does not exist: MLflow would silently create an empty one (an empty
    ``mlflow.db`` in whatever folder the command ran from). Remote (``http(s)://``, ``databricks``) URIs pass."""
    hint = "give --tracking-uri sqlite:///PATH/TO/mlflow.db, or --sweep-dir DIR to read the records on disk"
    if tracking_uri.startswith("sqlite:"):
        db = tracking_uri.split(":///", 1)[1] if ":///" in tracking_uri else ""
        if db in ("", ":memory:"):
            raise LoadError(f"tracking URI {tracking_uri} names no database file; {hint}")
        path = Path(db).expanduser()
        if not path.is_file():
            raise LoadError(f"no MLflow database at {path.resolve()} (tracking URI {tracking_uri}); {hint}")
    elif tracking_uri.startswith("file:") or "://" not in tracking_uri:
        path = Path(tracking_uri.split("file://", 1)[-1] if tracking_uri.startswith("file:") else tracking_uri)
        if not path.expanduser().is_dir():
            raise LoadError(f"no MLflow file store at {path.expanduser().resolve()} (tracking URI {tracking_uri}); "
                            f"{hint}")


def once_per_configuration(items: list[dict[str, Any]], skipped: list[str]) -> list[dict[str, Any]]:
    """One run per configuration (config hash and task set): two sweeps of one store that both hold it would
    otherwise list it twice and compare it with itself. The latest run stands (``items`` are in start order); each
    other is named in ``skipped``."""
    latest: dict[tuple[str, tuple[str, ...]], int] = {}
    for i, it in enumerate(items):
        key = (it["config"].config_hash, tuple(sorted(r.task_id for r in it["records"])))
        if it["config"].config_hash:
            latest[key] = i
    kept = []
    for i, it in enumerate(items):
        key = (it["config"].config_hash, tuple(sorted(r.task_id for r in it["records"])))
        j = latest.get(key, i)
        if j != i:
            skipped.append(f"run {it['run_id']} ({it['name']}): same configuration (config {key[0]}) as the later "
                           f"run {items[j]['run_id']} of another sweep, listed once")
            continue
        kept.append(it)
    return kept


def load_experiment(experiment: str, tracking_uri: str, parent_run_id: str | None = None) -> RunSet:
    """Every config run of an MLflow experiment (of one sweep: ``parent_run_id``) with its ``records.jsonl``
    artifact and flattened-config params. The store must exist (``check_store``); nothing is created."""
    check_store(tracking_uri)
    from inmind_exp.tracking import writer as tracking

    client = tracking.MlflowClient(tracking_uri=tracking_uri)
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        names = ", ".join(e.name for e in client.search_experiments())
        raise LoadError(f"no experiment {experiment!r} in {tracking_uri} (experiments: {names or 'none'})")
    runs, token = [], None
    while True:
        page = client.search_runs([exp.experiment_id], filter_string=T.kind_filter(T.CONFIG) + (
                                      f" and tags.`{T.PARENT_RUN}` = '{parent_run_id}'" if parent_run_id else ""),
                                  max_results=1000, order_by=["start_time ASC"], page_token=token)
        runs.extend(page)
        token = page.token
        if not token:
            break
    items: list[dict[str, Any]] = []
    skipped: list[str] = []
    incomplete = [(run.info.run_name or run.info.run_id, int(run.data.metrics.get("n_tasks", 0)),
                   int(run.data.metrics.get("n_planned", 0)), run.data.tags[T.INCOMPLETE])
                  for run in runs if run.data.tags.get(T.INCOMPLETE)]
    with tempfile.TemporaryDirectory(prefix="inmind-analysis-") as tmp:
        for run in runs:
            rid = run.info.run_id
            try:
                local = client.download_artifacts(rid, "records.jsonl", str(Path(tmp) / rid))
            except Exception as e:  # noqa: BLE001  (a run still in progress, or one that failed before writing)
                skipped.append(f"run {rid} ({run.info.run_name}): no records.jsonl artifact ({type(e).__name__})")
                continue
            records = read_records(Path(local))
            if not records:
                skipped.append(f"run {rid} ({run.info.run_name}): {EMPTY_RECORDS}")
                continue
            try:
                fid = read_fidelity(Path(client.download_artifacts(rid, FIDELITY_FILE, str(Path(tmp) / rid))))
            except Exception:  # noqa: BLE001  (a run older than the record: its fidelity is not known)
                fid = None
            tags, params = run.data.tags, dict(run.data.params)
            cfg = RunConfig.from_params(params, tags.get(T.CONFIG_HASH, ""), tags.get(T.SYSTEM, ""), records)
            items.append(dict(name=run.info.run_name or cfg.name, config=cfg, records=tuple(records), run_id=rid,
                              parent_run_id=tags.get(T.PARENT_RUN), status=run.info.status,
                              source=f"mlflow run {rid}", params=params, fidelity=fid))
    if not items:
        # every run there but none with a finished task (stopped before the first ended) is no failure to report
        empty = bool(runs) and all(s.endswith(EMPTY_RECORDS) for s in skipped)
        raise (NoRecordsError if empty else LoadError)(
            f"experiment {experiment!r} in {tracking_uri} has no config run with records"
            + (f" ({'; '.join(skipped)})" if skipped else ""))
    items = once_per_configuration(items, skipped)
    built = make_runs(items)
    parents = tuple(sorted({r.parent_run_id for r in built if r.parent_run_id}))
    return RunSet(runs=built, origin=f"MLflow experiment {experiment!r} at {tracking_uri}", tracking_uri=tracking_uri,
                  experiment=experiment, parent_run_ids=parents, skipped=tuple(skipped), incomplete=tuple(incomplete))


@dataclass(frozen=True)
class Listed:
    """One configuration run as ``python -m analysis runs`` lists it: read from MLflow's run metadata only."""

    experiment: str
    sweep: str
    name: str
    done: int
    planned: int
    status: str
    fidelity: str


def list_runs(tracking_uri: str, experiment: str | None = None) -> tuple[list[str], list[Listed]]:
    """Every experiment of the store (or the one named) and its configuration runs, oldest first: tasks done of
    planned, the status (why it is incomplete, from ``inmind.incomplete``, else MLflow's), the fidelity tag and
    the sweep it belongs to. Reads tags and metrics only (no artifact), so it is quick on a large store."""
    check_store(tracking_uri)
    from inmind_exp.tracking import writer as tracking

    client = tracking.MlflowClient(tracking_uri=tracking_uri)
    exps = client.search_experiments()
    if experiment is not None:
        exps = [e for e in exps if e.name == experiment]
        if not exps:
            names = ", ".join(e.name for e in client.search_experiments())
            raise LoadError(f"no experiment {experiment!r} in {tracking_uri} (experiments: {names or 'none'})")
    names, rows = [], []
    for exp in sorted(exps, key=lambda e: e.name):
        names.append(exp.name)
        runs, token = [], None
        while True:
            page = client.search_runs([exp.experiment_id], filter_string=T.kind_filter(T.CONFIG), max_results=1000,
                                      order_by=["start_time ASC"], page_token=token)
            runs.extend(page)
            token = page.token
            if not token:
                break
        if not runs and experiment is None:
            names.pop()  # an experiment with no configuration run (MLflow's Default) is not listed
            continue
        sweeps = {r.info.run_id: r.info.run_name for r in client.search_runs(
            [exp.experiment_id], filter_string=T.kind_filter(T.SWEEP), max_results=5000)}
        for run in runs:
            tags, m = run.data.tags, run.data.metrics
            done = int(m.get("n_tasks", 0))
            sweep = tags.get(T.SWEEP_NAME) or sweeps.get(tags.get(T.PARENT_RUN, ""), "–")
            rows.append(Listed(exp.name, sweep, run.info.run_name or run.info.run_id,
                               done, int(m.get("n_planned", done)), tags.get(T.INCOMPLETE) or run.info.status.lower(),
                               tags.get(T.FIDELITY, "") or "not recorded"))
    return names, rows
