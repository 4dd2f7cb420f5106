"""Values as MLflow shows them: metrics rounded for the runs table, and the per-task records as the table behind
MLflow's per-sample view."""

from __future__ import annotations

import math
from typing import Any, Iterable, Mapping

#: Rate metrics are percentages: two decimals are all a reader can use (n=125 moves a rate in steps of 0.8).
METRIC_DECIMALS = 2
COST_DECIMALS = 4

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
