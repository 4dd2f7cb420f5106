"""Mem0: the extract → retrieve-similar → ADD/UPDATE/DELETE/NONE write path, the top-k read path with timestamps,
shared and native answers, provenance and faults through the protocol, and exact snapshot/restore, against the fake
OpenAI-compatible server."""

from __future__ import annotations

import ast
import json
import re

import numpy as np
import pytest
import yaml

from inmind_exp.memory.answering import Answerer, EMPTY_MEMORY, SHARED_ANSWER_SYSTEM, SHARED_ANSWER_VERSION
from inmind_exp.llm import LLMCallError
from inmind_exp.memory import SYSTEMS
from inmind_exp.protocol.task import run_task
from inmind_exp.records import FACT_REPLY_TURN_ID, FACT_TURN_ID, Session, Task, Turn
from systems.mem0 import ANSWER_PROMPT_VERSION, Mem0
from systems.prompts.mem0 import FACT_RETRIEVAL_PROMPT, USER_MEMORY_EXTRACTION_PROMPT
from tests.conftest import make_trace
from tests.fake_openai import Fault

NATIVE = Answerer("native")  # the run's answer=native: the system's own answer prompt

EXTRACT = "You are a Personal Information Organizer"
UPDATE = "You are a smart memory manager"
D1, D2, D3 = "2024/01/01 (Mon) 10:00", "2024/02/03 (Sat) 09:30", "2024/03/05 (Tue) 18:45"
S1 = ["s1#0", "s1#1"]


def session(sid: str, date: str, *pairs: tuple[str, str]) -> Session:
    turns = []
    for u, a in pairs:
        turns += [Turn("user", u), Turn("assistant", a)]
    return Session(id=sid, date=date, turns=tuple(turns))


def old_memory(prompt: str) -> list[dict[str, str]]:
    """The old-memory list the update prompt shows (empty when it says the memory is empty)."""
    if "Current memory is empty." in prompt:
        return []
    m = re.search(r"collected till now\. You have to update it in the following format only:\n\n {4}```\n {4}(\[.*?\])\n {4}```",
                  prompt, re.S)
    assert m, prompt
    return ast.literal_eval(m.group(1))  # upstream's f-string shows str() of the list


def new_facts(prompt: str) -> list[str]:
    """The new facts the update prompt shows (``str()`` of the list, in the block after the task sentence)."""
    m = re.search(r"deleted in the memory\.\n\n {4}```\n {4}(\[.*?\])\n {4}```", prompt, re.S)
    assert m, prompt
    return ast.literal_eval(m.group(1))


def update_prompt(body: dict) -> str:
    return body["messages"][-1]["content"]


def by_text(mem_list: list[dict[str, str]], text: str) -> str:
    return next(m["id"] for m in mem_list if m["text"] == text)


def requests_with(fake, marker: str) -> list[dict]:
    return [b for b in fake.chat_requests() if marker in "\n".join(str(m["content"]) for m in b["messages"])]


def seed(fake, models, tmp_path, encoder, **params) -> Mem0:
    """A Mem0 holding 'Drinks coffee every morning' and 'Lives in Lisbon with two cats' (ADDed on D1)."""
    facts = ["Drinks coffee every morning", "Lives in Lisbon with two cats"]
    fake.add_rule("I drink coffee every morning", {"facts": facts})
    fake.add_rule(UPDATE, lambda body: {"memory": [  # ADD every new fact (the facts block is the first ``` list)
        {"id": "0", "text": f, "event": "ADD"}
        for f in new_facts(update_prompt(body))
    ]})
    mem = Mem0(models, encoder, tmp_path / "work", **params)
    exchange = ("I drink coffee every morning. I live in Lisbon with my two cats.", "Noted!")
    mem.ingest_session(session("s1", D1, exchange))
    fake.rules.clear()
    return mem


