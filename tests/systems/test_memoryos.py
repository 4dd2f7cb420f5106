"""MemoryOS against the fake server: eviction to mid-term, heat promotion, the answer context, snapshot/restore."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

import systems.memoryos as mos
from inmind_exp.memory.answering import Answerer, SHARED_ANSWER_VERSION
from inmind_exp.llm.embed import MiniLMEncoder
from inmind_exp.memory import SYSTEMS
from inmind_exp.protocol.task import run_task
from inmind_exp.records import FACT_REPLY_TURN_ID, FACT_TURN_ID, Session, Task, Turn
from tests.conftest import make_trace

NATIVE = Answerer("native")  # the run's answer=native: the system's own answer prompt

CONT = mos.CONTINUITY_SYSTEM_PROMPT[:45]
META = mos.META_INFO_SYSTEM_PROMPT[:45]
MULTI = mos.MULTI_SUMMARY_SYSTEM_PROMPT[:45]
PROFILE = mos.PROFILE_SYSTEM_PROMPT[:45]
KNOW = mos.KNOWLEDGE_SYSTEM_PROMPT[:45]

# states the background pages' content (the one rule keeps a page's turns as the profile's origin only then)
PROFILE_TEXT = "Food Interest ( High ): asks each week how to care for tomato plants; waters them deeply, stakes them."
KNOWLEDGE_TEXT = (
    "【User Private Data】\n- Grows tomato plants: home garden, January 2024\n- None\n"
    "【Assistant Knowledge】\n- Assistant advised deep watering at week 0"
)

_ENCODER = None


def encoder() -> MiniLMEncoder:
    global _ENCODER
    if _ENCODER is None:
        _ENCODER = MiniLMEncoder()
    return _ENCODER


def build(models, path, **params) -> mos.MemoryOS:
    return SYSTEMS.get("memoryos")(models, encoder(), path, **params)


def requests_with(fake, marker: str) -> list[str]:
    """The user prompts of the chat requests whose messages contain ``marker``."""
    out = []
    for body in fake.chat_requests():
        if any(marker in (m.get("content") or "") for m in body["messages"]):
            out.append(body["messages"][-1]["content"])
    return out


def meta_reply(body) -> str:
    """'META <first words of the new dialogue's user turn>': tells apart the pages a meta call was made for."""
    text = body["messages"][-1]["content"]
    m = re.search(r"New Dialogue:\n *User: (Session \d+ question \d+)", text)  # upstream indents the dialogue
    return f"META {m.group(1) if m else '?'}"


def topics(content: str, keywords: list[str]) -> str:
    return json.dumps([{"theme": "Tomatoes", "keywords": keywords, "content": content}])


def script_write_path(fake, continuous: str = "false") -> None:
    fake.add_rule(CONT, continuous)
    fake.add_rule(META, meta_reply)
    fake.add_rule(MULTI, "```json\n" + topics("Tomato plant care: watering and staking", ["tomato", "garden"]) + "\n```")
    fake.add_rule(PROFILE, PROFILE_TEXT)
    fake.add_rule(KNOW, KNOWLEDGE_TEXT)


def test_overflow_evicts_oldest_pair_into_a_summarised_mid_term_session(fake, models, tmp_path):
    script_write_path(fake)
    s = build(models, tmp_path / "w", short_term_capacity=2)
    s.ingest_session(make_trace(1, 2).sessions[0])
    assert fake.chat_requests() == [] and s.sessions == []  # not full yet: no calls
    s.ingest_session(make_trace(2, 1).sessions[1])  # third pair overflows: "Session 0 question 0" is evicted

    assert [qa["user_input"][:20] for qa in s.short_term] == ["Session 0 question 1", "Session 1 question 0"]
    assert len(s.sessions) == 1
    seg = s.sessions[0]
    assert seg["summary"] == "Tomato plant care: watering and staking"
    assert seg["summary_keywords"] == ["tomato", "garden"]
    [page] = seg["details"]
    assert page["user_input"].startswith("Session 0 question 0") and page["timestamp"] == "2024/01/01 (Mon) 10:00"
    assert page["meta_info"] == "META Session 0 question 0"
    assert seg["L_interaction"] == 1 and seg["N_visit"] == 0 and seg["H_segment"] == pytest.approx(2.0)

    # the three upstream calls, each made with the evicted page (and only it)
    [cont] = requests_with(fake, CONT)
    assert "Previous Page:\nUser: \nAssistant: \n" in cont and "Current Page:\nUser: Session 0 question 0" in cont
    [meta] = requests_with(fake, META)
    assert "Previous Meta-summary: None" in meta and "User: Session 0 question 0" in meta
    [multi] = requests_with(fake, MULTI)
    assert "User: Session 0 question 0" in multi and "question 1" not in multi
    assert s.vectors["p:page_000001"].shape == (384,)


