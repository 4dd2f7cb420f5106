"""Statistics against known values: exact and mid-p McNemar, Newcombe's paired interval, the exact test's power and
minimum detectable difference, Wilson, Holm/BH, Cohen's κ, and bootstrap coverage."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import binomtest

from analysis.agreement import cohen_kappa
from analysis.stats import (benjamini_hochberg, bonett_price_ci, discordant, holm, mcnemar_exact, mcnemar_midp,
                            mcnemar_power, min_detectable_diff, newcombe_paired_ci, paired_bootstrap_ci,
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


def test_mid_p_mcnemar_by_hand():
    # 4 vs 0: exact 2·(1/16) = 0.125; mid-p 2·(½·1/16) = 0.0625. 1 vs 9: 2·(P(0) + ½·P(1)) = 2·(1 + 5)/1024
    assert mcnemar_midp(4, 0) == pytest.approx(0.0625) and mcnemar_exact(4, 0) == pytest.approx(0.125)
    assert mcnemar_midp(1, 9) == pytest.approx(12 / 1024) == mcnemar_midp(9, 1)
    assert mcnemar_midp(0, 0) == 1.0 and mcnemar_midp(5, 5) == pytest.approx(1.0)
    for b, c in [(0, 3), (2, 7), (6, 11), (20, 13)]:  # the exact p less the observed table's probability
        assert mcnemar_midp(b, c) == pytest.approx(mcnemar_exact(b, c) - math.comb(b + c, b) / 2 ** (b + c))


def test_paired_tests_and_intervals_on_the_published_example():
    """Fagerland, Lydersen & Laake (2017), Chapter 8, Cavo et al. (2012): a = 59, b = 6, c = 16, d = 80. The
    reference values are those the authors' R package (contingencytables) prints: exact conditional McNemar
    P = 0.052479, mid-P 0.034690, Bonett–Price adjusted Wald −0.1195 to −0.0032."""
    assert round(mcnemar_exact(6, 16), 6) == 0.052479 and round(mcnemar_midp(6, 16), 6) == 0.034690
    lo, hi = bonett_price_ci(6, 16, 161)
    assert (round(lo, 4), round(hi, 4)) == (-0.1195, -0.0032)


def test_bonett_price_by_hand():
    # 4 tasks favour A, none B, n = 125: p̃ = 5/127 − 1/127, half-width z·√((6/127 − (4/127)²)/127)
    z = 1.959963984540054
    d, half = 4 / 127, z * math.sqrt((6 / 127 - (4 / 127) ** 2) / 127)
    assert bonett_price_ci(4, 0, 125) == pytest.approx((d - half, d + half), abs=1e-15)
    lo, hi = bonett_price_ci(4, 0, 125)
    assert lo < 0 < hi and mcnemar_exact(4, 0) == 0.125  # crosses 0 as the exact test does not reject (the
    # percentile bootstrap said [+0.8, +6.4])
    lo, hi = bonett_price_ci(0, 0, 125)  # no discordant task: ±2.2 points, never [0, 0]
    assert lo == pytest.approx(-hi) and round(100 * hi, 1) == 2.2
    assert bonett_price_ci(9, 2, 125) == pytest.approx(tuple(-x for x in bonett_price_ci(2, 9, 125))[::-1])
    assert bonett_price_ci(2, 0, 2)[1] == 1.0 and all(math.isnan(x) for x in bonett_price_ci(0, 0, 0))
    with pytest.raises(ValueError):
        bonett_price_ci(3, 2, 4)


def test_newcombe_paired_interval_on_the_published_example():
    """Fagerland, Lydersen & Laake (2017), Table 8.x, Cavo et al. (2012): a = 59, b = 6, c = 16, d = 80 gives
    −0.0621 (95% CI −0.1186 to −0.0046) by Newcombe's square-and-add (hybrid score) interval."""
    lo, hi = newcombe_paired_ci(59, 6, 16, 80)
    assert (round(lo, 4), round(hi, 4)) == (-0.1186, -0.0046)