def test_extraction_and_update_cycle_adds_memories(fake, models, tmp_path, encoder):
    mem = seed(fake, models, tmp_path, encoder)
    reqs = fake.chat_requests()
    assert len(reqs) == 2  # one extraction call, one update call for the one exchange
    ext, upd = reqs
    assert ext["response_format"] == {"type": "json_object"} and upd["response_format"] == {"type": "json_object"}
    assert [m["role"] for m in ext["messages"]] == ["system", "user"]
    assert EXTRACT in ext["messages"][0]["content"]
    assert "Today's date is 2024-01-01." in ext["messages"][0]["content"]  # trace date, not the wall clock
    assert ext["messages"][1]["content"] == (
        "Input:\nuser: I drink coffee every morning. I live in Lisbon with my two cats.\nassistant: Noted!\n")
    assert [m["role"] for m in upd["messages"]] == ["user"]
    assert UPDATE in upd["messages"][0]["content"] and "Current memory is empty." in upd["messages"][0]["content"]
    # upstream's f-string: str() of the facts list, inside its indented block
    assert "    ```\n    ['Drinks coffee every morning', 'Lives in Lisbon with two cats']\n    ```" in upd["messages"][0]["content"]
    # the cited commit's default extraction prompt: facts from the user's messages only
    assert ext["messages"][0]["content"] == USER_MEMORY_EXTRACTION_PROMPT.format(date="2024-01-01", context_rule="")
    assert mem.memories == {
        "m000001": {"text": "Drinks coffee every morning", "timestamp": D1, "created": D1, "sources": S1},
        "m000002": {"text": "Lives in Lisbon with two cats", "timestamp": D1, "created": D1, "sources": S1},
    }  # each memory carries the turn ids of the exchange it was extracted from
    assert mem.index.ids == ["m000001", "m000002"]
    assert [h["event"] for h in mem.history] == ["ADD", "ADD"]
    assert mem.faults == []


def test_extraction_prompt_user_is_the_default_and_legacy_is_fact_retrieval(fake, models, tmp_path, encoder):
    """``extraction_prompt``: ``user`` (the default, and the conf value) sends upstream's USER_MEMORY_EXTRACTION_PROMPT
    ("based on the user messages only"), ``legacy`` FACT_RETRIEVAL_PROMPT ("user and assistant messages"); with the
    recency window off no rule of ours is added, so the text is upstream's byte for byte but the date."""
    conf = yaml.safe_load(open("conf/system/mem0.yaml"))["params"]
    assert conf["extraction_prompt"] == "user"
    for choice, prompt, rule in (("user", USER_MEMORY_EXTRACTION_PROMPT, "the user messages only"),
                                 ("legacy", FACT_RETRIEVAL_PROMPT, "the user and assistant messages only")):
        fake.rules.clear()
        fake.add_rule(EXTRACT, {"facts": []})
        mem = Mem0(models, encoder, tmp_path / choice, recent_messages=0, extraction_prompt=choice)
        mem.ingest_session(session("s1", D1, (f"Hello from {choice}.", "Hi!")))
        system = next(b for b in reversed(fake.chat_requests()) if f"Hello from {choice}." in str(b["messages"]))
        system = system["messages"][0]["content"]
        assert system == prompt.format(date="2024-01-01", context_rule="")
        assert f"Create the facts based on {rule}." in system and "{" not in system.replace('{"facts"', "")
    with pytest.raises(ValueError, match="extraction_prompt must be one of user, legacy"):
        Mem0(models, encoder, tmp_path / "bad", extraction_prompt="agent")
    assert Mem0.check_params({"extraction_prompt": "agent"}) == [
        "system.params.extraction_prompt=agent (mem0): must be one of user, legacy"]  # caught at planning
    assert Mem0.check_params({"extraction_prompt": "legacy"}) == []


