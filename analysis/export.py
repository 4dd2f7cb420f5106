"""A flat per-task export for a paper's own analysis (lm-eval's ``--log_samples``, as one table): one row per
configuration × task with the configuration's coordinates, every verdict's score, reason and error, the judge-free
bounds, the fact's rank in each context, the faults, both answers and the task's error. Written as CSV, and as
Parquet when pyarrow is importable.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

import pandas as pd

from inmind_exp.protocol.judges import JUDGES
from inmind_exp.protocol.metrics import JUDGE_FREE, valid

from analysis.load import Run, RunSet

EXPORT_STEM = "tasks"
#: Columns before the per-judge ones; the per-judge columns are ``<judge>_score``, ``_reason``, ``_error``.
ID_COLUMNS: tuple[str, ...] = (
    "configuration", "config_hash", "run_id", "system", "embedding", "injection", "llm", "answer_mode",
    "answerer_model", "judge_model", "task_id", "domain", "injection_session", "valid", "error", "attempts",
    "latency_s")
TAIL_COLUMNS: tuple[str, ...] = (
    *JUDGE_FREE, "naive_fact_rank", "target_fact_rank", "naive_items", "indirect_items", "fact_write_fault",
    "n_faults", "memory_faults", "fault_kinds", "faults_json", "naive_answer", "indirect_answer",
    "prompt_tokens", "completion_tokens", "calls")


def columns() -> list[str]:
    judge_cols = [f"{j}_{part}" for j in JUDGES for part in ("score", "reason", "error")]
    return [*ID_COLUMNS, *judge_cols, *TAIL_COLUMNS]


def rows(runs: Sequence[Run]) -> list[dict[str, Any]]:
    out = []
    for run in runs:
        c = run.config
        for r in sorted(run.records, key=lambda r: r.task_id):
            row: dict[str, Any] = {
                "configuration": run.label, "config_hash": c.config_hash, "run_id": run.run_id or "",
                "system": c.system, "embedding": c.embedding, "injection": c.injection, "llm": c.llm,
                "answer_mode": c.answer, "answerer_model": c.answerer_model, "judge_model": c.judge_model,
                "task_id": r.task_id, "domain": r.domain, "injection_session": r.injection_session,
                "valid": valid(r), "error": r.error, "attempts": r.attempts, "latency_s": r.latency_s}
            for j in JUDGES:
                v = r.verdicts.get(j)
                row[f"{j}_score"] = v.score if v else None
                row[f"{j}_reason"] = v.reason if v else None
                row[f"{j}_error"] = v.error if v else None
            for m in JUDGE_FREE:
                row[m] = getattr(r, m)
            row.update({
                "naive_fact_rank": r.naive_fact_rank, "target_fact_rank": r.target_fact_rank,
                "naive_items": _n_items(r.naive), "indirect_items": _n_items(r.indirect),
                "fact_write_fault": r.fact_write_fault, "n_faults": len(r.faults),
                "memory_faults": sum(1 for f in r.faults if f.where != "answerer" and not f.diagnostic),
                "fault_kinds": ";".join(f"{k}={n}" for k, n in r.fault_counts().items()),
                "faults_json": json.dumps([f.to_dict() for f in r.faults], ensure_ascii=False),
                "naive_answer": r.naive.text if r.naive else None,
                "indirect_answer": r.indirect.text if r.indirect else None,
                "prompt_tokens": sum(u.prompt_tokens for u in r.usage.values()),
                "completion_tokens": sum(u.completion_tokens for u in r.usage.values()),
                "calls": sum(u.calls for u in r.usage.values())})
            out.append(row)
    return out


def _n_items(answer: Any) -> int | None:
    return None if answer is None or answer.items is None else len(answer.items)


def frame(runs: Sequence[Run]) -> pd.DataFrame:
    """The export as a DataFrame, columns in ``columns()`` order; nullable integer columns stay integers."""
    df = pd.DataFrame(rows(runs), columns=columns())
    ints = [f"{j}_score" for j in JUDGES] + [*JUDGE_FREE, "naive_fact_rank", "target_fact_rank", "naive_items",
                                                "indirect_items"]
    return df.astype({c: "Int64" for c in ints})


def write_export(runset: RunSet, out: Path | str, stem: str = EXPORT_STEM) -> list[Path]:
    """``<out>/tasks.csv`` and, when pyarrow is importable, ``<out>/tasks.parquet``; the paths written."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    df = frame(runset.runs)
    paths = [out / f"{stem}.csv"]
    df.to_csv(paths[0], index=False)
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        return paths
    paths.append(out / f"{stem}.parquet")
    df.to_parquet(paths[1], index=False)
    return paths
