"""MemGPT against the fake server: core-memory edits are tool calls whose lines become always-visible items, the
archival store is searched at query time, provenance by the one rule, faults as for every system."""

from __future__ import annotations

import json


from inmind_exp.memory import SYSTEMS, Answerer
from inmind_exp.memory.answering import SHARED
from inmind_exp.protocol.task import run_task
from inmind_exp.records import FACT_TURN_ID, Task
from inmind_exp.memory.traits import Traits
from systems.memgpt import TOOL_SCHEMAS, MemGPT
from tests.conftest import make_trace
from tests.fake_openai import ToolCalls
from tests.systems.test_contract import check_invariants

FACT = "My doctor put me on warfarin after a blood clot last year."
TASK = Task(id="mg", domain="health", user_message=FACT, assistant_message="Thanks for telling me, noted.",
            naive_query="Which medication am I on?", query="Can you plan a weekend hiking trip with some trail snacks?",
            explanation="-")


def _tools(body) -> set[str]:
    return {t["function"]["name"] for t in body.get("tools") or ()}


def _last(body) -> dict:
    return body["messages"][-1]


def agent(write=None, read=None):
    """A scripted MemGPT agent: ``write(message)`` / ``read(message)`` give the tool calls for a new user message;
    after a tool result or a heartbeat it stops with a short monologue (or sends the answer on the read path)."""
    def reply(body):
        last = _last(body)
        is_write = "core_memory_append" in _tools(body)
        if last["role"] == "user" and json.loads(last["content"]).get("type") == "user_message":
            message = json.loads(last["content"])["message"]
            calls = (write if is_write else read or (lambda m: None))(message)
            return ToolCalls(calls) if calls else "Nothing to remember."
        if is_write:
            return "Memory updated."
        return ToolCalls([("send_message", {"message": "You take warfarin, so pack snacks without vitamin K."})])
    return reply


def write_fact(message: str):
    if "warfarin" in message:
        return [("core_memory_append", {"label": "human", "content": "Takes warfarin after a blood clot",
                                        "request_heartbeat": True}),
                ("archival_memory_insert", {"content": "Doctor prescribed warfarin after a blood clot last year",
                                            "tags": ["health"], "request_heartbeat": False})]
    if "Session 0 question 0" in message:
        return [("core_memory_append", {"label": "human", "content": "Cares for tomato plants",
                                        "request_heartbeat": False})]
    return None


def read_archival(message: str):
    return [("archival_memory_search", {"query": "medication health", "request_heartbeat": True})]


def run(models, encoder, tmp_path, answerer=SHARED, **params):
    return run_task(TASK, make_trace(n_sessions=3, user_turns_per_session=2), 1,
                    lambda wd: MemGPT(models, encoder, wd, **params), models, tmp_path / "run", config_hash="h",
                    system_name="memgpt", answerer=answerer)


def test_core_edit_is_visible_and_archival_is_retrieved(fake, models, encoder, tmp_path):
    fake.add_rule("You are Letta", agent(write_fact, read_archival))
    rec = run(models, encoder, tmp_path, context_messages=2)  # the fact's message is out of the queue at query time
    assert rec.error is None, rec.error
    assert not any(FACT_TURN_ID in it.sources for it in rec.indirect.items if it.kind == "message")
    check_invariants(rec)
    items = rec.indirect.items
    [core] = [it for it in items if it.kind == "core" and "warfarin" in it.text]
    assert core.visible and core.sources == (FACT_TURN_ID,)
    tomato = [it for it in items if it.kind == "core" and "tomato" in it.text]
    assert tomato and FACT_TURN_ID not in tomato[0].sources
    passages = [it for it in items if it.kind == "passage"]
    assert passages and not any(it.visible for it in passages) and FACT_TURN_ID in passages[0].sources
    assert (rec.visible_state_recall_provenance, rec.retrieved_recall_provenance) == (1, 1)
    assert rec.indirect.meta["stop_reason"] == "done" and rec.indirect.meta["tool_calls"] == 2
    # the edit reached the system message of the next call (the core block is recompiled after each step)
    later = [r for r in fake.chat_requests() if "core_memory_append" in _tools(r)
             and "Takes warfarin after a blood clot" in r["messages"][0]["content"]]
    assert later and not rec.faults


def test_failed_replace_is_a_fault_and_gets_a_heartbeat(fake, models, encoder, tmp_path):
    def write(message):
        if "warfarin" in message:
            return [("core_memory_replace", {"label": "human", "old_content": "no such text",
                                             "new_content": "Takes warfarin", "request_heartbeat": False})]
        return None
    fake.add_rule("You are Letta", agent(write))
    rec = run(models, encoder, tmp_path, context_messages=2)  # the fact's message is out of the queue at query time
    assert rec.error is None
    faults = [f for f in rec.faults if f.kind == "bad_tool_call"]
    assert faults and faults[0].turns == (FACT_TURN_ID,) and "not found in memory block" in faults[0].detail
    assert rec.fact_write_fault
    beats = [r for r in fake.chat_requests() if "Function call failed, returning control" in r["messages"][-1]["content"]]
    assert len(beats) == 1  # upstream runs the agent again after a failed call
    assert rec.visible_state_recall_provenance == 0


def test_block_limit_and_step_limit_and_text_calls_are_faults(fake, models, encoder, tmp_path):
    def write(message):
        if "warfarin" in message:
            return [("core_memory_append", {"label": "human", "content": "x" * 50, "request_heartbeat": False})]
        return None

    def handling(body) -> str:
        """The user message the agent is handling (the last packaged one)."""
        for m in reversed(body["messages"]):
            if m["role"] == "user" and '"type": "user_message"' in (m["content"] or ""):
                return json.loads(m["content"])["message"]
        return ""

    def reply(body):
        if "core_memory_append" not in _tools(body):
            return agent(write)(body)
        if _last(body)["role"] == "user" and "Session 2 question 0" in handling(body):
            return '<tool_call>{"name": "core_memory_append", "arguments": {"label": "human"}}</tool_call>'
        if "Session 1 question 1" in handling(body):  # chains heartbeats forever
            return ToolCalls([("conversation_search", {"query": "tomato", "request_heartbeat": True})])
        return agent(write)(body)

    fake.add_rule("You are Letta", reply)
    rec = run(models, encoder, tmp_path, core_char_limit=20, max_steps=3)
    kinds = {f.kind for f in rec.faults}
    assert {"bad_tool_call", "step_limit", "tool_call_as_text"} <= kinds, rec.faults
    [over] = [f for f in rec.faults if f.kind == "bad_tool_call"]
    assert "Exceeds 20 character limit" in over.detail and over.turns == (FACT_TURN_ID,)


def test_native_answer_is_the_agents_send_message(fake, models, encoder, tmp_path):
    fake.add_rule("You are Letta", agent(write_fact, read_archival))
    rec = run(models, encoder, tmp_path, answerer=Answerer("native"))
    assert rec.indirect.text.startswith("You take warfarin")
    assert rec.indirect.meta["answer_prompt"].startswith("memgpt-native")
    assert any(m.role == "tool" for m in rec.indirect.context)


def test_tool_schemas_and_traits():
    assert set(TOOL_SCHEMAS) >= {"core_memory_append", "core_memory_replace", "archival_memory_insert",
                                 "archival_memory_search", "conversation_search", "send_message"}
    assert "request_heartbeat" in TOOL_SCHEMAS["core_memory_append"]["function"]["parameters"]["required"]
    traits = Traits.of(SYSTEMS.get("memgpt"))
    assert traits.routing and traits.retrieval and not traits.control