def test_update_replaces_text_vector_and_timestamp(fake, models, tmp_path, encoder):
    mem = seed(fake, models, tmp_path, encoder)
    fake.reset_log()
    fake.add_rule("I switched to green tea", {"facts": ["Switched from coffee to green tea"]})
    seen: list[list[dict[str, str]]] = []

    def decide(body):
        old = old_memory(update_prompt(body))
        seen.append(old)
        return {"memory": [{"id": by_text(old, "Drinks coffee every morning"), "event": "UPDATE",
                            "text": "Drinks green tea every morning instead of coffee",
                            "old_memory": "Drinks coffee every morning"}]}

    fake.add_rule(UPDATE, decide)
    mem.ingest_session(session("s2", D2, ("I switched to green tea last month.", "Good choice.")))

    # the update call saw both existing memories (top 5 per fact) under small integer ids, never the real ids
    assert sorted(m["id"] for m in seen[0]) == ["0", "1"]
    assert "m00000" not in update_prompt(requests_with(fake, UPDATE)[0])
    merged = ["s1#0", "s1#1", "s2#0", "s2#1"]  # the union of the old memory's and the new exchange's turns
    assert mem.memories["m000001"] == {"text": "Drinks green tea every morning instead of coffee", "timestamp": D2,
                                       "created": D1, "sources": merged}
    assert mem.memories["m000002"]["sources"] == S1  # shown to the update call but not changed: sources kept
    assert mem.memories["m000002"]["text"] == "Lives in Lisbon with two cats" and len(mem.memories) == 2
    # the vector was replaced too: a search finds the memory by its new text
    assert mem.index.search("Drinks green tea every morning instead of coffee", 1)[0][0] == "m000001"
    np.testing.assert_allclose(mem.index.vector("m000001"),
                               encoder.encode(["Drinks green tea every morning instead of coffee"])[0], atol=1e-6)
    assert mem.history[-1] == {"batch": 2, "date": D2, "event": "UPDATE", "id": "m000001",
                               "text": "Drinks green tea every morning instead of coffee",
                               "previous": "Drinks coffee every morning", "sources": merged}


def test_delete_removes_none_keeps_and_bad_entries_are_skipped(fake, models, tmp_path, encoder):
    mem = seed(fake, models, tmp_path, encoder)
    fake.add_rule("I gave up coffee", {"facts": ["Has given up coffee"]})

    def decide(body):
        old = old_memory(update_prompt(body))
        coffee, lisbon = by_text(old, "Drinks coffee every morning"), by_text(old, "Lives in Lisbon with two cats")
        return {"memory": [
            {"id": coffee, "text": "Drinks coffee every morning", "event": "DELETE"},
            {"id": lisbon, "text": "Lives in Lisbon with two cats", "event": "NONE"},
            {"id": "17", "text": "Hallucinated id", "event": "UPDATE"},        # unknown id: skipped
            {"id": coffee, "text": "Already deleted", "event": "UPDATE"},      # deleted above: skipped
            {"id": lisbon, "text": "", "event": "DELETE"},                     # empty text: skipped (upstream)
        ]}

    fake.add_rule(UPDATE, decide)
    events = mem.add([("user", "I gave up coffee this week."), ("assistant", "Well done.")], D2, ("s2#0", "s2#1"))
    assert [e["event"] for e in events] == ["DELETE"]
    assert mem.memories == {"m000002": {"text": "Lives in Lisbon with two cats", "timestamp": D1, "created": D1,
                                        "sources": S1}}
    # the three skipped entries are one fault on the exchange being written, never silent
    [f] = mem.take_faults()
    assert (f.kind, f.where, f.turns) == ("malformed_reply", "mem0.update.entry", ("s2#0", "s2#1"))
    assert "UPDATE of unknown id '17'" in f.detail and "DELETE with empty text" in f.detail
    assert f.detail.count("UPDATE of unknown id") == 2  # the hallucinated id and the one deleted just before
    assert mem.index.ids == ["m000002"]
    assert [i for i, _ in mem.index.search("coffee every morning", 5)] == ["m000002"]