def test_continuity_chains_pages_and_similar_summaries_merge(fake, models, tmp_path):
    script_write_path(fake, continuous="true")
    s = build(models, tmp_path / "w", short_term_capacity=1, mid_term_heat_threshold=100)
    s.ingest_session(make_trace(1, 3).sessions[0])  # pairs 0,1 are evicted one by one, pair 2 stays short-term

    assert len(s.sessions) == 1  # identical summary: similarity 1 >= 0.6, the second page merges
    p0, p1 = s.sessions[0]["details"]
    assert s.sessions[0]["L_interaction"] == 2
    assert p1["pre_page"] == p0["page_id"] and p0["next_page"] == p1["page_id"]
    # the second meta call continues the first page's meta info and the chain gets the new meta info
    metas = requests_with(fake, META)
    assert "Previous Meta-summary: META Session 0 question 0" in metas[1]
    assert p0["meta_info"] == p1["meta_info"] == "META Session 0 question 1"
    conts = requests_with(fake, CONT)
    assert "Previous Page:\nUser: Session 0 question 0" in conts[1]


def test_dissimilar_summary_opens_a_new_session_and_lfu_evicts_beyond_capacity(fake, models, tmp_path):
    replies = iter([topics("Tomato plant care in the garden", []), topics("Quarterly tax filing deadlines", [])])
    fake.add_rule(MULTI, lambda body: next(replies))
    s = build(models, tmp_path / "w", short_term_capacity=1, mid_term_heat_threshold=100, mid_term_capacity=1)
    s.ingest_session(make_trace(1, 3).sessions[0])
    # two sessions were made; capacity 1 evicted the older (least accessed, oldest on ties)
    assert [seg["summary"] for seg in s.sessions] == ["Quarterly tax filing deadlines"]
    assert s.counters["session"] == 2 and "s:session_000001" not in s.vectors


def test_unparseable_multi_summary_falls_back_to_a_general_segment(fake, models, tmp_path):
    s = build(models, tmp_path / "w", short_term_capacity=1)  # fake default replies everywhere
    s.ingest_session(make_trace(1, 2).sessions[0])
    assert [seg["summary"] for seg in s.sessions] == [mos.FALLBACK_SEGMENT_SUMMARY]
    assert s.sessions[0]["details"][0]["meta_info"] == "fake answer"


