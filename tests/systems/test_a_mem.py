"""A-Mem against the fake OpenAI server: two memory calls per turn, evolution (strengthen / update_neighbor) and the
provenance it carries, the find_related_memories_raw read path, shared and native answers, fallbacks on malformed
JSON counted as faults, provenance recall through the protocol, consolidation and snapshot/restore."""

from __future__ import annotations

import re

import numpy as np
import pytest

from inmind_exp.memory.answering import Answerer, SHARED_ANSWER_SYSTEM, SHARED_ANSWER_VERSION, SHARED
from inmind_exp.llm import LLMCallError
from inmind_exp.memory import SYSTEMS
from inmind_exp.protocol.task import run_task
from inmind_exp.records import FACT_TURN_ID, Session, Task, Turn
from systems.a_mem import ANSWER_PROMPT_VERSION, AMem, consolidated_document, note_document, raw_memory_line
from systems.prompts.a_mem import ANALYZE_PROMPT
from tests.conftest import make_trace
from tests.fake_openai import Fault

NATIVE = Answerer("native")  # the run's answer=native: the system's own answer prompt

ANALYZE = "Content for analysis:"
EVOLVE = "memory evolution agent"
KEYWORDS = "generate several keywords"
DATE = "2024/03/05 (Tue) 09:30"


def _prompt(body) -> str:
    return body["messages"][-1]["content"]


def _content(body) -> str:
    return _prompt(body).split(ANALYZE, 1)[1].strip()


def analysis_reply(body):
    """Keywords/context/tags derived from the note text, so every note gets distinct metadata."""
    words = re.findall(r"[a-z]+", _content(body).lower().split(" : ", 1)[1])
    return {"keywords": words[:3], "context": f"About {words[0]}.", "tags": ["chat", words[-1]]}


def neighbour_indices(body) -> list[int]:
    return [int(m) for m in re.findall(r"memory index:(\d+)\t", _prompt(body))]


def session(sid: str, *texts: str, date: str = DATE) -> Session:
    roles = ("user", "assistant")
    return Session(id=sid, date=date, turns=tuple(Turn(roles[i % 2], t) for i, t in enumerate(texts)))


def build(models, encoder, tmp_path, **params) -> AMem:
    return SYSTEMS.get("a_mem")(models, encoder, tmp_path / "work", **params)


def test_ingest_makes_two_memory_calls_per_turn(fake, models, encoder, tmp_path):
    fake.add_rule(ANALYZE, analysis_reply)
    fake.add_rule(EVOLVE, {"should_evolve": False})
    mem = build(models, encoder, tmp_path)
    mem.ingest_session(session("s7", "My tomato plants wilt in July heat.", "Water them deeply at dawn."))

    reqs = fake.chat_requests()
    assert len(reqs) == 4
    kinds = ["analyze" if ANALYZE in _prompt(r) else "evolve" if EVOLVE in _prompt(r) else "?" for r in reqs]
    assert kinds == ["analyze", "evolve", "analyze", "evolve"]
    assert all(r["response_format"] == {"type": "json_object"} for r in reqs)
    assert _prompt(reqs[0]) == ANALYZE_PROMPT + "Speaker user says : My tomato plants wilt in July heat."  # upstream: prompt + content
    assert _prompt(reqs[2]).endswith("Speaker assistant says : Water them deeply at dawn.")
    # the first note's evolution sees no neighbour; the second sees the first, with its analysed metadata
    assert "The number of neighbors is 0." in _prompt(reqs[1]) and "memory index:" not in _prompt(reqs[1])
    p = _prompt(reqs[3])
    assert "The number of neighbors is 1." in p
    assert ("memory index:0\t talk start time:2024/03/05 (Tue) 09:30\t memory content: Speaker user says : My tomato "
            "plants wilt in July heat.\t memory context: About my.\t memory keywords: ['my', 'tomato', 'plants']\t "
            "memory tags: ['chat', 'heat']\n") in p
    indent = "\n" + " " * 32  # upstream's evolution prompt keeps its source indentation
    assert f"content: Speaker assistant says : Water them deeply at dawn.{indent}keywords: ['water', 'them', 'deeply']" in p
    assert [(n.id, n.timestamp, n.context) for n in mem.notes] == [("s7#0", DATE, "About my."), ("s7#1", DATE, "About water.")]
    assert mem.index.ids == ["s7#0", "s7#1"]
    assert [n.sources for n in mem.notes] == [["s7#0"], ["s7#1"]]  # each note derives from its own turn
    assert mem.faults == []
    assert mem.index.texts[1] == ("content:Speaker assistant says : Water them deeply at dawn. context:About water. "
                                  "keywords: water, them, deeply tags: chat, dawn")