def test_no_facts_or_malformed_json_skip_the_update_call(fake, models, tmp_path, encoder):
    mem = Mem0(models, encoder, tmp_path / "work")
    fake.add_rule("Tell me a joke", "this is not JSON at all")  # first: later prompts repeat earlier messages
    fake.add_rule("Hello there, how are you", {"facts": []})
    mem.ingest_session(session("s1", D1, ("Hello there, how are you?", "Fine."), ("Tell me a joke.", "No.")))
    assert len(fake.chat_requests()) == 2 and not requests_with(fake, UPDATE)
    assert mem.memories == {} and mem.n_batches == 2
    # a valid empty extraction is Mem0's decision (a diagnostic); the malformed reply is a fault on its exchange
    d, f = mem.take_faults()
    assert (d.kind, d.where, d.turns, d.diagnostic) == ("empty_extraction", "mem0.extract_facts", ("s1#0", "s1#1"), True)
    assert (f.kind, f.where, f.turns, f.diagnostic) == ("malformed_reply", "mem0.extract_facts", ("s1#2", "s1#3"), False)
    assert "this is not JSON at all" in f.detail
    # an off-schema update reply is a no-op, not a crash
    fake.rules.clear()
    fake.add_rule("I own a red bicycle", {"facts": ["Owns a red bicycle"]})
    fake.add_rule(UPDATE, {"memory": "ADD everything"})
    assert mem.add([("user", "I own a red bicycle."), ("assistant", "Nice.")], D2, ("s2#0", "s2#1")) == []
    assert mem.memories == {}
    [f] = mem.take_faults()
    assert (f.kind, f.where, f.turns) == ("malformed_reply", "mem0.decide", ("s2#0", "s2#1"))
    # an empty reply is its own kind
    fake.rules.clear()
    fake.add_rule("I own a red bicycle", "")
    assert mem.add([("user", "I own a red bicycle."), ("assistant", "Nice.")], D3, ("s3#0", "s3#1")) == []
    assert [(f.kind, f.where) for f in mem.take_faults()] == [("empty_reply", "mem0.extract_facts")]


def test_endpoint_failure_propagates(fake, models, tmp_path, encoder):
    mem = Mem0(models, encoder, tmp_path / "work")
    fake.fail_next(Fault(status=400))
    with pytest.raises(LLMCallError):
        mem.add([("user", "I am a pilot."), ("assistant", "Cool.")], D1)


def test_extraction_sees_recent_messages_as_context(fake, models, tmp_path, encoder):
    fake.add_rule(EXTRACT, {"facts": []})
    mem = Mem0(models, encoder, tmp_path / "work", recent_messages=2)
    mem.ingest_session(session("s1", D1, ("first question", "first answer"), ("second question", "second answer")))
    mem.ingest_session(session("s2", D2, ("third question", "third answer")))
    users = [b["messages"][1]["content"] for b in fake.chat_requests()]
    assert users[0] == "Input:\nuser: first question\nassistant: first answer\n"
    assert users[1] == ("Earlier messages (context only, oldest first):\n"
                        "user: first question\nassistant: first answer\n"
                        "\nInput:\nuser: second question\nassistant: second answer\n")
    assert users[2].startswith("Earlier messages (context only, oldest first):\nuser: second question\n")
    assert "first question" not in users[2]  # window of 2 messages
    assert "Today's date is 2024-02-03." in fake.chat_requests()[2]["messages"][0]["content"]

    plain = Mem0(models, encoder, tmp_path / "plain", recent_messages=0)
    plain.add([("user", "fourth question"), ("assistant", "fourth answer")], D3)
    last = fake.chat_requests()[-1]["messages"]
    assert last[1]["content"] == "Input:\nuser: fourth question\nassistant: fourth answer\n"
    assert "Earlier messages" not in last[0]["content"] and "context" not in last[0]["content"].split("Remember the following")[1]


