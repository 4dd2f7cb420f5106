"""The release's aggregate (score-1 verdicts / 125; errored or missing tasks count as not 1) beside our paired rates."""

from __future__ import annotations

import pytest

from inmind_exp.protocol.metrics import compute
from inmind_exp.official.aggregate import official_line, official_metrics, official_rates
from inmind_exp.records import Answer, Message, TaskRecord, Verdict


def rec(tid: str, app: int | None, naive: int | None = 1, error: str | None = None) -> TaskRecord:
    a = Answer("a", (Message("user", "q"),))
    v = {"target_recall": Verdict("target_recall", 1),
         "application": Verdict("application", app) if app is not None else Verdict("application", None, error="x")}
    if naive is not None:
        v["naive"] = Verdict("naive", naive)
    return TaskRecord("h", tid, "other", "s", 8, a, None if error else a, v, 1, {}, 0.0, error=error)


def test_official_counts_every_missing_or_errored_task_as_not_1_while_paired_rates_leave_them_out():
    records = [rec("0", 1), rec("3", 1), rec("4", 0), rec("5", None), rec("6", 1, error="worker died")]
    off = official_rates(records)
    assert (off["application"].successes, off["application"].judged, off["application"].total) == (2, 3, 125)
    assert off["application"].pct == pytest.approx(1.6)
    assert off["target_recall"].successes == 4  # the errored-verdict task 5 still has a valid target recall
    paired = compute(records).rates["application"]
    assert (paired.successes, paired.n, paired.errors) == (2, 3, 2)  # tasks 5 and 6 left out
    assert paired.pct > off["application"].pct  # the two are different numbers: named apart
    m = official_metrics(records)
    assert m["application_official"] == pytest.approx(1.6) and m["application_official_k"] == 2
    assert "naive_official" in m and "application" not in m


def test_a_metric_without_verdicts_is_0_of_125_and_the_line_names_both_definitions():
    records = [rec("0", 1, naive=None)]  # e.g. a backbone that was not asked the naive query
    assert official_rates(records)["naive"].successes == 0
    line = official_line(records)
    assert "application_official 1/125 = 0.8%" in line and "naive_official 0/125 = 0.0%" in line
    assert "score-1 verdicts / 125" in line and "a failed verdict" in line


def test_a_task_counts_once():
    assert official_rates([rec("0", 0), rec("0", 1)])["application"].successes == 1