def test_strengthen_adds_links_and_retags_the_new_note(fake, models, encoder, tmp_path):
    fake.add_rule(ANALYZE, analysis_reply)

    def evolve(body):
        if "sourdough starter" in _prompt(body).split("nearest neighbors memories:")[0]:
            return {"should_evolve": True, "actions": ["strengthen"], "suggested_connections": [0, "1", 99, "x"],
                    "tags_to_update": ["baking", "linked"], "new_context_neighborhood": [], "new_tags_neighborhood": []}
        return {"should_evolve": False, "actions": [], "suggested_connections": [], "tags_to_update": [],
                "new_context_neighborhood": [], "new_tags_neighborhood": []}

    fake.add_rule(EVOLVE, evolve)
    mem = build(models, encoder, tmp_path)
    mem.ingest_session(session("a", "I bake sourdough bread on weekends.", "Great, keep the dough warm."))
    assert mem.evo_cnt == 0 and all(n.links == [] for n in mem.notes)
    mem.ingest_session(session("b", "How do I revive my sourdough starter?"))
    new = mem.notes[2]
    assert new.links == ["a#0", "a#1"]  # indices 0 and "1" resolved; 99 and "x" dropped ...
    [f] = mem.take_faults()  # ... and counted, on the note being written
    assert (f.kind, f.where, f.turns) == ("malformed_reply", "a_mem.evolution", ("b#0",))
    assert "suggested connection 99 is not a memory index" in f.detail and "'x'" in f.detail
    assert new.tags == ["baking", "linked"]
    # its tags were rewritten by a call that saw both neighbours, but state neither: their turns are derived only
    assert new.sources == ["b#0"] and sorted(new.derived) == ["a#0", "a#1"]
    assert mem.evo_cnt == 1
    assert mem.index.texts[2].endswith("tags: baking, linked")
    assert [n.tags for n in mem.notes[:2]] == [["chat", "weekends"], ["chat", "warm"]]  # neighbours untouched
    assert [n.sources for n in mem.notes[:2]] == [["a#0"], ["a#1"]]