def test_recent_messages_are_context_only_outside_the_union(fake, models, tmp_path, encoder):
    """With ``recent_messages`` > 0 the extraction call sees earlier messages only as context: they add nothing to
    a memory's provenance (neither origin nor derived), so the memories carry exactly what they carry without the
    window; an UPDATE that changes the text adds the new exchange to the origin, one that echoes it only to the
    derived."""
    fake.add_rule(EXTRACT, lambda body: {"facts": ["Fact from " + body["messages"][1]["content"].split("Input:\n")[1]
                                                   .splitlines()[0]]})
    fake.add_rule(UPDATE, lambda body: {"memory": [{"id": "0", "text": new_facts(update_prompt(body))[0],
                                                    "event": "ADD"}]})
    s1 = session("s1", D1, ("I play the cello", "nice"), ("second question", "second answer"))
    plain = Mem0(models, encoder, tmp_path / "plain", recent_messages=0)
    plain.ingest_session(s1)
    mem = Mem0(models, encoder, tmp_path / "work", recent_messages=2)
    mem.ingest_session(s1)
    assert any("Earlier messages" in str(b["messages"][-1]["content"]) for b in fake.chat_requests())
    provenance = lambda m: [(v["text"], v["sources"], v.get("derived")) for _, v in sorted(m.memories.items())]  # noqa: E731
    assert provenance(mem) == provenance(plain)
    first = mem.memories[min(mem.memories)]
    assert (first["sources"], first.get("derived")) == (["s1#0", "s1#1"], None)

    fake.rules.clear()
    fake.add_rule(EXTRACT, {"facts": ["Plays the cello"]})
    cello = "Fact from user: I play the cello"
    fake.add_rule(UPDATE, lambda body: {"memory": [{"id": by_text(old_memory(update_prompt(body)), cello),
                                                    "text": cello, "event": "UPDATE"}]})  # unchanged
    mem.ingest_session(session("s2", D2, ("cello again", "ok")))
    updated = next(m for m in mem.memories.values() if m["text"] == cello and "s2#0" in m.get("derived", ()))
    assert "s2#0" not in updated["sources"]
    fake.rules.clear()
    fake.add_rule(EXTRACT, {"facts": ["Plays the cello in an orchestra"]})
    fake.add_rule(UPDATE, lambda body: {"memory": [{"id": by_text(old_memory(update_prompt(body)), cello),
                                                    "text": "Plays the cello in an orchestra", "event": "UPDATE"}]})
    mem.ingest_session(session("s3", D3, ("orchestra now", "great")))
    changed = next(m for m in mem.memories.values() if m["text"] == "Plays the cello in an orchestra")
    assert changed["sources"][-2:] == ["s3#0", "s3#1"] and "s3#0" not in changed.get("derived", ())


def _three_memories(fake, models, tmp_path, encoder, **params) -> tuple[Mem0, dict[str, str]]:
    mem = Mem0(models, encoder, tmp_path / "work", top_k=2, **params)
    facts = {D1: "Plays the cello in an orchestra", D2: "Is baking a cake for a party", D3: "Owns a red bicycle"}
    for n, (date, fact) in enumerate(facts.items()):
        fake.rules.clear()
        fake.add_rule(EXTRACT, {"facts": [fact]})
        fake.add_rule(UPDATE, {"memory": [{"id": "0", "text": fact, "event": "ADD"}]})
        mem.add([("user", f"note for {date}"), ("assistant", "ok")], date, (f"s{n}#0", f"s{n}#1"))
    fake.rules.clear()
    return mem, facts


def _expected_lines(encoder, facts: dict[str, str], query: str, k: int) -> tuple[list[str], list[int]]:
    vecs = encoder.encode(list(facts.values()))
    order = [int(i) for i in np.argsort(-(vecs @ encoder.encode([query])[0]), kind="stable")[:k]]
    return [f"{list(facts)[i]}: {list(facts.values())[i]}" for i in order], order


def test_native_answer_is_the_evaluation_prompt_with_its_length_limit(fake, models, tmp_path, encoder):
    mem, facts = _three_memories(fake, models, tmp_path, encoder)
    fake.add_rule("Question: Which dessert", "Sponge cake.")
    query = "Which dessert recipe should I bake for my party?"
    ans = mem.answer(query, NATIVE)

    expected, order = _expected_lines(encoder, facts, query, 2)
    assert ans.text == "Sponge cake."
    assert len(ans.context) == 1 and ans.context[0].role == "system"
    prompt = ans.context[0].content
    assert prompt.startswith("You are an intelligent memory assistant tasked with retrieving accurate information "
                             "from conversation memories.")
    assert "8. The answer should be less than 5-6 words." in prompt  # upstream's length limit, kept
    assert "based solely on the evidence in the memories" in prompt
    assert "taking into account" not in prompt  # the old steering addition is gone
    assert f"Memories for the user:\n\n{json.dumps(expected, indent=4)}\n\nQuestion: {query}\n\nAnswer:" in prompt
    assert ans.meta["retrieved"] == 2 and ans.meta["answer_prompt"] == ANSWER_PROMPT_VERSION
    assert [it.text for it in ans.items] == expected
    assert [it.sources for it in ans.items] == [(f"s{i}#0", f"s{i}#1") for i in order]
    sent = fake.chat_requests()[-1]["messages"]
    assert sent == [{"role": "system", "content": prompt}]  # the context is exactly what the answerer saw