def test_newcombe_paired_interval_by_hand():
    """The issue's example: 4 tasks favour A, none B, n = 125 (here a = 0, d = 121: ad − bc = 0 ≤ n/2, so the
    corrected correlation is 0 and the limits are the square-and-add of the two Wilson intervals)."""
    z = 1.959963984540054
    (l1, u1), (l2, u2) = wilson_interval(4, 125, z), wilson_interval(0, 125, z)
    d = 4 / 125
    expected = (d - math.sqrt((d - l1) ** 2 + u2 ** 2), d + math.sqrt((u1 - d) ** 2 + l2 ** 2))
    assert newcombe_paired_ci(0, 4, 0, 121) == pytest.approx(expected, abs=1e-15)
    lo, hi = newcombe_paired_ci(0, 4, 0, 121)
    assert (round(100 * lo, 1), round(100 * hi, 1)) == (-0.4, 7.9)  # the bootstrap said [+0.8, +6.4]
    assert mcnemar_exact(4, 0) == 0.125  # so the interval crosses 0 as the exact test does not reject
    lo, hi = newcombe_paired_ci(60, 0, 0, 65)  # no discordant task, half the tasks 1 in both: ±1.5 points only
    assert lo == pytest.approx(-hi) and round(100 * hi, 1) == 1.5  # (why it is not the reported interval)
    # symmetric: swapping A and B mirrors the interval
    assert newcombe_paired_ci(30, 2, 9, 84) == pytest.approx(tuple(-x for x in newcombe_paired_ci(30, 9, 2, 84))[::-1])
    assert all(math.isnan(x) for x in newcombe_paired_ci(0, 0, 0, 0))
    with pytest.raises(ValueError):
        newcombe_paired_ci(1, -1, 0, 3)


def test_newcombe_paired_reduces_to_statsmodels_newcombe_when_uncorrelated():
    """With the continuity-corrected correlation 0 (0 ≤ ad − bc ≤ n/2) the paired interval is Newcombe's
    independent-samples hybrid score interval on the two margins, which statsmodels implements."""
    from statsmodels.stats.proportion import confint_proportions_2indep

    checked = 0
    for a, b, c, d in [(0, 4, 0, 121), (4, 3, 5, 5), (6, 4, 6, 5), (3, 2, 4, 3), (20, 10, 10, 6), (2, 9, 4, 14)]:
        n = a + b + c + d
        if not 0 <= a * d - b * c <= n / 2:
            continue
        ref = confint_proportions_2indep(a + b, n, a + c, n, method="newcomb", compare="diff")
        assert newcombe_paired_ci(a, b, c, d) == pytest.approx(tuple(ref), abs=1e-12), (a, b, c, d)
        checked += 1
    assert checked == 5
    # with a positive correlation the paired interval is narrower than the independent one
    ref = confint_proportions_2indep(59 + 6, 161, 59 + 16, 161, method="newcomb", compare="diff")
    lo, hi = newcombe_paired_ci(59, 6, 16, 80)
    assert hi - lo < ref[1] - ref[0]


def test_power_and_minimum_detectable_difference_of_the_exact_test():
    # n = 125: 8.0 points at 10% discordant tasks, 9.9 at 15%, 14.1 at 30%; none at 5% (6 of 6 in one direction
    # is the least the exact test rejects, and 6 discordant tasks are too rarely drawn)
    assert round(100 * min_detectable_diff(125, 0.10), 1) == 8.0
    assert round(100 * min_detectable_diff(125, 0.15), 1) == 9.9
    assert round(100 * min_detectable_diff(125, 0.30), 1) == 14.1
    assert math.isnan(min_detectable_diff(125, 0.05)) and math.isnan(min_detectable_diff(0, 0.1))
    assert mcnemar_power(min_detectable_diff(125, 0.10), 0.10, 125) == pytest.approx(0.8, abs=1e-6)
    assert mcnemar_power(0.0, 0.10, 125) <= 0.05  # the exact test keeps its level under the null
    assert mcnemar_power(0.04, 0.10, 125) < mcnemar_power(0.06, 0.10, 125) < mcnemar_power(0.08, 0.10, 125)
    # by hand: n = 6, every task discordant and all favouring A (diff = discordance = 1): 6 of 6 rejects
    # (p = 2/64), so the power is 1; at n = 5 (5 of 5: p = 1/16 > 0.05) it is 0
    assert mcnemar_power(1.0, 1.0, 6) == pytest.approx(1.0) and mcnemar_power(1.0, 1.0, 5) == 0.0
    # by simulation: the power the formula gives is the share of rejections
    rng = np.random.default_rng(0)
    cells = rng.multinomial(125, [0.09, 0.03, 0.88], size=4000)
    sim = np.mean([mcnemar_exact(int(b), int(c)) <= 0.05 for b, c, _ in cells])
    assert sim == pytest.approx(mcnemar_power(0.06, 0.12, 125), abs=0.025)


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


# -- against the libraries researchers trust ------------------------------------------------------------------------
# Ours are kept (no runtime dependency on statsmodels or scikit-learn) and must agree with them. "To the last digit"
# means within a few units in the last place of a double (4 ulp of 1.0 = 8.9e-16): the formulas are the same but
# evaluated in a different order, so bit-identical results cannot be expected (exact McNemar is bit-identical).

ULP4 = 4 * np.spacing(1.0)


