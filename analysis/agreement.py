"""Agreement between raters (two judges, a judge and human labels, a judge panel): the confusion counts, Cohen's
and Fleiss' κ, positive/negative specific agreement, and the Rogan–Gladen rate corrected for a judge's measured
sensitivity and specificity; and between two runs of the same answers (``agreement``: flip rate and κ) or across
repeated samples (``across_samples``: majority vote and Fleiss' κ). Each statistic is tested against a reference
implementation (scikit-learn, statsmodels) in tests/analysis/test_stats.py."""

from __future__ import annotations

import math
import statistics
from collections import Counter
from dataclasses import dataclass
from typing import Hashable, Sequence

import numpy as np

from inmind_exp.protocol.metrics import Z95, Rate

from analysis.compare import verdict_outcome
from analysis.load import Run

def confusion(a: Sequence[Hashable], b: Sequence[Hashable]) -> dict[tuple[Hashable, Hashable], int]:
    """Counts of each (a, b) label pair."""
    if len(a) != len(b):
        raise ValueError(f"ratings must align: {len(a)} vs {len(b)}")
    return dict(Counter(zip(a, b)))


def cohen_kappa(a: Sequence[Hashable], b: Sequence[Hashable]) -> float:
    """Cohen's κ of two raters over the same items; NaN when chance agreement is 1 (both raters constant)."""
    if len(a) != len(b):
        raise ValueError(f"ratings must align: {len(a)} vs {len(b)}")
    n = len(a)
    if n == 0:
        return float("nan")
    po = sum(1 for x, y in zip(a, b) if x == y) / n
    ca, cb = Counter(a), Counter(b)
    pe = sum(ca[k] * cb[k] for k in ca) / (n * n)
    if pe >= 1.0:
        return float("nan")
    return (po - pe) / (1.0 - pe)


def fleiss_kappa(counts: Sequence[Sequence[int]]) -> float:
    """Fleiss' κ of items × categories rating counts, every item rated by the same number of raters (as
    ``statsmodels.stats.inter_rater.fleiss_kappa``); NaN without items or when chance agreement is 1."""
    table = np.asarray(counts, dtype=float)
    if table.ndim != 2 or not len(table):
        return float("nan")
    raters = table.sum(axis=1)
    if raters[0] < 2 or not np.all(raters == raters[0]):
        raise ValueError(f"Fleiss' κ needs the same number (≥ 2) of ratings per item, got {sorted(set(raters))}")
    k = raters[0]
    p_cat = table.sum(axis=0) / table.sum()
    p_item = ((table * table).sum(axis=1) - k) / (k * (k - 1))
    pe = float((p_cat * p_cat).sum())
    if pe >= 1.0:
        return float("nan")
    return (float(p_item.mean()) - pe) / (1.0 - pe)


def specific_agreement(a: Sequence[int], b: Sequence[int]) -> tuple[float, float]:
    """(positive, negative) specific agreement of two 0/1 raters: 2·both1 / (2·both1 + discordant) and the same for
    0; beside κ, which collapses at low prevalence though the raters agree. NaN where a class never occurs."""
    if len(a) != len(b):
        raise ValueError(f"ratings must align: {len(a)} vs {len(b)}")
    both1 = sum(1 for x, y in zip(a, b) if x == y == 1)
    both0 = sum(1 for x, y in zip(a, b) if x == y == 0)
    disc = len(a) - both1 - both0
    pos = 2 * both1 + disc
    neg = 2 * both0 + disc
    return (2 * both1 / pos if pos else float("nan"), 2 * both0 / neg if neg else float("nan"))


