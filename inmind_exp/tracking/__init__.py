"""MLflow logging through one writer (the driver): a parent run per sweep, one child run per configuration, found
again by tags on resume so a rerun never duplicates a run. This package is the only one that imports mlflow;
``analysis`` reaches MLflow through ``MlflowClient`` here.

``writer`` (the ``Tracker``), ``store`` (opening a store safely when several processes may create it), ``params``
(what a configuration run shows: params, tags, provenance), ``naming`` (a sweep parent's name and key), ``view``
(the MLflow UI's saved view) and ``records_table`` (rounded metrics, the per-task table). Their names are
re-exported here but for ``writer``'s (``Tracker``, ``MlflowClient``, ``artifact_location``): only it and ``store``
import mlflow (seconds), so naming a sweep's parent run or reading a view's state imports ``inmind_exp.tracking``
alone and the writer is imported from its module where it is used.
"""

from __future__ import annotations

from inmind_exp.tracking.naming import SWEEP_KEY_SKIP, SWEEP_NAME_SKIP, sweep_name, sweep_overrides, sweep_run_key
from inmind_exp.tracking.params import (
    REPO_ROOT,
    RESULT_PARAM_KEYS,
    RESULT_PARAM_PREFIXES,
    RESULT_ROLE_FIELDS,
    config_tags,
    provenance_tags,
    result_params,
)
from inmind_exp.tracking.records_table import COST_DECIMALS, METRIC_DECIMALS, display_metrics, records_table
from inmind_exp.tracking.view import (
    EXPERIMENT_KIND,
    EXPERIMENT_KIND_TAG,
    VIEW_CHARTS,
    VIEW_KEY,
    VIEW_METRICS,
    VIEW_TAG_PREFIX,
    VIEW_TAGS,
    runs_view_state,
    runs_view_url,
)

__all__ = [
    "COST_DECIMALS", "EXPERIMENT_KIND", "EXPERIMENT_KIND_TAG", "METRIC_DECIMALS", "REPO_ROOT", "RESULT_PARAM_KEYS",
    "RESULT_PARAM_PREFIXES", "RESULT_ROLE_FIELDS", "SWEEP_KEY_SKIP", "SWEEP_NAME_SKIP", "VIEW_CHARTS",
    "VIEW_KEY",
    "VIEW_METRICS", "VIEW_TAG_PREFIX", "VIEW_TAGS", "config_tags",
    "display_metrics", "provenance_tags", "records_table", "result_params", "runs_view_state", "runs_view_url",
    "sweep_name", "sweep_overrides", "sweep_run_key",
]