def test_heat_promotion_rewrites_profile_and_extracts_knowledge(fake, models, tmp_path):
    script_write_path(fake)
    s = build(models, tmp_path / "w", short_term_capacity=1, mid_term_heat_threshold=3.0,
              long_term_knowledge_capacity=1)
    trace = make_trace(1, 3)
    s.ingest_session(trace.sessions[0])
    # page 1 lands in a new session (heat 1 + 1 = 2 < 3); page 2 merges (heat 2 + 1 = 3): promotion
    assert requests_with(fake, PROFILE) and len(requests_with(fake, PROFILE)) == 1
    [prof] = requests_with(fake, PROFILE)
    assert "**Existing User Profile:**\nNo existing profile data." in prof
    assert "User: Session 0 question 0" in prof and "User: Session 0 question 1" in prof
    assert "(Timestamp: 2024/01/01 (Mon) 10:00)" in prof and "Need for Security" in prof
    [know] = requests_with(fake, KNOW)
    assert "User: Session 0 question 1" in know

    assert s.profile == PROFILE_TEXT
    assert [e["knowledge"] for e in s.user_knowledge] == ["- Grows tomato plants: home garden, January 2024"]
    assert [e["knowledge"] for e in s.assistant_knowledge] == ["- Assistant advised deep watering at week 0"]
    seg = s.sessions[0]
    assert all(p["analyzed"] for p in seg["details"])
    assert seg["N_visit"] == 0 and seg["L_interaction"] == 0 and seg["H_segment"] == pytest.approx(1.0)

    # two more evictions (pair 2, then the repeated pair 0) reheat the session: the second promotion feeds the stored
    # profile back with only the unanalysed pages; each knowledge store keeps its newest entry (capacity 1)
    s.ingest_session(Session("later", "2024/01/01 (Mon) 12:00", trace.sessions[0].turns[:4]))
    profs = requests_with(fake, PROFILE)
    assert len(profs) == 2 and f"**Existing User Profile:**\n{PROFILE_TEXT}" in profs[1]
    latest = profs[1].split("**Latest User-AI Conversation:**")[1]
    assert "Session 0 question 2" in latest and "Session 0 question 1" not in latest
    assert [e["id"] for e in s.user_knowledge] == ["know_000003"] and "k:know_000001" not in s.vectors


def test_short_profile_reply_is_not_stored_and_is_a_fault(fake, models, tmp_path):
    script_write_path(fake)
    fake.rules = [(k, v) for k, v in fake.rules if k != PROFILE] + [(PROFILE, "Too short.")]
    s = build(models, tmp_path / "w", short_term_capacity=1, mid_term_heat_threshold=2.0)
    s.ingest_session(make_trace(1, 2).sessions[0])
    assert requests_with(fake, PROFILE) and s.profile is None and s.user_knowledge and s.profile_sources == []
    [f] = s.take_faults()
    assert (f.kind, f.where, f.turns) == ("malformed_reply", "profile", ("bg_00#0", "bg_00#1"))


def test_answer_context_holds_history_pages_profile_and_knowledge(fake, models, tmp_path):
    script_write_path(fake)
    fake.add_rule("The user just said:", "<think>short</think>Water deeply.")
    s = build(models, tmp_path / "w", short_term_capacity=2, mid_term_heat_threshold=3.0,
              write_answers=True)
    s.ingest_session(make_trace(1, 4).sessions[0])  # pairs 0,1 evicted and promoted; 2,3 in short-term
    assert s.profile == PROFILE_TEXT
    n_before = len(fake.chat_requests())

    ans = s.answer("How often should I water my tomato plants?", NATIVE)
    system, user = ans.context
    assert system.role == "system" and user.role == "user"
    assert "【Assistant Knowledge Base】\n- - Assistant advised deep watering at week 0 (Recorded: 2024/01/01" in system.content
    assert "you embody the role of friend throughout the following dialogues" in system.content
    history = user.content.split("<CONTEXT>")[1].split("<MEMORY>")[0]
    assert "User: Session 0 question 2" in history and "User: Session 0 question 3" in history
    assert "(Time: 2024/01/01 (Mon) 10:00)" in history and "question 0" not in history
    memory = user.content.split("<MEMORY>")[1].split("<USER TRAITS>")[0]
    assert memory.count("【Historical Memory】") == 2
    assert "User: Session 0 question 0" in memory and "Conversation chain overview: META Session 0 question 0" in memory
    traits = user.content.split("<USER TRAITS>")[1]
    assert f"【User Profile】\n{PROFILE_TEXT}\n" in traits
    assert "【Relevant User Knowledge Entries】\n- - Grows tomato plants: home garden, January 2024 (Recorded:" in traits
    assert "The user just said: How often should I water my tomato plants?" in traits
    assert "Please respond to the user's statement using the following format (maximum 30 words, must be in English)" \
        in traits

    # the answerer saw exactly the context; the retrieval counted a visit; the Q/A was written (upstream get_response)
    answer_req = [b for b in fake.chat_requests() if "The user just said:" in b["messages"][-1]["content"]]
    assert [m["content"] for m in answer_req[0]["messages"]] == [system.content, user.content]
    assert ans.text == "Water deeply." and sorted(ans.meta["pages"]) == ["page_000001", "page_000002"]
    assert ans.meta["answer_prompt"] == mos.NATIVE_ANSWER_VERSION
    # the visit (heat 1 -> 2) plus the evicted page (-> 3) promote again; the LFU count keeps the visit
    assert s.sessions[0]["access_count_lfu"] == 1 and len(requests_with(fake, PROFILE)) == 2
    assert s.short_term[-1] == {"user_input": "How often should I water my tomato plants?",
                                "agent_response": "Water deeply.", "timestamp": "2024/01/01 (Mon) 10:00",
                                "sources": []}
    assert len(requests_with(fake, CONT)) == 3 and len(fake.chat_requests()) > n_before + 1  # the write evicted