def rogan_gladen(positives: int, n: int, tp: int, fn: int, tn: int, fp: int, z: float = Z95
                 ) -> tuple[float, float, float]:
    """A judge's rate corrected for its misclassification (Rogan & Gladen 1978): (p + Sp − 1) / (Se + Sp − 1), with
    ``positives`` of ``n`` the judge's observed 1s and Se = tp / (tp + fn), Sp = tn / (tn + fp) from an audit against
    human labels. The delta-method interval carries both sampling errors, the run's and the audit's
    (Var = [p(1−p)/n + π²·Se(1−Se)/n₁ + (1−π)²·Sp(1−Sp)/n₀] / (Se + Sp − 1)², Greenland 1996), so a small audit
    widens it. (corrected, low, high) as fractions, the estimate and the bounds clipped to [0, 1]; NaN when the
    audit has no labelled 1 or no labelled 0, or Se + Sp ≤ 1 (a judge no better than chance cannot be inverted)."""
    n1, n0 = tp + fn, tn + fp
    if n <= 0 or n1 <= 0 or n0 <= 0:
        return (math.nan,) * 3
    p, se, sp = positives / n, tp / n1, tn / n0
    j = se + sp - 1.0
    if j <= 0:
        return (math.nan,) * 3
    pi = (p + sp - 1.0) / j
    var = (p * (1 - p) / n + pi * pi * se * (1 - se) / n1 + (1 - pi) ** 2 * sp * (1 - sp) / n0) / (j * j)
    half = z * math.sqrt(var)

    def clip(x: float) -> float:
        return min(1.0, max(0.0, x))

    return clip(pi), clip(pi - half), clip(pi + half)


@dataclass(frozen=True)
class Agreement:
    """Rejudged verdicts of one judge against the source's original verdicts over the tasks both judged validly."""

    n: int
    flips: int
    kappa: float
    #: positive / negative specific agreement (beside κ, which collapses at low prevalence)
    positive: float = math.nan
    negative: float = math.nan

    @property
    def flip_rate(self) -> float:
        return 100.0 * self.flips / self.n if self.n else math.nan

    @property
    def ci(self) -> tuple[float, float]:
        """The flip rate's Wilson 95% interval, in percent."""
        return Rate(self.flips, self.n, 0).ci


def agreement(original: Run, rejudged: Run, judge_name: str) -> Agreement:
    """Flip count, Cohen's κ and specific agreement of ``rejudged`` against ``original`` on one judge (valid
    verdicts only: a task whose verdict of this judge failed leaves this comparison, not the others)."""
    xs, ys = [], []
    for tid, a in original.by_task.items():
        b = rejudged.by_task.get(tid)
        if b is None:
            continue
        x, y = verdict_outcome(a, judge_name), verdict_outcome(b, judge_name)
        if x is not None and y is not None:
            xs.append(x)
            ys.append(y)
    return Agreement(len(xs), sum(1 for x, y in zip(xs, ys) if x != y), cohen_kappa(xs, ys) if xs else math.nan,
                     *specific_agreement(xs, ys))


@dataclass(frozen=True)
class AcrossSamples:
    """One judge's verdicts across a setting's samples: the majority-vote rate (None unless the number of samples
    is odd; a task whose valid verdicts tie has no majority and is counted in ``errors``) and Fleiss' κ over the
    tasks every sample judged validly (NaN with one sample)."""

    majority: Rate | None
    fleiss: float
    fleiss_n: int


def across_samples(samples: Sequence[Run], judge_name: str) -> AcrossSamples:
    votes: dict[str, list[int]] = {}
    for m in samples:
        for tid, r in m.by_task.items():
            if (v := verdict_outcome(r, judge_name)) is not None:
                votes.setdefault(tid, []).append(v)
    k = len(samples)
    majority = None
    if k % 2 == 1 and votes:
        decided = [2 * sum(v) > len(v) for v in votes.values() if 2 * sum(v) != len(v)]
        judged = {tid for m in samples for tid, r in m.by_task.items()
                  if r.indirect is not None and not r.error and judge_name in r.verdicts}
        majority = Rate(sum(decided), len(decided), len(judged) - len(decided))
    full = [[len(v) - sum(v), sum(v)] for v in votes.values() if len(v) == k]
    return AcrossSamples(majority, fleiss_kappa(full) if k > 1 and full else math.nan, len(full) if k > 1 else 0)


def _mean_sd(values: Sequence[float]) -> tuple[float, float]:
    """Mean and SD of the values that are not NaN; the SD is NaN ("–") for one value."""
    vals = [v for v in values if not math.isnan(v)]
    if not vals:
        return math.nan, math.nan
    return statistics.fmean(vals), statistics.stdev(vals) if len(vals) > 1 else math.nan