def test_shared_answer_renders_the_memory_list_into_the_shared_prompt(fake, models, tmp_path, encoder):
    mem, facts = _three_memories(fake, models, tmp_path, encoder)  # answer_mode defaults to shared
    query = "Which dessert recipe should I bake for my party?"
    ans = mem.answer(query)
    expected, _ = _expected_lines(encoder, facts, query, 2)
    assert [(m.role, m.content) for m in ans.context] == [
        ("system", SHARED_ANSWER_SYSTEM.format(memory=json.dumps(expected, indent=4))), ("user", query)]
    assert ans.meta["answer_prompt"] == SHARED_ANSWER_VERSION
    assert "5-6 words" not in ans.context_text()
    assert [m["content"] for m in fake.chat_requests()[-1]["messages"]] == [m.content for m in ans.context]
    empty = Mem0(models, encoder, tmp_path / "empty").answer(query)  # nothing stored: the shared empty marker
    assert EMPTY_MEMORY in empty.context[0].content and empty.items == ()


def test_snapshot_restore_round_trip(fake, models, tmp_path, encoder):
    mem = seed(fake, models, tmp_path, encoder)
    fake.add_rule("Question:", "fake answer")
    before = mem.answer("What should I drink tomorrow morning?")
    mem.snapshot(tmp_path / "snap")

    other = Mem0(models, encoder, tmp_path / "other")
    other.restore(tmp_path / "snap")
    after = other.answer("What should I drink tomorrow morning?")
    assert after.context == before.context and after.text == before.text
    assert other.memories == mem.memories and other.counter == 2 and other.recent == mem.recent
    assert other.memories["m000002"]["sources"] == S1  # provenance survives the round trip
    assert after.items == before.items and all(it.sources == tuple(S1) for it in after.items)
    np.testing.assert_array_equal(other.index.vector("m000002"), mem.index.vector("m000002"))

    # both continue identically: same extraction context, new ids after the restored counter
    fake.add_rule("I adopted a puppy", {"facts": ["Adopted a puppy"]})
    fake.add_rule(UPDATE, lambda body: {"memory": [{"id": "9", "text": "Adopted a puppy", "event": "ADD"}]})
    batch = [("user", "I adopted a puppy."), ("assistant", "Congrats!")]
    assert mem.add(batch, D2) == other.add(batch, D2)
    assert other.memories["m000003"]["text"] == "Adopted a puppy"
    exts = requests_with(fake, "I adopted a puppy")
    assert exts[0]["messages"][1]["content"].startswith("Input:")  # recent_messages 0: the exchange alone
    assert len(exts) == 1  # the restored instance sent a byte-identical extraction prompt (a call-cache hit)


def test_registered_with_config_defaults_and_default_fake_replies(fake, models, tmp_path, encoder, repo_root):
    cfg = yaml.safe_load((repo_root / "conf/system/mem0.yaml").read_text())
    cls = SYSTEMS.get(cfg["name"])
    assert cls is Mem0
    mem = cls(models, encoder, tmp_path / "work", **cfg["params"])
    assert (mem.top_k, mem.search_top_s, mem.recent_messages) == (30, 5, 0)
    for s in make_trace(n_sessions=2).sessions:  # default JSON reply is off-schema: no facts, no crash
        mem.ingest_session(s)
    assert mem.n_batches == 4 and mem.memories == {}
    faults = mem.take_faults()  # ... but each off-schema reply is counted, with the exchange it was writing
    assert [(f.kind, f.where) for f in faults] == [("malformed_reply", "mem0.extract_facts")] * 4
    assert faults[0].turns == ("bg_00#0", "bg_00#1") and faults[-1].turns == ("bg_01#2", "bg_01#3")
    first = mem.answer("What should I plant?")
    mem.snapshot(tmp_path / "snap")
    again = cls(models, encoder, tmp_path / "w2", **cfg["params"])
    again.restore(tmp_path / "snap")
    assert again.answer("What should I plant?").context == first.context
    with pytest.raises(TypeError):
        cls(models, encoder, tmp_path / "w3", top_n=3)