def test_empty_memory_answer_and_no_write_option(fake, models, tmp_path):
    s = build(models, tmp_path / "w", write_answers=False, answer_word_limit=None)
    ans = s.answer("Any plans?", NATIVE)
    assert "No detailed profile available yet." in ans.context[1].content
    assert "- No relevant assistant knowledge found for this query." in ans.context[0].content
    assert "words" not in ans.context[1].content and s.short_term == []
    assert ans.text == "fake answer"


def test_snapshot_restore_round_trips(fake, models, tmp_path):
    script_write_path(fake)
    params = dict(short_term_capacity=2, mid_term_heat_threshold=3.0)
    a = build(models, tmp_path / "a", **params)
    for sess in make_trace(3, 2).sessions:
        a.ingest_session(sess)
    a.snapshot(tmp_path / "snap")

    first = a.answer("How do I stake tomato plants?")
    b = build(models, tmp_path / "b", **params)
    b.restore(tmp_path / "snap")
    again = b.answer("How do I stake tomato plants?")
    assert again.context == first.context and again.text == first.text

    # a snapshot after the answer (visits, the written Q/A) is exact too
    a.snapshot(tmp_path / "post")
    c = build(models, tmp_path / "c", **params)
    c.restore(tmp_path / "post")
    assert c.short_term == a.short_term and c.sessions == a.sessions and c.counters == a.counters
    assert c.last_evicted == a.last_evicted and c.profile == a.profile
    for k, v in c.vectors.items():
        assert np.array_equal(v, a.vectors[k])
    assert c.answer("Which week was it?").context == a.answer("Which week was it?").context


def test_unknown_param_and_bm25_rejected(models, tmp_path):
    with pytest.raises(TypeError):
        build(models, tmp_path / "w", nonsense=1)
    with pytest.raises(ValueError):
        mos.MemoryOS(models, None, tmp_path / "w")


def test_parsers_tolerate_weak_model_output():
    assert mos.parse_topics("no json here") == []
    assert mos.parse_topics('{"summaries": [{"content": "x", "keywords": "bad"}]}')[0] == \
        {"theme": "", "content": "x", "keywords": []}
    assert mos.parse_topics('Sure! [{"theme": "t", "content": "c", "keywords": ["k"]}, 3]') == \
        [{"theme": "t", "content": "c", "keywords": ["k"]}]
    assert mos.parse_knowledge("【Assistant Knowledge】\n- did x") == ("None", "- did x")
    assert mos.knowledge_lines("- None\n\n- a fact\nnone") == ["- a fact"]
    assert mos.time_decay("2024/01/01 (Mon) 10:00", "2024/01/02 (Tue) 10:00") == pytest.approx(np.exp(-1))
    assert mos.time_decay("yesterday", "2024/01/02 (Tue) 10:00") == 0.1
    assert mos.clean_reply("<think>hmm</think>\n true ") == "true"


# -- provenance, faults and answer modes ------------------------------------------------------------------------

FACT = "I started learning the cello last month with a teacher named Mira."
TASK = Task(id="t1", domain="other", user_message=FACT, assistant_message="Nice, enjoy the lessons with Mira.",
            naive_query="Which instrument did I start learning?",
            query="Can you suggest a weekly practice routine for my cello lessons?", explanation="-")


