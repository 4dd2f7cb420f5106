"""Paired comparison of two runs on the tasks both answered: the 2×2 table with the discordant task ids, exact and
mid-p McNemar, the Bonett–Price interval of the difference, the 80%-power minimum detectable difference at the
observed discordance, and the domain structure beside it (tasks of one domain share a fact type and a bridge): a
within-domain (stratified) interval for this design's fixed domains, the difference with each domain left out, and
for "would it hold on another domain mix" an approximate CR2 interval with Bell–McCaffrey degrees of freedom (given
from ``stats.MIN_CLUSTERS`` domains up); and an account of every task left out.

Rates are paired as in ``inmind_exp.protocol.metrics``: a task counts only if it ran and *every* verdict it got is valid
(``metrics.valid``), so all rates of a row, the Δ columns and the paired tests use the same tasks. A task enters a
paired test only when it is valid in both runs; the others are counted under ``excluded``, never scored as 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from inmind_exp.protocol.controls import CONTROL_METRICS
from inmind_exp.protocol.metrics import METRICS, rate, valid
from inmind_exp.records import TaskRecord

from analysis.caveats import FLAG, degenerate
from analysis.load import Run
from inmind_exp.records import DOMAINS, OFFICIAL_DOMAINS

from analysis.stats import (BONETT_PRICE, MIN_CLUSTERS, bonett_price_ci, cr2_bm_ci, discordant, leave_one_out,
                            mcnemar_exact, mcnemar_midp, min_detectable_diff, stratified_bonett_price_ci)

#: the health domain under the bundled and the release's names (46 of the release's 125 tasks)
HEALTH = frozenset({DOMAINS[0], OFFICIAL_DOMAINS[0]})

EXCLUSION_NOTE = ("A task that failed is left out of every rate of its row; a failed verdict leaves the task out of "
                  "that verdict's rate only. A paired test of a metric uses only tasks with a valid value of it in "
                  "both runs (the others are counted under 'excluded'); an error is never scored as 0.")


def outcome(record: TaskRecord, metric: str) -> int | None:
    """The task's paired 0/1 for ``metric``: None when the task is left out (it failed or this verdict failed) or
    the metric does not apply (the backbone's naive query, provenance from a system that reports no items).

    It is ``inmind_exp.protocol.metrics.rate`` over this one task, so it can never disagree with Table 1.
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
    #: the Bonett–Price interval of the difference (points)
    ci_low: float
    ci_high: float
    #: two-sided exact and mid-p McNemar p-values
    p_exact: float
    p_midp: float = math.nan
    excluded: dict[str, int] = field(default_factory=dict)
    #: the tasks of each discordant cell (A 1 and B 0; A 0 and B 1)
    a_only_tasks: tuple[str, ...] = ()
    b_only_tasks: tuple[str, ...] = ()
    #: the within-domain (stratified Bonett–Price) interval of the difference (points): this design's domains fixed
    st_low: float = math.nan
    st_high: float = math.nan
    #: the approximate CR2 / Bell–McCaffrey interval (points) and its degrees of freedom, for another mix of
    #: domains; NaN below ``stats.MIN_CLUSTERS`` domains or with no spread
    cr_low: float = math.nan
    cr_high: float = math.nan
    cr_df: float = math.nan
    #: the difference (points) with each domain left out, by domain
    loo: tuple[tuple[str, float], ...] = ()
    n_domains: int = 0
    ci_method: str = BONETT_PRICE

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
        """The interval has zero width or spans more than ``caveats.WIDE_PP`` points."""
        return degenerate(self.ci_low, self.ci_high, self.n)

    @property
    def health_out(self) -> float:
        """The difference (points) without the health domain; NaN when no health task was paired."""
        return next((v for d, v in self.loo if d in HEALTH), math.nan)

    @property
    def loo_range(self) -> tuple[float, float]:
        vals = [v for _, v in self.loo if not math.isnan(v)]
        return (min(vals), max(vals)) if vals else (math.nan, math.nan)

    @property
    def discordance(self) -> float:
        """Discordant tasks, percent of the paired ones."""
        return 100.0 * (self.a_only + self.b_only) / self.n if self.n else math.nan

    @property
    def mdd(self) -> float:
        """The paired difference (points) the exact McNemar test detects with 80% power at this n and observed
        discordance; NaN when none can (too few discordant tasks)."""
        return 100.0 * min_detectable_diff(self.n, self.discordance / 100.0) if self.a_only + self.b_only else math.nan

    def as_dict(self) -> dict[str, object]:
        """The machine-readable comparison (``compare --json``): rates, difference and interval in points; None for
        what could not be computed (NaN is not JSON)."""
        out = {"a": self.a, "b": self.b, "metric": self.metric, "n": self.n, "rate_a": self.rate_a,
                "rate_b": self.rate_b, "diff": self.diff, "ci_low": self.ci_low, "ci_high": self.ci_high,
                "ci_method": self.ci_method, "p_exact": self.p_exact, "p_midp": self.p_midp, "both": self.both,
                "a_only": self.a_only, "b_only": self.b_only, "neither": self.neither,
                "a_only_tasks": list(self.a_only_tasks), "b_only_tasks": list(self.b_only_tasks),
                "discordance": self.discordance, "mdd_80": self.mdd, "n_domains": self.n_domains,
                "within_domain_ci_low": self.st_low, "within_domain_ci_high": self.st_high,
                "domain_mix_ci_low": self.cr_low, "domain_mix_ci_high": self.cr_high, "domain_mix_df": self.cr_df,
                "leave_one_domain_out": {d: (None if math.isnan(v) else v) for d, v in self.loo},
                "health_out": self.health_out, "excluded": dict(self.excluded)}
        return {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in out.items()}

    @property
    def n_excluded(self) -> int:
        return sum(self.excluded.values())

    def summary(self) -> str:
        ex = ", ".join(f"{v} {k}" for k, v in self.excluded.items() if v) or "none"
        if not self.n:
            return f"{self.metric}: no shared task with a measured value in both runs; excluded: {ex}"
        mdd = (f"{self.mdd:.1f} pp" if not math.isnan(self.mdd) else "none (too few discordant tasks)")
        return (f"{self.metric}: {self.a} {self.rate_a:.1f}% vs {self.b} {self.rate_b:.1f}% on {self.n} paired tasks; "
                f"difference {self.diff:+.1f} pp, 95% Bonett–Price [{self.ci_low:+.1f}, {self.ci_high:+.1f}]; "
                + f"{self.domain_summary()}; " +
                f"discordant {self.a_only} (A only) / {self.b_only} (B only), exact McNemar p = {self.p_exact:.4g}, "
                f"mid-p = {self.p_midp:.4g}; 80%-power minimum detectable difference at this discordance: {mdd}; "
                f"excluded: {ex}"
                + (f"; {FLAG} degenerate interval (n={self.n}): not a finding" if self.degenerate else ""))


    def domain_summary(self) -> str:
        """The domain structure in words: within-domain interval, another domain mix, leave-one-domain-out."""
        within = ("–" if math.isnan(self.st_low) else f"[{self.st_low:+.1f}, {self.st_high:+.1f}]")
        mix = (f"[{self.cr_low:+.1f}, {self.cr_high:+.1f}] (approximate, df {self.cr_df:.1f})"
               if not math.isnan(self.cr_low) else
               f"– ({self.n_domains} domain(s), fewer than {MIN_CLUSTERS})" if self.n_domains < MIN_CLUSTERS
               else "– (no spread)")
        lo, hi = self.loo_range
        loo = "–" if math.isnan(lo) else f"{lo:+.1f} to {hi:+.1f}"
        health = "" if math.isnan(self.health_out) else f", without health {self.health_out:+.1f}"
        return (f"within-domain 95% {within}; another domain mix (CR2, {self.n_domains} domains) {mix}; "
                f"leave one domain out {loo}{health}")


def compare(run_a: Run, run_b: Run, metric: str = "application") -> Comparison:
    """Pair the two runs task by task and test the difference A − B (every interval here is analytic: no
    resampling, no seed)."""
    excluded = {"only in A": 0, "only in B": 0, "error in A": 0, "error in B": 0, "error in both": 0,
                "not applicable": 0}
    xs: list[int] = []
    ys: list[int] = []
    domains: list[str] = []
    ids: list[str] = []
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
        ids.append(tid)
    both, a_only, b_only, neither = discordant(xs, ys)
    lo, hi = bonett_price_ci(a_only, b_only, len(xs))
    diffs = [x - y for x, y in zip(xs, ys)]
    strata = [(sum(1 for d, g in zip(diffs, domains) if g == dom and d > 0),
               sum(1 for d, g in zip(diffs, domains) if g == dom and d < 0),
               sum(1 for g in domains if g == dom)) for dom in sorted(set(domains))]
    st_lo, st_hi = stratified_bonett_price_ci(strata)
    cr_lo, cr_hi, cr_df = cr2_bm_ci(diffs, domains) if diffs else (math.nan, math.nan, math.nan)
    loo = leave_one_out(diffs, domains) if len(set(domains)) > 1 else {}
    return Comparison(
        a=run_a.label, b=run_b.label, metric=metric, n=len(xs), both=both, a_only=a_only, b_only=b_only,
        neither=neither, ci_low=100.0 * lo, ci_high=100.0 * hi,
        p_exact=mcnemar_exact(a_only, b_only) if xs else math.nan,
        p_midp=mcnemar_midp(a_only, b_only) if xs else math.nan, excluded=excluded,
        a_only_tasks=tuple(t for t, x, y in zip(ids, xs, ys) if x and not y),
        b_only_tasks=tuple(t for t, x, y in zip(ids, xs, ys) if y and not x),
        st_low=100.0 * st_lo, st_high=100.0 * st_hi, cr_low=100.0 * cr_lo, cr_high=100.0 * cr_hi, cr_df=cr_df,
        loo=tuple((str(d), 100.0 * v) for d, v in loo.items()), n_domains=len(set(domains)),
    )
