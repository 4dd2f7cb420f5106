"""The contract every registered memory system keeps, against the fake server with its default replies:
ingest → answer → snapshot → restore into a fresh instance → the same answer from the same context."""

from __future__ import annotations

import re
import sys

import pytest

from inmind_exp.llm.embed import MiniLMEncoder
from inmind_exp.memory import SYSTEMS, kept_provenance, states, unusable_state
from inmind_exp.protocol.task import run_task
from inmind_exp.records import FACT_TURN_ID, Answer, Message, Task, TaskRecord
from tests.conftest import make_trace

ALL = SYSTEMS.names()


def encoder_for(cls):
    return None if "minilm" not in cls.embeddings else MiniLMEncoder()


@pytest.mark.parametrize("name", ALL)
def test_snapshot_restore_answers_identically(name, models, tmp_path):
    cls = SYSTEMS.get(name)
    enc = encoder_for(cls)
    a = cls(models, enc, tmp_path / "a")
    for s in make_trace(n_sessions=3, user_turns_per_session=2).sessions:
        a.ingest_session(s)
    a.snapshot(tmp_path / "snap")
    first = a.answer("What should I plant next week?")
    assert isinstance(first, Answer) and isinstance(first.text, str)
    assert first.context and all(isinstance(m, Message) for m in first.context)
    assert "What should I plant next week?" in first.context_text()  # the query reached the answerer
    b = cls(models, enc, tmp_path / "b")
    b.restore(tmp_path / "snap")
    second = b.answer("What should I plant next week?")
    assert second.context == first.context
    assert second.text == first.text


@pytest.mark.parametrize("name", ALL)
def test_registered_under_its_config_name(name, repo_root):
    cls = SYSTEMS.get(name)
    assert cls.name == name
    if SYSTEMS.builtin(cls):  # an installed plug-in's yaml is in its own config package (README: Adding a memory system)
        assert (repo_root / "conf" / "system" / f"{name}.yaml").is_file()
    doc = sys.modules[cls.__module__].__doc__ or ""
    assert len(doc) > 100 and re.search(r"et al\.|paper", doc, re.I), "the module docstring must name its paper"


def test_unknown_system_suggests_close_match():
    with pytest.raises(KeyError, match="did you mean naive_rag"):
        SYSTEMS.get("naive_rga")


# -- provenance conformance: one rule (``inmind_exp.memory.kept_provenance``), through the real HTTP path -----------

FACT = "My doctor put me on warfarin after a blood clot last year."
TASK = Task(id="prov", domain="health", user_message=FACT, assistant_message="Thanks for telling me, noted.",
            naive_query="Which medication am I on?", query="Can you plan a weekend hiking trip with some trail snacks?",
            explanation="-")
_FACT_WORDS = ("warfarin", "clot")


def _run(make, models, tmp_path, name: str) -> TaskRecord:
    rec = run_task(TASK, make_trace(n_sessions=3, user_turns_per_session=2), 1, make, models, tmp_path / "run",
                   config_hash="h", system_name=name)
    assert rec.error is None, rec.error
    return rec


def check_invariants(rec: TaskRecord) -> None:
    """verbatim <= origin <= union on the indirect query, origin and derived disjoint on every item, and an item
    whose origin holds the fact states it (its text names the fact's content words)."""
    exact, origin, union = rec.target_recall_exact, rec.target_recall_provenance, rec.target_recall_provenance_union
    assert exact is None or origin is None or exact <= origin, (exact, origin)
    assert origin is None or union is None or origin <= union, (origin, union)
    for answer in (rec.naive, rec.indirect):
        for it in answer.items if answer is not None else ():
            assert set(it.sources).isdisjoint(it.derived), it
            if FACT_TURN_ID in it.sources and it.kind not in ("short_term", "page", "turn", "chunk", "message",
                                                                 "passage", "note", "session", "episode"):
                assert any(w in it.text.lower() for w in _FACT_WORDS), it  # a rewritten item: it states the fact