def test_update_neighbor_rewrites_context_tags_and_embedding(fake, models, encoder, tmp_path):
    fake.add_rule(ANALYZE, analysis_reply)
    seen: dict[str, list[int]] = {}

    def evolve(body):
        if "Speaker user says : Linda" not in _prompt(body).split("nearest neighbors memories:")[0]:
            return {"should_evolve": False}
        idx = seen["order"] = neighbour_indices(body)
        return {"should_evolve": True, "actions": ["update_neighbor"], "suggested_connections": [],
                "tags_to_update": [],
                "new_context_neighborhood": [f"Linda from Cincinnati visits next week (memory {i})." for i in idx[:-1]],  # one short
                "new_tags_neighborhood": [["family", f"n{i}"] for i in idx]}

    fake.add_rule(EVOLVE, evolve)
    mem = build(models, encoder, tmp_path, evolution_k=2)
    mem.ingest_session(session("a", "My partner Alex works at a clinic.", "That sounds like a busy job.",
                               "We play board games on Thursdays."))
    before = {n.id: (n.context, mem.index.vector(n.id).copy()) for n in mem.notes}
    mem.ingest_session(session("b", "Linda from Cincinnati visits us next week."))

    order = seen["order"]
    assert len(order) == 2  # evolution_k neighbours, in ranking order
    first, second = (mem.notes[i] for i in order)
    assert (first.context, first.tags) == (f"Linda from Cincinnati visits next week (memory {order[0]}).",
                                           ["family", f"n{order[0]}"])
    assert (second.context, second.tags) == (before[second.id][0], ["family", f"n{order[1]}"])  # context kept
    for n in (first, second):
        assert mem.index.texts[mem.index.ids.index(n.id)] == note_document(n)
        v = mem.index.vector(n.id)
        assert not np.allclose(v, before[n.id][1])
        assert np.allclose(v, encoder.encode([note_document(n)])[0], atol=1e-5)
    untouched = next(n for i, n in enumerate(mem.notes[:3]) if i not in order)
    assert untouched.tags[0] == "chat" and np.allclose(mem.index.vector(untouched.id), before[untouched.id][1])
    # the one rule: the first's new context states the new note (Linda's turn joins its origin); the second's
    # tag-only edit states no shown note, so the call's other turns are only derived
    assert first.sources == [first.id, "b#0"] and set(first.derived) == {second.id}
    assert second.sources == [second.id] and set(second.derived) == {"b#0", first.id}
    assert untouched.sources == [untouched.id] and mem.notes[3].sources == ["b#0"]  # not rewritten: own turn only
    assert mem.faults == []  # a shorter context list is upstream's tolerated case, not a fault
    assert mem.notes[3].tags == ["chat", "week"]  # update_neighbor alone does not retag the new note


def test_unchanged_neighbour_evolution_adds_no_origin_source(fake, models, encoder, tmp_path):
    """Upstream asks the model to echo unchanged neighbours: an evolution that changes nothing adds the call's turns
    to every shown note only as derived, so the origin stays the note's own turn (no transitive spread); a
    neighbour the call did change gains the shown turns as origin."""
    fake.add_rule(ANALYZE, analysis_reply)
    holder: dict[str, AMem] = {}

    def echo(body):
        mem, idx = holder["mem"], neighbour_indices(body)
        if not idx:
            return {"should_evolve": False}
        changed = "Linda" in _prompt(body).split("nearest neighbors memories:")[0]
        return {"should_evolve": True, "actions": ["update_neighbor"], "suggested_connections": [],
                "tags_to_update": [], "new_context_neighborhood": [mem.notes[i].context for i in idx],
                "new_tags_neighborhood": [(["family"] if changed and i == idx[0] else []) + mem.notes[i].tags
                                          for i in idx]}

    fake.add_rule(EVOLVE, echo)
    mem = holder["mem"] = build(models, encoder, tmp_path, evolution_k=3)
    mem.ingest_session(session("a", "My partner Alex works at a clinic.", "That sounds like a busy job.",
                               "We play board games on Thursdays."))
    mem.ingest_session(session("b", "I keep a logbook of train rides.", "Nice hobby."))
    for n in mem.notes:
        assert n.sources == [n.id], (n.id, n.sources)  # every evolution so far echoed: origin is the own turn
    b0 = next(n for n in mem.notes if n.id == "b#0")
    assert any("b#0" in n.derived for n in mem.notes if n.id != "b#0")  # inherited, on the looser union only
    mem.ingest_session(session("c", "Linda from Cincinnati visits us next week."))
    [linda] = [n for n in mem.notes if n.id == "c#0"]
    changed = next(n for n in mem.notes if "family" in n.tags)
    assert changed.sources == [changed.id] and "c#0" in changed.derived  # a tag-only edit: c#0 derived only
    assert all(n.sources == [n.id] for n in mem.notes if n is not changed) and linda.sources == ["c#0"]
    assert b0 is changed or "b#0" in b0.sources and b0.sources == ["b#0"]
    items = mem.recall("logbook of train rides").items
    assert all(set(it.sources).isdisjoint(it.derived) for it in items)


