"""The environment defaults of every process the project starts, stated once: the entry point and the tests apply
``DRIVER``, Ray workers get ``WORKER`` (through the runtime env and again in the actor). Values already set in the
environment always win (``os.environ.setdefault``)."""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Iterator, Mapping, MutableMapping

#: Ray without a dashboard login, usage reporting or the Windows/macOS cluster warning.
RAY: dict[str, str] = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0",
                       "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
#: MLflow without telemetry (any process that imports it); the entry point also silences its INFO chatter.
MLFLOW: dict[str, str] = {"MLFLOW_DISABLE_TELEMETRY": "true"}
#: (and without the "Downloading artifacts" bars the end-of-sweep report's reads would print after the table)
QUIET_MLFLOW: dict[str, str] = {"MLFLOW_LOGGING_LEVEL": "WARNING", "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false"}
#: Hugging Face: never download at run time (MiniLM ships as a package), no tokenizer thread pools, no bars.
HF: dict[str, str] = {"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "HF_HUB_DISABLE_PROGRESS_BARS": "1"}
#: A task actor owns one CPU: one BLAS/OpenMP thread.
THREADS: dict[str, str] = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}

DRIVER: dict[str, str] = {**RAY, **MLFLOW, **QUIET_MLFLOW, **HF}
WORKER: dict[str, str] = {**HF, **THREADS, **MLFLOW}


def apply(defaults: Mapping[str, str], environ: MutableMapping[str, str] | None = None) -> None:
    """Set each default that the environment does not already set."""
    env = os.environ if environ is None else environ
    for k, v in defaults.items():
        env.setdefault(k, v)


@contextmanager
def overriding(values: Mapping[str, str]) -> Iterator[None]:
    """``values`` set in ``os.environ`` (over what it holds) while the block runs, then the environment restored:
    for processes started inside the block (a local Ray's daemons and their workers inherit them)."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