def test_wilson_matches_statsmodels_for_every_count_up_to_200():
    from statsmodels.stats.proportion import proportion_confint

    worst = 0.0
    for n in range(1, 201):
        for k in range(n + 1):
            lo, hi = wilson_interval(k, n)
            slo, shi = proportion_confint(k, n, alpha=0.05, method="wilson")
            worst = max(worst, abs(lo - slo), abs(hi - shi))
    assert worst <= ULP4, worst


def test_exact_mcnemar_matches_statsmodels_exactly():
    from statsmodels.stats.contingency_tables import mcnemar

    for b in range(0, 61):
        for c in range(0, 61):
            # the concordant cells (30 and 85) must not matter to the exact test
            assert mcnemar_exact(b, c) == mcnemar([[30, b], [c, 85]], exact=True).pvalue, (b, c)


def test_cohen_kappa_matches_scikit_learn():
    from sklearn.metrics import cohen_kappa_score

    rng = np.random.default_rng(7)
    for _ in range(300):
        n = int(rng.integers(2, 200))
        a = rng.integers(0, 2, n)
        b = np.where(rng.random(n) < rng.uniform(0.3, 0.95), a, 1 - a)
        if len(set(a)) < 2 and len(set(b)) < 2:
            continue  # undefined (both raters constant): ours is NaN, tested above
        assert abs(cohen_kappa(list(a), list(b)) - cohen_kappa_score(a, b)) <= ULP4
    labels = ["yes", "no", "unsure"]  # more than two categories
    a = list(rng.choice(labels, 80))
    b = [x if rng.random() < 0.6 else rng.choice(labels) for x in a]
    assert abs(cohen_kappa(a, b) - cohen_kappa_score(a, b)) <= ULP4


def test_holm_and_bh_match_statsmodels_multipletests():
    from statsmodels.stats.multitest import multipletests

    rng = np.random.default_rng(11)
    for m in (1, 2, 5, 28):
        p = list(rng.uniform(0, 0.2, m))
        assert holm(p) == pytest.approx(list(multipletests(p, method="holm")[1]), abs=ULP4)
        assert benjamini_hochberg(p) == pytest.approx(list(multipletests(p, method="fdr_bh")[1]), abs=ULP4)


def _scipy_paired_percentile(a, b, n_boot: int, seed: int) -> tuple[float, float, float]:
    import inspect

    from scipy.stats import bootstrap

    seed_kw = "rng" if "rng" in inspect.signature(bootstrap).parameters else "random_state"
    res = bootstrap((np.asarray(a), np.asarray(b)), lambda x, y, axis: x.mean(axis=axis) - y.mean(axis=axis),
                    paired=True, vectorized=True, method="percentile", confidence_level=0.95, n_resamples=n_boot,
                    **{seed_kw: np.random.default_rng(seed)})
    return float(res.confidence_interval.low), float(res.confidence_interval.high), float(res.standard_error)


@pytest.mark.parametrize("n, cells", [(125, [0.15, 0.15, 0.05, 0.65]), (40, [0.3, 0.2, 0.1, 0.4]),
                                      (300, [0.4, 0.1, 0.1, 0.4]), (12, [0.1, 0.4, 0.1, 0.4])])
def test_paired_bootstrap_matches_scipy_stats_bootstrap(n, cells):
    """Same data, same method (percentile, resampling pairs): the intervals may differ only by Monte Carlo error.

    Tolerance: both are B-resample estimates of the same 2.5% and 97.5% percentiles. The standard error of a
    sample quantile is sqrt(q(1-q)/B)/f(x_q); for a near-normal bootstrap distribution with standard deviation s that
    is 2.67·s/sqrt(B) at q=0.025, and sqrt(2) times that for the difference of two independent estimates. The
    bootstrap means live on a lattice of step 1/n, so a quantile can also move by one lattice step. Allowed: one
    step plus 4 standard errors (B=20000: 0.08·s, a false alarm far below 1e-4).
    """
    rng = np.random.default_rng(n)
    draw = np.array([[1, 1], [1, 0], [0, 1], [0, 0]])[rng.choice(4, size=n, p=cells)]
    a, b = draw[:, 0], draw[:, 1]
    boot = 20_000
    lo, hi = paired_bootstrap_ci(a, b, n_boot=boot, seed=1)
    slo, shi, s = _scipy_paired_percentile(a, b, boot, seed=2)
    tol = 1.0 / n + 4 * math.sqrt(2) * 2.67 * s / math.sqrt(boot)
    assert abs(lo - slo) <= tol and abs(hi - shi) <= tol, ((lo, hi), (slo, shi), tol)


def test_paired_bootstrap_degenerate_case_matches_scipy():
    # every pair differs by +1: both give the zero-width interval [1, 1] (which the report flags as degenerate)
    slo, shi, _ = _scipy_paired_percentile([1, 1], [0, 0], 2000, seed=0)
    assert paired_bootstrap_ci([1, 1], [0, 0], n_boot=2000) == (1.0, 1.0) == (slo, shi)


