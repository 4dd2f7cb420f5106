"""Values as MLflow shows them: the metrics a run charts (rounded; the rest go to its ``metrics.json``), and the
per-task records as the table behind MLflow's per-sample view."""

from __future__ import annotations

import math
from typing import Any, Iterable, Mapping

#: Rate metrics are percentages: two decimals are all a reader can use (n=125 moves a rate in steps of 0.8).
METRIC_DECIMALS = 2
COST_DECIMALS = 4

#: What a configuration run logs as MLflow metrics besides every metric's rate (``protocol.metrics.METRICS``, the
#: controls' rates, Table 1's Δ columns and the release's ``<metric>_official``): counts, faults, size, time and
#: cost. Each is one chart in the run's metrics tab, so the other ~60 values of ``RunMetrics.flat`` (per-role
#: tokens, per-metric n and errors, fault kinds, judge-audit counts) are in the run's ``metrics.json`` artifact.
LOGGED = ("n_tasks", "n_planned", "n_errors", "n_excluded", "memory_fault_rate", "fact_write_fault_rate",
          "context_tokens", "total_calls", "total_prompt_tokens", "wall_s", "cost_usd", "n_configs")
#: the rates shown with their interval and n (the headline's columns); the others by their value only
HEADLINE_RATES = {"application": ("_ci_low", "_ci_high", "_n"), "target_recall": ("_ci_low", "_ci_high", "_n"),
                  "naive": ("_n",)}
METRICS_FILE = "metrics.json"


def logged_metric(name: str) -> bool:
    """True when ``name`` is one of the metrics a configuration run logs to MLflow (``LOGGED`` and the rates)."""
    from inmind_exp.protocol.metrics import DELTAS, METRICS
    from inmind_exp.protocol.rates import CONTROL_LABELS

    rates = {*METRICS, *CONTROL_LABELS}
    return (name in LOGGED or name in rates or name in DELTAS or name.removesuffix("_official") in METRICS
            or any(name == f"{m}{s}" for m, suffixes in HEADLINE_RATES.items() for s in suffixes))


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
