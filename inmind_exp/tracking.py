"""MLflow logging through one writer (the driver): a parent run per sweep, one child run per configuration, found
again by tags on resume so a rerun never duplicates a run. The only module that imports mlflow.

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
import math
import subprocess
import time
from pathlib import Path
from typing import Any, Iterable, Mapping

from inmind_exp import env
from inmind_exp import tags as T

env.apply(env.MLFLOW)

import mlflow  # noqa: E402
from mlflow.entities import Metric, Param, RunTag  # noqa: E402
from mlflow.tracking import MlflowClient  # noqa: E402,F401  (analysis.load reaches MLflow through this module)

from inmind_exp.run.labels import injection_label, split_override  # noqa: E402
from inmind_exp.secrets import scrub, scrub_obj  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[1]

#: Experiment tag the MLflow 3 UI reads to choose its layout; "custom_model_development" opens the runs table
#: (an untagged experiment may be inferred as GenAI and open on the traces overview).
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"

#: Flattened-config keys logged as params: what changes a result (see ``inmind_exp.config.result_identity``) plus
#: the coordinates ``analysis.load.RunConfig`` reads. Everything else (server threads, timeouts, cluster, tracking,
#: prices, paths of caches) stays in the ``config.yaml`` artifact.
RESULT_PARAM_PREFIXES = ("system.", "answer.mode", "run.judge_attempts", "judges.")
RESULT_PARAM_KEYS = (
    "embedding.name", "embedding.kind", "embedding.model", "embedding.dim",
    "injection.name", "injection.user_turn", "injection.fraction",
    "llm.name", "llm.provider", "llm.base_url", "llm.model", "llm.temperature", "llm.top_p", "llm.max_tokens", "llm.seed",
    "llm.reasoning", "dataset.path", "dataset.limit", "trace.path", "trace.index", "dataset.name", "trace.name",
)
RESULT_ROLE_FIELDS = ("model", "base_url", "temperature", "top_p", "max_tokens", "seed")

#: Rate metrics are percentages: two decimals are all a reader can use (n=125 moves a rate in steps of 0.8).
METRIC_DECIMALS = 2
COST_DECIMALS = 4

#: A saved runs-table view stored on the experiment (the MLflow UI's "share view" tag): Table 1's columns shown,
#: sorted by application. Open it with ``#/experiments/<id>/runs?viewStateShareKey=inmind-table``.
VIEW_KEY = "inmind-table"
VIEW_TAG_PREFIX = "mlflow.sharedViewState."
#: the headline rates with their Wilson interval's bounds (#25 item 6), then the rest of Table 1. MLflow 3.17's runs
#: table orders the metric columns by name whatever this order is, so a rate's bounds sit beside it
#: (``application``, ``application_ci_high``, ``application_ci_low``) rather than first
VIEW_METRICS = ("application", "application_ci_low", "application_ci_high", "target_recall", "target_recall_ci_low",
                "target_recall_ci_high", "naive", "answer_only", "target_recall_exact", "delta_application_recall",
                "n_tasks", "n_errors", "cost_usd")
#: the chart view of the saved view shows Table 1's rates and deltas first (a regex over metric names; the search box
#: shows it, clear it for every metric)
VIEW_CHARTS = "^(application|target_recall|naive|answer_only|target_recall_exact|delta_.*)$"
VIEW_TAGS = ("inmind.system", "inmind.embedding", "inmind.injection", "inmind.answerer_model", "inmind.judge_model",
             T.FIDELITY)


def runs_view_state() -> dict[str, Any]:
    """The saved view: search facets and UI state in the shape the MLflow 3 experiment page shares."""
    cols = [f"metrics.`{m}`" for m in VIEW_METRICS] + [f"tags.`{t}`" for t in VIEW_TAGS]
    return {"searchFilter": "", "orderByKey": "metrics.`application`", "orderByAsc": False, "startTime": "ALL",
            "lifecycleFilter": "Active", "datasetsFilter": [], "modelVersionFilter": "All Runs",
            "selectedColumns": cols, "runsHiddenMode": "SHOW_ALL", "groupBy": None, "useGroupedValuesInCharts": True,
            "hideEmptyCharts": True, "chartsSearchFilter": VIEW_CHARTS}


def runs_view_url(base: str, experiment_id: str) -> str:
    """The UI address of the saved runs view, e.g. ``runs_view_url("http://127.0.0.1:5000", "1")``."""
    return f"{base.rstrip('/')}/#/experiments/{experiment_id}/runs?viewStateShareKey={VIEW_KEY}"


#: Sweep-level overrides that do not tell configurations apart (paths, limits, tracking, cluster, hydra).
SWEEP_NAME_SKIP = ("hydra.", "tracking.", "cluster", "run.", "dataset.path", "trace.path", "llm.base_url",
                   "embedding.base_url", "llm.model_path", "dry_run")


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


def _scrub_file(path: Path) -> None:
    """Rewrite a text file in place with secrets redacted (``inmind_exp.secrets.scrub``), if it holds any."""
    try:
        text = path.read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError):
        return
    clean = scrub(text)
    if clean != text:
        path.write_text(clean, encoding="utf-8")


# -- what a configuration run shows ---------------------------------------------------------------------------------

def result_params(flat_cfg: Mapping[str, str], config_hash: str) -> dict[str, str]:
    """The params worth comparing across runs: result-changing keys only, nulls dropped."""
    def wanted(k: str) -> bool:
        if k in RESULT_PARAM_KEYS or k.startswith(RESULT_PARAM_PREFIXES):
            return True
        parts = k.split(".")
        return len(parts) == 4 and parts[:2] == ["llm", "roles"] and parts[3] in RESULT_ROLE_FIELDS

    out = {k: v for k, v in flat_cfg.items() if wanted(k) and v not in ("None", "null", "")}
    out["inmind.config_hash"] = config_hash
    return out


def config_tags(plan: Any, flat_cfg: Mapping[str, str]) -> dict[str, str]:
    """Tags for filtering and grouping in the runs table: the configuration's coordinates and models.

    ``plan`` is the run's plan (duck-typed: name, config_hash, system_name, answer_mode, endpoints, session_index,
    trace); ``flat_cfg`` its flattened config.
    """
    def get(k: str) -> str | None:
        v = flat_cfg.get(k)
        return None if v in (None, "None", "null", "") else str(v)

    turn, fraction = get("injection.user_turn"), get("injection.fraction")
    point = f"turn{turn}" if turn is not None else f"{float(fraction or 0):.0%} of user turns"
    tags = {
        T.KIND: T.CONFIG,
        T.CONFIG_HASH: plan.config_hash,
        "inmind.label": plan.name,
        T.SYSTEM: plan.system_name,
        "inmind.embedding": get("embedding.name") or "?",
        "inmind.injection": injection_label(get("injection.name") or "?", turn, fraction),
        "inmind.injection_point": f"{point} (session {plan.session_index + 1}/{len(plan.trace.sessions)})",
        "inmind.llm": get("llm.name") or "?",
        "inmind.answer_mode": str(plan.answer_mode),
    }
    for role, ep in sorted(plan.endpoints.items()):
        tags[f"inmind.{role}_model"] = str(ep.model)
    from inmind_exp.fidelity import fidelity, setting_of_params

    # a Plan (its endpoints and data hashes), else what the flattened config says
    fid = fidelity(plan) if hasattr(plan, "params") else fidelity(
        setting_of_params(flat_cfg, n_tasks=len(getattr(plan, "tasks", ())) or None))
    tags[T.FIDELITY], tags[T.TASK_SET] = fid.tag, fid.task_set
    return tags


def sweep_overrides(root: Path) -> list[str]:
    """The command-line overrides of the sweep rooted at ``root`` (Hydra writes them to ``multirun.yaml``)."""
    f = Path(root) / "multirun.yaml"
    if not f.is_file():
        return []
    try:
        import yaml

        doc = yaml.safe_load(f.read_text()) or {}
        return [str(o) for o in (((doc.get("hydra") or {}).get("overrides") or {}).get("task") or [])]
    except Exception:  # noqa: BLE001  (a name is cosmetic: never fail a run over it)
        return []


def sweep_name(root: Path, overrides: Iterable[str]) -> str:
    """``sweep <dir>: system=a,b embedding=x,y`` (path-like and bookkeeping overrides left out)."""
    shown = [o for o in overrides if not split_override(o)[0].startswith(SWEEP_NAME_SKIP)]
    return f"sweep {Path(root).name}" + (f": {' '.join(shown)}" if shown else "")


def display_metrics(flat: Mapping[str, float]) -> dict[str, float]:
    """Metric values as the runs table should show them: percentages to two decimals, cost to four."""
    out = {}
    for k, v in flat.items():
        if isinstance(v, float) and math.isnan(v):
            continue
        digits = COST_DECIMALS if k.startswith("cost") else METRIC_DECIMALS
        out[k] = round(float(v), digits)
    return out


def records_table(records: Iterable[Any]) -> dict[str, list[Any]]:
    """One row per task for MLflow's per-sample table view: the queries, answers, verdicts and errors."""
    # verdicts first: the UI's per-sample view ("artifact" mode) compares runs on the first column after task_id
    cols: dict[str, list[Any]] = {k: [] for k in (
        "task_id", "application", "target_recall", "naive", "answer_only", "target_recall_exact",
        "target_recall_provenance", "query", "answer", "naive_query", "naive_answer", "domain", "faults", "error")}
    for r in records:
        naive, indirect = r.naive, r.indirect

        def last_user(a: Any) -> str:
            users = [m.content or "" for m in (a.context if a is not None else ()) if m.role == "user"]
            return users[-1] if users else ""

        def verdict(name: str) -> Any:
            v = r.verdicts.get(name)
            return None if v is None else (v.score if v.error is None else "error")

        cols["task_id"].append(r.task_id)
        cols["domain"].append(r.domain)
        cols["naive_query"].append(last_user(naive))
        cols["naive_answer"].append(naive.text if naive else "")
        cols["query"].append(last_user(indirect))
        cols["answer"].append(indirect.text if indirect else "")
        cols["naive"].append(verdict("naive"))
        cols["target_recall"].append(verdict("target_recall"))
        cols["target_recall_exact"].append(r.target_recall_exact)
        cols["target_recall_provenance"].append(r.target_recall_provenance)
        cols["application"].append(verdict("application"))
        cols["answer_only"].append(verdict("answer_only"))
        cols["faults"].append(", ".join(f"{k}×{n}" for k, n in r.fault_counts().items()))
        cols["error"].append(r.error or "")
    return cols