def test_fleiss_kappa_matches_statsmodels():
    from statsmodels.stats.inter_rater import fleiss_kappa as sm_fleiss

    from analysis.agreement import fleiss_kappa

    rng = np.random.default_rng(41)
    for raters in (2, 3, 5):
        for _ in range(50):
            n = int(rng.integers(2, 60))
            ones = rng.binomial(raters, rng.uniform(0.02, 0.98), size=n)
            table = np.column_stack([raters - ones, ones])
            if table[:, 0].sum() and table[:, 1].sum():  # (one category only: both are NaN)
                assert fleiss_kappa(table) == pytest.approx(sm_fleiss(table, method="fleiss"), abs=1e-12)
    # the published example (Fleiss 1971 as in statsmodels' tests: 10 items, 14 raters, 5 categories): 0.2099
    table = [[0, 0, 0, 0, 14], [0, 2, 6, 4, 2], [0, 0, 3, 5, 6], [0, 3, 9, 2, 0], [2, 2, 8, 1, 1],
             [7, 7, 0, 0, 0], [3, 2, 6, 3, 0], [2, 5, 3, 2, 2], [6, 5, 2, 1, 0], [0, 2, 2, 3, 7]]
    assert fleiss_kappa(table) == pytest.approx(0.20993070442195522, abs=1e-12)
    assert math.isnan(fleiss_kappa([[3, 0], [3, 0]]))  # everyone always 0: chance agreement 1
    with pytest.raises(ValueError, match="same number"):
        fleiss_kappa([[2, 1], [1, 1]])


def test_specific_agreement_by_hand():
    from analysis.agreement import specific_agreement

    # both 1 on 2, both 0 on 5, discordant on 3: PA = 4/7, NA = 10/13
    a = [1, 1, 0, 0, 0, 0, 0, 1, 0, 1]
    b = [1, 1, 0, 0, 0, 0, 0, 0, 1, 0]
    assert specific_agreement(a, b) == pytest.approx((4 / 7, 10 / 13))
    pos, neg = specific_agreement([0, 0, 0], [0, 0, 0])  # no 1 anywhere: PA undefined, NA perfect
    assert math.isnan(pos) and neg == 1.0


def test_rogan_gladen_on_a_hand_worked_example():
    """40 of 100 observed 1s; the audit: 45 of 50 labelled 1s judged 1 (Se 0.9), 40 of 50 labelled 0s judged 0
    (Sp 0.8). By hand: π = (0.4 + 0.8 − 1) / 0.7 = 0.285714; Var = [0.4·0.6/100 + π²·0.9·0.1/50 + (1−π)²·0.8·0.2/50]
    / 0.49 = (0.0024 + 0.00014694 + 0.00163265) / 0.49 = 0.00852978, SE 0.092357, ±1.96·SE = ±0.181016."""
    from analysis.agreement import rogan_gladen

    est, lo, hi = rogan_gladen(40, 100, tp=45, fn=5, tn=40, fp=10)
    assert est == pytest.approx(0.285714, abs=1e-6)
    assert (lo, hi) == pytest.approx((0.104698, 0.466730), abs=1e-6)
    # the audit's own error widens it: with an audit a thousand times larger only the run's error is left
    _, blo, bhi = rogan_gladen(40, 100, tp=45_000, fn=5_000, tn=40_000, fp=10_000)
    assert bhi - blo < hi - lo
    assert (bhi - blo) / 2 == pytest.approx(1.959964 * math.sqrt(0.0024 / 0.49), rel=1e-3)
    # a perfect judge changes nothing; a chance judge cannot be inverted; clipped to [0, 1]
    assert rogan_gladen(40, 100, 50, 0, 50, 0)[0] == pytest.approx(0.4)
    assert all(math.isnan(x) for x in rogan_gladen(40, 100, 25, 25, 25, 25))
    assert rogan_gladen(2, 100, 45, 5, 40, 10)[:2] == (0.0, 0.0)


def test_rogan_gladen_interval_agrees_with_a_parametric_bootstrap():
    """The delta-method interval against a parametric bootstrap that redraws the run and the audit."""
    from analysis.agreement import rogan_gladen

    rng = np.random.default_rng(8)
    est, lo, hi = rogan_gladen(300, 1000, tp=90, fn=10, tn=160, fp=40)
    p = rng.binomial(1000, 0.3, 20_000) / 1000
    se = rng.binomial(100, 0.9, 20_000) / 100
    sp = rng.binomial(200, 0.8, 20_000) / 200
    boot = (p + sp - 1) / (se + sp - 1)
    blo, bhi = np.percentile(boot, [2.5, 97.5])
    assert (lo, hi) == pytest.approx((blo, bhi), abs=0.01)
