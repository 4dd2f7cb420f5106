"""Paired comparison of two runs on the tasks both answered: the 2×2 table, exact McNemar, a paired bootstrap
interval of the difference over tasks, a domain-clustered bootstrap interval beside it (tasks of one domain are
correlated: resampling whole domains says how far the difference rests on a few of them), and an account of every
task left out.

Rates are paired as in ``inmind_exp.metrics``: a task counts only if it ran and *every* verdict it got is valid
(``metrics.valid``), so all rates of a row, the Δ columns and the paired tests use the same tasks. A task enters a
paired test only when it is valid in both runs; the others are counted under ``excluded``, never scored as 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from inmind_exp.controls import CONTROL_METRICS
from inmind_exp.metrics import METRICS, rate, valid
from inmind_exp.records import TaskRecord

from analysis.caveats import FLAG, degenerate
from analysis.load import Run
from analysis.stats import cluster_bootstrap_ci, discordant, mcnemar_exact, paired_bootstrap_ci

EXCLUSION_NOTE = ("A task that failed is left out of every rate of its row; a failed verdict leaves the task out of "
                  "that verdict's rate only. A paired test of a metric uses only tasks with a valid value of it in "
                  "both runs (the others are counted under 'excluded'); an error is never scored as 0.")


def outcome(record: TaskRecord, metric: str) -> int | None:
    """The task's paired 0/1 for ``metric``: None when the task is left out (it failed or this verdict failed) or
    the metric does not apply (the backbone's naive query, provenance from a system that reports no items).

    It is ``inmind_exp.metrics.rate`` over this one task, so it can never disagree with Table 1.
    """
    if metric not in METRICS and metric not in CONTROL_METRICS:
        raise ValueError(f"unknown metric {metric!r}; expected one of {', '.join([*METRICS, *CONTROL_METRICS])}")
    r = rate([record], metric)
    return r.successes if r.n else None


#: Metrics measured without a judge (fields of the task record rather than verdicts).
JUDGE_FREE: tuple[str, ...] = ("target_recall_exact", "target_recall_provenance", "naive_recall_provenance")


def verdict_outcome(record: TaskRecord, metric: str) -> int | None:
    """One verdict on its own, for judge audits: the judge's valid 0/1 whatever the task's other verdicts (or the
    judge-free value); None when that verdict errored, the task did not run, or the metric was not measured."""
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; expected one of {', '.join(METRICS)}")
    if metric in JUDGE_FREE:
        return getattr(record, metric) if record.indirect is not None else None
    v = record.verdicts.get(metric)
    return int(v.score) if v is not None and v.ok else None  # type: ignore[arg-type]


def failed(record: TaskRecord, metric: str) -> bool:
    """The task failed, or its verdict of ``metric`` did: an error of this metric (never scored, counted)."""
    return not valid(record) or metric in record.failed_verdicts


def not_applicable(record: TaskRecord, metric: str) -> bool:
    """True for a task on which ``metric`` is not measured (not an error): the backbone's naive query, or
    provenance from a system (or an older record) that reports no items."""
    return not failed(record, metric) and outcome(record, metric) is None


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
    #: the domain-clustered bootstrap interval of the difference (points) and the number of domains resampled;
    #: NaN with fewer than two domains
    cl_low: float = math.nan
    cl_high: float = math.nan
    n_domains: int = 0

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
    def degenerate(self) -> bool:
        """The bootstrap interval has zero width or spans more than ``caveats.WIDE_PP`` points."""
        return degenerate(self.ci_low, self.ci_high, self.n)

    @property
    def n_excluded(self) -> int:
        return sum(self.excluded.values())

    def summary(self) -> str:
        ex = ", ".join(f"{v} {k}" for k, v in self.excluded.items() if v) or "none"
        if not self.n:
            return f"{self.metric}: no shared task with a measured value in both runs; excluded: {ex}"
        return (f"{self.metric}: {self.a} {self.rate_a:.1f}% vs {self.b} {self.rate_b:.1f}% on {self.n} paired tasks; "
                f"difference {self.diff:+.1f} pp, 95% paired bootstrap [{self.ci_low:+.1f}, {self.ci_high:+.1f}]; "
                + (f"domain-clustered bootstrap ({self.n_domains} domains) [{self.cl_low:+.1f}, {self.cl_high:+.1f}]; "
                   if not math.isnan(self.cl_low) else f"domain-clustered: – ({self.n_domains} domain(s)); ") +
                f"discordant {self.a_only} (A only) / {self.b_only} (B only), exact McNemar p = {self.p_mcnemar:.4g}; "
                f"excluded: {ex}"
                + (f"; {FLAG} degenerate interval (n={self.n}): not a finding" if self.degenerate else ""))


def compare(run_a: Run, run_b: Run, metric: str = "application", n_boot: int = 10_000, seed: int = 0) -> Comparison:
    """Pair the two runs task by task and test the difference A − B."""
    excluded = {"only in A": 0, "only in B": 0, "error in A": 0, "error in B": 0, "error in both": 0,
                "not applicable": 0}
    xs: list[int] = []
    ys: list[int] = []
    domains: list[str] = []
    ta, tb = run_a.by_task, run_b.by_task
    for tid in sorted(set(ta) | set(tb)):
        if tid not in tb:
            excluded["only in A"] += 1
            continue
        if tid not in ta:
            excluded["only in B"] += 1
            continue
        ra, rb = ta[tid], tb[tid]
        bad_a, bad_b = failed(ra, metric), failed(rb, metric)
        if bad_a or bad_b:
            key = "error in both" if bad_a and bad_b else "error in A" if bad_a else "error in B"
            excluded[key] += 1
            continue
        x, y = outcome(ra, metric), outcome(rb, metric)
        if x is None or y is None:
            excluded["not applicable"] += 1
            continue
        xs.append(x)
        ys.append(y)
        domains.append(ra.domain)
    both, a_only, b_only, neither = discordant(xs, ys)
    lo, hi = paired_bootstrap_ci(xs, ys, n_boot=n_boot, seed=seed)
    cl, ch = cluster_bootstrap_ci(xs, ys, domains, n_boot=n_boot, seed=seed)
    return Comparison(
        a=run_a.label, b=run_b.label, metric=metric, n=len(xs), both=both, a_only=a_only, b_only=b_only,
        neither=neither, ci_low=100.0 * lo, ci_high=100.0 * hi,
        p_mcnemar=mcnemar_exact(a_only, b_only) if xs else math.nan, excluded=excluded,
        cl_low=100.0 * cl, cl_high=100.0 * ch, n_domains=len(set(domains)),
    )
