"""Fixture runs built in memory from the synthetic per-task records (see fixtures.py)."""

from __future__ import annotations

import os

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

import pytest

from inmind_exp.official.fidelity import fidelity

from inmind_exp.official.setting import setting_of_params
from inmind_exp.records import TaskRecord

from analysis.load import Run, RunConfig, flatten, make_runs
from tests.analysis.fixtures import SPECS, Spec, config_dict, fixture_records


def build_runs(records_by_spec: dict[Spec, list[dict]]) -> tuple[Run, ...]:
    items = []
    for spec, rows in records_by_spec.items():
        params = flatten(config_dict(spec))
        # the fidelity record each run stores when it ends (``fidelity.json``)
        stored = fidelity(setting_of_params(params, n_tasks=len(rows))).to_dict()
        items.append(dict(config=RunConfig.from_params(params, spec.config_hash), params=params,
                          records=tuple(TaskRecord.from_dict(d) for d in rows), source="fixture", fidelity=stored))
    return make_runs(items)


@pytest.fixture(scope="session")
def runs() -> tuple[Run, ...]:
    return build_runs(fixture_records(SPECS))
