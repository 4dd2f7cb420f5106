"""Wilson intervals against known values, rates that exclude errors, and the Δ columns."""

from __future__ import annotations

import math

import pytest

from inmind_exp.protocol.metrics import compute, wilson_interval

from inmind_exp.display.headline import results_table
from inmind_exp.records import Answer, Message, TaskRecord, Usage, Verdict


def test_wilson_matches_paper_backbone():
    lo, hi = wilson_interval(105, 125)
    assert (round(100 * lo, 1), round(100 * hi, 1)) == (76.6, 89.4)


def test_wilson_matches_paper_best_retrieval():
    lo, hi = wilson_interval(20, 125)  # 16.0% -> [10.6, 23.4] in Section 4.3
    assert (round(100 * lo, 1), round(100 * hi, 1)) == (10.6, 23.4)


def test_wilson_edges():
    assert wilson_interval(0, 10)[0] == 0.0
    assert wilson_interval(10, 10)[1] == pytest.approx(1.0)
    lo, hi = wilson_interval(0, 10)
    assert hi == pytest.approx(0.2775, abs=1e-4)  # known value for 0/10
    assert all(math.isnan(x) for x in wilson_interval(0, 0))


def rec(tid, naive, app, tr, exact, err=None, judge_error=None):
    ans = Answer("a", (Message("user", "q"),))
    v = {}
    if naive is not None:
        v["naive"] = Verdict("naive", naive)
    v["application"] = Verdict("application", None, error=judge_error) if judge_error else Verdict("application", app)
    v["target_recall"] = Verdict("target_recall", tr)
    v["answer_only"] = Verdict("answer_only", app)
    return TaskRecord("h", tid, "other", "s", 0, ans if naive is not None else None, ans, v, exact,
                      {"answerer": Usage(calls=2, prompt_tokens=10, completion_tokens=5)}, 1.0, error=err)


def test_rates_exclude_errors_and_compute_deltas():
    records = [rec("a", 1, 1, 1, 1), rec("b", 1, 0, 0, 0), rec("c", 0, 0, 1, 0),
               rec("d", 1, None, 1, 1, err="judge failed", judge_error="no json")]
    m = compute(records)
    assert (m.rates["application"].successes, m.rates["application"].n, m.rates["application"].errors) == (1, 3, 1)
    # paired: task d (an errored verdict) is left out of every rate, not only the application rate
    assert (m.rates["naive"].successes, m.rates["naive"].n) == (2, 3)
    assert (m.rates["target_recall"].successes, m.rates["target_recall"].n) == (2, 3)
    assert m.deltas["delta_application_naive"] == pytest.approx(100 / 3 - 200 / 3)
    assert m.excluded == ("d",)
    flat = m.flat()
    assert flat["n_errors"] == 1 and flat["answerer_calls"] == 8 and flat["total_prompt_tokens"] == 40
    assert flat["application_ci_low"] < flat["application"] < flat["application_ci_high"]
    assert "| cfg | 4 | 1 |" in results_table([("cfg", m)])


def test_backbone_naive_is_not_applicable_not_an_error():
    m = compute([rec("a", None, 1, 1, 1), rec("b", None, 0, 1, 1)])
    assert m.rates["naive"].n == 0 and m.rates["naive"].errors == 0
    assert "naive" not in m.flat()


def test_what_ran_rates_and_context_budget_per_run():
    """Per task the protocol copies what ran (``Answer.meta``: retrieval_mode, gate_ran, tool_calls, steps) and the
    context budget onto the record; per run they become rates and means (MLflow metrics, results-table columns)."""
    from inmind_exp.protocol.budget import count_tokens
    from inmind_exp.protocol.metrics import compute
    from inmind_exp.display.headline import results_table
    from inmind_exp.protocol.task import task_record
    from inmind_exp.records import Answer, ContextItem, Message, Task

    task = Task(id="t", domain="other", user_message="u", assistant_message="a", naive_query="n", query="q",
                explanation="-")

    def rec(tid, **meta):
        ans = Answer("x", (Message("user", "q" * 41),), meta=meta, items=(ContextItem("passage", "p", ("s#0",)),))
        return task_record(Task(**{**task.__dict__, "id": tid}), config_hash="h", system_name="s", session_index=0,
                           naive=ans, indirect=ans)

    recs = [rec("a", retrieval_mode="ppr", gate_ran=True, tool_calls=3, steps=2),
            rec("b", retrieval_mode="dense", gate_ran=False, tool_calls=1, steps=1), rec("c")]
    assert recs[0].ran == {"retrieval_mode": "ppr", "gate_ran": True, "tool_calls": 3, "steps": 2} and recs[2].ran == {}
    assert recs[0].context_tokens == count_tokens("[user] " + "q" * 41) == 12 and recs[0].context_items == 1
    m = compute(recs)
    flat = m.flat()
    assert flat["retrieval_mode_ppr_rate"] == 50.0 and flat["gate_ran_rate"] == 50.0  # of the tasks that report it
    assert flat["mean_tool_calls"] == 2.0 and flat["mean_steps"] == 1.5
    assert flat["context_tokens"] == 12.0 and flat["context_items"] == 1.0
    row = results_table([("cfg", m)]).splitlines()[2]
    assert row.endswith("| 12 | PPR 50%, gate 50%, tool calls 2.0, steps 1.5 |")
    assert "retrieval_mode_ppr_rate" not in compute([recs[2]]).flat()  # a system that does not report it
