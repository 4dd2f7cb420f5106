"""Within-row comparisons of a control and the rate it bounds (issue #41, item 3): paired over the same tasks, with
the Bonett–Price interval of ``analysis compare`` and exact McNemar, checked on a hand-worked table and against
statsmodels; a pair screened related leaves the pair."""

from __future__ import annotations

import math

from statsmodels.stats.contingency_tables import mcnemar

from analysis.controls import controls_table, within_row
from analysis.load import Run, RunConfig
from inmind_exp.records import Answer, ControlResult, TaskRecord, Verdict


def _run(app: list[int], oa: list[int | None]) -> Run:
    """Task i: application ``app[i]``; over-application ``oa[i]`` (None: the pair was screened related)."""
    recs = []
    for i, (a, o) in enumerate(zip(app, oa)):
        screen = Verdict("relevance", 1 if o is None else 0)
        c = ControlResult("mismatched", "q", answer=None if o is None else Answer("x", ()),
                          verdict=None if o is None else Verdict("over_application", o), screen=screen)
        recs.append(TaskRecord("h", f"t{i}", "legal", "s", 0, None, Answer("x", ()),
                               {"application": Verdict("application", a)}, None, {}, 0.0,
                               controls={"mismatched": c}))
    return Run(label="r", config=RunConfig.from_params({}, "r", "naive_rag"), records=tuple(recs))


def test_application_minus_over_application_is_paired_over_the_same_tasks():
    # tasks 0-8 paired; application 1 on 0-5, over-application 1 on 4, 5, 6; task 9 screened related (left out)
    run = _run([1, 1, 1, 1, 1, 1, 0, 0, 0, 1], [0, 0, 0, 0, 1, 1, 1, 0, 0, None])
    w = within_row(run, "application", "over_application")
    assert (w.n, w.base_only, w.control_only) == (9, 4, 1)
    assert math.isclose(w.diff, 100 * 3 / 9)
    # Bonett–Price by hand: p10 = 5/11, p01 = 2/11, d = 3/11, se = sqrt((7/11 - (3/11)^2) / 11)
    d, se = 3 / 11, math.sqrt((7 / 11 - (3 / 11) ** 2) / 11)
    assert math.isclose(w.ci_low, 100 * (d - 1.959963984540054 * se), abs_tol=1e-9)
    assert math.isclose(w.ci_high, 100 * (d + 1.959963984540054 * se), abs_tol=1e-9)
    ref = mcnemar([[2, 4], [1, 2]], exact=True).pvalue  # both, app only / OA only, neither
    assert math.isclose(w.p_exact, ref) and math.isclose(ref, 0.375)
    # unpaired, the rates would be 7/10 - 3/9: the paired difference is over the 9 tasks with both
    assert "p=0.375 (4/1 of 9)" in w.cell()


def test_the_controls_table_shows_the_paired_difference_and_the_derived_rates():
    run = _run([1, 1, 0, 0], [1, 0, 0, None])
    t = controls_table([run])
    row = t.data.iloc[0]
    assert row["application_minus_over_application_n"] == 3
    assert math.isclose(row["application_minus_over_application"], 100 / 3)
    assert row["over_application_related"] == 25.0 and row["over_application_related_n"] == 4
    shown = t.display.iloc[0]
    assert shown["Application − Over-application (paired)"].endswith("(1/0 of 3)")
    assert "Pairs related (screen)" in t.display.columns and "paired over the tasks with both values" in t.note
