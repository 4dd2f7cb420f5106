"""The contract every registered memory system keeps: the scenarios of ``inmind_exp.testing.check_system`` (the
same a plug-in runs with ``python -m inmind_exp.testing.check_system module:Class``) for every built-in, the check
itself on the example plug-in and on a class without ``recall``, and per-system provenance cases through the real
HTTP path."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from inmind_exp.llm.embed import MiniLMEncoder
from inmind_exp.memory import SYSTEMS, kept_provenance, states, unusable_state
from inmind_exp.records import FACT_TURN_ID
from inmind_exp.testing import check_system
from inmind_exp.testing.check_system import FACT, SCENARIOS, check, check_invariants, run_protocol
from tests.launch_helpers import env

ALL = SYSTEMS.names()
#: parameters that make each system's deferred write calls happen on check_system's four-session trace (MemoryOS
#: evicts every pair into pages and rewrites the profile from a hot segment; A-Mem shows every note to every
#: evolution call), so its ``writing`` scenario sees them
PARAMS = {"memoryos": {"short_term_capacity": 1, "mid_term_heat_threshold": 1.0}, "a_mem": {"evolution_k": 50}}


@pytest.mark.parametrize("scenario", list(SCENARIOS))
@pytest.mark.parametrize("name", ALL)
def test_every_built_in_passes_check_system(name, scenario):
    [result] = check(SYSTEMS.get(name), PARAMS.get(name, {}), (scenario,))
    assert result.ok, result.detail


@pytest.mark.parametrize("name", ALL)
def test_registered_under_its_config_name(name, repo_root):
    cls = SYSTEMS.get(name)
    assert cls.name == name
    assert (repo_root / "conf" / "system" / f"{name}.yaml").is_file()


def test_unknown_system_suggests_close_match():
    with pytest.raises(KeyError, match="did you mean naive_rag"):
        SYSTEMS.get("naive_rga")


NO_RECALL = '''"""A memory system that forgot ``recall`` (the InMind paper's protocol; no upstream code); check_system
must refuse it before any ingest, naming what is missing."""
from inmind_exp.memory import MemorySystem


class NoRecall(MemorySystem):
    def ingest_session(self, session):
        pass

    def snapshot(self, directory):
        pass

    def restore(self, directory):
        pass
'''


def test_check_system_fails_a_system_without_recall(tmp_path, monkeypatch, capsys):
    (tmp_path / "no_recall.py").write_text(NO_RECALL)
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        assert check_system.main(["no_recall:NoRecall"]) == 1
    finally:
        SYSTEMS._refs.pop("no_recall:NoRecall", None)
        SYSTEMS._items.pop("no_recall:NoRecall", None)
    out, err = capsys.readouterr()
    assert "FAIL contract: abstract method(s) not implemented: recall" in out
    assert "SKIP provenance" in out  # nothing is ingested once the contract fails
    assert "no_recall:NoRecall fails contract (abstract method(s) not implemented: recall)" in err


def test_check_system_passes_the_example_plug_in_from_its_own_folder(repo_root, tmp_path):
    """As a plug-in's author runs it: the package on the path, the class by reference, a fresh process."""
    e = {**env(), "PYTHONPATH": f"{repo_root}:{repo_root / 'examples' / 'plugin_memory'}"}
    p = subprocess.run([sys.executable, "-m", "inmind_exp.testing.check_system", "profile_memory.hybrid:ProfileRAG",
                        "top_k=3"], cwd=tmp_path, env=e, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert [line.split()[0] for line in p.stdout.splitlines()[:-1]] == ["PASS"] * len(SCENARIOS), p.stdout
    assert f"passes all {len(SCENARIOS)} scenarios" in p.stdout


# -- provenance conformance: one rule (``inmind_exp.memory.kept_provenance``), through the real HTTP path -----------

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
    ais = SYSTEMS.get("always_in_state")
    rec = run_protocol(lambda wd: ais(models, None, wd), models, tmp_path / "run", "always_in_state")
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
    ais = SYSTEMS.get("always_in_state")
    rec = run_protocol(lambda wd: ais(models, None, wd), models, tmp_path / "run", "always_in_state")
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
    rec = run_protocol(lambda wd: SYSTEMS.get("mem0")(models, enc, wd), models, tmp_path / "run", "mem0")
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
    rec = run_protocol(lambda wd: SYSTEMS.get("a_mem")(models, enc, wd), models, tmp_path / "run", "a_mem")
    check_invariants(rec)
    items = rec.indirect.items + rec.naive.items
    assert all(FACT_TURN_ID not in it.sources for it in items if FACT not in it.text)  # only the fact's own note
    assert any(FACT_TURN_ID in it.derived for it in items)  # the looser union still sees the shown fact


def test_plugin_example_profile_rewrite_keeps_the_fact_and_a_refusal_is_not_origin(fake, models, tmp_path, repo_root,
                                                                                  monkeypatch, forget_example):
    monkeypatch.syspath_prepend(str(repo_root / "examples" / "plugin_memory"))
    cls = SYSTEMS.get(EXAMPLE)
    fake.add_rule("Rewrite the complete profile", lambda body: (
        "Cares for tomato plants each week\nTakes warfarin after a blood clot last year\nI'm sorry, I can't help "
        "with that." if "warfarin" in body["messages"][-1]["content"] else "Cares for tomato plants each week"))
    rec = run_protocol(lambda wd: cls(models, MiniLMEncoder(), wd), models, tmp_path / "run", EXAMPLE)
    check_invariants(rec)
    profile = {it.text: it for it in rec.indirect.items if it.kind == "profile"}
    assert FACT_TURN_ID in profile["Takes warfarin after a blood clot last year"].sources
    assert not profile["I'm sorry, I can't help with that."].sources  # no catch-all origin