def echo_topics(body) -> str:
    """A one-topic summary whose content is the batch's first user line, so each batch gets its own summary."""
    text = body["messages"][-1]["content"].split("Conversation content:\n")[1]
    return topics(text.split("\n")[0][len("User: "):], [])


def script_protocol(fake, multi=echo_topics) -> None:
    fake.add_rule(CONT, "false")
    fake.add_rule(META, meta_reply)
    fake.add_rule(MULTI, multi)
    fake.add_rule("The user just said:", "Native reply.")


def run(models, tmp_path, **params):
    trace = make_trace(n_sessions=3, user_turns_per_session=2)
    return run_task(TASK, trace, 0, lambda wd: build(models, wd, **params), models, tmp_path / "run",
                    config_hash="h", system_name="memoryos")


def test_fact_page_retrieved_gives_provenance_recall_1(fake, models, tmp_path):
    script_protocol(fake)
    rec = run(models, tmp_path, short_term_capacity=2, mid_term_heat_threshold=100)
    assert rec.error is None and rec.faults == () and not rec.fact_write_fault
    pages = [it for it in rec.indirect.items if it.kind == "page"]
    fact_pages = [it for it in pages if FACT_TURN_ID in it.sources]
    assert len(fact_pages) == 1 and FACT in fact_pages[0].text
    assert set(fact_pages[0].sources) == {FACT_TURN_ID, FACT_REPLY_TURN_ID}
    assert rec.target_recall_provenance == 1 and rec.naive_recall_provenance == 1
    # the fact page was evicted from short-term memory: every short-term item names two later trace turns
    short = [it for it in rec.indirect.items if it.kind == "short_term"]
    assert len(short) == 2 and all(len(it.sources) == 2 and FACT_TURN_ID not in it.sources for it in short)


def test_fact_page_stored_but_not_retrieved_gives_0(fake, models, tmp_path):
    script_protocol(fake)
    rec = run(models, tmp_path, short_term_capacity=2, mid_term_heat_threshold=100, page_similarity_threshold=0.99)
    assert rec.error is None and rec.target_recall_provenance == 0 and rec.naive_recall_provenance == 0
    assert [it.kind for it in rec.indirect.items] == ["short_term", "short_term"]


def test_malformed_summary_on_the_injected_exchange_is_a_fact_write_fault(fake, models, tmp_path):
    def multi(body):
        if FACT in body["messages"][-1]["content"]:
            return '[{"theme": "Music", "keywords": ["cello"], "content": "Learning the'  # cut off
        return echo_topics(body)

    script_protocol(fake, multi)
    rec = run(models, tmp_path, short_term_capacity=2, mid_term_heat_threshold=100)
    assert rec.error is None and rec.fact_write_fault
    assert rec.fault_counts() == {"malformed_reply": 1}
    [f] = rec.faults
    assert (f.where, f.phase, set(f.turns)) == ("multi_summary", "ingest", {FACT_TURN_ID, FACT_REPLY_TURN_ID})
    # upstream's fallback is kept: the page is filed under the general segment summary, which the cello query does
    # not reach (the run above without the fault retrieves it), so the miss is on the record as a write fault
    assert rec.target_recall_provenance == 0


def test_every_fallback_is_a_fault_with_the_turns_written(fake, models, tmp_path):
    fake.add_rule(CONT, "maybe")  # neither true nor false
    fake.add_rule(META, "")  # empty
    fake.add_rule(MULTI, topics("x", []))
    fake.add_rule(PROFILE, "")
    fake.add_rule(KNOW, "I could not find anything.")
    s = build(models, tmp_path / "w", short_term_capacity=1, mid_term_heat_threshold=2.0)
    s.ingest_session(Session("s", "2024/01/01 (Mon) 10:00", (
        Turn("user", "hello", id="s#0"), Turn("assistant", "hi", id="s#1"), Turn("user", "lone question", id="s#2"),
        Turn("user", "next", id="s#3"), Turn("assistant", "ok", id="s#4"))))
    got = [(f.kind, f.where, f.turns) for f in s.take_faults()]
    page = ("s#0", "s#1")
    assert got == [("malformed_reply", "continuity", page), ("empty_reply", "meta_info", page),
                   ("empty_reply", "profile", page), ("malformed_reply", "knowledge", page),
                   ("fallback", "short_to_mid", ("s#2",))]
    assert s.profile is None and s.user_knowledge == [] and s.sessions[0]["details"][0]["meta_info"] == ""


