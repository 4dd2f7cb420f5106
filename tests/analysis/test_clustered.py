"""The domain structure beside the per-task paired interval: a within-domain (stratified) interval for the fixed
design, an approximate CR2 / Bell–McCaffrey interval for another domain mix (checked against statsmodels' HC2 and
the balanced G − 1 degrees of freedom), leave-one-domain-out differences, carried into every comparison table; and
the per-domain Wilson rates with the domain-macro average and health against the rest."""

from __future__ import annotations

import math
import numpy as np
import pytest

from inmind_exp.records import Answer, Message, TaskRecord, Verdict

from analysis.compare import compare
from analysis.load import Run, RunConfig
from analysis.stats import (bonett_price_ci, cr2_bm_ci, leave_one_out, stratified_bonett_price_ci,
                            wilson_interval)
from analysis.breakdowns import by_domain
from analysis.pairwise import pairwise

DOMAINS10 = [f"domain_{i}" for i in range(10)]


def one_domain_difference(per_domain: int = 10) -> tuple[list[int], list[int], list[str]]:
    """A beats B on every task of domain_0 and ties (half right, half wrong) everywhere else."""
    a, b, g = [], [], []
    for d in DOMAINS10:
        for i in range(per_domain):
            g.append(d)
            if d == "domain_0":
                a.append(1)
                b.append(0)
            else:
                a.append(i % 2)
                b.append(i % 2)
    return a, b, g


def test_within_domain_interval_is_bonett_price_on_one_domain_and_narrows_with_a_domain_effect():
    assert stratified_bonett_price_ci([(4, 0, 125)]) == bonett_price_ci(4, 0, 125)
    assert all(math.isnan(v) for v in stratified_bonett_price_ci([]))
    # by hand: two domains of 10 tasks, 3/0 and 1/1: weights ½, pseudo-counts ½ per cell
    p = [((3 + .5) / 11, .5 / 11), (1.5 / 11, 1.5 / 11)]
    centre = sum(.5 * (x - y) for x, y in p)
    var = sum(.25 * (x + y - (x - y) ** 2) / 11 for x, y in p)
    z = 1.959963984540054
    assert stratified_bonett_price_ci([(3, 0, 10), (1, 1, 10)]) == pytest.approx(
        (centre - z * math.sqrt(var), centre + z * math.sqrt(var)))
    # the whole difference in one domain: within-domain variation only, narrower than the pooled interval
    a, b, g = one_domain_difference()
    strata = [(sum(1 for x, y, d in zip(a, b, g) if d == dom and x > y),
               sum(1 for x, y, d in zip(a, b, g) if d == dom and y > x), g.count(dom)) for dom in DOMAINS10]
    lo, hi = stratified_bonett_price_ci(strata)
    plo, phi = bonett_price_ci(10, 0, 100)
    assert 0 < lo and hi - lo < phi - plo


def test_cr2_is_hc2_with_one_task_per_cluster_and_has_g_minus_1_df_when_balanced():
    """With every task its own cluster CR2 is HC2 (statsmodels); with equal clusters the Bell–McCaffrey degrees of
    freedom of a mean are G − 1."""
    import statsmodels.api as sm
    from scipy.stats import t as student_t

    rng = np.random.default_rng(0)
    y = rng.integers(-1, 2, size=30).astype(float)
    lo, hi, df = cr2_bm_ci(y, list(range(30)))
    se = sm.OLS(y, np.ones(30)).fit(cov_type="HC2").bse[0]
    assert df == pytest.approx(29) and (hi - lo) / 2 == pytest.approx(student_t.ppf(0.975, 29) * se)
    assert cr2_bm_ci(rng.normal(size=40), [i % 10 for i in range(40)])[2] == pytest.approx(9)
    # a difference sitting in one domain of ten: the domain-mix interval covers 0, the per-task one does not
    a, b, g = one_domain_difference()
    lo, hi, df = cr2_bm_ci([x - y for x, y in zip(a, b)], g)
    assert lo < 0 < hi and bonett_price_ci(10, 0, 100)[0] > 0
    assert all(math.isnan(v) for v in cr2_bm_ci([1, 0, -1] * 3, list("abcabcabc")))  # 3 domains: not given
    assert all(math.isnan(v) for v in cr2_bm_ci([0] * 20, [i % 10 for i in range(20)]))  # no spread
    with pytest.raises(ValueError):
        cr2_bm_ci([1, 0], ["x"])


