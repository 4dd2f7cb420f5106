"""The domain-clustered interval beside the per-task paired test: wider when the whole difference sits in one
domain, deterministic, independent of task order, checked against a plain loop, and carried into every comparison
table and the per-domain Wilson rates."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from inmind_exp.records import Answer, Message, TaskRecord, Verdict

from analysis.compare import compare
from analysis.load import Run, RunConfig
from analysis.stats import cluster_bootstrap_ci, paired_bootstrap_ci, wilson_interval
from analysis.tables import by_domain, pairwise

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


def test_clustered_interval_is_wider_when_the_difference_sits_in_one_domain():
    a, b, g = one_domain_difference()
    lo, hi = paired_bootstrap_ci(a, b, n_boot=4000, seed=0)
    clo, chi = cluster_bootstrap_ci(a, b, g, n_boot=4000, seed=0)
    assert lo > 0.0  # per task: 10 of 100 discordant, all one way, looks like a clear win
    assert chi - clo > hi - lo  # resampling domains: the difference may not exist on another task mix
    assert clo <= 0.0 < chi  # a draw without domain_0 (p = 0.9^10 ≈ 0.35) gives exactly 0


def test_clustered_interval_is_close_to_the_per_task_one_when_the_difference_is_spread():
    rng = random.Random(3)
    a, b, g = [], [], []
    for d in DOMAINS10:
        for _ in range(12):
            a.append(int(rng.random() < 0.6))
            b.append(int(rng.random() < 0.4))
            g.append(d)
    lo, hi = paired_bootstrap_ci(a, b, n_boot=4000, seed=0)
    clo, chi = cluster_bootstrap_ci(a, b, g, n_boot=4000, seed=0)
    assert 0.5 < (chi - clo) / (hi - lo) < 1.6  # no domain effect: about the same width


def test_clustered_interval_is_seeded_order_free_and_matches_a_plain_loop():
    a, b, g = one_domain_difference(per_domain=4)
    first = cluster_bootstrap_ci(a, b, g, n_boot=2000, seed=7)
    assert cluster_bootstrap_ci(a, b, g, n_boot=2000, seed=7) == first
    order = list(range(len(a)))
    random.Random(1).shuffle(order)
    shuffled = cluster_bootstrap_ci([a[i] for i in order], [b[i] for i in order], [g[i] for i in order],
                                    n_boot=2000, seed=7)
    assert shuffled == first
    # the same resampling written as a loop over drawn domains
    names = sorted(set(g))
    rng = np.random.default_rng(7)
    draws = rng.multinomial(len(names), np.full(len(names), 1 / len(names)), size=2000)
    means = []
    for row in draws:
        num = den = 0.0
        for count, name in zip(row, names):
            diffs = [x - y for x, y, d in zip(a, b, g) if d == name]
            num += count * sum(diffs)
            den += count * len(diffs)
        means.append(num / den)
    assert first == pytest.approx(tuple(np.quantile(means, [0.025, 0.975])))


def test_clustered_interval_needs_two_domains_and_aligned_inputs():
    assert all(math.isnan(v) for v in cluster_bootstrap_ci([1, 0, 1], [0, 0, 0], ["x", "x", "x"]))
    with pytest.raises(ValueError):
        cluster_bootstrap_ci([1, 0], [0, 0], ["x"])


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


def test_every_comparison_table_shows_both_intervals():
    a, b, g = one_domain_difference()
    ra, rb = _run("a", a, g), _run("b", b, g)
    c = compare(ra, rb, "application", n_boot=2000, seed=0)
    assert c.n_domains == 10 and c.cl_high - c.cl_low > c.ci_high - c.ci_low
    assert "domain-clustered bootstrap (10 domains)" in c.summary()
    long, _ = pairwise([ra, rb], "application", n_boot=2000, seed=0)
    assert long.display.iloc[0]["domain-clustered 95% CI"].endswith("(10 domains)")
    assert long.data.iloc[0]["cluster_ci_low"] == pytest.approx(c.cl_low)
    assert "resamples whole domains" in long.note


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
    assert list(table.display.columns[1:]) == list(OFFICIAL_DOMAINS) and len(OFFICIAL_DOMAINS) == len(DOMAINS) == 10
    assert list(table.display.iloc[0][1:]) == ["2"] * 10