def test_profile_and_knowledge_carry_the_turns_of_the_calls_that_wrote_them(fake, models, tmp_path):
    script_write_path(fake)
    s = build(models, tmp_path / "w", short_term_capacity=1, mid_term_heat_threshold=3.0)
    trace = make_trace(1, 3)
    s.ingest_session(trace.sessions[0])
    first = ["bg_00#0", "bg_00#1", "bg_00#2", "bg_00#3"]  # pages 0 and 1 were analysed; pair 2 is short-term
    assert s.profile_sources == first
    assert all(e["sources"] == first for e in s.user_knowledge + s.assistant_knowledge)
    page0 = s.sessions[0]["details"][0]
    assert page0["sources"] == ["bg_00#0", "bg_00#1"] and page0["meta_sources"] == ["bg_00#0", "bg_00#1"]
    assert s.sessions[0]["summary_sources"] == ["bg_00#0", "bg_00#1"]

    # the second promotion sees the old profile and only the new pages and returns the same text: its pages are
    # inherited (derived), not origin; the new knowledge carries only those pages
    s.ingest_session(Session("later", "2024/01/01 (Mon) 12:00", tuple(
        Turn(t.role, t.content, id=f"later#{i}") for i, t in enumerate(trace.sessions[0].turns[:4]))))
    assert s.profile_sources == first and s.profile_derived == ["bg_00#4", "bg_00#5", "later#0", "later#1"]
    assert s.user_knowledge[-1]["sources"] == ["bg_00#4", "bg_00#5", "later#0", "later#1"]
    ctx = s.recall("How do I water tomato plants?")
    [profile] = [it for it in ctx.items if it.kind == "profile"]
    assert profile.text == PROFILE_TEXT and list(profile.sources) == s.profile_sources and profile.visible
    assert list(profile.derived) == s.profile_derived
    assert {it.kind for it in ctx.items} == {"short_term", "page", "profile", "user_knowledge", "assistant_knowledge"}
    # top_k_knowledge 20 over two entries per store: the search excluded nothing, so the entries are shown whatever
    # the query: visible, not retrieved, and the meta says so
    knowledge = [it for it in ctx.items if it.kind.endswith("_knowledge")]
    assert knowledge and all(it.visible for it in knowledge)
    assert ctx.meta["knowledge_saturated"] == ["user", "assistant"]
    s.top_k_knowledge = 1
    ctx = s.recall("How do I water tomato plants?")
    knowledge = [it for it in ctx.items if it.kind.endswith("_knowledge")]
    assert len(knowledge) == 2 and not any(it.visible for it in knowledge) and ctx.meta["knowledge_saturated"] == []


def test_continuous_pages_share_the_overview_and_its_sources(fake, models, tmp_path):
    script_write_path(fake, continuous="true")
    s = build(models, tmp_path / "w", short_term_capacity=1, mid_term_heat_threshold=100)
    s.ingest_session(make_trace(1, 3).sessions[0])
    p0, p1 = s.sessions[0]["details"]
    # each overview ("META Session 0 question") states the page dialogue it was written from and the previous one
    assert p1["meta_sources"] == p0["meta_sources"] == ["bg_00#0", "bg_00#1", "bg_00#2", "bg_00#3"]
    items = {it.text.split("\n")[1]: it for it in s.recall("tomato plants").items if it.kind == "page"}
    page0 = items["User: Session 0 question 0: how do I care for my tomato plants in week 0?"]
    # its text shows the overview written from both pages, which states both: the chain's turns are origin too
    assert (page0.sources, page0.derived) == (("bg_00#0", "bg_00#1", "bg_00#2", "bg_00#3"), ())