def _linked_memory(fake, models, encoder, tmp_path, **params) -> AMem:
    """Four notes; the last is linked (by strengthen) to the first three."""
    fake.add_rule(ANALYZE, analysis_reply)

    def evolve(body):
        if "Speaker user says : Peanut" in _prompt(body).split("nearest neighbors memories:")[0]:
            return {"should_evolve": True, "actions": ["strengthen"], "suggested_connections": [2, 0, 1],
                    "tags_to_update": ["health"]}
        return {"should_evolve": False}

    fake.add_rule(EVOLVE, evolve)
    mem = build(models, encoder, tmp_path, **params)
    mem.ingest_session(session("a", "I run three mornings a week.", "Nice, rest days matter.",
                               "I am learning the ukulele."))
    mem.ingest_session(session("b", "Peanut butter gives me hives.", date="2024/04/01 (Mon) 18:00"))
    return mem


def test_read_path_returns_top_k_plus_linked_notes(fake, models, encoder, tmp_path):
    mem = _linked_memory(fake, models, encoder, tmp_path, retrieve_k=2)
    fake.add_rule(KEYWORDS, {"keywords": "peanut, hives, allergy"})
    fake.add_rule("Short answer:", {"answer": "Avoid peanut snacks."})
    fake.reset_log()
    ans = mem.answer("What snacks should I pack for my run?", NATIVE)

    reqs = fake.chat_requests()
    assert len(reqs) == 2
    assert "Question: What snacks should I pack for my run?" in _prompt(reqs[0])
    top = [i for i, _ in mem.index.search("peanut, hives, allergy", 2)]
    assert top[0] == "b#0"  # the keywords, not the question, are the retrieval query
    by_id = {n.id: n for n in mem.notes}
    expected = raw_memory_line(by_id["b#0"]) + "".join(raw_memory_line(by_id[i]) for i in ("a#2", "a#0", "a#1"))
    expected += raw_memory_line(by_id[top[1]])
    assert raw_memory_line(by_id["b#0"]) == (
        "talk start time:2024/04/01 (Mon) 18:00memory content: Speaker user says : Peanut butter gives me hives."
        "memory context: About peanut.memory keywords: ['peanut', 'butter', 'gives']memory tags: ['health']\n")
    assert ans.text == "Avoid peanut snacks."
    assert [m.role for m in ans.context] == ["system", "user"]
    assert ans.context[1].content == (f"Based on the context: {expected}, write an answer in the form of a short "
                                      "phrase for the following question. Answer with exact words from the context "
                                      "whenever possible.\n\n" + " " * 28 + "Question: What snacks should I pack for "
                                      "my run? Short answer:\n" + " " * 28)  # upstream's f-string, indentation kept
    assert [m["content"] for m in reqs[1]["messages"]] == [m.content for m in ans.context]
    assert reqs[1]["response_format"] == {"type": "json_object"}
    assert ans.meta["answer_prompt"] == ANSWER_PROMPT_VERSION and ans.meta["keywords"] == "peanut, hives, allergy"
    assert [it.text for it in ans.items] == [raw_memory_line(by_id[i]) for i in ("b#0", "a#2", "a#0", "a#1", top[1])]
    assert [it.sources for it in ans.items][1:4] == [("a#2",), ("a#0",), ("a#1",)]  # linked notes: their own turns
    assert ans.items[0].sources == ("b#0",)  # strengthened with a tag that states none of the three neighbours
    assert set(ans.items[0].derived) == {"a#0", "a#1", "a#2"}
    # upstream's loop bound: at most k+1 linked notes follow a retrieved note
    assert mem.find_related_memories_raw("peanut hives", 1).count("talk start time:") == 3


