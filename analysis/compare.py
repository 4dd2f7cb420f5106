"""Paired comparison of two runs on the tasks both answered: the 2×2 table, exact McNemar, a paired bootstrap
interval of the difference, and an account of every task left out.

A task enters the paired test only when both runs have a valid verdict for it. An errored (or missing) verdict
excludes that task from the test and is counted under ``excluded``; it is never scored as 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from inmind_exp.metrics import METRICS
from inmind_exp.records import TaskRecord

from analysis.load import Run
from analysis.stats import discordant, mcnemar_exact, paired_bootstrap_ci

EXCLUSION_NOTE = ("Paired tests use only tasks with a valid verdict in both runs; a task whose verdict errored in "
                  "either run is excluded from that test (counted under 'excluded'), never scored as 0.")


def outcome(record: TaskRecord, metric: str) -> int | None:
    """The 0/1 outcome of one task for ``metric``, or None when it errored or does not apply.

    Mirrors ``inmind_exp.metrics``: exact recall needs an indirect answer; a judge counts only with a valid verdict.
    """
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; expected one of {', '.join(METRICS)}")
    if metric == "target_recall_exact":
        return record.target_recall_exact if record.indirect is not None else None
    verdict = record.verdicts.get(metric)
    return int(verdict.score) if verdict is not None and verdict.ok else None  # type: ignore[arg-type]


def not_applicable(record: TaskRecord, metric: str) -> bool:
    """True for the backbone's naive query, which is not evaluated (not an error)."""
    return (metric == "naive" and "naive" not in record.verdicts and record.naive is None
            and record.indirect is not None and record.error is None)


@dataclass(frozen=True)
class Comparison:
    """Run A against run B on one metric over their shared valid tasks; rates and differences in percent."""

    a: str
    b: str
    metric: str
    n: int
    both: int
    a_only: int
    b_only: int
    neither: int
    ci_low: float
    ci_high: float
    p_mcnemar: float
    excluded: dict[str, int] = field(default_factory=dict)

    @property
    def rate_a(self) -> float:
        return 100.0 * (self.both + self.a_only) / self.n if self.n else math.nan

    @property
    def rate_b(self) -> float:
        return 100.0 * (self.both + self.b_only) / self.n if self.n else math.nan

    @property
    def diff(self) -> float:
        return 100.0 * (self.a_only - self.b_only) / self.n if self.n else math.nan

    @property
    def n_excluded(self) -> int:
        return sum(self.excluded.values())

    def summary(self) -> str:
        ex = ", ".join(f"{v} {k}" for k, v in self.excluded.items() if v) or "none"
        return (f"{self.metric}: {self.a} {self.rate_a:.1f}% vs {self.b} {self.rate_b:.1f}% on {self.n} paired tasks; "
                f"difference {self.diff:+.1f} pp, 95% paired bootstrap [{self.ci_low:+.1f}, {self.ci_high:+.1f}]; "
                f"discordant {self.a_only} (A only) / {self.b_only} (B only), exact McNemar p = {self.p_mcnemar:.4g}; "
                f"excluded: {ex}")


def compare(run_a: Run, run_b: Run, metric: str = "application", n_boot: int = 10_000, seed: int = 0) -> Comparison:
    """Pair the two runs task by task and test the difference A − B."""
    excluded = {"only in A": 0, "only in B": 0, "error in A": 0, "error in B": 0, "error in both": 0,
                "not applicable": 0}
    xs: list[int] = []
    ys: list[int] = []
    ta, tb = run_a.by_task, run_b.by_task
    for tid in sorted(set(ta) | set(tb)):
        if tid not in tb:
            excluded["only in A"] += 1
            continue
        if tid not in ta:
            excluded["only in B"] += 1
            continue
        x, y = outcome(ta[tid], metric), outcome(tb[tid], metric)
        if x is None or y is None:
            if not_applicable(ta[tid], metric) or not_applicable(tb[tid], metric):
                excluded["not applicable"] += 1
            elif x is None and y is None:
                excluded["error in both"] += 1
            elif x is None:
                excluded["error in A"] += 1
            else:
                excluded["error in B"] += 1
            continue
        xs.append(x)
        ys.append(y)
    both, a_only, b_only, neither = discordant(xs, ys)
    lo, hi = paired_bootstrap_ci(xs, ys, n_boot=n_boot, seed=seed)
    return Comparison(
        a=run_a.label, b=run_b.label, metric=metric, n=len(xs), both=both, a_only=a_only, b_only=b_only,
        neither=neither, ci_low=100.0 * lo, ci_high=100.0 * hi,
        p_mcnemar=mcnemar_exact(a_only, b_only) if xs else math.nan, excluded=excluded,
    )