def test_a_state_replacing_reply_must_keep_most_of_the_state_and_not_refuse():
    old = "# User\n- Takes warfarin after a blood clot\n- Cares for tomato plants each week"
    assert unusable_state(old + "\n- Enjoys hiking", old) == ""
    assert unusable_state("I'm sorry, but I can't help with rewriting this file.", "") == "a refusal or chat reply"
    assert unusable_state("# User\n- Enjoys hiking", old) == "it drops most of the previous state"


def test_kept_provenance_keeps_what_the_text_states_and_nothing_by_default():
    inputs = [("Takes warfarin after a blood clot", ["f#0"], []), ("Enjoys hiking on weekends", ["h#0"], ["x#1"]),
              ("Grows tomatoes", ["t#0"], [])]
    origin, derived = kept_provenance("Enjoys hiking; medications: warfarin (after a clot) and daily aspirin", inputs)
    assert origin == ["f#0", "h#0"] and derived == ["x#1", "t#0"]
    assert kept_provenance("I'm sorry, but I can't help with rewriting this file.", inputs) == (
        [], ["f#0", "h#0", "x#1", "t#0"])  # no catch-all: a text stating nothing is derived from all, origin of none
    assert kept_provenance("health, hobby", inputs)[0] == []  # a tag-only text states no input
    assert states("Learning the cello with teacher Mira", "I started learning the cello with a teacher named Mira")


EXAMPLE = "profile_memory.hybrid:ProfileRAG"  # the plug-in example, by reference from its folder (not installed)


@pytest.fixture
def forget_example():
    """The example loaded by reference stays out of the registry after the test (a later test lists the plug-ins
    the registry holds, to ship their code)."""
    yield
    SYSTEMS._items.pop(EXAMPLE, None)
    SYSTEMS._refs.pop(EXAMPLE, None)


@pytest.mark.parametrize("name", [*ALL, EXAMPLE])
def test_provenance_invariants_hold_on_every_record(name, models, tmp_path, repo_root, monkeypatch, forget_example):
    monkeypatch.syspath_prepend(str(repo_root / "examples" / "plugin_memory"))
    cls = SYSTEMS.get(name)
    enc = encoder_for(cls)
    check_invariants(_run(lambda wd: cls(models, enc, wd), models, tmp_path, name))


def test_always_in_state_rewrite_that_keeps_the_fact_keeps_it_in_origin(fake, models, tmp_path):
    def update(body):
        prompt = body["messages"][-1]["content"]
        memory, session = prompt.split("<session>")
        lines = ["# User", "- Cares for tomato plants each week, waters them deeply and stakes them"]
        if "warfarin" in session:
            lines.append(f"- {FACT}")  # written from the fact turn
        elif "warfarin" in memory:
            lines.append("- Doctor put the user on warfarin after a blood clot (last year)")  # rewritten, kept
        return "\n".join(lines)

    fake.add_rule("Rewrite the complete memory file", update)
    rec = _run(lambda wd: SYSTEMS.get("always_in_state")(models, None, wd), models, tmp_path, "always_in_state")
    check_invariants(rec)
    [fact_line] = [it for it in rec.indirect.items if "warfarin" in it.text]
    assert FACT_TURN_ID in fact_line.sources and rec.target_recall_provenance == 1
    assert all(FACT_TURN_ID not in it.sources for it in rec.indirect.items if it is not fact_line)


def test_always_in_state_refusal_is_a_fault_and_keeps_the_file(fake, models, tmp_path):
    """A refusal to rewrite the file is a ``malformed_reply`` fault on the session's turns (a fact-write fault
    here), and the previous file stays."""
    fake.add_rule("Rewrite the complete memory file", lambda body: (
        "I'm sorry, but I can't help with rewriting this file." if "warfarin" in body["messages"][-1]["content"]
        else "# User\n- Cares for tomato plants each week"))
    rec = _run(lambda wd: SYSTEMS.get("always_in_state")(models, None, wd), models, tmp_path, "always_in_state")
    check_invariants(rec)
    assert rec.fact_write_fault and rec.target_recall_provenance == rec.target_recall_provenance_union == 0
    assert [it.text for it in rec.indirect.items] == ["# User", "- Cares for tomato plants each week"]