def test_leave_one_out_by_hand():
    loo = leave_one_out([1, 1, 0, 0, -1, 0], ["h", "h", "x", "x", "y", "y"])
    assert loo == {"h": pytest.approx(-1 / 4), "x": pytest.approx(1 / 4), "y": pytest.approx(2 / 4)}
    assert math.isnan(leave_one_out([1, 0], ["h", "h"])["h"])


def _run(name: str, outcomes: list[int], domains: list[str]) -> Run:
    ctx = (Message("user", "q"),)
    records = tuple(TaskRecord(
        config_hash=name * 16, task_id=f"t{i:03d}", domain=d, system=name, injection_session=3, naive=None,
        indirect=Answer("answer", ctx), verdicts={"target_recall": Verdict("target_recall", 1),
                                                  "application": Verdict("application", o),
                                                  "answer_only": Verdict("answer_only", o)},
        target_recall_exact=1, usage={}, latency_s=0.0, target_recall_provenance=1)
        for i, (o, d) in enumerate(zip(outcomes, domains)))
    cfg = RunConfig(system=name, embedding="minilm", injection="middle", llm="openai", answerer_model="m",
                    judge_model="m", config_hash=name * 16)
    return Run(label=name, config=cfg, records=records)


def test_every_comparison_table_shows_the_domain_structure():
    a, b, g = one_domain_difference()
    ra, rb = _run("a", a, g), _run("b", b, g)
    c = compare(ra, rb, "application")
    assert c.n_domains == 10 and c.ci_low > 0  # per task: a clear win
    assert c.cr_low < 0 < c.cr_high and c.cr_df > 0  # on another domain mix: not shown
    assert c.st_low > 0  # on this design: within-domain, it holds
    assert dict(c.loo)["domain_0"] == 0.0 and c.loo_range == (0.0, pytest.approx(100 * 10 / 90))
    assert "within-domain 95% [" in c.summary() and "another domain mix (CR2, 10 domains)" in c.summary()
    doc = c.as_dict()
    assert doc["leave_one_domain_out"]["domain_0"] == 0.0 and doc["domain_mix_df"] == pytest.approx(c.cr_df)
    long, _ = pairwise([ra, rb], "application")
    row = long.display.iloc[0]
    assert row["domain mix 95% CI (approx.)"].endswith(f"(df {c.cr_df:.1f})")
    assert row["leave one domain out"] == "+0.0 to +11.1"
    assert long.data.iloc[0]["within_domain_ci_low"] == pytest.approx(c.st_low) and "Bell–McCaffrey" in long.note
    few = compare(_run("a", a[:30], g[:30]), _run("b", b[:30], g[:30]), "application")  # 3 domains
    assert math.isnan(few.cr_low) and "fewer than 10" in few.summary()


def test_per_domain_rates_carry_wilson_intervals():
    a, _, g = one_domain_difference()
    table = by_domain([_run("a", a, g)], "application")
    lo, hi = wilson_interval(10, 10)
    assert table.display.iloc[1]["domain_0"] == f"100.0 (10/10) [{100 * lo:.1f}, {100 * hi:.1f}]"
    row = table.data[table.data["domain"] == "domain_3"].iloc[0]
    assert (row["k"], row["n"]) == (5, 10) and row["ci_low"] < 50 < row["ci_high"]


def test_the_release_domain_names_keep_the_ten_domains_order():
    from inmind_exp.records import DOMAINS, OFFICIAL_DOMAINS

    outcomes = [1, 0] * 10
    table = by_domain([_run("a", outcomes, [d for d in reversed(OFFICIAL_DOMAINS) for _ in range(2)])], "application")
    assert list(table.display.columns[1:11]) == list(OFFICIAL_DOMAINS) and len(OFFICIAL_DOMAINS) == len(DOMAINS) == 10
    assert list(table.display.columns[11:]) == ["pooled", "domain-macro", "non-health"]
    assert list(table.display.iloc[0][1:11]) == ["2"] * 10
    assert list(table.display.iloc[1][11:]) == ["50.0 (10/20)", "50.0", "50.0 (9/18)"]  # health is 1 of 2 too
