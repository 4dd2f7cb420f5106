"""Statistics against known values: exact McNemar, Wilson, Holm/BH, Cohen's κ, and bootstrap coverage."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import binomtest

from analysis.stats import (benjamini_hochberg, cohen_kappa, discordant, holm, mcnemar_exact, paired_bootstrap_ci,
                            wilson_interval)


def test_mcnemar_exact_on_a_hand_made_table():
    # paired 2x2: both 30, A only 1, B only 9, neither 85 -> only the discordant 1 vs 9 matter
    a = [1] * 30 + [1] * 1 + [0] * 9 + [0] * 85
    b = [1] * 30 + [0] * 1 + [1] * 9 + [0] * 85
    assert discordant(a, b) == (30, 1, 9, 85)
    assert mcnemar_exact(1, 9) == pytest.approx(0.021484375, abs=1e-12)  # 2 * 11/1024
    assert mcnemar_exact(9, 1) == mcnemar_exact(1, 9)
    assert mcnemar_exact(1, 9) == pytest.approx(binomtest(1, 10, 0.5).pvalue)
    assert mcnemar_exact(0, 0) == 1.0 and mcnemar_exact(5, 5) == 1.0
    assert mcnemar_exact(0, 6) == pytest.approx(2 / 64)
    with pytest.raises(ValueError):
        mcnemar_exact(-1, 2)


def test_wilson_on_the_papers_backbone():
    lo, hi = wilson_interval(105, 125)  # 84.0% -> [76.6, 89.4] (Section 4.3)
    assert (round(100 * lo, 1), round(100 * hi, 1)) == (76.6, 89.4)


def test_holm_and_bh_on_known_p_values():
    p = [0.01, 0.04, 0.03, 0.005]
    assert holm(p) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert benjamini_hochberg(p) == pytest.approx([0.02, 0.04, 0.04, 0.02])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])  # capped at 1
    out = holm([0.01, math.nan, 0.02])
    assert out[0] == pytest.approx(0.02) and math.isnan(out[1]) and out[2] == pytest.approx(0.02)


def test_cohen_kappa_on_a_hand_table():
    # rater A yes/rater B yes 20, yes/no 5, no/yes 10, no/no 15: po = 0.7, pe = 0.5 -> kappa = 0.4
    a = [1] * 20 + [1] * 5 + [0] * 10 + [0] * 15
    b = [1] * 20 + [0] * 5 + [1] * 10 + [0] * 15
    assert cohen_kappa(a, b) == pytest.approx(0.4)
    assert cohen_kappa([0, 1, 1, 0], [0, 1, 1, 0]) == pytest.approx(1.0)
    assert math.isnan(cohen_kappa([1, 1, 1], [1, 1, 1]))  # chance agreement is 1: undefined


def test_bootstrap_interval_degenerate_and_seeded():
    assert paired_bootstrap_ci([1] * 10, [0] * 10) == (1.0, 1.0)
    a, b = [1, 0, 1, 1, 0, 1, 0, 1], [0, 0, 1, 0, 0, 1, 1, 0]
    assert paired_bootstrap_ci(a, b, seed=3) == paired_bootstrap_ci(a, b, seed=3)
    lo, hi = paired_bootstrap_ci(a, b, n_boot=20_000)
    assert lo < (sum(a) - sum(b)) / len(a) < hi


def test_bootstrap_interval_covers_the_true_difference_about_95_percent():
    # correlated paired outcomes: P(1,1)=.15, P(1,0)=.15, P(0,1)=.05, P(0,0)=.65 -> true difference 0.10
    rng = np.random.default_rng(12345)
    cells = np.array([[1, 1], [1, 0], [0, 1], [0, 0]])
    reps, covered = 200, 0
    for r in range(reps):
        draw = cells[rng.choice(4, size=125, p=[0.15, 0.15, 0.05, 0.65])]
        lo, hi = paired_bootstrap_ci(draw[:, 0], draw[:, 1], n_boot=2000, seed=r)
        covered += lo <= 0.10 <= hi
    assert 0.90 <= covered / reps <= 0.99, covered / reps