def test_old_snapshot_without_sources_loads_with_empty_sources(fake, models, tmp_path, encoder):
    mem = seed(fake, models, tmp_path, encoder)
    mem.snapshot(tmp_path / "snap")
    state = json.loads((tmp_path / "snap" / "state.json").read_text())
    for m in state["memories"].values():
        del m["sources"]
    (tmp_path / "snap" / "state.json").write_text(json.dumps(state))
    old = Mem0(models, encoder, tmp_path / "old")
    old.restore(tmp_path / "snap")
    assert [m["sources"] for m in old.memories.values()] == [[], []]
    assert all(it.sources == () for it in old.recall("coffee").items)


# -- the protocol: provenance recall and faults on the injected exchange -------------------------------------------

TASK = Task(id="mem0-t", domain="other", user_message="I keep a logbook of every train ride I take.",
            assistant_message="Noted, thanks for telling me.", naive_query="What do I keep a logbook of?",
            query="Any tips for my tomato plants this week?", explanation="(test task)")
FACT_MEMORY = "Keeps a logbook of every train ride"


def script_protocol(fake, fact_reply, broken_update_for: str | None = None) -> None:
    """Extraction: the fact exchange gives ``fact_reply``, every background exchange one fact naming its text; the
    update call ADDs every new fact (or, for the facts containing ``broken_update_for``, replies with cut-off JSON).
    Rules look at the "Input" part only (the context window repeats the fact)."""
    def extract(body):
        new = body["messages"][1]["content"].split("Input:\n", 1)[1]
        if TASK.user_message in new:
            return fact_reply
        return {"facts": [f"Asked: {new.splitlines()[0][len('user: '):]}"]}

    def decide(body):
        facts = new_facts(update_prompt(body))
        if broken_update_for and any(broken_update_for in f for f in facts):
            return '{"memory": [{"id": '
        return {"memory": [{"id": str(100 + i), "text": f, "event": "ADD"} for i, f in enumerate(facts)]}

    fake.add_rule(EXTRACT, extract)
    fake.add_rule(UPDATE, decide)


def protocol_run(models, encoder, tmp_path, **params):
    make = lambda wd: Mem0(models, encoder, wd, **params)  # noqa: E731
    return run_task(TASK, make_trace(n_sessions=3), 1, make, models, tmp_path / "w", config_hash="h",
                    system_name="mem0", keep_workdir=True)


def stored_memories(tmp_path, models, encoder) -> dict[str, dict]:
    mem = Mem0(models, encoder, tmp_path / "inspect")
    mem.restore(tmp_path / "w" / "post_ingest")
    return mem.memories


def test_fact_stored_and_retrieved_gives_provenance_recall_1(fake, models, tmp_path, encoder):
    script_protocol(fake, {"facts": [FACT_MEMORY]})
    rec = protocol_run(models, encoder, tmp_path)
    assert rec.error is None and rec.faults == () and not rec.fact_write_fault
    fact = [m for m in stored_memories(tmp_path, models, encoder).values() if m["text"] == FACT_MEMORY]
    assert [m["sources"] for m in fact] == [[FACT_TURN_ID, FACT_REPLY_TURN_ID]]
    # 13 memories, top_k 30: the fact memory is in both contexts, paraphrased (the verbatim metric cannot see it)
    assert rec.target_recall_provenance == 1 and rec.naive_recall_provenance == 1
    assert rec.target_recall_exact == 0
    item = next(it for it in rec.indirect.items if FACT_MEMORY in it.text)
    assert item.sources == (FACT_TURN_ID, FACT_REPLY_TURN_ID) and item.text in rec.indirect.context_text()


