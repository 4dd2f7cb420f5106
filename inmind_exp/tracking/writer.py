"""The MLflow writer (the ``Tracker`` of ``run.recorders.MLflowRun``): a parent run per sweep, one child run per
configuration, found again by tags on resume so a rerun never duplicates a run.

The layout answers "which system is better?" in the MLflow UI without setup: the experiment is a classic (non-GenAI)
one so it opens on its runs; metrics are logged once at step 0 (one bar per run in the chart view); the coordinates
of a configuration (system, embedding, injection, models, answer mode) are tags; params hold only what changes a
result (the full config is the ``config.yaml`` artifact); per-task records are an MLflow table (per-sample view);
the task file is the run's dataset input; the sweep parent is named after its overrides and carries the combined
results table.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any, Mapping

from inmind_exp import env
from inmind_exp import tags as T

env.apply(env.MLFLOW)

import mlflow  # noqa: E402
from mlflow.entities import Metric, Param, RunTag  # noqa: E402
from mlflow.tracking import MlflowClient  # noqa: E402,F401  (analysis.load reaches MLflow through this package)

from inmind_exp.labels import split_override  # noqa: E402
from inmind_exp.safety.redact import scrub, scrub_obj  # noqa: E402
from inmind_exp.tracking.naming import sweep_name, sweep_overrides  # noqa: E402
from inmind_exp.tracking.params import config_tags, provenance_tags, result_params  # noqa: E402
from inmind_exp.tracking.records_table import (COST_DECIMALS, METRIC_DECIMALS, METRICS_FILE,  # noqa: E402
                                              display_metrics, logged_metric, records_table)
from inmind_exp.tracking.view import (EXPERIMENT_KIND, EXPERIMENT_KIND_TAG, VIEW_KEY,  # noqa: E402
                                      VIEW_TAG_PREFIX, runs_view_state)


#: the tag the MLflow UI shows (and edits) as a run's description
DESCRIPTION_TAG = "mlflow.note.content"


def artifact_location(uri: str) -> str | None:
    """Artifacts beside a SQLite store (``<db dir>/mlruns``) rather than under whatever directory we run from."""
    if uri.startswith("sqlite:///"):
        db = Path(uri[len("sqlite:///"):]).expanduser().resolve()
        return (db.parent / "mlruns").as_uri()
    return None


def _scrub_file(path: Path) -> None:
    """Rewrite a text file in place with secrets redacted (``inmind_exp.safety.redact.scrub``), if it holds any."""
    try:
        text = path.read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError):
        return
    clean = scrub(text)
    if clean != text:
        path.write_text(clean, encoding="utf-8")


class Tracker:
    """Creates or finds runs by their ``inmind.key`` tag and logs params, metrics, tables and artifacts."""

    def __init__(self, uri: str, experiment: str):
        self.uri = uri
        mlflow.set_tracking_uri(uri)
        from inmind_exp.tracking.store import ensure_experiment, open_tracking_store

        self.client = open_tracking_store(uri)  # two processes creating one new SQLite store do not race
        self.experiment_id = ensure_experiment(self.client, experiment, artifact_location(uri))
        tags = self.client.get_experiment(self.experiment_id).tags
        if EXPERIMENT_KIND_TAG not in tags:  # also for experiments made before the tag existed
            self.client.set_experiment_tag(self.experiment_id, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND)
        self._write_views(tags)

    def _write_views(self, tags: Mapping[str, str]) -> None:
        """The saved runs view (``tracking.view``), rewritten when this version's differs from the stored one."""
        view = json.dumps(runs_view_state(), sort_keys=True)
        if tags.get(VIEW_TAG_PREFIX + VIEW_KEY) != view:
            self.client.set_experiment_tag(self.experiment_id, VIEW_TAG_PREFIX + VIEW_KEY, view)

    def find_run(self, key: str) -> str | None:
        runs = self.client.search_runs(
            [self.experiment_id], filter_string=f"tags.`{T.KEY}` = '{key}'", max_results=1, order_by=["start_time ASC"]
        )
        return runs[0].info.run_id if runs else None

    def get_or_create_run(self, key: str, name: str, tags: dict[str, str], parent_id: str | None = None,
                          start_time: int | None = None) -> tuple[str, bool]:
        """The run with tag ``tags.KEY == key``, reopened if it exists (its start time kept); else a new one, started
        at ``start_time`` (ms since the epoch; None: now). Returns (run_id, created)."""
        run_id = self.find_run(key)
        name = scrub(name)
        all_tags = scrub_obj({T.KEY: key, **provenance_tags(), **tags})
        if parent_id:
            all_tags[T.PARENT_RUN] = parent_id
            all_tags[T.SWEEP_NAME] = self.client.get_run(parent_id).info.run_name  # the saved view groups by it
        if run_id is None:
            run = self.client.create_run(self.experiment_id, run_name=name, tags=all_tags, start_time=start_time)
            return run.info.run_id, True
        self.client.update_run(run_id, status="RUNNING", name=name)
        self.client.log_batch(run_id, tags=[RunTag(k, v) for k, v in all_tags.items()])
        return run_id, False

    # -- the sweep parent -------------------------------------------------------------------------------------------

    def open_sweep_run(self, key: str, root: Path, start_time: int | None = None) -> str:
        """The sweep's parent run, named after its overrides, with the overrides as params; a new one starts at
        ``start_time`` (ms since the epoch)."""
        overrides = sweep_overrides(root)
        run_id, _ = self.get_or_create_run(key, sweep_name(root, overrides), {T.KIND: T.SWEEP,
                                                                               "inmind.sweep_dir": str(root)},
                                           start_time=start_time)
        self.log_params(run_id, {f"sweep.{k}": v for k, v in map(split_override, overrides)
                                 if not k.startswith(("hydra.", "tracking."))})
        return run_id

    def add_to_sweep(self, parent_id: str, run_id: str, flat: Mapping[str, float]) -> None:
        """Refresh the parent's combined results (``results.md`` and the MLflow table ``results_table.json``) from all
        its configuration runs, after ``run_id`` finished with metrics ``flat``: the parent is complete whenever the
        sweep stops, resumed or not, without running ``analysis report``."""
        from inmind_exp.display import headline
        from inmind_exp.protocol.metrics import METRICS
        from inmind_exp.memory.traits import logged

        rows: dict[str, Mapping[str, float]] = {}
        fidelity: dict[str, str] = {}
        in_context: set[str] = set()
        children = self.client.search_runs(
            [self.experiment_id], max_results=5000,
            filter_string=f"tags.`{T.PARENT_RUN}` = '{parent_id}' and {T.kind_filter(T.CONFIG)}")
        states: dict[str, str] = {}
        for child in children:
            rows[child.info.run_name] = flat if child.info.run_id == run_id else child.data.metrics
            fidelity[child.info.run_name] = child.data.tags.get(T.FIDELITY, "")
            if logged(child.data.tags.get(T.SYSTEM, ""), child.data.params).control == headline.IN_CONTEXT:
                in_context.add(child.info.run_name)
            if why := child.data.tags.get(T.INCOMPLETE):
                states[child.info.run_name] = why
        # the parent is incomplete while a configuration is, for the most telling reason
        self.mark_incomplete(parent_id, next((w for w in (T.INTERRUPTED, T.CAPPED, T.ERRORS)
                                              if w in states.values()), None))
        # the release's aggregate (score-1 / 125) of runs of the official tasks, beside our paired rates
        official = [f"{m}_official" for m in METRICS if any(f"{m}_official" in r for r in rows.values())]
        cols = ["configuration", "n_tasks", "n_errors", *[m for m in METRICS], *official, "delta_recall_naive",
                "delta_application_recall", "delta_application_naive", "cost_usd"]
        table: dict[str, list[Any]] = {c: [] for c in cols}
        for n, m in sorted(rows.items()):
            table["configuration"].append(n)
            for c in cols[1:]:
                v = m.get(c)
                table[c].append(None if v is None else round(v, COST_DECIMALS if c == "cost_usd" else METRIC_DECIMALS))
        cols.append("fidelity")
        table["fidelity"] = [fidelity.get(n, "") for n in table["configuration"]]
        self._replace_table(parent_id, table, "results_table.json")
        md = ["# Results", "", headline.table(sorted(rows.items()), in_context=in_context, states=states), "",
              "## All metrics", "",
              "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
        for i in range(len(table["configuration"])):
            md.append("| " + " | ".join("" if table[c][i] is None else str(table[c][i]) for c in cols) + " |")
        self.log_text(parent_id, "\n".join(md) + "\n", "results.md")
        # the headline; the verdict lines above it come with the sweep's report (``analysis.publish``), computed
        # from these results: until then none is shown rather than one of the results before
        self.describe(parent_id, md[2])
        self.log_metrics(parent_id, {"n_configs": float(len(rows))})

    # -- a configuration run ----------------------------------------------------------------------------------------

    def open_config_run(self, plan: Any, flat_cfg: Mapping[str, str], key: str, parent_id: str | None,
                        dataset_path: Path | None = None, start_time: int | None = None) -> str:
        """The configuration's run: named by its label (which shows the keys its sweep varies,
        ``inmind_exp.labels``), tagged, with result-changing params and the task file as its dataset input; a new
        one starts at ``start_time`` (ms since the epoch: when its tasks started, though it is opened at their end)."""
        run_id, created = self.get_or_create_run(key, plan.name, config_tags(plan, flat_cfg), parent_id=parent_id,
                                                 start_time=start_time)
        self.log_params(run_id, result_params(flat_cfg, plan.config_hash))
        if created and dataset_path is not None:
            self.log_dataset(run_id, plan.tasks, dataset_path)
        return run_id

    def log_config_results(self, run_id: str, flat: Mapping[str, float], records: list[Any],
                           artifacts: list[Path], tags: Mapping[str, str] | None = None) -> dict[str, float]:
        """The rates, counts, time and cost as metrics at step 0 (one value per run: bar charts, sortable columns;
        ``records_table.logged_metric``), every value in ``metrics.json``, the per-task table, artifacts, and the tags
        known only from what ran (the fidelity). Returns the metrics logged."""
        for k, v in (tags or {}).items():
            self.client.set_tag(run_id, k, scrub(v)[:5000])
        every = display_metrics(flat)
        shown = {k: v for k, v in every.items() if logged_metric(k)}
        self.log_metrics(run_id, shown, step=0)
        self.client.log_text(run_id, json.dumps(every, indent=1, sort_keys=True) + "\n", METRICS_FILE)
        if records:
            self._replace_table(run_id, records_table(records), "records_table.json")
        self.log_artifacts(run_id, artifacts)
        return shown

    def log_dataset(self, run_id: str, tasks: list[Any], path: Path) -> None:
        """The task set as the run's dataset input (name, digest, source, schema) in the UI's Datasets column."""
        try:
            import pandas as pd
            import warnings

            from mlflow.data.pandas_dataset import from_pandas
            from mlflow.entities import DatasetInput, InputTag

            df = pd.DataFrame([{k: v for k, v in t.to_dict().items() if isinstance(v, (str, int, float)) or v is None}
                               for t in tasks])
            with warnings.catch_warnings():  # "source can be interpreted in multiple ways": both are local files
                warnings.simplefilter("ignore", UserWarning)
                ds = from_pandas(df, source=str(Path(path).resolve()), name=Path(path).stem)
            self.client.log_inputs(run_id, datasets=[DatasetInput(
                ds._to_mlflow_entity(), tags=[InputTag("mlflow.data.context", "eval")])])
        except Exception as e:  # noqa: BLE001  (the dataset input is a convenience; the run is what matters)
            logging.getLogger(__name__).warning(f"[inmind] MLflow: dataset input not logged ({type(e).__name__}: {e})")

    # -- primitives -------------------------------------------------------------------------------------------------

    def log_params(self, run_id: str, params: dict[str, str]) -> None:
        existing = self.client.get_run(run_id).data.params
        fresh = [Param(k, scrub(v)[:6000]) for k, v in sorted(params.items()) if k not in existing]
        for i in range(0, len(fresh), 100):
            self.client.log_batch(run_id, params=fresh[i : i + 100])

    def log_metrics(self, run_id: str, metrics: Mapping[str, float], step: int = 0) -> None:
        ts = int(time.time() * 1000)
        items = [Metric(k, float(v), ts, step) for k, v in sorted(metrics.items())]
        for i in range(0, len(items), 500):
            self.client.log_batch(run_id, metrics=items[i : i + 500])

    def log_artifacts(self, run_id: str, paths: list[Path]) -> None:
        for p in paths:
            if p.exists():
                _scrub_file(p)  # the last look before a file leaves for the store
                self.client.log_artifact(run_id, str(p))

    def log_text(self, run_id: str, text: str, artifact_file: str) -> None:
        self.client.log_text(run_id, scrub(text), artifact_file)

    def _replace_table(self, run_id: str, data: dict[str, list[Any]], artifact_file: str) -> None:
        """``log_table`` appends to an existing file; a resumed run must replace it, so delete the old one first."""
        try:
            if any(f.path == artifact_file for f in self.client.list_artifacts(run_id)):
                from mlflow.tracking.artifact_utils import get_artifact_repository

                get_artifact_repository(self.client.get_run(run_id).info.artifact_uri).delete_artifacts(artifact_file)
        except Exception:  # noqa: BLE001  (a store that cannot delete keeps appending; the JSONL is authoritative)
            pass
        self.client.log_table(run_id, data=scrub_obj(data), artifact_file=artifact_file)

    def mark_incomplete(self, run_id: str, why: str | None) -> None:
        """Tag ``run_id`` with why not every planned task finished (``tags.INCOMPLETE``), or drop the tag of a run
        a rerun completed."""
        if why is not None:
            self.client.set_tag(run_id, T.INCOMPLETE, why)
        elif T.INCOMPLETE in self.client.get_run(run_id).data.tags:
            self.client.delete_tag(run_id, T.INCOMPLETE)

    def describe(self, run_id: str, text: str) -> None:
        """The run's description in the MLflow UI (Markdown, the ``mlflow.note.content`` tag)."""
        self.client.set_tag(run_id, DESCRIPTION_TAG, scrub(text)[:5000])

    def finish(self, run_id: str, status: str = "FINISHED") -> None:
        self.client.set_terminated(run_id, status=status)

    def run_info(self, run_id: str) -> Any:
        return self.client.get_run(run_id)
