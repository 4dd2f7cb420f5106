"""Judge-free measurement: provenance recall decided by the protocol from the items a system reports, the judge's
self-audit against the two bounds, memory faults on the record, and paired rates over the same tasks."""

from __future__ import annotations

import contextlib
import dataclasses

import pytest

from inmind_exp.llm.embed import MiniLMEncoder
from inmind_exp.memory import SYSTEMS, MemorySystem, Recall
from inmind_exp.protocol.metrics import LABELS, compute
from inmind_exp.display.headline import results_table
from inmind_exp.protocol.task import run_task
from inmind_exp.records import (FACT_TURN_ID, Answer, ContextItem, Message, Session, Task, TaskRecord, Usage,
                                Verdict)
from tests.conftest import make_trace

TASK = Task(id="t1", domain="health_wellness", user_message="I have a tree nut allergy.",
            assistant_message="Noted, thanks for telling me.", naive_query="What allergy do I have?",
            query="Any good macaron recipes for this weekend?", explanation="Macarons are made with almond flour.")


@pytest.fixture(scope="module")
def encoder():
    return MiniLMEncoder()


def run(models, tmp_path, encoder, **params):
    cls = SYSTEMS.get("naive_rag")
    make = lambda d: cls(models, encoder, d, **params)  # noqa: E731
    return run_task(TASK, make_trace(n_sessions=4), 1, make, models, tmp_path / "w", config_hash="h",
                    system_name="naive_rag")


def test_provenance_is_one_when_the_fact_turn_reaches_the_context(models, tmp_path, encoder):
    rec = run(models, tmp_path, encoder, top_k=20)  # every chunk retrieved: the fact turn is among them
    assert rec.error is None
    assert rec.naive_recall_provenance == 1 and rec.target_recall_provenance == 1
    assert any(FACT_TURN_ID in it.sources for it in rec.indirect.items)


def test_provenance_is_zero_when_the_fact_is_stored_but_not_retrieved(models, tmp_path, encoder):
    rec = run(models, tmp_path, encoder, top_k=1)
    # the naive query names the allergy, so the fact turn is the nearest chunk; the macaron query shares nothing
    assert rec.naive_recall_provenance == 1
    assert rec.target_recall_provenance == 0
    assert rec.target_recall_exact == 0
    assert all(FACT_TURN_ID not in it.sources for it in rec.indirect.items)


class KeepsNothing(MemorySystem):
    """A test system that stores nothing: it recalls no items and its snapshot is empty."""

    def recall(self, query: str) -> Recall:
        return Recall("", ())

    def snapshot(self, directory):
        directory.mkdir(parents=True, exist_ok=True)

    def restore(self, directory):
        pass


def run_small(models, tmp_path, system_cls):
    """One task of ``system_cls`` (built without an encoder) on a three-session trace, the fact in the second
    session."""
    return run_task(TASK, make_trace(n_sessions=3), 1, lambda d: system_cls(models, None, d), models, tmp_path / "w",
                    config_hash="h", system_name=system_cls.name)


class Faulty(KeepsNothing):
    """Drops every exchange it is given, recording a fault with the exchange's turn ids (as Mem0 does on a
    malformed extraction reply)."""

    name = "faulty-test"

    def ingest_session(self, session: Session) -> None:
        for t in session.turns:
            if t.role == "user" and "allergy" in t.content:
                self.fault("malformed_reply", "extract", "truncated JSON", [t.id])


def test_a_fault_on_the_injected_exchange_is_flagged_and_counted(models, tmp_path):
    rec = run_small(models, tmp_path, Faulty)
    assert rec.error is None
    assert rec.fact_write_fault is True
    assert rec.fault_counts() == {"malformed_reply": 1}
    assert rec.faults[0].phase == "ingest" and rec.faults[0].turns == (FACT_TURN_ID,)
    assert rec.target_recall_provenance == 0  # measured (the system reports items), and nothing reached the context
    back = TaskRecord.from_dict(rec.to_dict())
    assert back.faults == rec.faults and back.fact_write_fault
    m = compute([rec])
    assert m.fact_write_fault_rate == 100.0 and m.memory_fault_rate == 100.0
    assert m.flat()["faults_malformed_reply"] == 1.0


def test_an_answerer_reply_cut_at_its_limit_is_a_fault_but_not_a_memory_fault(fake, models, tmp_path):
    from tests.fake_openai import CutReply

    # the indirect query's answer is cut; the judges (JSON mode) that quote the query get the default verdict
    fake.add_rule("macaron recipes", lambda body: fake.default_json if body.get("response_format")
                  else CutReply("Here is a classic"))
    rec = run_small(models, tmp_path, type("Quiet", (KeepsNothing,), {"ingest_session": lambda self, s: None}))
    assert rec.error is None
    assert rec.fault_counts() == {"truncated_reply": 1} and rec.faults[0].where == "answerer"
    m = compute([rec])
    assert m.flat()["faults_truncated_reply"] == 1.0  # on the record and counted by kind
    assert m.memory_fault_rate == 0.0 and not rec.fact_write_fault  # the answerer's budget, not the memory system's


