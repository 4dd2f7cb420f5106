"""The MLflow UI's layout for an experiment: the experiment kind it opens on and the saved runs view (Table 1's
columns, sorted by application) with its address."""

from __future__ import annotations

from typing import Any

from inmind_exp import tags as T

#: Experiment tag the MLflow 3 UI reads to choose its layout; "custom_model_development" opens the runs table
#: (an untagged experiment may be inferred as GenAI and open on the traces overview).
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"

#: A saved runs-table view stored on the experiment (the MLflow UI's "share view" tag): Table 1's columns shown,
#: sorted by application. Open it with ``#/experiments/<id>/runs?viewStateShareKey=inmind-table``. It is ungrouped: a
#: group row of MLflow's averages the application of different systems, a number no table should show; the sweep is a
#: column, and MLflow's per-task (evaluation) view, which refuses a grouped table, opens from the same view.
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
VIEW_TAGS = (T.SWEEP_NAME, "inmind.system", "inmind.embedding", "inmind.injection", "inmind.answerer_model", "inmind.judge_model",
             T.FIDELITY)


def runs_view_state() -> dict[str, Any]:
    """The saved view: search facets and UI state in the shape the MLflow 3 experiment page shares. Configuration
    runs only (the sweep parent is no sibling row), ungrouped, each with its sweep's name (tag ``inmind.sweep``)
    and its coordinates as columns, sorted by application."""
    cols = [f"metrics.`{m}`" for m in VIEW_METRICS] + [f"tags.`{t}`" for t in VIEW_TAGS]
    return {"searchFilter": f"tags.`{T.KIND}` = '{T.CONFIG}'", "orderByKey": "metrics.`application`",
            "orderByAsc": False, "startTime": "ALL", "lifecycleFilter": "Active", "datasetsFilter": [],
            "modelVersionFilter": "All Runs", "selectedColumns": cols, "runsHiddenMode": "SHOW_ALL",
            "groupBy": None, "groupsExpanded": {},
            # full run names, whole CI column headers, and the metric columns in VIEW_METRICS' order (the UI's
            # own default sorts them by name)
            "columnWidths": {"attributes.`Run Name`": 330, **{c: 150 for c in cols if "_ci_" in c}},
            "columnOrder": ["attributes.`Run Name`", "attributes.`Created`", "attributes.`Duration`", *cols],
            "useGroupedValuesInCharts": False, "hideEmptyCharts": True, "chartsSearchFilter": VIEW_CHARTS}


def runs_view_url(base: str, experiment_id: str, key: str = VIEW_KEY) -> str:
    """The UI address of a saved runs view, e.g. ``runs_view_url("http://127.0.0.1:5000", "1")``."""
    return f"{base.rstrip('/')}/#/experiments/{experiment_id}/runs?viewStateShareKey={key}"
