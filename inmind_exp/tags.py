"""The MLflow tag names and values the driver writes and the analysis reads, stated once (no mlflow import here)."""

from __future__ import annotations

KEY = "inmind.key"  # finds a run again on resume
KIND = "inmind.kind"  # SWEEP (the parent run) or CONFIG (one configuration)
SWEEP = "sweep"
CONFIG = "config"
CONFIG_HASH = "inmind.config_hash"
SYSTEM = "inmind.system"
VERSION = "inmind.version"
GIT_DIRTY = "inmind.git_dirty"
GIT_COMMIT = "mlflow.source.git.commit"
PARENT_RUN = "mlflow.parentRunId"
SWEEP_NAME = "inmind.sweep"  # the sweep parent's name on each of its configuration runs (the saved view groups by it)
FIDELITY = "inmind.fidelity"  # "paper", "leaderboard", or the deviations, from what ran (inmind_exp.official.fidelity)
TASK_SET = "inmind.task_set"  # official, or demo tasks (the bundled set), or a custom task file
#: on a configuration run (and its sweep parent) that did not finish every planned task: why, one of INCOMPLETE_WHY;
#: removed when a rerun completes it
INCOMPLETE = "inmind.incomplete"
CAPPED, INTERRUPTED, ERRORS = "capped", "interrupted", "errors"
#: whether the tasks' results are coupled through the call cache: ``shared_background`` (``run.cache_scope=shared``:
#: later tasks reuse earlier tasks' cached background replies, one sample of the background's memory for all) or
#: ``per_task`` (``run.cache_scope=task``: each task's memory replies are its own samples)
CACHE_COUPLING = "inmind.cache_coupling"
COUPLING = {"shared": "shared_background", "task": "per_task"}


def kind_filter(kind: str) -> str:
    """An MLflow search filter for runs of one kind."""
    return f"tags.`{KIND}` = '{kind}'"
