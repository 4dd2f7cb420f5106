"""The judge-robustness panel's per-system tables: flip rate and κ between every two judge settings (the run's own
judge one of them), and each setting's rates over repeated samples and its label-free self-audit, on constructed
verdicts whose flips and certain errors are known."""

from __future__ import annotations

import dataclasses
import math

import pytest

from inmind_exp.records import Answer, Message, TaskRecord, Verdict

from analysis.judge_panel import ORIGINAL, between_settings, self_audit, settings
from analysis.load import Run, RunConfig
from analysis.judge_panel import panel
from analysis.rejudge import P_SAMPLE, P_SETTING, P_SOURCE
from analysis.agreement import cohen_kappa

N = 10
#: provenance 0 on t0, t1 (a target-recall verdict of 1 there is a certain FP); verbatim 1 on t8, t9 (a 0 a certain FN)
PROVENANCE = [0, 0] + [1] * 8
VERBATIM = [0] * 8 + [1, 1]


def _records(name: str, app: list[int], recall: list[int]) -> tuple[TaskRecord, ...]:
    ctx = (Message("user", "q"),)
    return tuple(TaskRecord(
        config_hash="c" * 16, task_id=f"t{i}", domain="food_drink", system=name, injection_session=3, naive=None,
        indirect=Answer("answer", ctx), verdicts={"target_recall": Verdict("target_recall", recall[i]),
                                                  "application": Verdict("application", app[i]),
                                                  "answer_only": Verdict("answer_only", app[i])},
        target_recall_exact=VERBATIM[i], usage={}, latency_s=0.0, target_recall_provenance=PROVENANCE[i])
        for i in range(N))


def _flip(xs: list[int], idx: list[int]) -> list[int]:
    return [1 - x if i in idx else x for i, x in enumerate(xs)]


CFG = RunConfig(system="mem0", embedding="minilm", injection="middle", llm="openai", answerer_model="m",
                judge_model="judge-0", config_hash="c" * 16)
APP = [1, 0] * 5
RECALL = [0, 0] + [1] * 6 + [1, 1]  # no certain error by the run's own judge


def _rejudged(source: Run, setting: str, sample: int, app: list[int], recall: list[int]) -> Run:
    return Run(label=f"mem0 ⟂ {setting} #{sample}", config=CFG, records=_records("mem0", app, recall),
               params={P_SOURCE: source.run_id, P_SETTING: setting, P_SAMPLE: str(sample),
                       "rejudge.base_url": "http://127.0.0.1:1/v1"})


@pytest.fixture
def panel_runs():
    source = Run(label="mem0", config=CFG, records=_records("mem0", APP, RECALL), run_id="src1",
                 params={"llm.roles.judge.model": "judge-0", "judges.prompts": "strict"})
    paper = [_rejudged(source, "paper/judge-0", 0, _flip(APP, [0, 1]), _flip(RECALL, [0])),  # 1 FP
             _rejudged(source, "paper/judge-0", 1, _flip(APP, [0, 1, 2]), _flip(RECALL, [0, 1, 8]))]  # 2 FP, 1 FN
    other = [_rejudged(source, "strict/judge-b", 0, _flip(APP, [5, 6, 7, 8, 9]), RECALL)]
    return source, paper + other


def test_every_two_settings_are_compared_with_flips_and_kappa(panel_runs):
    source, rejudged = panel_runs
    names = [s.name for s in settings(source, rejudged)]
    assert names == [f"{ORIGINAL} (strict/judge-0)", "paper/judge-0", "strict/judge-b"]
    t = between_settings([source], rejudged)
    app = t.data[t.data["judge"] == "application"].set_index(["setting_a", "setting_b"])
    assert len(app) == 3  # three settings: three pairs
    orig = names[0]
    assert app.loc[(orig, "paper/judge-0"), "flips"] == 2  # sample 0 of each setting
    assert app.loc[(orig, "strict/judge-b"), "flips"] == 5
    between = app.loc[("paper/judge-0", "strict/judge-b")]
    assert between["flips"] == 7 and between["flip_rate"] == pytest.approx(70.0)
    assert between["kappa"] == pytest.approx(cohen_kappa(_flip(APP, [0, 1]), _flip(APP, [5, 6, 7, 8, 9])))
    assert "70.0 (7/10)" in t.display["flip rate % (flips/n)"].tolist()