def test_mem0_merge_and_delete_in_one_call_transfers_the_fact(fake, models, tmp_path):
    """Upstream's update prompt permits a merge: UPDATE another memory into one stating the fact and DELETE the fact
    memory in the same call; the merged memory carries the fact as origin."""
    def extract(body):
        text = body["messages"][-1]["content"]
        if "warfarin" in text:
            return {"facts": ["Takes warfarin after a blood clot"]}
        if "Session 0 question 0" in text:
            return {"facts": ["Cares for tomato plants"]}
        return {"facts": ["Stakes the tomato plants"]} if "Session 2 question 1" in text else {"facts": []}

    def update(body):
        prompt = body["messages"][-1]["content"]
        old = re.findall(r"'id': '(\d+)', 'text': '([^']*)'", prompt)
        ids = {text: i for i, text in old}
        fact, tomato = ids.get("Takes warfarin after a blood clot"), ids.get("Cares for tomato plants")
        if fact is not None and tomato is not None:
            return {"memory": [{"id": tomato, "event": "UPDATE", "old_memory": "Cares for tomato plants",
                                "text": "Cares for tomato plants; medications: warfarin (after a clot)"},
                               {"id": fact, "event": "DELETE", "text": "Takes warfarin after a blood clot"}]}
        facts = re.findall(r"\['([^']*)'\]", prompt)
        return {"memory": [{"id": "0", "event": "ADD", "text": facts[-1]}] if facts else []}

    fake.add_rule("You are a Personal Information Organizer", extract)
    fake.add_rule("You are a smart memory manager", update)
    enc = MiniLMEncoder()
    rec = _run(lambda wd: SYSTEMS.get("mem0")(models, enc, wd), models, tmp_path, "mem0")
    check_invariants(rec)
    merged = [it for it in rec.indirect.items if "medications: warfarin" in it.text]
    assert merged and FACT_TURN_ID in merged[0].sources
    assert not any(it.text.endswith("Takes warfarin after a blood clot") for it in rec.indirect.items)  # deleted
    assert rec.target_recall_provenance == 1


def test_a_mem_tag_only_edit_of_a_neighbour_does_not_make_the_fact_origin(fake, models, tmp_path):
    fake.add_rule("memory evolution agent", lambda body: {
        "should_evolve": True, "actions": ["update_neighbor"], "suggested_connections": [], "tags_to_update": [],
        "new_context_neighborhood": [], "new_tags_neighborhood": [["health", "plants"]] * 10})
    enc = MiniLMEncoder()
    rec = _run(lambda wd: SYSTEMS.get("a_mem")(models, enc, wd), models, tmp_path, "a_mem")
    check_invariants(rec)
    items = rec.indirect.items + rec.naive.items
    assert all(FACT_TURN_ID not in it.sources for it in items if FACT not in it.text)  # only the fact's own note
    assert any(FACT_TURN_ID in it.derived for it in items)  # the looser union still sees the shown fact


def test_plugin_example_profile_rewrite_keeps_the_fact_and_a_refusal_is_not_origin(fake, models, tmp_path, repo_root,
                                                                                  monkeypatch, forget_example):
    monkeypatch.syspath_prepend(str(repo_root / "examples" / "plugin_memory"))
    cls = SYSTEMS.get(EXAMPLE)
    fake.add_rule("Rewrite the complete profile", lambda body: (
        "Takes warfarin after a blood clot last year\nI'm sorry, I can't help with that."
        if "warfarin" in body["messages"][-1]["content"] else "Cares for tomato plants each week"))
    rec = _run(lambda wd: cls(models, MiniLMEncoder(), wd), models, tmp_path, EXAMPLE)
    check_invariants(rec)
    profile = {it.text: it for it in rec.indirect.items if it.kind == "profile"}
    assert FACT_TURN_ID in profile["Takes warfarin after a blood clot last year"].sources
    assert not profile["I'm sorry, I can't help with that."].sources  # no catch-all origin