def test_snapshot_keeps_provenance_and_old_snapshots_load(fake, models, tmp_path):
    script_write_path(fake)
    a = build(models, tmp_path / "a", short_term_capacity=2, mid_term_heat_threshold=3.0)
    for sess in make_trace(3, 2).sessions:
        a.ingest_session(sess)
    a.snapshot(tmp_path / "snap")
    b = build(models, tmp_path / "b", short_term_capacity=2, mid_term_heat_threshold=3.0)
    b.restore(tmp_path / "snap")
    ra, rb = a.recall("How do I stake tomato plants?"), b.recall("How do I stake tomato plants?")
    assert rb.items == ra.items and all(it.sources for it in ra.items) and b.profile_sources == a.profile_sources

    state = json.loads((tmp_path / "snap" / "state.json").read_text())  # a snapshot written before provenance
    del state["profile_sources"]
    for qa in state["short_term"]:
        del qa["sources"]
    for seg in state["sessions"]:
        for p in seg["details"]:
            del p["sources"], p["meta_sources"]
    for e in state["user_knowledge"] + state["assistant_knowledge"]:
        del e["sources"]
    (tmp_path / "snap" / "state.json").write_text(json.dumps(state))
    c = build(models, tmp_path / "c", short_term_capacity=2, mid_term_heat_threshold=3.0)
    c.restore(tmp_path / "snap")
    rc = c.recall("How do I stake tomato plants?")
    assert [it.text for it in rc.items] == [it.text for it in rb.items] and all(not it.sources for it in rc.items)


def test_shared_and_native_answer_prompts(fake, models, tmp_path):
    script_write_path(fake)
    fake.add_rule("The user just said:", "Native reply.")
    fake.add_rule("<memory>", "Shared reply.")
    sessions = make_trace(2, 2).sessions
    answers = {}
    for mode in ("shared", "native"):
        s = build(models, tmp_path / mode, short_term_capacity=2, mid_term_heat_threshold=3.0,
                  write_answers=False)
        for sess in sessions:
            s.ingest_session(sess)
        answers[mode] = s.answer("How do I stake tomato plants?", Answerer(mode))
    shared, native = answers["shared"], answers["native"]
    assert shared.text == "Shared reply." and shared.meta["answer_prompt"] == SHARED_ANSWER_VERSION
    [sys_msg, user_msg] = shared.context
    assert sys_msg.content.startswith("You are a helpful assistant.") and user_msg.content == "How do I stake tomato plants?"
    memory = sys_msg.content.split("<memory>\n")[1]
    assert memory.startswith("<CONTEXT>\nRecent conversation with the user:\nUser: Session 1 question 0")
    assert "【Historical Memory】\nUser: Session 0 question 0" in memory and "【User Profile】" in memory
    assert "words" not in sys_msg.content and "role-play" not in sys_msg.content
    assert native.text == "Native reply." and native.meta["answer_prompt"] == mos.NATIVE_ANSWER_VERSION
    assert native.context[1].content.endswith(
        "The user just said: How do I stake tomato plants?\n"
        "Please respond to the user's statement using the following format (maximum 30 words, must be in English):\n "
        "When answering questions, be sure to check whether the timestamp of the referenced information matches the "
        "timeframe of the question")
    # both modes put the same items in front of the answerer
    assert shared.items == native.items and shared.items


def test_reasoning_endpoint_gets_no_refused_parameter(fake, tmp_path):
    from inmind_exp.llm import CallCache, Models
    from tests.conftest import fake_endpoints

    models = Models.build(fake_endpoints(fake.base_url, reasoning=True), CallCache(tmp_path / "cache"))
    script_write_path(fake)
    s = build(models, tmp_path / "w", short_term_capacity=1, mid_term_heat_threshold=2.0)
    s.ingest_session(make_trace(1, 3).sessions[0])
    s.answer("How do I stake tomato plants?", NATIVE)
    bodies = fake.chat_requests()
    assert len(bodies) >= 8 and s.profile == PROFILE_TEXT and s.take_faults() == []
    for b in bodies:
        assert not {"temperature", "top_p", "max_tokens", "logprobs", "top_logprobs"} & set(b)
        assert b["max_completion_tokens"] == 256


# -- provenance by origin: the profile is visible in every answer context -----------------------------------------