def test_each_setting_reports_its_spread_over_samples_and_its_certain_errors(panel_runs):
    source, rejudged = panel_runs
    t = self_audit([source], rejudged)
    rows = t.data[t.data["configuration"] == "mem0"].set_index("setting")
    paper = rows.loc["paper/judge-0"]
    assert paper["samples"] == 2 and paper["audited"] == N
    assert paper["false_positives_mean"] == pytest.approx(1.5)
    assert paper["false_positives_sd"] == pytest.approx(math.sqrt(0.5))
    assert paper["false_negatives_mean"] == pytest.approx(0.5)
    apps = [50.0, 40.0]  # flipping t0, t1 keeps 5 of 10; flipping t0, t1, t2 leaves 4
    assert paper["application_mean"] == pytest.approx(45.0)
    assert (paper["application_min"], paper["application_max"]) == (min(apps), max(apps))
    orig = rows.loc[f"{ORIGINAL} (strict/judge-0)"]
    assert orig["false_positives_mean"] == 0 and orig["samples"] == 1 and math.isnan(orig["application_sd"])
    pooled = t.data[t.data["configuration"] == "(all configurations)"].set_index("setting")
    assert pooled.loc["paper/judge-0", "false_positives_total"] == 3
    assert pooled.loc["paper/judge-0", "false_negatives_total"] == 1
    assert pooled.loc["paper/judge-0", "audited"] == 2 * N
    shown = t.display.set_index("Judge setting").loc["paper/judge-0"]
    assert shown["Application %"].iloc[0] == "45.0 ± 7.1 [40.0–50.0]"


def test_the_panel_and_the_pairs_agree_on_the_flips_against_the_run(panel_runs):
    source, rejudged = panel_runs
    p = panel([source], rejudged).data.set_index(["setting", "judge"])
    pairs = between_settings([source], rejudged).data
    first = pairs[(pairs["setting_a"].str.startswith(ORIGINAL)) & (pairs["judge"] == "application")]
    for _, row in first.iterrows():
        assert p.loc[(row["setting_b"], "application"), "flips"] == row["flips"]


def test_no_rejudged_run_gives_empty_tables():
    source = Run(label="mem0", config=CFG, records=_records("mem0", APP, RECALL), run_id="src1")
    assert between_settings([source], []).data.empty
    assert len(self_audit([source], []).data) == 2  # the run's own judge, and its pooled row


def _with_failed(run: Run, tid: str, judge: str) -> Run:
    """``run`` with ``tid``'s verdict of ``judge`` failed (an error of that metric only)."""
    recs = []
    for r in run.records:
        if r.task_id == tid:
            r = dataclasses.replace(r, verdicts={**r.verdicts, judge: Verdict(judge, None, error="unparsable")})
        recs.append(r)
    return dataclasses.replace(run, records=tuple(recs))


def test_majority_vote_fleiss_kappa_and_flip_intervals_over_three_samples():
    """Issue #41 item 6 on constructed verdicts: three samples give a majority verdict per task (its rate with a
    Wilson interval), Fleiss' κ as statsmodels computes it, and flip rates with Wilson intervals."""
    from statsmodels.stats.inter_rater import fleiss_kappa as sm_fleiss

    from inmind_exp.protocol.metrics import wilson_interval

    source = Run(label="mem0", config=CFG, records=_records("mem0", APP, RECALL), run_id="src1")
    samples = [_flip(APP, [0]), _flip(APP, [0, 1, 3]), _flip(APP, [1, 5])]
    runs = [_rejudged(source, "strict/t", s, app, RECALL) for s, app in enumerate(samples)]
    row = panel([source], runs).data.set_index("judge").loc["application"]
    votes = list(zip(*samples))
    majority = [int(sum(v) >= 2) for v in votes]
    assert row["samples"] == 3 and row["majority_n"] == N and row["majority_undecided"] == 0
    assert row["majority_pct"] == pytest.approx(10.0 * sum(majority))
    lo, hi = wilson_interval(sum(majority), N)
    assert (row["majority_ci_low"], row["majority_ci_high"]) == pytest.approx((100 * lo, 100 * hi))
    table = [[3 - sum(v), sum(v)] for v in votes]
    assert row["fleiss_kappa"] == pytest.approx(sm_fleiss(table, method="fleiss"), abs=1e-12)
    assert row["fleiss_n"] == N
    # sample 0 flips t0 against the run: 1 of 10, its Wilson interval
    lo, hi = wilson_interval(1, N)
    assert (row["flips"], row["flip_n"]) == (1, N)
    assert (row["flip_ci_low"], row["flip_ci_high"]) == pytest.approx((100 * lo, 100 * hi))
    # between samples: sample 1 differs from sample 0 on t1, t3; sample 2 on t0, t1, t5 → 5 of 20 pairs
    assert (row["repeat_flips"], row["repeat_pairs"]) == (5, 2 * N)
    lo, hi = wilson_interval(5, 2 * N)
    assert (row["repeat_ci_low"], row["repeat_ci_high"]) == pytest.approx((100 * lo, 100 * hi))
    # positive / negative specific agreement beside κ (run vs sample 0: both-1 on 4 tasks, both-0 on 5, 1 flip)
    assert (row["positive_agreement"], row["negative_agreement"]) == pytest.approx((8 / 9, 10 / 11))
    shown = panel([source], runs).display.set_index("Judge").loc["Application"]
    assert shown["flips vs original % [95% CI]"].endswith("(1/10)") and "[" in shown["majority % [95% CI]"]