def test_malformed_json_falls_back_like_upstream(fake, models, encoder, tmp_path):
    fake.add_rule(ANALYZE, "keywords: tomatoes")
    fake.add_rule(EVOLVE, "I think it should evolve: True")
    fake.add_rule(KEYWORDS, "tomato cosmos garden")
    fake.add_rule("Short answer:", "Stake them.")
    mem = build(models, encoder, tmp_path, json_attempts=1)
    mem.ingest_session(session("s", "Tomatoes need stakes.", "Yes, and mulch."))
    assert len(fake.chat_requests()) == 4
    assert [(n.keywords, n.context, n.tags, n.links) for n in mem.notes] == [([], "General", [], [])] * 2
    assert mem.evo_cnt == 0
    # every fallback is a fault on the note being written
    assert [(f.kind, f.where, f.turns) for f in mem.take_faults()] == [
        ("malformed_reply", "a_mem.analyze_content", ("s#0",)), ("malformed_reply", "a_mem.evolution", ("s#0",)),
        ("malformed_reply", "a_mem.analyze_content", ("s#1",)), ("malformed_reply", "a_mem.evolution", ("s#1",))]
    ans = mem.answer("How are my tomatoes?", NATIVE)
    assert ans.meta["keywords"] == "tomato cosmos garden"
    assert ans.text == "Stake them."  # not JSON: the raw reply is the answer
    assert [(f.kind, f.where, f.turns) for f in mem.take_faults()] == [
        ("malformed_reply", "a_mem.generate_query", ()), ("malformed_reply", "a_mem.native_answer", ())]
    fake.fail_next(Fault(status=400))
    with pytest.raises(LLMCallError):
        mem.ingest_session(session("t", "Another turn."))


def test_consolidation_rebuilds_the_retriever(fake, models, encoder, tmp_path):
    fake.add_rule(ANALYZE, analysis_reply)
    fake.add_rule(EVOLVE, {"should_evolve": True, "actions": []})
    mem = build(models, encoder, tmp_path, evo_threshold=2)
    mem.ingest_session(session("s", "Soup on Sunday.", "Try lentils."))
    assert mem.evo_cnt == 2
    assert mem.index.texts == [consolidated_document(n) for n in mem.notes]
    assert mem.index.texts[0] == "Speaker user says : Soup on Sunday. , About soup. soup on sunday chat sunday"
    mem.ingest_session(session("t", "Bread too."))
    assert mem.index.texts[2] == note_document(mem.notes[2])


def test_snapshot_restore_round_trips(fake, models, encoder, tmp_path):
    mem = _linked_memory(fake, models, encoder, tmp_path)
    fake.add_rule(KEYWORDS, {"keywords": "peanut, snacks"})
    fake.add_rule("Short answer:", lambda body: {"answer": str(len(_prompt(body)))})
    mem.snapshot(tmp_path / "snap")
    a1 = mem.answer("What snacks should I pack?")

    other = build(models, encoder, tmp_path / "other")
    other.restore(tmp_path / "snap")
    a2 = other.answer("What snacks should I pack?")
    assert a1.context == a2.context and a1.text == a2.text
    assert [vars(n) for n in other.notes] == [vars(n) for n in mem.notes] and other.evo_cnt == mem.evo_cnt == 1
    assert (other.notes[3].sources, other.notes[3].derived) == (mem.notes[3].sources, mem.notes[3].derived)
    assert len(other.notes[3].derived) == 3  # provenance kept
    assert a2.items == a1.items
    assert np.array_equal(other.index._vectors, mem.index._vectors)
    # a restored instance keeps writing where the original left off
    fake.reset_log()
    other.ingest_session(session("c", "New turn."))
    assert "memory index:" in _prompt(fake.chat_requests()[1]) and other.position["c#0"] == 4
    assert other.index.ids[-1] == "c#0" and len(other.index) == 5


def test_default_fake_replies_contract(fake, models, encoder, tmp_path):
    mem = build(models, encoder, tmp_path)
    mem.ingest_session(session("s", "Hello there.", "Hi!"))
    a1 = mem.answer("Anything?")
    mem.snapshot(tmp_path / "snap")
    other = build(models, encoder, tmp_path / "other")
    other.restore(tmp_path / "snap")
    assert other.answer("Anything?").context == a1.context


