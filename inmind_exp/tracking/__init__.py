"""MLflow logging through one writer (the driver): a parent run per sweep, one child run per configuration, found
again by tags on resume so a rerun never duplicates a run. This package and ``inmind_exp.tracking_store`` (opening
a store safely) are the only modules that import mlflow; ``analysis`` reaches MLflow through ``MlflowClient`` here.
"""

from inmind_exp.tracking.writer import (  # noqa: F401  (the package's public surface)
    COST_DECIMALS,
    EXPERIMENT_KIND,
    EXPERIMENT_KIND_TAG,
    METRIC_DECIMALS,
    REPO_ROOT,
    RESULT_PARAM_KEYS,
    RESULT_PARAM_PREFIXES,
    RESULT_ROLE_FIELDS,
    SWEEP_KEY_SKIP,
    SWEEP_NAME_SKIP,
    VIEW_CHARTS,
    VIEW_KEY,
    VIEW_METRICS,
    VIEW_TAG_PREFIX,
    VIEW_TAGS,
    MlflowClient,
    Tracker,
    artifact_location,
    config_tags,
    display_metrics,
    provenance_tags,
    records_table,
    result_params,
    runs_view_state,
    runs_view_url,
    sweep_name,
    sweep_overrides,
    sweep_run_key,
)