def test_an_even_number_of_samples_has_no_majority_and_one_sample_no_sd():
    source = Run(label="mem0", config=CFG, records=_records("mem0", APP, RECALL), run_id="src1")
    two = [_rejudged(source, "strict/t", s, APP, RECALL) for s in range(2)]
    row = panel([source], two).data.set_index("judge").loc["application"]
    assert math.isnan(row["majority_pct"]) and row["rejudged_sd_pct"] == 0.0
    one = panel([source], two[:1])
    row = one.data.set_index("judge").loc["application"]
    assert math.isnan(row["rejudged_sd_pct"]) and math.isnan(row["fleiss_kappa"])
    assert one.display.set_index("Judge").loc["Application", "rejudged % (mean ± SD)"] == "50.0"  # no "± 0.0"


def test_original_and_rejudged_rates_are_over_the_same_tasks():
    """One unparsable rejudged verdict: the task leaves that judge's comparison on both sides (the original rate is
    recomputed without it), and stays in the other judges' rates; no flip is invented."""
    source = Run(label="mem0", config=CFG, records=_records("mem0", APP, RECALL), run_id="src1")
    sample = _with_failed(_rejudged(source, "strict/t", 0, APP, RECALL), "t0", "application")  # t0: app 1
    p = panel([source], [sample]).data.set_index("judge")
    app = p.loc["application"]
    assert app["same_n"] == N - 1 and app["original_all_n"] == N and app["flips"] == 0
    assert app["original_pct"] == pytest.approx(100 * 4 / 9) == app["rejudged_mean_pct"]
    assert p.loc["target_recall", "same_n"] == N  # the failed application verdict leaves that judge only


def test_a_failed_verdict_in_one_sample_keeps_the_majority_of_the_valid_ones():
    source = Run(label="mem0", config=CFG, records=_records("mem0", APP, RECALL), run_id="src1")
    runs = [_rejudged(source, "strict/t", s, APP, RECALL) for s in range(3)]
    runs[0] = _with_failed(runs[0], "t0", "application")  # 1, 1 valid: majority 1
    runs[1] = _with_failed(runs[1], "t1", "application")  # t1: 0 (failed) 0 → majority 0
    runs[2] = _with_failed(runs[2], "t1", "application")
    runs[0] = _with_failed(runs[0], "t2", "application")
    runs[1] = dataclasses.replace(runs[1], records=tuple(
        dataclasses.replace(r, verdicts={**r.verdicts, "application": Verdict("application", 0)})
        if r.task_id == "t2" else r for r in runs[1].records))  # t2: failed, 0, 1 → a tie: no majority
    row = panel([source], runs).data.set_index("judge").loc["application"]
    assert row["majority_n"] == N - 1 and row["majority_undecided"] == 1
    assert row["majority_pct"] == pytest.approx(100 * 4 / 9)  # t0, t4, t6, t8 (t2 undecided)
    assert row["fleiss_n"] == N - 3  # only tasks every sample judged validly