def test_shared_answer_gets_the_note_lines_and_no_json_instruction(fake, models, encoder, tmp_path):
    mem = _linked_memory(fake, models, encoder, tmp_path, retrieve_k=1)  # answer_mode defaults to shared
    fake.add_rule(KEYWORDS, {"keywords": "peanut, hives"})
    fake.reset_log()
    ans = mem.answer("What snacks should I pack for my run?")
    lines = mem.find_related_memories_raw("peanut, hives", 1)
    assert [(m.role, m.content) for m in ans.context] == [
        ("system", SHARED_ANSWER_SYSTEM.format(memory=lines.strip())), ("user", "What snacks should I pack for my run?")]
    reqs = fake.chat_requests()
    assert len(reqs) == 2 and "response_format" not in reqs[1]  # the keyword call, then the shared answer
    assert "Short answer" not in ans.context_text() and ans.meta["answer_prompt"] == SHARED_ANSWER_VERSION
    assert ans.text == "fake answer" and len(ans.items) == 3  # the top note and k+1 = 2 of its three links


def test_old_snapshot_without_sources_loads_with_empty_sources(fake, models, encoder, tmp_path):
    import json

    mem = _linked_memory(fake, models, encoder, tmp_path)
    mem.snapshot(tmp_path / "snap")
    state = json.loads((tmp_path / "snap" / "state.json").read_text())
    for n in state["notes"]:
        del n["sources"]
    (tmp_path / "snap" / "state.json").write_text(json.dumps(state))
    old = build(models, encoder, tmp_path / "old")
    old.restore(tmp_path / "snap")
    assert [n.sources for n in old.notes] == [[]] * 4


# -- the protocol: provenance recall and faults on the injected exchange -------------------------------------------

TASK = Task(id="amem-t", domain="other", user_message="I keep a logbook of every train ride I take.",
            assistant_message="Noted, thanks for telling me.", naive_query="What do I keep a logbook of?",
            query="Any tips for my tomato plants this week?", explanation="(test task)")


def protocol_run(fake, models, encoder, tmp_path, keywords: str, analysis=analysis_reply, answerer=SHARED,
                 **params):
    fake.add_rule(ANALYZE, analysis)
    fake.add_rule(EVOLVE, {"should_evolve": False})
    fake.add_rule(KEYWORDS, lambda body: {"keywords": "logbook, train, rides" if TASK.naive_query in _prompt(body)
                                          else keywords})
    make = lambda wd: AMem(models, encoder, wd, **params)  # noqa: E731
    return run_task(TASK, make_trace(n_sessions=3), 1, make, models, tmp_path / "w", config_hash="h",
                    system_name="a_mem", answerer=answerer)


def _fact_items(answer) -> list:
    return [it for it in answer.items if FACT_TURN_ID in it.sources]


def test_fact_note_retrieved_gives_provenance_recall_1(fake, models, encoder, tmp_path):
    rec = protocol_run(fake, models, encoder, tmp_path, keywords="logbook, train rides, tomato")
    assert rec.error is None and rec.faults == () and not rec.fact_write_fault
    assert rec.target_recall_provenance == 1 and rec.naive_recall_provenance == 1
    [item] = _fact_items(rec.indirect)
    assert item.sources == (FACT_TURN_ID,) and f"Speaker user says : {TASK.user_message}" in item.text
    assert item.text.strip() in rec.indirect.context_text()


def test_fact_note_stored_but_not_retrieved_gives_provenance_recall_0(fake, models, encoder, tmp_path):
    rec = protocol_run(fake, models, encoder, tmp_path, keywords="tomato plants, water, stake", retrieve_k=2)
    assert rec.error is None and not rec.fact_write_fault
    assert len(rec.indirect.items) == 2 and all("tomato plants" in it.text for it in rec.indirect.items)
    assert rec.target_recall_provenance == 0
    assert rec.naive_recall_provenance == 1  # stored: the direct query's keywords find it