UPDATER = "Rewrite the complete memory file to include"


def _messages_text(body) -> str:
    return "\n".join(str(m.get("content") or "") for m in body.get("messages", []))


def run_always_in_state(fake, models, tmp_path, fact_file):
    """always_in_state on a small trace whose updater writes ``fact_file`` for the fact's session and a tomato
    line otherwise."""
    fake.add_rule(UPDATER, lambda body: fact_file if "tree nut allergy" in _messages_text(body)
                  else "# About the user\n- Grows tomato plants and stakes them weekly")
    return run_small(models, tmp_path, SYSTEMS.get("always_in_state"))


def test_an_updater_reply_cut_at_the_token_limit_is_a_fault_on_the_fact(fake, models, tmp_path):
    from tests.fake_openai import CutReply

    rec = run_always_in_state(fake, models, tmp_path, CutReply("# About the user\n- Grows tomato"))
    assert rec.error is None
    # the fact's session only: the cut file lost the fact, and most of the previous file, so it is also unusable
    # (``unusable_state``) and the previous file is kept
    assert rec.fault_counts() == {"truncated_reply": 1, "malformed_reply": 1}
    assert rec.fact_write_fault is True
    assert all(FACT_TURN_ID in f.turns for f in rec.faults)
    assert any(f.where == "memory" and f.kind == "truncated_reply" for f in rec.faults)
    # the cut file lost the fact: no line is attributed to it, so provenance does not claim it reached the answerer
    assert rec.target_recall_provenance == 0


class PerTurn(KeepsNothing):
    """Writes each user turn with its own memory call (as Mem0 writes each exchange)."""

    name = "per-turn-test"

    def ingest_session(self, session: Session) -> None:
        for t in session.turns:
            if t.role == "user":
                self.llm.memory.chat([Message("user", f"Extract facts from: {t.content}")])


@pytest.mark.parametrize("cut_on, fact_fault", [("tomato plants in week 1", False), ("tree nut allergy", True)])
def test_a_cut_reply_names_the_turns_of_the_call_that_was_cut(fake, models, tmp_path, cut_on, fact_fault):
    from tests.fake_openai import CutReply

    fake.add_rule(cut_on, CutReply("- the user"))
    rec = run_small(models, tmp_path, PerTurn)
    cuts = [f for f in rec.faults if f.kind == "truncated_reply" and f.phase == "ingest"]
    assert cuts and all(len(f.turns) == 1 for f in cuts)  # the cut call's own turn, not the whole session
    assert rec.fact_write_fault is fact_fault  # a cut on a background exchange of the fact's session is not on the fact


class OneSessionLate(KeepsNothing):
    """Writes each session while ingesting the next one (as xMemory writes a buffered episode when the next message
    closes it); the prompt paraphrases, so no turn's text is in it. ``declares``: it names the turns it writes."""

    name = "one-session-late-test"
    declares = True

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.k, self.buffered = 0, []

    def ingest_session(self, session: Session) -> None:
        if self.buffered:
            with (self.writing(self.buffered) if self.declares else contextlib.nullcontext()):
                self.llm.memory.chat([Message("user", f"Summarise earlier exchange number {self.k - 1}.")])
        self.k, self.buffered = self.k + 1, [t.id for t in session.turns if t.id]


@pytest.mark.parametrize("declares", [True, False])
def test_a_cut_reply_is_counted_on_the_turns_the_system_says_the_call_was_writing(fake, models, tmp_path, declares):
    from tests.fake_openai import CutReply

    fake.add_rule("exchange number 0.", CutReply("The user"))  # session 0, written while the fact's session is read
    cls = type("OneSessionLateCase", (OneSessionLate,), {"declares": declares})
    rec = run_small(models, tmp_path, cls)
    cuts = [f for f in rec.faults if f.kind == "truncated_reply" and f.phase == "ingest"]
    assert len(cuts) == 1
    # declared: session 0's turns, not the fact's; undeclared: no turn text in the prompt, so the whole fact session
    assert rec.fact_write_fault is (not declares)
    assert all(t.startswith(make_trace(n_sessions=3).sessions[0].id) for t in cuts[0].turns) is declares


