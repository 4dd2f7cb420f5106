"""LangMem through the library itself against the fake server: the profile (always visible) and the collection
(retrieved) written by the library's managers over our memory client, provenance by the one rule, faults."""

from __future__ import annotations

import pytest

from inmind_exp.memory import SYSTEMS
from inmind_exp.protocol.task import run_task
from inmind_exp.records import FACT_TURN_ID, Task
from inmind_exp.memory.traits import Traits
from systems.langmem import LangMem, profile_lines
from inmind_exp.llm import CallCache, Models
from tests.conftest import fake_endpoints, make_trace
from tests.fake_openai import ToolCalls
from tests.systems.test_contract import check_invariants

pytest.importorskip("langmem")

FACT = "My doctor put me on warfarin after a blood clot last year."
TASK = Task(id="lm", domain="health", user_message=FACT, assistant_message="Thanks for telling me, noted.",
            naive_query="Which medication am I on?", query="Can you plan a weekend hiking trip with some trail snacks?",
            explanation="-")


def _tools(body) -> set[str]:
    return {t["function"]["name"] for t in body.get("tools") or ()}


def library_model(body):
    """A model that follows the library's tool calls: extracts the profile, patches it, inserts memories."""
    text = "\n".join(str(m.get("content") or "") for m in body["messages"])
    session = text.rsplit("<session_", 1)[-1]
    fact = "warfarin" in session
    tools = _tools(body)
    if "Memory" in tools:
        content = "User takes warfarin after a blood clot" if fact else "User cares for tomato plants each week"
        return ToolCalls([("Memory", {"content": content})])
    if "UserProfile" in tools:
        return ToolCalls([("UserProfile", {"name": None, "preferences": ["Grows tomato plants and stakes them"],
                                           **({"health": ["Takes warfarin after a blood clot"]} if fact else {})})])
    if "PatchDoc" in tools:
        patches = [{"op": "add", "path": "/health/-", "value": "Takes warfarin after a blood clot"}] if fact else []
        return ToolCalls([("PatchDoc", {"json_doc_id": "profile", "planned_edits": "add the medication",
                                        "patches": patches})])
    if (body.get("response_format") or {}).get("type") == "json_object":
        return {"score": 1, "reason": "fake"}
    return "fake answer"


def run(models, encoder, tmp_path, **params):
    return run_task(TASK, make_trace(n_sessions=3, user_turns_per_session=2), 1,
                    lambda wd: LangMem(models, encoder, wd, **params), models, tmp_path / "run", config_hash="h",
                    system_name="langmem")


def test_profile_is_visible_and_collection_is_retrieved(fake, models, encoder, tmp_path):
    fake.add_rule("", library_model)
    rec = run(models, encoder, tmp_path)
    assert rec.error is None, rec.error
    check_invariants(rec)
    items = rec.indirect.items
    [health] = [it for it in items if it.kind == "profile" and "warfarin" in it.text]
    assert health.visible and health.text == "health: Takes warfarin after a blood clot"
    assert health.sources == (FACT_TURN_ID,)
    tomato = [it for it in items if it.kind == "profile" and "tomato" in it.text]
    assert tomato and FACT_TURN_ID not in tomato[0].sources
    memories = [it for it in items if it.kind == "memory"]
    assert memories and not any(it.visible for it in memories)
    assert any(FACT_TURN_ID in it.sources and "warfarin" in it.text for it in memories)
    assert (rec.visible_state_recall_provenance, rec.retrieved_recall_provenance) == (1, 1)
    assert not rec.faults, rec.faults
    # every call went through our client, the library's forced choice as OpenAI's
    chats = fake.chat_requests()
    assert any(r.get("tool_choice") == "required" or isinstance(r.get("tool_choice"), dict) for r in chats)


def test_prompts_are_deterministic_across_runs(fake, models, encoder, tmp_path):
    """The library's uuid4 (its session tag, new memory ids) comes from a counter seeded by the session id."""
    fake.add_rule("", library_model)
    run(models, encoder, tmp_path / "a")
    first = [r["messages"] for r in fake.chat_requests() if r.get("tools")]
    fake.reset_log()
    fresh = Models.build(fake_endpoints(fake.base_url), CallCache(tmp_path / "cache2"))  # nothing served from cache
    run(fresh, encoder, tmp_path / "b")
    again = [r["messages"] for r in fake.chat_requests() if r.get("tools")]
    assert again == first and any("<session_" in str(m) for m in first)


def test_a_call_the_library_cannot_complete_is_a_fault_and_keeps_the_state(fake, models, encoder, tmp_path):
    def model(body):
        if "warfarin" in "\n".join(str(m.get("content") or "") for m in body["messages"]) and "PatchDoc" in _tools(body):
            return ToolCalls([("PatchDoc", {"json_doc_id": "profile", "planned_edits": "x",
                                            "patches": [{"op": "add", "path": "/health/nowhere/7", "value": 1}]})])
        return library_model(body)

    fake.add_rule("", model)
    rec = run(models, encoder, tmp_path)
    assert rec.error is None, rec.error
    check_invariants(rec)
    profile = [it.text for it in rec.indirect.items if it.kind == "profile"]
    assert profile == ["preferences: Grows tomato plants and stakes them"]  # the patch never applied
    faults = [f for f in rec.faults if f.where == "langmem.profile"]
    assert faults and FACT_TURN_ID in faults[0].turns and faults[0].kind == "malformed_reply", rec.faults
    assert rec.fact_write_fault


def test_profile_lines_and_traits():
    assert profile_lines({"name": "Ana", "health": ["a", ""], "plans": []}) == ["name: Ana", "health: a"]
    traits = Traits.of(SYSTEMS.get("langmem"))
    assert traits.routing and traits.block == "routing"
    assert Traits.of(SYSTEMS.get("naive_rag")).block == "control"
    assert Traits.of(SYSTEMS.get("mem0")).block == "retrieval"
    # table order: controls, retrieval systems, routing systems, the always-in-state probe
    order = [Traits.of(SYSTEMS.get(n)).order for n in ("backbone", "naive_rag", "mem0", "langmem", "always_in_state")]
    assert order == sorted(order) and len(set(order)) == 5