def test_truncated_analysis_of_the_fact_turn_is_a_fact_write_fault(fake, models, encoder, tmp_path):
    def analysis(body):
        if TASK.user_message in body["messages"][1]["content"]:  # also the client's re-asks (json_attempts 3)
            return '{"keywords": ["logbook", "train'  # cut off
        return analysis_reply(body)

    rec = protocol_run(fake, models, encoder, tmp_path, keywords="logbook, train rides", analysis=analysis)
    assert rec.error is None and rec.fact_write_fault is True
    assert rec.fault_counts() == {"malformed_reply": 1}
    [f] = rec.faults
    assert (f.phase, f.where, f.turns) == ("ingest", "a_mem.analyze_content", (FACT_TURN_ID,))
    assert "after 3 attempt(s)" in f.detail and '"train' in f.detail
    # upstream's fallback keeps the note with an empty analysis, so it can still be retrieved
    assert rec.target_recall_provenance == 1
    assert "memory context: General" in _fact_items(rec.indirect)[0].text


def test_a_cut_evolution_reply_is_counted_on_the_note_written_not_on_the_neighbours_shown(fake, models, encoder,
                                                                                          tmp_path):
    """The evolution call of a later note shows the fact's note as a neighbour (its text is in the prompt): a reply
    cut there is a fault of the later note, not a fact-write fault; a cut reply in the fact note's own call is."""
    from inmind_exp.llm import CallCache, Models
    from tests.conftest import fake_endpoints
    from tests.fake_openai import CutReply

    cut_prompts: list[str] = []

    def evolve(body, cut_fact: bool):
        new = _prompt(body).split("nearest neighbors memories:")[0]
        mine = TASK.user_message in new or TASK.assistant_message in new  # the injected exchange's own notes
        if mine == cut_fact and TASK.user_message in _prompt(body):
            cut_prompts.append(_prompt(body))
            return CutReply('{"should_evolve": false}')
        return {"should_evolve": False}

    for cut_fact in (False, True):
        fake.rules.clear()
        cut_prompts.clear()
        fake.add_rule(ANALYZE, analysis_reply)
        fake.add_rule(EVOLVE, lambda body: evolve(body, cut_fact))
        fake.add_rule(KEYWORDS, {"keywords": "logbook, train rides"})
        fresh = Models.build(fake_endpoints(fake.base_url), CallCache(tmp_path / f"cache{cut_fact}"))  # no cache hits
        make = lambda wd: AMem(fresh, encoder, wd, evolution_k=50)  # noqa: E731  (every note is a neighbour)
        rec = run_task(TASK, make_trace(n_sessions=3), 1, make, fresh, tmp_path / f"w{cut_fact}", config_hash="h",
                       system_name="a_mem")
        assert rec.error is None and cut_prompts and all(TASK.user_message in p for p in cut_prompts)
        cuts = [f for f in rec.faults if f.kind == "truncated_reply" and f.phase == "ingest"]
        assert cuts and rec.fact_write_fault is cut_fact, (cut_fact, cuts)
        if not cut_fact:
            assert all(FACT_TURN_ID not in f.turns and len(f.turns) == 1 for f in cuts)


def test_reasoning_endpoint_gets_no_sampling_parameters(fake, encoder, tmp_path):
    from inmind_exp.llm import CallCache, Models
    from tests.conftest import fake_endpoints

    models = Models.build(fake_endpoints(fake.base_url, reasoning=True), CallCache(tmp_path / "cache"))
    for mode in ("shared", "native"):
        rec = protocol_run(fake, models, encoder, tmp_path / mode, keywords="logbook, train rides",
                           answerer=Answerer(mode))
        assert rec.error is None and rec.target_recall_provenance == 1
    reqs = fake.chat_requests()
    assert reqs and not any(k in r for r in reqs for k in ("temperature", "top_p", "logprobs", "max_tokens"))
    assert all("max_completion_tokens" in r for r in reqs)
