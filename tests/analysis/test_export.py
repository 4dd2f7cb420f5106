"""The flat per-task export: one row per configuration × task with every verdict's score, reason and error, the
judge-free bounds, faults, answers and errors, as CSV and Parquet."""

from __future__ import annotations

import pandas as pd

from inmind_exp.protocol.judges import JUDGES

from analysis.__main__ import main
from analysis.export import ID_COLUMNS, TAIL_COLUMNS
from tests.analysis.fixtures import FIXTURE_ERRORS, N_TASKS, SPECS, write_sweep


def test_export_columns_and_rows(tmp_path, capsys):
    root = write_sweep(tmp_path / "sweep")
    assert main(["export", "--sweep-dir", str(root), "--out", str(tmp_path / "out")]) == 0
    assert "tasks.csv" in capsys.readouterr().out
    csv = pd.read_csv(tmp_path / "out" / "tasks.csv")
    judge_cols = [f"{j}_{p}" for j in JUDGES for p in ("score", "reason", "error")]
    assert list(csv.columns) == [*ID_COLUMNS, *judge_cols, *TAIL_COLUMNS]
    for col in ("configuration", "config_hash", "task_id", "domain", "application_score", "application_reason",
                "target_recall_exact", "target_recall_provenance", "fact_write_fault", "naive_answer",
                "indirect_answer", "error", "target_fact_rank"):
        assert col in csv.columns, col
    assert len(csv) == len(SPECS) * N_TASKS
    assert csv.groupby("config_hash").size().to_dict() == {s.config_hash: N_TASKS for s in SPECS}
    mem0 = csv[csv.config_hash == "1" * 16].set_index("task_id")
    # the errored verdict: no score, its error kept; the task ran, so it stays valid (an error of that metric only)
    assert pd.isna(mem0.loc["t003", "application_score"]) and "could not parse" in mem0.loc["t003", "application_error"]
    assert mem0.loc["t003", "valid"] and mem0.loc["t001", "valid"]
    assert mem0.loc["t000", "fact_write_fault"] and mem0.loc["t000", "fault_kinds"] == "malformed_reply=1"
    assert mem0.loc["t005", "indirect_answer"] == "indirect answer t005"
    backbone = csv[csv.system == "backbone"]
    assert backbone.naive_score.isna().all() and backbone.naive_answer.isna().all()  # not asked
    assert mem0.valid.all()  # the fixture's errors are verdict errors, never a failed task
    assert all(pd.notna(mem0.loc[t, f"{j}_error"]) for t, j in FIXTURE_ERRORS["1" * 16].items())

    pq = pd.read_parquet(tmp_path / "out" / "tasks.parquet")
    assert list(pq.columns) == list(csv.columns) and len(pq) == len(csv)
    assert str(pq.application_score.dtype) == "Int64"  # 0/1 with gaps stay integers, not floats
