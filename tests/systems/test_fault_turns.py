"""Faults on the right turns, the same rule for every system (issue 21 item 3): every memory call a system makes
while ingesting declares the trace turns it writes (``MemorySystem.writing``), deferred calls included, so a reply
cut at the token limit is charged to them (check_system's ``writing`` scenario, run for every built-in by
``test_contract.py``); and per system, a cut reply in a call that writes other turns than the injected exchange's
is no fact-write fault, while one in the call that writes the fact's turn is. The per-system cases whose fixtures
live beside each system are named in ``PER_SYSTEM``."""

from __future__ import annotations

import json

import pytest

from inmind_exp.llm.embed import MiniLMEncoder
from inmind_exp.memory import SYSTEMS
from inmind_exp.protocol.task import run_task
from inmind_exp.records import FACT_TURN_ID, Task
from inmind_exp.testing.replies import plausible_reply
from tests.conftest import make_trace
from tests.fake_openai import CutReply

FACT = "I keep a logbook of every train ride I take."
TASK = Task(id="t1", domain="other", user_message=FACT, assistant_message="Noted, happy travels.",
            naive_query="What do I keep a logbook of?", query="Any ideas for my next trip?", explanation="-")

#: the per-system tests of both halves, beside each system's own fixtures
PER_SYSTEM = {
    "a_mem": "test_a_mem.py::test_a_cut_evolution_reply_is_counted_on_the_note_written_not_on_the_neighbours_shown",
    "mem0": "test_mem0.py::test_a_cut_update_reply_is_counted_on_its_exchange_not_on_the_fact_in_the_same_session, "
            "test_mem0.py::test_truncated_reply_on_the_injected_exchange_is_a_fact_write_fault",
    "memoryos": "test_memoryos.py::test_a_cut_profile_reply_is_counted_on_the_pages_it_analysed",
    "hipporag2": "test_hipporag2.py::test_a_cut_openie_reply_is_charged_to_the_passage_it_writes",
    "xmemory": "this file: test_a_cut_xmemory_reply_is_charged_to_the_episode_or_theme_it_writes",
    "always_in_state": "this file: test_a_cut_always_in_state_rewrite_is_charged_to_the_session_it_writes",
    # the turns each edit call writes are declared (MemorySystem.writing); a cut-reply test of its own is still owed
    "memgpt": "test_memgpt.py::test_failed_replace_is_a_fault_and_gets_a_heartbeat",
    "langmem": "test_langmem.py::test_a_call_the_library_cannot_complete_is_a_fault_and_keeps_the_state",
}


def test_each_system_that_writes_through_the_llm_has_its_fault_attribution_test():
    writers = {n for n in SYSTEMS.names()
               if SYSTEMS.get(n).cost.memory_calls_per_user_turn + SYSTEMS.get(n).cost.memory_calls_per_session > 0}
    assert writers == set(PER_SYSTEM), writers


def _run(models, tmp_path, name, **params):
    cls, enc = SYSTEMS.get(name), MiniLMEncoder()
    return run_task(TASK, make_trace(n_sessions=4, user_turns_per_session=2), 2,
                    lambda wd: cls(models, enc, wd, **params), models, tmp_path / "run", config_hash="h",
                    system_name=name)


@pytest.mark.parametrize("cut_fact", [False, True])
def test_a_cut_always_in_state_rewrite_is_charged_to_the_session_it_writes(fake, models, tmp_path, cut_fact):
    """The rewrite of the session after the fact's shows the file, which states the fact: cut there, it is a fault
    of that session; cut in the fact session's own rewrite, it is a fact-write fault."""
    def reply(body):
        text = "\n".join(str(m.get("content") or "") for m in body["messages"])
        if "Rewrite the complete memory file" not in text:
            return {"score": 1, "reason": "fake"} if body.get("response_format") else "fake answer"
        session = text.split("<session>")[-1]  # the session being written, not the file shown above it
        mine = FACT in session if cut_fact else "Session 3 question" in session
        new = "# About the user\n- Keeps a logbook of every train ride I take."
        return CutReply(new) if mine else new

    fake.add_rule("", reply)
    rec = _run(models, tmp_path, "always_in_state")
    cuts = [f for f in rec.faults if f.kind == "truncated_reply" and f.phase == "ingest"]
    assert rec.error is None and len(cuts) == 1, rec.faults
    assert rec.fact_write_fault is cut_fact
    assert (FACT_TURN_ID in cuts[0].turns) is cut_fact and all(t.startswith("bg_03") for t in cuts[0].turns) \
        is (not cut_fact)


@pytest.mark.parametrize("cut_fact", [False, True])
def test_a_cut_xmemory_reply_is_charged_to_the_episode_or_theme_it_writes(fake, models, tmp_path, cut_fact):
    """Every new message closes the buffered episode, so the last message of the session before the fact's is
    written as an episode while the fact's session is read: a cut reply there is that message's fault, no fact-write
    fault (undeclared, it was charged to the whole fact session); cut on the fact turn's episode, it is one."""
    def reply(body):
        last = str(body["messages"][-1].get("content") or "")
        obj = plausible_reply(body)
        if not isinstance(obj, dict):
            return obj
        obj = {**obj, "should_end": True, "timestamp": "2024-01-01T10:00:00"}
        if "convert the following conversation into an episodic memory" in last and (FACT in last if cut_fact else "Session 1 answer 1" in last):
            return CutReply(json.dumps(obj))
        return obj

    fake.add_rule("", reply)
    rec = _run(models, tmp_path, "xmemory")
    cuts = [f for f in rec.faults if f.kind == "truncated_reply" and f.phase == "ingest"]
    assert rec.error is None and len(cuts) == 1, rec.faults
    assert [f for f in rec.faults if not f.diagnostic] == cuts, rec.faults
    assert rec.fact_write_fault is cut_fact, cuts
    assert cuts[0].turns == ((FACT_TURN_ID,) if cut_fact else ("bg_01#3",))