def test_always_in_state_attributes_each_rewritten_line_to_the_inputs_it_shares_words_with(fake, models, tmp_path):
    rec = run_always_in_state(fake, models, tmp_path, "# About the user\n- Has a severe tree nut allergy\n"
                              "- Grows tomato plants and stakes them weekly")
    assert rec.error is None and rec.faults == ()
    by_text = {it.text: set(it.sources) for it in rec.indirect.items}
    assert FACT_TURN_ID in by_text["- Has a severe tree nut allergy"]
    assert FACT_TURN_ID not in by_text["- Grows tomato plants and stakes them weekly"]  # kept verbatim: old sources
    assert by_text["# About the user"] == set()
    assert rec.target_recall_provenance == 1


def _rec(tid, *, tr, prov, exact, app=1, naive=1, judge_error=None, union=None):
    ans = Answer("a", (Message("user", "q"),), items=(ContextItem("chunk", "x", ("s#0",)),))
    v = {"naive": Verdict("naive", naive), "application": Verdict("application", app),
         "target_recall": Verdict("target_recall", tr), "answer_only": Verdict("answer_only", app)}
    if judge_error:
        v["answer_only"] = Verdict("answer_only", None, error=judge_error)
    return TaskRecord("h", tid, "other", "s", 0, ans, ans, v, exact, {"judge": Usage(calls=1)}, 1.0,
                      error=f"judge failed: {judge_error}" if judge_error else None,
                      naive_recall_provenance=1, target_recall_provenance=prov, naive_recall_provenance_union=1,
                      target_recall_provenance_union=prov if union is None else union,
                      visible_state_recall_provenance=0,
                      retrieved_recall_provenance=prov)


def test_a_row_with_one_errored_verdict_is_computed_over_n_minus_one_tasks_for_every_rate():
    recs = [_rec("a", tr=1, prov=1, exact=1), _rec("b", tr=0, prov=0, exact=0), _rec("c", tr=1, prov=1, exact=0),
            _rec("d", tr=1, prov=1, exact=1, judge_error="no JSON")]
    m = compute(recs)
    assert {k: r.n for k, r in m.rates.items()} == {k: 3 for k in m.rates}
    assert all(r.errors == 1 for r in m.rates.values())
    assert m.excluded == ("d",)
    assert m.rates["target_recall_provenance"].successes == 2
    assert m.rates["target_recall_exact"].successes == 1
    assert "left out of every rate (task failed): d" in results_table([("cfg", m)])


def test_judge_audit_finds_certain_false_positives_and_negatives():
    recs = [_rec("fp", tr=1, prov=0, exact=0), _rec("fn", tr=0, prov=1, exact=1), _rec("ok", tr=1, prov=1, exact=1)]
    m = compute(recs)
    assert m.audit.false_positives == ("fp",) and m.audit.false_negatives == ("fn",) and m.audit.checked == 3
    flat = m.flat()
    assert flat["judge_false_positives"] == 1.0 and flat["judge_false_negatives"] == 1.0
    table = results_table([("cfg", m)])
    assert "Target recall (verbatim, lower bound)" in table and "Target recall, provenance (origin)" in table
    assert "Target recall, provenance (union: upper bound)" in table and "upper bound)" not in LABELS[
        "target_recall_provenance"]
    assert "false positives (union provenance 0): fp" in table and "false negatives (verbatim 1): fn" in table


def test_judge_audit_uses_the_union_bound_and_audits_application():
    """Origin provenance 0 is no proof (a rewrite that only inherited the fact may state it): only union provenance
    0 makes a verdict of 1 certainly wrong, for target recall and for application alike."""
    recs = [_rec("rewritten", tr=1, prov=0, exact=0, union=1),  # origin 0, union 1: not a certain error
            _rec("never", tr=1, prov=0, exact=0, app=1),  # the fact never reached the context: both judges wrong
            _rec("app_only", tr=0, prov=0, exact=0, app=1),
            _rec("fine", tr=1, prov=1, exact=1, app=1), _rec("no", tr=0, prov=0, exact=0, app=0)]
    m = compute(recs)
    assert m.audit.false_positives == ("never",) and m.audit.checked == 5
    assert m.audit.application_false_positives == ("never", "app_only") and m.audit.application_checked == 5
    flat = m.flat()
    assert flat["judge_application_false_positives"] == 2.0 and flat["judge_application_audited"] == 5.0
    assert "application false positives (union provenance 0): never, app_only" in results_table([("cfg", m)])
    old = dataclasses.replace(recs[0], target_recall_provenance_union=None)  # a record older than the union field:
    assert compute([old]).audit.false_positives == ("rewritten",)  # its provenance was the union then


def test_provenance_not_measured_for_a_system_without_items():
    ans = Answer("a", (Message("user", "q"),))  # items None: the system reports no provenance
    rec = TaskRecord("h", "x", "other", "s", 0, ans, ans, {"target_recall": Verdict("target_recall", 1)}, 1, {}, 1.0)
    m = compute([rec])
    assert m.rates["target_recall_provenance"].n == 0 and m.rates["target_recall_provenance"].errors == 0
    assert m.audit.false_positives == ()
