"""Mem0: the extract → retrieve-similar → ADD/UPDATE/DELETE/NONE write path, the top-k read path with timestamps,
and exact snapshot/restore, against the fake OpenAI-compatible server."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import yaml

from inmind_exp.embed import MiniLMEncoder
from inmind_exp.llm import LLMCallError
from inmind_exp.records import Session, Turn
from inmind_exp.memory import SYSTEMS
from systems.mem0 import Mem0
from tests.conftest import make_trace
from tests.fake_openai import Fault

EXTRACT = "You organise personal information"
UPDATE = "You are a memory manager"
D1, D2, D3 = "2024/01/01 (Mon) 10:00", "2024/02/03 (Sat) 09:30", "2024/03/05 (Tue) 18:45"


@pytest.fixture(scope="module")
def encoder():
    return MiniLMEncoder()


def session(sid: str, date: str, *pairs: tuple[str, str]) -> Session:
    turns = []
    for u, a in pairs:
        turns += [Turn("user", u), Turn("assistant", a)]
    return Session(id=sid, date=date, turns=tuple(turns))


def old_memory(prompt: str) -> list[dict[str, str]]:
    """The old-memory list the update prompt shows (empty when it says the memory is empty)."""
    if "Current memory is empty." in prompt:
        return []
    m = re.search(r"collected so far\. Update it using only the format that follows:\n\n```\n(.*?)\n```", prompt, re.S)
    assert m, prompt
    return json.loads(m.group(1))


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
        for f in json.loads(re.search(r"```\n(\[.*?\])\n```", update_prompt(body), re.S).group(1))
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
    assert '["Drinks coffee every morning", "Lives in Lisbon with two cats"]' in upd["messages"][0]["content"]
    assert mem.memories == {
        "m000001": {"text": "Drinks coffee every morning", "timestamp": D1, "created": D1},
        "m000002": {"text": "Lives in Lisbon with two cats", "timestamp": D1, "created": D1},
    }
    assert mem.index.ids == ["m000001", "m000002"]
    assert [h["event"] for h in mem.history] == ["ADD", "ADD"]


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
    assert mem.memories["m000001"] == {"text": "Drinks green tea every morning instead of coffee", "timestamp": D2,
                                       "created": D1}
    assert mem.memories["m000002"]["text"] == "Lives in Lisbon with two cats" and len(mem.memories) == 2
    # the vector was replaced too: a search finds the memory by its new text
    assert mem.index.search("Drinks green tea every morning instead of coffee", 1)[0][0] == "m000001"
    np.testing.assert_allclose(mem.index.vector("m000001"),
                               encoder.encode(["Drinks green tea every morning instead of coffee"])[0], atol=1e-6)
    assert mem.history[-1] == {"batch": 2, "date": D2, "event": "UPDATE", "id": "m000001",
                               "text": "Drinks green tea every morning instead of coffee",
                               "previous": "Drinks coffee every morning"}


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
    events = mem.add([("user", "I gave up coffee this week."), ("assistant", "Well done.")], D2)
    assert [e["event"] for e in events] == ["DELETE"]
    assert mem.memories == {"m000002": {"text": "Lives in Lisbon with two cats", "timestamp": D1, "created": D1}}
    assert mem.index.ids == ["m000002"]
    assert [i for i, _ in mem.index.search("coffee every morning", 5)] == ["m000002"]


def test_no_facts_or_malformed_json_skip_the_update_call(fake, models, tmp_path, encoder):
    mem = Mem0(models, encoder, tmp_path / "work")
    fake.add_rule("Tell me a joke", "this is not JSON at all")  # first: later prompts repeat earlier messages
    fake.add_rule("Hello there, how are you", {"facts": []})
    mem.ingest_session(session("s1", D1, ("Hello there, how are you?", "Fine."), ("Tell me a joke.", "No.")))
    assert len(fake.chat_requests()) == 2 and not requests_with(fake, UPDATE)
    assert mem.memories == {} and mem.n_batches == 2
    # an off-schema update reply is a no-op, not a crash
    fake.rules.clear()
    fake.add_rule("I own a red bicycle", {"facts": ["Owns a red bicycle"]})
    fake.add_rule(UPDATE, {"memory": "ADD everything"})
    assert mem.add([("user", "I own a red bicycle."), ("assistant", "Nice.")], D2) == []
    assert mem.memories == {}


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
    assert "Earlier messages" not in last[0]["content"] and "context" not in last[0]["content"].split("Keep in mind")[1]


def test_read_path_lists_top_k_memories_with_timestamps(fake, models, tmp_path, encoder):
    mem = Mem0(models, encoder, tmp_path / "work", top_k=2)
    facts = {D1: "Is allergic to tree nuts", D2: "Plays the cello in an orchestra", D3: "Is baking a cake for a party"}
    for date, fact in facts.items():
        fake.rules.clear()
        fake.add_rule(EXTRACT, {"facts": [fact]})
        fake.add_rule(UPDATE, {"memory": [{"id": "0", "text": fact, "event": "ADD"}]})
        mem.add([("user", f"note for {date}"), ("assistant", "ok")], date)
    assert len(mem.memories) == 3
    fake.rules.clear()
    fake.add_rule("Question: Which dessert", "Try a nut-free sponge cake.")
    query = "Which dessert recipe should I bake for my party?"
    ans = mem.answer(query)

    vecs = encoder.encode(list(facts.values()))
    order = np.argsort(-(vecs @ encoder.encode([query])[0]), kind="stable")[:2]
    expected = [f"{list(facts)[i]}: {list(facts.values())[i]}" for i in order]
    assert ans.text == "Try a nut-free sponge cake."
    assert len(ans.context) == 1 and ans.context[0].role == "system"
    prompt = ans.context[0].content
    assert f"Memories for the user:\n\n{json.dumps(expected, indent=4)}\n\nQuestion: {query}\n\nAnswer:" in prompt
    assert ans.meta["retrieved"] == 2
    sent = fake.chat_requests()[-1]["messages"]
    assert sent == [{"role": "system", "content": prompt}]  # the context is exactly what the answerer saw


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
    np.testing.assert_array_equal(other.index.vector("m000002"), mem.index.vector("m000002"))

    # both continue identically: same extraction context, new ids after the restored counter
    fake.add_rule("I adopted a puppy", {"facts": ["Adopted a puppy"]})
    fake.add_rule(UPDATE, lambda body: {"memory": [{"id": "9", "text": "Adopted a puppy", "event": "ADD"}]})
    batch = [("user", "I adopted a puppy."), ("assistant", "Congrats!")]
    assert mem.add(batch, D2) == other.add(batch, D2)
    assert other.memories["m000003"]["text"] == "Adopted a puppy"
    exts = requests_with(fake, "I adopted a puppy")
    assert "Lisbon with my two cats" in exts[0]["messages"][1]["content"]  # the recent-message window
    assert len(exts) == 1  # the restored instance sent a byte-identical extraction prompt (a call-cache hit)


def test_registered_with_config_defaults_and_default_fake_replies(fake, models, tmp_path, encoder, repo_root):
    cfg = yaml.safe_load((repo_root / "conf/system/mem0.yaml").read_text())
    cls = SYSTEMS.get(cfg["name"])
    assert cls is Mem0
    mem = cls(models, encoder, tmp_path / "work", **cfg["params"])
    assert (mem.top_k, mem.search_top_s, mem.recent_messages) == (30, 5, 10)
    for s in make_trace(n_sessions=2).sessions:  # default JSON reply is off-schema: no facts, no crash
        mem.ingest_session(s)
    assert mem.n_batches == 4 and mem.memories == {}
    first = mem.answer("What should I plant?")
    mem.snapshot(tmp_path / "snap")
    again = cls(models, encoder, tmp_path / "w2", **cfg["params"])
    again.restore(tmp_path / "snap")
    assert again.answer("What should I plant?").context == first.context
    with pytest.raises(TypeError):
        cls(models, encoder, tmp_path / "w3", top_n=3)
