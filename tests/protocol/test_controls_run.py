"""The negative controls wired into runs (issue #22, item 1), against the fake server through the real client: the
no-fact control replays the background once per configuration (counted at the server) into a state with no item
derived from a fact turn; the mismatched control asks each task its recorded partner's indirect query from its own
state; ``controls=`` is part of the result identity only when not none; metrics, tables, the report's section and the
dry-run estimate follow the control registry."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest

from inmind_exp.protocol.controls import CONTROLS, PAIRING_VERSION, ControlSpec
from inmind_exp.errors import PlanError
from inmind_exp.protocol.judges import OVER_APPLICATION_JUDGE, RELEVANCE_JUDGE
from inmind_exp.protocol.metrics import compute, control_rate
from inmind_exp.records import FACT_REPLY_TURN_ID, FACT_TURN_ID, ControlResult, TaskRecord, Verdict
from inmind_exp.plan.estimate import estimate
from inmind_exp.plan.plan import plan_config
from inmind_exp.run.driver import run_plan
from inmind_exp.plan.estimate import price
from inmind_exp.exec.executor import InProcessExecutor
from inmind_exp.run.resources import Resources
from tests.fake_openai import FakeOpenAI
from tests.launch_helpers import TASKS
from tests.exec.test_runner_ray import compose

FACTS = [t[2] for t in TASKS[:4]]
SESSION = re.compile(r"New conversation session \((2024/01/\d\d)")


def _echo_memory(body: dict) -> str:
    """The always-in-state updater's reply: the previous file plus the session, so each replay's prompts differ by
    what it has seen (the call cache then hides nothing) and the file keeps the fact once it was given."""
    text = body["messages"][-1]["content"]
    old = text.split("<memory>\n", 1)[1].split("\n</memory>", 1)[0]
    session = text.split("<session>\n", 1)[1].split("\n</session>", 1)[0]
    return (old + "\n" + session).strip()


#: the relevance screen's reply "unrelated" (the fake's default JSON verdict is a 1: every pair screened related)
UNRELATED = ("[query] (the later request)", {"score": 0, "reason": "unrelated"})


def _fake() -> FakeOpenAI:
    return FakeOpenAI(rules=[("Rewrite the complete memory file", _echo_memory), UNRELATED])


def _updates(fake: FakeOpenAI) -> list[tuple[str, str]]:
    """(session date, user prompt) of every updater call the server answered."""
    out = []
    for body in fake.chat_requests():
        text = body["messages"][-1]["content"]
        if (m := SESSION.search(text)) is not None:
            out.append((m.group(1), text))
    return out


def _run(tmp_path: Path, fake: FakeOpenAI, *overrides: str):
    cfg = compose(tmp_path, fake.base_url, "system=always_in_state", "embedding=bm25", *overrides)
    plan = plan_config(cfg, tmp_path / "root", tmp_path / "job")
    return plan, run_plan(plan, executor=InProcessExecutor(), resources=Resources())


def test_no_fact_replays_the_background_once_per_configuration(tmp_path):
    with _fake() as fake:
        plan, result = _run(tmp_path, fake, "controls=no_fact")
        updates = _updates(fake)
    assert plan.session_index == 2 and len(plan.trace.sessions) == 6 and len(plan.tasks) == 4
    per_session = Counter(d for d, _ in updates)
    # the prefix (two sessions) once; every later session once per task and once more for the no-fact state
    assert per_session == {"2024/01/01": 1, "2024/01/02": 1, **{f"2024/01/0{d}": 5 for d in range(3, 7)}}
    without_fact = Counter(d for d, text in updates if not any(f in text for f in FACTS))
    assert without_fact == {"2024/01/01": 1, "2024/01/02": 1, **{f"2024/01/0{d}": 1 for d in range(3, 7)}}
    for r in result.records:
        assert r.error is None and set(r.controls) == {"no_fact", "no_fact_application"}
        c = r.controls["no_fact"]
        assert c.ok and c.query == next(t.query for t in plan.tasks if t.id == r.task_id)
        assert c.verdict.judge == "answer_only" and c.answer.items
        # the same answer (asked once: the replay counts above) judged by the application judge too (issue #41 item 4)
        a = r.controls["no_fact_application"]
        assert a.ok and a.answer == c.answer and a.verdict.judge == "application"
        # the no-fact state holds no item derived from a fact turn; the task's own state does
        assert not {FACT_TURN_ID, FACT_REPLY_TURN_ID} & set(c.answer.union_sources())
        assert not any(f in c.answer.context_text() for f in FACTS)
        assert FACT_TURN_ID in r.indirect.sources()
    assert result.metrics.controls["no_fact_warning"].n == 4
    assert result.metrics.flat()["no_fact_warning_n"] == 4.0 and "no_fact_warning_ci_low" in result.metrics.flat()
    assert result.metrics.controls["no_fact_application"].n == 4
    assert {"no_fact_application", "no_fact_application_ci_low", "no_fact_application_ci_high"} <= set(
        result.metrics.flat())

    # a second configuration (another seed of the answerer) replays it once more: once per configuration
    with _fake() as fake:
        _run(tmp_path, fake, "controls=no_fact", "llm.seed=7")
        assert Counter(d for d, t in _updates(fake) if not any(f in t for f in FACTS))["2024/01/06"] == 1


def test_without_controls_there_is_no_extra_replay_and_the_identity_is_unchanged(tmp_path):
    with _fake() as fake:
        base = compose(tmp_path, fake.base_url, "system=always_in_state", "embedding=bm25")
        plan = plan_config(base, tmp_path / "root", tmp_path / "job")
        none = plan_config(compose(tmp_path, fake.base_url, "system=always_in_state", "embedding=bm25",
                                   "controls=none"), tmp_path / "root", tmp_path / "job")
        assert plan.controls is None and "controls" not in plan.identity
        assert none.config_hash == plan.config_hash and none.prefix_hash == plan.prefix_hash
        result = run_plan(plan, executor=InProcessExecutor(), resources=Resources())
        updates = _updates(fake)
    assert Counter(d for d, _ in updates)["2024/01/06"] == 4
    assert all(not r.controls and "controls" not in r.to_dict() for r in result.records)
    assert result.metrics.controls == {} and "over_application" not in result.metrics.flat()


def test_controls_are_part_of_the_identity(tmp_path):
    def plan(*o):
        cfg = compose(tmp_path, "http://127.0.0.1:9/v1", "system=always_in_state", "embedding=bm25", *o)
        return plan_config(cfg, tmp_path / "root", tmp_path / "job")

    none, nf, mm, both = plan(), plan("controls=no_fact"), plan("controls=mismatched"), plan("controls=all")
    assert len({p.config_hash for p in (none, nf, mm, both)}) == 4
    assert both.identity["controls"]["names"] == ["no_fact", "no_fact_application", "mismatched"]
    assert both.identity["controls"]["pairing"] == {"version": PAIRING_VERSION, "seed": 0,
                                                    "screen": both.identity["controls"]["pairing"]["screen"]}
    assert plan("controls=mismatched", "controls.seed=3").config_hash != mm.config_hash
    # the MLflow params name the controls only when there are some
    assert not any(k.startswith("controls.") for k in none.params) and both.params["controls.seed"] == "0"
    # the no-fact state rides in the prefix snapshot, so its prefix is its own; the mismatched control needs none
    assert nf.prefix_hash != none.prefix_hash and mm.prefix_hash == none.prefix_hash
    with pytest.raises(PlanError, match="controls=.*unknown control.*bogus"):
        plan("controls.names=[bogus]")
    # a subset is paired as the full file is (issue #41 item 3): one task still gets its partner of the full set
    one = plan("controls=mismatched", "dataset.limit=1")
    assert len(one.tasks) == 1 and one.controls.pairings == {"t1": mm.controls.pairings["t1"]}
    assert one.controls.partners["t1"].id not in {t.id for t in one.tasks}


def test_mismatched_asks_the_recorded_partner_from_the_task_own_state(tmp_path):
    rule = ("a request the fact does not bear on", {"score": 0, "reason": "served the request"})
    with FakeOpenAI(rules=[("Rewrite the complete memory file", _echo_memory), rule, UNRELATED]) as fake:
        plan, result = _run(tmp_path, fake, "controls=mismatched")
        judged = [b["messages"][-1]["content"] for b in fake.chat_requests()
                  if "a request the fact does not bear on" in b["messages"][-1]["content"]]
        replan = plan_config(compose(tmp_path, fake.base_url, "system=always_in_state", "embedding=bm25",
                                     "controls=mismatched"), tmp_path / "root", tmp_path / "job")
    tasks = {t.id: t for t in plan.tasks}
    pairs = plan.controls.pairings
    assert replan.controls.pairings == pairs  # deterministic
    assert len(judged) == 4
    for r in result.records:
        c = r.controls["mismatched"]
        p = pairs[r.task_id]
        assert c.pairing == p.to_dict() and p.partner_id != r.task_id and p.partner_domain != r.domain
        assert c.query == tasks[p.partner_id].query and c.verdict.score == 0 and c.verdict.judge == "over_application"
        assert c.verdict.prompt_version == OVER_APPLICATION_JUDGE.version
        assert c.screen.judge == "relevance" and c.screen.score == 0 and not c.related
        # answered from the task's own post-injection state: its fact is in the context
        assert FACT_TURN_ID in c.answer.sources() and tasks[r.task_id].user_message in c.answer.context_text()
        assert any(tasks[r.task_id].user_message in j and c.query in j for j in judged)
    assert result.metrics.controls["over_application"].successes == 0
    assert result.metrics.controls["over_application"].n == 4
    # recorded in the run's artifacts too
    art = json.loads((tmp_path / "job" / "controls.json").read_text())
    assert art["controls"] == ["mismatched"] and {a["task_id"]: a["partner_id"] for a in art["pairings"]} == {
        k: p.partner_id for k, p in pairs.items()}
    # with the relevance screen's verdict of each pair, for review; and in the task set's file, shared across runs
    from inmind_exp.official.outputs import screen_verdicts_path

    shared = json.loads(screen_verdicts_path(plan).read_text())
    assert (shared["screened"], shared["related"]) == (4, 0) and shared["dataset"] == plan.identity["dataset"]
    assert {k: v["partner_id"] for k, v in shared["pairs"].items()} == {k: p.partner_id for k, p in pairs.items()}
    assert all(a["screen"]["related"] == 0 and a["screen"]["reason"] == "unrelated"
               and a["screen"]["prompt_version"] == "relevance-v1" for a in art["pairings"])
    # and in the ledger: a resumed run reads the same pairing back
    again = replan
    assert again.remaining() == [] and all(again.done[t].controls["mismatched"].pairing == pairs[t].to_dict()
                                           for t in tasks)


def test_a_failed_control_is_an_error_of_the_control_never_a_score(tmp_path):
    bad = ("a request the fact does not bear on", "not json at all")
    with FakeOpenAI(rules=[bad, UNRELATED]) as fake:
        plan, result = _run(tmp_path, fake, "controls=all", "run.judge_attempts=1")
    for r in result.records:
        assert r.error is None  # the task itself is fine: its own rates are unchanged
        assert r.controls["no_fact"].ok
        c = r.controls["mismatched"]
        assert not c.ok and c.error.startswith("judge failed") and c.verdict.score is None
    m = result.metrics
    assert m.controls["over_application"].n == 0 and m.controls["over_application"].errors == 4
    assert m.controls["no_fact_warning"].n == 4 and m.rates["application"].n == 4
    again = TaskRecord.from_dict(result.records[0].to_dict())
    assert again.controls == result.records[0].controls


def test_control_rates_count_only_valid_tasks_and_ok_controls():
    def rec(tid, score, error=None, task_error=None):
        v = Verdict("over_application", score, error=error)
        return TaskRecord("h", tid, "legal", "s", 0, None, None, {}, None, {}, 0.0, error=task_error,
                          controls={"mismatched": ControlResult("mismatched", "q", verdict=v)})

    from inmind_exp.records import Answer

    ans = Answer("a", ())
    rs = [rec("a", 1), rec("b", 0), rec("c", None, error="bad"), rec("d", 1, task_error="boom")]
    rs = [TaskRecord.from_dict({**r.to_dict(), "indirect": ans.to_dict()}) for r in rs]
    r = control_rate(rs, "over_application")
    assert (r.successes, r.n, r.errors) == (1, 2, 2)
    assert set(compute(rs).controls) == {"over_application", "over_application_related", "spurious_recall",
                                         "over_application_given_recalled"}


def test_the_dry_run_counts_and_prices_both_controls(tmp_path):
    def plan(*o):
        cfg = compose(tmp_path, "http://127.0.0.1:9/v1", "system=always_in_state", "embedding=bm25", *o)
        return plan_config(cfg, tmp_path / "root", tmp_path / "job")

    none, both = plan(), plan("controls=all")
    a, b = estimate(none), estimate(both)
    n = 4
    cost = none.system_cls.cost
    nf_replay = cost.memory_calls_per_session * (len(none.trace.sessions) - none.session_index)
    asked = 2  # no_fact_application judges the no-fact answer: a judge call, no query
    # a judge call per control and the relevance screen's per mismatched pair
    assert b["judge_calls"] - a["judge_calls"] == n * (len(CONTROLS) + 1) == n * 4
    assert b["answer_calls"] - a["answer_calls"] == n * asked * cost.answer_calls_per_query
    assert b["memory_calls"] - a["memory_calls"] == n * asked * cost.memory_calls_per_query + nf_replay
    assert b["control_calls"] == (b["memory_calls"] - a["memory_calls"] + b["answer_calls"] - a["answer_calls"]
                                  + b["judge_calls"] - a["judge_calls"])
    assert "control_calls" not in a or a["control_calls"] == 0
    assert b["judge_prompt_tokens"] - a["judge_prompt_tokens"] == n * (
        none.judges["answer_only"].prompt_tokens + none.judges["application"].prompt_tokens
        + OVER_APPLICATION_JUDGE.prompt_tokens + RELEVANCE_JUDGE.prompt_tokens)
    prices = {"fake-model": (1.0, 2.0)}
    from dataclasses import replace

    ca, _ = price(replace(none, prices=prices), a)
    cb, _ = price(replace(both, prices=prices), b)
    assert cb > ca


def test_tables_and_report_show_the_controls(tmp_path):
    from analysis.controls import controls_table
    from analysis.load import Run, RunConfig
    from analysis.report import build
    from analysis.load import RunSet
    from analysis.tables import table1

    with _fake() as fake:
        _, with_controls = _run(tmp_path / "a", fake, "controls=all")
        _, other = _run(tmp_path / "b", fake, "controls=all", "llm.seed=3")
        _, plain = _run(tmp_path / "c", fake)
    runs = [Run(label=name, config=RunConfig.from_params({}, name, "always_in_state"), records=tuple(res.records))
            for name, res in (("ais/a", with_controls), ("ais/b", other), ("ais/plain", plain))]
    t1 = table1(runs)
    assert {"Over-application", "No-fact warning", "No-fact application"} <= set(t1.display.columns)
    assert t1.display.set_index("Configuration").loc["ais/plain", "Over-application"] == "–"
    assert t1.data.set_index("configuration").loc["ais/a", "over_application_n"] == 4
    assert "Negative controls" in t1.note
    ctl = controls_table(runs)
    assert list(ctl.display["Configuration"]) == ["ais/a", "ais/b"]
    assert {"Application", "Over-application", "Answer-only", "No-fact warning"} <= set(ctl.display.columns)
    assert table1(runs[2:]).display.columns.tolist() == [c for c in t1.display.columns
                                                        if c not in ("Over-application", "No-fact warning",
                                                                     "No-fact application")]
    rep = build(RunSet(tuple(runs), origin="test"), tmp_path / "report")
    assert {"controls", "pairwise_over_application", "pairwise_no_fact_warning"} <= set(rep.tables)
    assert "application beside over-application" in rep.markdown.read_text()


def test_control_spec_is_registry_driven():
    assert [c.metric for c in CONTROLS.values()] == ["no_fact_warning", "no_fact_application", "over_application"]
    spec = ControlSpec(("no_fact",))
    assert spec.no_fact and "no_fact" in spec and "mismatched" not in spec
    assert ControlSpec(("no_fact", "no_fact_application")).asked == ("no_fact",)
    assert not ControlSpec(("mismatched",)).no_fact


def test_no_fact_application_shares_the_no_fact_answer_and_its_failure(tmp_path):
    """The application judge's no-fact control asks nothing itself: when the no-fact query fails it fails with it,
    on the control, never as a score."""
    from inmind_exp.protocol.controls import control_spec, run_controls
    from inmind_exp.records import Task

    def ask(*a, **k):
        raise AssertionError("no query may be asked without a no-fact state")

    task = Task("t1", "health", "a fact", "ok", "naive?", "indirect?", "bridge")
    spec = control_spec(["no_fact"], [task])
    assert spec.names == ("no_fact", "no_fact_application") and spec.asked == ("no_fact",)
    from inmind_exp.protocol.judges import JUDGES

    out = run_controls(spec, task, lambda w: None, None, JUDGES, tmp_path, None, tmp_path, ask=ask)
    assert out["no_fact"].error.startswith("RuntimeError: the no-fact state was not built")
    assert out["no_fact_application"].error.startswith("RuntimeError: the no_fact control's answer failed")
    assert not out["no_fact_application"].ok and out["no_fact_application"].verdict is None


def test_a_pair_screened_related_is_not_asked_scored_nor_an_error(tmp_path):
    """The relevance screen through the real client: the one pair whose partner query the fake calls related
    (t1's macaron question, partner of exactly one task: the pairing is a permutation) gets no query and no
    over-application verdict, leaves the rate without counting as an error, and is counted as related."""
    macaron = TASKS[0][4]
    screen = ("[query] (the later request)", lambda body: {"score": int(macaron in body["messages"][-1]["content"]),
                                                           "reason": "fake screen"})
    oa = ("a request the fact does not bear on", {"score": 1, "reason": "brought it up"})
    with FakeOpenAI(rules=[("Rewrite the complete memory file", _echo_memory), screen, oa]) as fake:
        plan, result = _run(tmp_path, fake, "controls=mismatched")
        judged = [b["messages"][-1]["content"] for b in fake.chat_requests()
                  if "a request the fact does not bear on" in b["messages"][-1]["content"]]
    related = [r for r in result.records if r.controls["mismatched"].related]
    assert len(related) == 1 and plan.controls.partners[related[0].task_id].id == "t1"
    c = related[0].controls["mismatched"]
    assert c.answer is None and c.verdict is None and c.error is None and c.screen.score == 1
    assert len(judged) == 3 and not any(macaron in j for j in judged)
    m = result.metrics.controls
    assert (m["over_application"].successes, m["over_application"].n, m["over_application"].errors) == (3, 3, 0)
    assert (m["over_application_related"].successes, m["over_application_related"].n) == (1, 4)
    flat = result.metrics.flat()
    assert flat["over_application_related"] == 25.0 and "over_application_related_ci_low" in flat
    # always_in_state's file holds the fact: every asked control answer had it in view
    assert (m["spurious_recall"].successes, m["spurious_recall"].n) == (3, 3)
    assert (m["over_application_given_recalled"].successes, m["over_application_given_recalled"].n) == (3, 3)
    again = TaskRecord.from_dict(related[0].to_dict())
    assert again.controls["mismatched"].related and again.controls["mismatched"].screen == c.screen
    from inmind_exp.official.outputs import screen_verdicts_path

    shared = json.loads(screen_verdicts_path(plan).read_text())
    assert (shared["screened"], shared["related"]) == (4, 1) and shared["pairs"][related[0].task_id]["related"] == 1


def test_over_application_given_recalled_reads_the_control_answers_provenance():
    """Hand-built: four asked controls, the fact turn an origin (a), an inherited source (b: the union counts it),
    absent (c, d); a screened related (e); a failed verdict (f, fact in view). Spurious recall 3 of 5 (f's answer
    exists), over-application 2 of 4 (f failed), given recalled 1 of 2 (a 0, b 1; f, verdict failed, an error)."""
    from inmind_exp.records import Answer, ContextItem
    from inmind_exp.protocol.rates import derived_rate

    def item(origin=(), derived=()):
        return ContextItem("memory", "m", tuple(origin), tuple(derived))

    def rec(tid, items, score, screen=0, error=None):
        v = Verdict("over_application", score, error=error) if items is not None else None
        ans = Answer("a", (), items=tuple(items)) if items is not None else None
        c = ControlResult("mismatched", "q", answer=ans, verdict=v, screen=Verdict("relevance", screen),
                          error=f"judge failed: {error}" if error else None)
        return TaskRecord("h", tid, "legal", "s", 0, None, Answer("x", ()), {}, None, {}, 0.0,
                          controls={"mismatched": c})

    rs = [rec("a", [item([FACT_TURN_ID])], 0), rec("b", [item(derived=[FACT_TURN_ID])], 1),
          rec("c", [item(["s1-0"])], 1), rec("d", [], 0), rec("e", None, None, screen=1),
          rec("f", [item([FACT_TURN_ID])], None, error="bad")]
    got = {k: (r.successes, r.n, r.errors) for k, r in compute(rs).controls.items()}
    assert got == {"over_application": (2, 4, 1), "over_application_related": (1, 6, 0),
                   "spurious_recall": (3, 5, 0), "over_application_given_recalled": (1, 2, 1)}
    assert derived_rate(rs[:4], "over_application_given_recalled").pct == 50.0
