"""Paired statistics for comparing two configurations on the same tasks: exact McNemar, a paired bootstrap interval
of the difference, Holm and Benjamini–Hochberg adjustment, and Cohen's κ. Pure functions over 0/1 outcomes.

Two separate Wilson intervals at n=125 are about ±8.6 points wide at p=0.5, and two independent rates must differ by
about 12 points to be told apart (``caveats.resolvable_gap_pp``); the paired test uses the fact that both
configurations answered the *same* tasks. Each function is tested against the reference implementation researchers
use (statsmodels, scikit-learn, ``scipy.stats.bootstrap``) in tests/analysis/test_stats.py.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Hashable, Sequence

import numpy as np
from scipy.stats import binom

from inmind_exp.metrics import wilson_interval

__all__ = [
    "wilson_interval", "mcnemar_exact", "discordant", "paired_bootstrap_ci", "holm", "benjamini_hochberg",
    "cohen_kappa", "confusion", "cluster_bootstrap_ci",
]

#: Paired-bootstrap resamples of every report: ``python -m analysis`` and the end-of-sweep report alike (resampling
#: is a multinomial draw over at most three per-task differences, so 10,000 costs milliseconds).
N_BOOT = 10_000


def discordant(a: Sequence[int], b: Sequence[int]) -> tuple[int, int, int, int]:
    """The paired 2×2 table (both 1, a only, b only, both 0) of two aligned 0/1 sequences."""
    if len(a) != len(b):
        raise ValueError(f"paired outcomes must align: {len(a)} vs {len(b)}")
    both = sum(1 for x, y in zip(a, b) if x and y)
    a_only = sum(1 for x, y in zip(a, b) if x and not y)
    b_only = sum(1 for x, y in zip(a, b) if y and not x)
    return both, a_only, b_only, len(a) - both - a_only - b_only


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value from the discordant counts: a binomial test of b against Bin(b+c, 1/2)."""
    if b < 0 or c < 0:
        raise ValueError(f"discordant counts must be non-negative, got b={b}, c={c}")
    n = b + c
    if n == 0:
        return 1.0
    return float(min(1.0, 2.0 * binom.cdf(min(b, c), n, 0.5)))


def paired_bootstrap_ci(a: Sequence[float], b: Sequence[float], n_boot: int = 10_000, seed: int = 0,
                        level: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap interval of mean(a) − mean(b), resampling tasks (pairs) with replacement.

    Resampling n pairs is the same as drawing multinomial counts over the distinct per-task differences, which is
    what is done here (exact, and fast for 0/1 outcomes where the difference takes three values).
    """
    if len(a) != len(b):
        raise ValueError(f"paired outcomes must align: {len(a)} vs {len(b)}")
    n = len(a)
    if n == 0:
        return (float("nan"), float("nan"))
    counts = Counter(float(x) - float(y) for x, y in zip(a, b))
    values = np.array(sorted(counts))
    probs = np.array([counts[v] for v in values], dtype=float) / n
    rng = np.random.default_rng(seed)
    draws = rng.multinomial(n, probs, size=n_boot)
    means = draws @ values / n
    alpha = (1.0 - level) / 2.0
    lo, hi = np.quantile(means, [alpha, 1.0 - alpha])
    return (float(lo), float(hi))


def cluster_bootstrap_ci(a: Sequence[float], b: Sequence[float], clusters: Sequence[Hashable],
                         n_boot: int = 10_000, seed: int = 0, level: float = 0.95) -> tuple[float, float]:
    """Percentile cluster-bootstrap interval of mean(a) − mean(b), resampling whole clusters (domains) of pairs.

    Tasks of one domain share their fact type and bridge, so their differences are correlated; resampling tasks
    one by one treats them as independent and understates the uncertainty when a difference sits in a few domains.
    Each resample draws as many clusters as there are, with replacement, and takes the pooled mean difference over
    the tasks of the drawn clusters (the ratio estimator). Seeded and deterministic: clusters are sorted by name,
    so the input order of the tasks does not matter. NaN with fewer than two clusters (no between-cluster spread
    can be estimated from one).
    """
    if not len(a) == len(b) == len(clusters):
        raise ValueError(f"paired outcomes and clusters must align: {len(a)}, {len(b)}, {len(clusters)}")
    sums: dict[Hashable, float] = {}
    sizes: dict[Hashable, int] = {}
    for x, y, g in zip(a, b, clusters):
        sums[g] = sums.get(g, 0.0) + float(x) - float(y)
        sizes[g] = sizes.get(g, 0) + 1
    names = sorted(sums, key=str)
    if len(names) < 2:
        return (float("nan"), float("nan"))
    s = np.array([sums[g] for g in names])
    m = np.array([sizes[g] for g in names], dtype=float)
    rng = np.random.default_rng(seed)
    draws = rng.multinomial(len(names), np.full(len(names), 1.0 / len(names)), size=n_boot)
    means = (draws @ s) / (draws @ m)
    alpha = (1.0 - level) / 2.0
    lo, hi = np.quantile(means, [alpha, 1.0 - alpha])
    return (float(lo), float(hi))


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm step-down adjusted p-values (family-wise error), in the input order; NaNs pass through untouched."""
    idx = [i for i, p in enumerate(pvalues) if not math.isnan(p)]
    m = len(idx)
    out = [float("nan")] * len(pvalues)
    running = 0.0
    for rank, i in enumerate(sorted(idx, key=lambda i: pvalues[i])):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        out[i] = running
    return out


def benjamini_hochberg(pvalues: Sequence[float]) -> list[float]:
    """Benjamini–Hochberg adjusted p-values (false discovery rate), in the input order; NaNs pass through."""
    idx = [i for i, p in enumerate(pvalues) if not math.isnan(p)]
    m = len(idx)
    out = [float("nan")] * len(pvalues)
    running = 1.0
    order = sorted(idx, key=lambda i: pvalues[i])
    for rank in range(m, 0, -1):
        i = order[rank - 1]
        running = min(running, m * pvalues[i] / rank)
        out[i] = min(1.0, running)
    return out


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