def test_fact_stored_but_not_retrieved_gives_provenance_recall_0(fake, models, tmp_path, encoder):
    script_protocol(fake, {"facts": [FACT_MEMORY]})
    rec = protocol_run(models, encoder, tmp_path, top_k=1)
    assert rec.error is None and not rec.fact_write_fault
    assert any(m["text"] == FACT_MEMORY for m in stored_memories(tmp_path, models, encoder).values())
    [item] = rec.indirect.items  # the one memory retrieved for the tomato query is a background one
    assert "tomato" in item.text and FACT_TURN_ID not in item.sources
    assert rec.target_recall_provenance == 0
    assert rec.naive_recall_provenance == 1  # the direct query still finds it


def test_truncated_reply_on_the_injected_exchange_is_a_fact_write_fault(fake, models, tmp_path, encoder):
    script_protocol(fake, '{"facts": ["Keeps a logbook of every tr')  # cut off mid-string
    rec = protocol_run(models, encoder, tmp_path)
    assert rec.error is None
    assert rec.fact_write_fault is True
    assert rec.fault_counts() == {"malformed_reply": 1}
    [f] = rec.faults
    assert (f.phase, f.where, f.turns) == ("ingest", "mem0.extract_facts", (FACT_TURN_ID, FACT_REPLY_TURN_ID))
    assert "Keeps a logbook of every tr" in f.detail
    # upstream behaviour is kept: nothing stored from the fact, so nothing of it can be retrieved
    assert not any(FACT_TURN_ID in m["sources"] for m in stored_memories(tmp_path, models, encoder).values())
    assert rec.target_recall_provenance == 0 and rec.naive_recall_provenance == 0
    assert rec.to_dict()["fact_write_fault"] is True and rec.to_dict()["faults"][0]["kind"] == "malformed_reply"


def test_malformed_update_on_a_background_exchange_is_counted_but_not_a_fact_fault(fake, models, tmp_path, encoder):
    script_protocol(fake, {"facts": [FACT_MEMORY]}, broken_update_for="Session 2 question 1")
    rec = protocol_run(models, encoder, tmp_path)
    assert rec.error is None and rec.fact_write_fault is False
    assert rec.fault_counts() == {"malformed_reply": 1}
    [f] = rec.faults
    assert (f.phase, f.where, f.turns) == ("ingest", "mem0.decide", ("bg_02#2", "bg_02#3"))
    assert rec.target_recall_provenance == 1


def test_reasoning_endpoint_gets_no_sampling_parameters(fake, tmp_path, encoder):
    from inmind_exp.llm import CallCache, Models
    from tests.conftest import fake_endpoints

    models = Models.build(fake_endpoints(fake.base_url, reasoning=True), CallCache(tmp_path / "cache"))
    script_protocol(fake, {"facts": [FACT_MEMORY]})
    for mode in ("shared", "native"):
        rec = run_task(TASK, make_trace(n_sessions=2), 1, lambda wd: Mem0(models, encoder, wd), models,
                       tmp_path / f"w-{mode}", config_hash="h", system_name="mem0", answerer=Answerer(mode))
        assert rec.error is None and rec.target_recall_provenance == 1
    reqs = fake.chat_requests()
    assert reqs and not any(k in r for r in reqs for k in ("temperature", "top_p", "logprobs", "max_tokens"))
    assert all("max_completion_tokens" in r for r in reqs)


def test_a_cut_update_reply_is_counted_on_its_exchange_not_on_the_fact_in_the_same_session(fake, models, tmp_path,
                                                                                             encoder):
    """The update prompt holds extracted facts, not the turns' text: the call declares its exchange, so a cut reply
    for a background exchange of the fact's session is not a fact-write fault."""
    from tests.fake_openai import CutReply

    script_protocol(fake, {"facts": [FACT_MEMORY]})
    decide = fake.rules[-1][1]

    def cut(body):
        facts = str(new_facts(update_prompt(body)))  # the new facts only
        if "Session 1 question 0" in facts:
            return CutReply(json.dumps(decide(body)))
        return decide(body)

    fake.rules[-1] = (fake.rules[-1][0], cut)
    rec = protocol_run(models, encoder, tmp_path)
    cuts = [f for f in rec.faults if f.kind == "truncated_reply"]
    assert rec.error is None and cuts, rec.faults
    assert {f.turns for f in cuts} == {("bg_01#0", "bg_01#1")} and not rec.fact_write_fault, cuts