NO_KNOWLEDGE = "【User Private Data】\n- None\n【Assistant Knowledge】\n- None"
CELLO_PROFILE = PROFILE_TEXT + " Music Interest ( High ): learning the cello with Mira."


def profile_run(fake, models, tmp_path, profile_reply):
    """Every page merges into one hot session (one topic), so the profile is rewritten every few evictions, the
    fact's page among them; no page reaches the query (threshold 0.99) and knowledge stays empty: the profile is the
    only way the fact's turn can reach the answer context."""
    script_protocol(fake, lambda body: topics("Tomato plant care: watering and staking", ["tomato", "garden"]))
    fake.add_rule(PROFILE, profile_reply)
    fake.add_rule(KNOW, NO_KNOWLEDGE)
    trace = make_trace(n_sessions=4, user_turns_per_session=2)
    rec = run_task(TASK, trace, 2, lambda wd: build(models, wd, short_term_capacity=1, mid_term_heat_threshold=3.0,
                                                    page_similarity_threshold=0.99), models, tmp_path / "run",
                   config_hash="h", system_name="memoryos")
    calls = requests_with(fake, PROFILE)
    assert rec.error is None and any(FACT in c for c in calls) and FACT not in calls[0]
    assert [it.kind for it in rec.indirect.items if it.kind not in ("short_term", "profile")] == []
    return rec


def test_an_unchanged_profile_does_not_carry_the_fact_turn_as_origin(fake, models, tmp_path):
    rec = profile_run(fake, models, tmp_path, PROFILE_TEXT)  # the call that saw the fact's page changed nothing
    [profile] = [it for it in rec.indirect.items if it.kind == "profile"]
    assert profile.visible and FACT_TURN_ID in profile.derived and FACT_TURN_ID not in profile.sources
    assert rec.target_recall_provenance == 0 and rec.visible_state_recall_provenance == 0
    assert rec.target_recall_provenance_union == 1  # the looser union still sees the inherited turn


def test_a_profile_rewritten_from_the_fact_page_carries_it_as_visible_origin(fake, models, tmp_path):
    def reply(body):
        return CELLO_PROFILE if FACT in body["messages"][-1]["content"].split("Existing User Profile")[-1] \
            else PROFILE_TEXT
    rec = profile_run(fake, models, tmp_path, reply)
    [profile] = [it for it in rec.indirect.items if it.kind == "profile"]
    calls = requests_with(fake, PROFILE)
    assert FACT in calls[-1] and profile.text == CELLO_PROFILE  # the last call saw the fact's page and changed the text
    # the rewrite states the fact's page and still states the earlier profile (its background pages): both origin
    assert {FACT_TURN_ID, FACT_REPLY_TURN_ID, "bg_03#0", "bg_03#1", "bg_00#0"} <= set(profile.sources)
    assert FACT_TURN_ID not in profile.derived
    assert rec.target_recall_provenance == 1 and rec.target_recall_provenance_union == 1
    assert rec.visible_state_recall_provenance == 1 and rec.retrieved_recall_provenance == 0


def test_a_cut_profile_reply_is_counted_on_the_pages_it_analysed(fake, models, tmp_path):
    """Profile calls are deferred (they analyse pages evicted sessions earlier): a reply cut in a call that saw only
    other pages is not a fact-write fault, although it happens while the fact's session is ingested; a cut reply in
    the call that analysed the fact's page is."""
    from inmind_exp.llm import CallCache, Models
    from tests.conftest import fake_endpoints
    from tests.fake_openai import CutReply

    for cut_fact in (False, True):
        fake.rules.clear()
        fresh = Models.build(fake_endpoints(fake.base_url), CallCache(tmp_path / f"cache{cut_fact}"))
        rec = profile_run(fake, fresh, tmp_path / f"r{cut_fact}", lambda body: CutReply(PROFILE_TEXT) if (
            FACT in body["messages"][-1]["content"]) == cut_fact else PROFILE_TEXT)
        cuts = [f for f in rec.faults if f.kind == "truncated_reply" and f.phase == "ingest"]
        assert cuts and rec.fact_write_fault is cut_fact, (cut_fact, cuts)