class Tracker:
    """Creates or finds runs by their ``inmind.key`` tag and logs params, metrics, tables and artifacts."""

    def __init__(self, uri: str, experiment: str):
        self.uri = uri
        mlflow.set_tracking_uri(uri)
        from inmind_exp.tracking_store import ensure_experiment, open_tracking_store

        self.client = open_tracking_store(uri)  # two processes creating one new SQLite store do not race
        self.experiment_id = ensure_experiment(self.client, experiment, artifact_location(uri))
        tags = self.client.get_experiment(self.experiment_id).tags
        if EXPERIMENT_KIND_TAG not in tags:  # also for experiments made before the tag existed
            self.client.set_experiment_tag(self.experiment_id, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND)
        view = json.dumps(runs_view_state(), sort_keys=True)
        if tags.get(VIEW_TAG_PREFIX + VIEW_KEY) != view:
            self.client.set_experiment_tag(self.experiment_id, VIEW_TAG_PREFIX + VIEW_KEY, view)

    def find_run(self, key: str) -> str | None:
        runs = self.client.search_runs(
            [self.experiment_id], filter_string=f"tags.`{T.KEY}` = '{key}'", max_results=1, order_by=["start_time ASC"]
        )
        return runs[0].info.run_id if runs else None

    def get_or_create_run(self, key: str, name: str, tags: dict[str, str], parent_id: str | None = None) -> tuple[str, bool]:
        """The run with tag ``tags.KEY == key``, reopened if it exists; else a new one. Returns (run_id, created)."""
        run_id = self.find_run(key)
        name = scrub(name)
        all_tags = scrub_obj({T.KEY: key, **provenance_tags(), **tags})
        if parent_id:
            all_tags[T.PARENT_RUN] = parent_id
        if run_id is None:
            run = self.client.create_run(self.experiment_id, run_name=name, tags=all_tags)
            return run.info.run_id, True
        self.client.update_run(run_id, status="RUNNING", name=name)
        self.client.log_batch(run_id, tags=[RunTag(k, v) for k, v in all_tags.items()])
        return run_id, False

    # -- the sweep parent -------------------------------------------------------------------------------------------

    def open_sweep_run(self, key: str, root: Path) -> str:
        """The sweep's parent run, named after its overrides, with the overrides as params."""
        overrides = sweep_overrides(root)
        run_id, _ = self.get_or_create_run(key, sweep_name(root, overrides), {T.KIND: T.SWEEP,
                                                                               "inmind.sweep_dir": str(root)})
        self.log_params(run_id, {f"sweep.{k}": v for k, v in map(split_override, overrides)
                                 if not k.startswith(("hydra.", "tracking."))})
        return run_id

    def add_to_sweep(self, parent_id: str, run_id: str, flat: Mapping[str, float]) -> None:
        """Refresh the parent's combined results (``results.md`` and the MLflow table ``results_table.json``) from all
        its configuration runs, after ``run_id`` finished with metrics ``flat``: the parent is complete whenever the
        sweep stops, resumed or not, without running ``analysis report``."""
        from inmind_exp.metrics import METRICS

        rows: dict[str, Mapping[str, float]] = {}
        fidelity: dict[str, str] = {}
        children = self.client.search_runs(
            [self.experiment_id], max_results=5000,
            filter_string=f"tags.`{T.PARENT_RUN}` = '{parent_id}' and {T.kind_filter(T.CONFIG)}")
        for child in children:
            rows[child.info.run_name] = flat if child.info.run_id == run_id else child.data.metrics
            fidelity[child.info.run_name] = child.data.tags.get(T.FIDELITY, "")
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
        from inmind_exp import headline

        md = ["# Results", "", headline.table(sorted(rows.items())), "", "## All metrics", "",
              "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
        for i in range(len(table["configuration"])):
            md.append("| " + " | ".join("" if table[c][i] is None else str(table[c][i]) for c in cols) + " |")
        self.log_text(parent_id, "\n".join(md) + "\n", "results.md")
        self.log_metrics(parent_id, {"n_configs": float(len(rows))})

    # -- a configuration run ----------------------------------------------------------------------------------------

    def open_config_run(self, plan: Any, flat_cfg: Mapping[str, str], key: str, parent_id: str | None,
                        dataset_path: Path | None = None) -> str:
        """The configuration's run: named by its label (which shows the keys its sweep varies,
        ``inmind_exp.run.labels``), tagged, with result-changing params and the task file as its dataset input."""
        run_id, created = self.get_or_create_run(key, plan.name, config_tags(plan, flat_cfg), parent_id=parent_id)
        self.log_params(run_id, result_params(flat_cfg, plan.config_hash))
        if created and dataset_path is not None:
            self.log_dataset(run_id, plan.tasks, dataset_path)
        return run_id

    def log_config_results(self, run_id: str, flat: Mapping[str, float], records: list[Any],
                           artifacts: list[Path]) -> dict[str, float]:
        """Metrics at step 0 (one value per run: bar charts, sortable columns), per-task table, artifacts."""
        shown = display_metrics(flat)
        self.log_metrics(run_id, shown, step=0)
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

    def finish(self, run_id: str, status: str = "FINISHED") -> None:
        self.client.set_terminated(run_id, status=status)

    def run_info(self, run_id: str) -> Any:
        return self.client.get_run(run_id)
