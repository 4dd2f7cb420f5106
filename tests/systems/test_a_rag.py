"""A-RAG against the fake OpenAI server: the sentence index built on write without LLM calls, the three tools on
hand-made data, the tool-calling loop (scripted trajectory, max-loops and token-budget forced answers, malformed
tool calls) and snapshot/restore."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import yaml

from inmind_exp.embed import Encoder, MiniLMEncoder
from inmind_exp.records import Session, Turn
from systems.a_rag import ARAG, FORCE_ANSWER_PROMPT, split_sentences
from inmind_exp.memory import SYSTEMS
from tests.fake_openai import ToolCalls

SYSTEM_MARK = "earlier conversations with this user"  # in the agent's system prompt
DATE = "2024/03/05 (Tue) 09:30"


@pytest.fixture(scope="module")
def encoder():
    return MiniLMEncoder()


class TopicEncoder(Encoder):
    """Hand-made vectors: counts of a few topic words plus a small constant, L2-normalised."""

    name = "topics"
    TOPICS = ("nut", "garden", "pie")
    dim = len(TOPICS) + 1

    def encode(self, texts):
        rows = []
        for t in texts:
            words = re.findall(r"[a-z]+", t.lower())
            v = np.array([sum(w == k for w in words) for k in self.TOPICS] + [0.1], dtype=np.float32)
            rows.append(v / np.linalg.norm(v))
        return np.array(rows, dtype=np.float32).reshape(len(texts), self.dim)


def session(sid: str, *texts: str, date: str = DATE) -> Session:
    roles = ("user", "assistant")
    return Session(id=sid, date=date, turns=tuple(Turn(roles[i % 2], t) for i, t in enumerate(texts)))


def build(models, encoder, tmp_path, name="work", **params) -> ARAG:
    return SYSTEMS.get("a_rag")(models, encoder, tmp_path / name, **params)


ALLERGY = session("s_a", "I have a severe tree nut allergy. Even almonds make my throat swell!",
                  "I am sorry. Noted. I will keep it in mind.",
                  "Can you suggest a houseplant for a dark room?", "A snake plant copes well with low light.")
GARDEN = session("s_b", "My tomato plants wilt in the July heat.", "Water them deeply at dawn and add mulch.",
                 date="2024/03/09 (Sat) 18:00")


# -- write path ---------------------------------------------------------------------------------------------------

def test_ingest_builds_sentence_index_and_map_without_llm_calls(fake, models, encoder, tmp_path):
    mem = build(models, encoder, tmp_path)
    mem.ingest_session(ALLERGY)
    assert fake.chat_requests() == []
    assert mem.chunk_ids == ["0", "1"]  # one chunk per exchange
    assert mem.chunk_texts[0] == (f"Date: {DATE}\nuser: I have a severe tree nut allergy. Even almonds make my throat "
                                  "swell!\nassistant: I am sorry. Noted. I will keep it in mind.")
    assert "s_a" not in mem.chunk_texts[0]  # session ids never reach the model
    # upstream's split on [.!?\n]+ keeping sentences over 10 characters: "Noted" is dropped, the date header kept
    assert mem.sentences[:5] == [f"Date: {DATE}", "user: I have a severe tree nut allergy",
                                 "Even almonds make my throat swell", "assistant: I am sorry", "I will keep it in mind"]
    assert mem.sentence_to_chunk == ["0"] * 5 + ["1"] * 3
    assert mem.embeddings.shape == (8, 384)
    assert np.allclose(mem.embeddings, encoder.encode(mem.sentences), atol=1e-6)

    mem.ingest_session(GARDEN)  # incremental: ids continue, rows append, earlier rows untouched
    assert fake.chat_requests() == []
    assert mem.chunk_ids == ["0", "1", "2"] and mem.chunk_sessions == ["s_a", "s_a", "s_b"]
    assert mem.sentence_to_chunk[8:] == ["2"] * 3
    assert mem.sentences[8:] == ["Date: 2024/03/09 (Sat) 18:00", "user: My tomato plants wilt in the July heat",
                                 "assistant: Water them deeply at dawn and add mulch"]
    assert mem.embeddings.shape == (len(mem.sentences), 384)
    assert np.allclose(mem.embeddings[:8], encoder.encode(mem.sentences[:8]), atol=1e-6)


def test_split_sentences_filters_short_pieces():
    text = "Ok. Yes!! This one is long enough?\nshort\n\nAnother long sentence here"
    assert split_sentences(text, 10) == ["This one is long enough", "Another long sentence here"]
    assert split_sentences(text) == ["Ok", "Yes", "This one is long enough", "short", "Another long sentence here"]


def test_chunk_units(models, tmp_path):
    enc = TopicEncoder()
    for unit, n in (("exchange", 2), ("session", 1), ("turn", 4)):
        mem = build(models, enc, tmp_path, name=unit, chunk_unit=unit)
        mem.ingest_session(ALLERGY)
        assert len(mem.chunk_ids) == n
        assert all(t.startswith(f"Date: {DATE}\n") for t in mem.chunk_texts)
    with pytest.raises(ValueError, match="chunk_unit"):
        build(models, enc, tmp_path, chunk_unit="paragraph")


# -- tools --------------------------------------------------------------------------------------------------------

def test_keyword_search_scores_count_times_length(models, tmp_path):
    mem = build(models, TopicEncoder(), tmp_path, chunk_unit="turn")
    mem.ingest_session(session("s", "Apple pie is my favourite. I bake apple pie weekly.", "An apple a day.",
                               "Pineapple upside-down cake.", "Nothing relevant here at all."))
    text, log = mem.keyword_search(["apple", "PIE"], top_k=2)
    # chunk 0: 2·len(apple) + 2·len(PIE) = 16; chunks 1 and 2 ("pineapple" contains "apple"): 5 each, corpus order
    assert log == {"chunks_found": 2, "chunk_ids": ["0", "1"], "scores": [16, 5]}
    assert text == ("Chunk ID: 0, Matched keywords in chunk: ... user: Apple pie is my favourite ... "
                    "I bake apple pie weekly ...\n\n"
                    "Chunk ID: 1, Matched keywords in chunk: ... assistant: An apple a day ...")
    _, log = mem.keyword_search(["apple", "pie"])
    assert log["chunk_ids"] == ["0", "1", "2"] and log["scores"] == [16, 5, 5]
    # top_k is capped at max_top_k; a bare string is one keyword
    capped = build(models, TopicEncoder(), tmp_path, name="capped", chunk_unit="turn", max_top_k=1)
    capped.ingest_session(session("s", "apple", "apple apple"))
    assert capped.keyword_search("apple", top_k=10)[1]["chunk_ids"] == ["1"]
    assert mem.keyword_search(["durian"]) == ("No results found for keywords: ['durian']",
                                              {"chunks_found": 0, "chunk_ids": []})


def test_semantic_search_groups_top_sentences_by_chunk(models, tmp_path):
    mem = build(models, TopicEncoder(), tmp_path, chunk_unit="turn")
    mem.ingest_session(session("s", "I have a nut allergy. A nut nut reaction scares me.",
                               "Your garden looks great. Skip the nut garnish on the pie.",
                               "The garden garden beds are ready."))
    # k=1: the top 3 sentences are chunk 0's two nut sentences and chunk 1's garnish; chunk 0 wins, its sentences
    # shown in text order
    text, log = mem.semantic_search("nut", top_k=1)
    assert text == ("Chunk ID: 0 (Similarity: 1.000)\n"
                    "Matched: ... user: I have a nut allergy ... A nut nut reaction scares me ...")
    # k=2: the top 6 sentences add the three date headers (tied, so in index order); chunk 1's garden sentence ranks
    # 7th and is left out of its snippet
    text, log = mem.semantic_search("nut", top_k=2)
    assert log["chunk_ids"] == ["0", "1"]
    blocks = text.split("\n\n")
    assert blocks[0] == (f"Chunk ID: 0 (Similarity: 1.000)\nMatched: ... Date: {DATE} ... user: I have a nut allergy "
                         "... A nut nut reaction scares me ...")
    assert blocks[1] == (f"Chunk ID: 1 (Similarity: 0.709)\nMatched: ... Date: {DATE} ... "
                         "Skip the nut garnish on the pie ...")
    text, log = mem.semantic_search("nut", top_k=3)  # 9 sentences: all 8, chunk 2 last (only its date header ties)
    assert log["chunk_ids"] == ["0", "1", "2"]
    assert "Your garden looks great" in text and "garden garden" in text
    assert mem.semantic_search("nut", top_k=0)[0] == "No results for: nut"


def test_read_chunk_marks_chunks_already_read(models, tmp_path):
    mem = build(models, TopicEncoder(), tmp_path)
    mem.ingest_session(ALLERGY)
    read: dict = {}
    text, log = mem.read_chunk(read, chunk_ids=["1"])
    assert text == "\n".join(["\n" + "=" * 80, "[Chunk 1]", "-" * 80, mem.chunk_texts[1], "=" * 80])
    text, log = mem.read_chunk(read, chunk_ids=[1, "0", "7"])
    assert "[Chunk 1]\n(This chunk has been read before)" in text and mem.chunk_texts[1] not in text
    assert mem.chunk_texts[0] in text and "[Chunk 7] - Not found" in text
    assert log == {"new_chunks_read": ["0"], "already_read": ["1"], "not_found": ["7"]}
    assert list(read) == ["1", "0"]
    assert mem.read_chunk({}, chunk_id="0")[1]["new_chunks_read"] == ["0"]
    assert mem.read_chunk({})[0] == "Error: No chunk IDs provided"


# -- read path ----------------------------------------------------------------------------------------------------

def scripted(body):
    """Search (two parallel calls), read chunk 0, read 0 again with 1 and a missing id, then answer."""
    n_tool = sum(1 for m in body["messages"] if m["role"] == "tool")
    if n_tool == 0:
        return ToolCalls([("keyword_search", {"keywords": ["allergy", "almonds"]}),
                          ("semantic_search", {"query": "food allergy", "top_k": 2})])
    if n_tool == 2:
        return ToolCalls([("read_chunk", {"chunk_ids": ["0"]})])
    if n_tool == 3:
        return ToolCalls([("read_chunk", {"chunk_ids": ["0", "1", "99"]})])
    return "Avoid almond flour: you have a tree nut allergy [Chunk 0]."


def test_scripted_trajectory_runs_tools_and_context_is_the_whole_trajectory(fake, models, encoder, tmp_path):
    fake.add_rule(SYSTEM_MARK, scripted)
    mem = build(models, encoder, tmp_path)
    mem.ingest_session(ALLERGY)
    mem.ingest_session(GARDEN)
    ans = mem.answer("Can you give me a macaron recipe?")

    reqs = fake.chat_requests()
    assert len(reqs) == 4
    assert all(r["tool_choice"] == "auto" for r in reqs)
    assert all([t["function"]["name"] for t in r["tools"]] == ["keyword_search", "read_chunk", "semantic_search"]
               for r in reqs)
    assert ans.text == "Avoid almond flour: you have a tree nut allergy [Chunk 0]."
    # the context is exactly the message list the final call was sent
    assert [m.to_openai() for m in ans.context] == reqs[-1]["messages"]
    assert [m.role for m in ans.context] == ["system", "user", "assistant", "tool", "tool", "assistant", "tool",
                                             "assistant", "tool"]
    assert ans.context[0].content == mem.system_prompt and ans.context[1].content == "Can you give me a macaron recipe?"
    # tool-call ids are derived from the step, and each tool message answers its call
    assert [tc["id"] for tc in ans.context[2].tool_calls] == ["call_1_0", "call_1_1"]
    assert [m.tool_call_id for m in ans.context if m.role == "tool"] == ["call_1_0", "call_1_1", "call_2_0", "call_3_0"]
    assert json.loads(ans.context[2].tool_calls[0]["function"]["arguments"]) == {"keywords": ["allergy", "almonds"]}
    kw, sem, read1, read2 = (m.content for m in ans.context if m.role == "tool")
    assert kw == ("Chunk ID: 0, Matched keywords in chunk: ... user: I have a severe tree nut allergy ... "
                  "Even almonds make my throat swell ...")
    assert sem.startswith("Chunk ID: 0 (Similarity: ") and "tree nut allergy" in sem
    assert mem.chunk_texts[0] in read1
    assert "[Chunk 0]\n(This chunk has been read before)" in read2 and mem.chunk_texts[1] in read2
    assert "[Chunk 99] - Not found" in read2
    assert "tree nut allergy" in ans.context_text()

    meta = ans.meta
    assert meta["stop_reason"] == "answered" and not meta["forced_final_answer"]
    assert meta["steps"] == 4 and meta["llm_calls"] == 4
    assert [(t["step"], t["tool_name"]) for t in meta["trajectory"]] == [
        (1, "keyword_search"), (1, "semantic_search"), (2, "read_chunk"), (3, "read_chunk")]
    assert meta["trajectory"][1]["arguments"] == {"query": "food allergy", "top_k": 2}
    assert meta["chunks_read_ids"] == ["0", "1"] and meta["chunks_read_sessions"] == ["s_a", "s_a"]
    assert meta["tool_errors"] == 0
    assert [c["prompt_tokens"] for c in meta["calls"]] == [r_tokens(r) for r in reqs]


def r_tokens(body) -> int:
    """The fake server's prompt-token count (whitespace words of all message contents)."""
    return sum(len(str(m.get("content") or "").split()) for m in body["messages"])


def test_max_loops_forces_a_final_answer_without_tools(fake, models, encoder, tmp_path):
    fake.add_rule("You have reached the limit", "Forced: here is my answer.")
    fake.add_rule(SYSTEM_MARK, ToolCalls([("keyword_search", {"keywords": ["tomato"]})]))
    mem = build(models, encoder, tmp_path, max_loops=3)
    mem.ingest_session(GARDEN)
    ans = mem.answer("How should I water my plants?")

    reqs = fake.chat_requests()
    assert len(reqs) == 4
    assert all("tools" in r for r in reqs[:3]) and "tools" not in reqs[3] and "tool_choice" not in reqs[3]
    assert ans.text == "Forced: here is my answer."
    assert [m.to_openai() for m in ans.context] == reqs[3]["messages"]
    assert ans.context[-1].role == "user" and ans.context[-1].content == FORCE_ANSWER_PROMPT
    assert sum(1 for m in ans.context if m.role == "tool") == 3
    assert ans.meta["stop_reason"] == "max_loops" and ans.meta["forced_final_answer"]
    assert ans.meta["steps"] == 3 and ans.meta["llm_calls"] == 4
    assert [c["tools"] for c in ans.meta["calls"]] == [True, True, True, False]


def test_token_budget_forces_a_final_answer(fake, models, encoder, tmp_path):
    fake.add_rule("You have reached the limit", "Forced by budget.")
    fake.add_rule(SYSTEM_MARK, ToolCalls([("keyword_search", {"keywords": ["tomato"]})]))
    mem = build(models, encoder, tmp_path, max_token_budget=50)  # the system prompt alone is >50 fake tokens
    mem.ingest_session(GARDEN)
    ans = mem.answer("How should I water my plants?")
    reqs = fake.chat_requests()
    assert len(reqs) == 2 and "tools" in reqs[0] and "tools" not in reqs[1]
    assert ans.meta["calls"][0]["prompt_tokens"] > 50
    assert ans.meta["stop_reason"] == "token_budget" and ans.meta["steps"] == 1
    assert ans.text == "Forced by budget." and ans.context[-1].content == FORCE_ANSWER_PROMPT


def test_malformed_and_unknown_tool_calls_become_error_messages(fake, models, encoder, tmp_path, monkeypatch):
    def reply(body):
        if any(m["role"] == "tool" for m in body["messages"]):
            return "I could not find anything."
        return ToolCalls([("keyword_search", {"keywords": ["x"]}), ("no_such_tool", {}),
                          ("semantic_search", {"top_k": 3}), ("read_chunk", {"chunk_ids": "0"}),
                          ("keyword_search", {"keywords": ["tomato"], "limit": 3})])

    original = fake._chat

    def truncating_chat(body):  # the first call's first arguments arrive as broken JSON, as from a weak model
        out = original(body)
        calls = out["choices"][0]["message"].get("tool_calls")
        if calls:
            calls[0]["function"]["arguments"] = '{"keywords": ["tomato"'
        return out

    monkeypatch.setattr(fake, "_chat", truncating_chat)
    fake.add_rule(SYSTEM_MARK, reply)
    mem = build(models, encoder, tmp_path)
    mem.ingest_session(GARDEN)
    ans = mem.answer("How should I water my plants?")

    tools = [m.content for m in ans.context if m.role == "tool"]
    assert tools[0] == "Error executing tool: missing required argument 'keywords'"  # unparseable → {} as upstream
    assert tools[1] == "Error: Tool 'no_such_tool' not found"
    assert tools[2] == "Error executing tool: missing required argument 'query'"
    assert mem.chunk_texts[0] in tools[3]  # a bare string id is read as one id
    assert tools[4] == "Error executing tool: unexpected argument 'limit'"
    assert ans.context[2].tool_calls[0]["function"]["arguments"] == '{"keywords": ["tomato"'  # echoed as received
    assert ans.text == "I could not find anything." and ans.meta["stop_reason"] == "answered"
    traj = ans.meta["trajectory"]
    assert traj[0]["malformed_arguments"] is True and traj[0]["arguments"] == '{"keywords": ["tomato"'
    assert traj[1]["error"] == "tool_not_found"
    assert ans.meta["tool_errors"] == 4


def test_run_tool_rejects_non_object_arguments(models, tmp_path):
    mem = build(models, TopicEncoder(), tmp_path)
    mem.ingest_session(ALLERGY)
    assert mem.run_tool("keyword_search", '["nut"]', {})[0] == "Error executing tool: arguments must be a JSON object"
    assert mem.run_tool("keyword_search", '{"keywords": ["nut"], "top_k": "two"}', {})[0] == (
        "Error executing tool: 'top_k' must be an integer")
    assert mem.run_tool("semantic_search", '{"query": 3}', {})[0] == "Error executing tool: 'query' must be a string"
    assert mem.run_tool("read_chunk", "", {})[0] == "Error: No chunk IDs provided"


# -- state --------------------------------------------------------------------------------------------------------

def test_snapshot_restore_round_trips_and_prefix_appends(fake, models, encoder, tmp_path):
    fake.add_rule(SYSTEM_MARK, scripted)
    a = build(models, encoder, tmp_path, name="a")
    a.ingest_session(ALLERGY)
    a.ingest_session(GARDEN)
    a.snapshot(tmp_path / "snap")
    b = build(models, encoder, tmp_path, name="b")
    b.restore(tmp_path / "snap")
    for attr in ("chunk_ids", "chunk_texts", "chunk_sessions", "sentences", "sentence_to_chunk", "n_sessions"):
        assert getattr(b, attr) == getattr(a, attr)
    assert np.array_equal(b.embeddings, a.embeddings) and b.embeddings.dtype == np.float32
    first, second = a.answer("Any dessert ideas?"), b.answer("Any dessert ideas?")
    assert second.context == first.context and second.text == first.text and second.meta == first.meta

    # a prefix snapshot plus the task's own sessions gives the same index as ingesting everything at once
    c = build(models, encoder, tmp_path, name="c")
    c.ingest_session(ALLERGY)
    c.snapshot(tmp_path / "prefix")
    d = build(models, encoder, tmp_path, name="d")
    d.restore(tmp_path / "prefix")
    d.ingest_session(GARDEN)
    assert d.chunk_ids == a.chunk_ids and d.sentence_to_chunk == a.sentence_to_chunk and d.sentences == a.sentences
    assert np.array_equal(d.embeddings, a.embeddings)

    with pytest.raises(ValueError, match="chunk_unit"):
        build(models, encoder, tmp_path, name="e", chunk_unit="session").restore(tmp_path / "snap")


def test_empty_memory_answers_and_round_trips(fake, models, encoder, tmp_path):
    fake.add_rule(SYSTEM_MARK, lambda body: "Nothing stored." if any(m["role"] == "tool" for m in body["messages"])
                  else ToolCalls([("semantic_search", {"query": "anything"}), ("keyword_search", {"keywords": ["a"]})]))
    mem = build(models, encoder, tmp_path)
    mem.snapshot(tmp_path / "snap")
    ans = mem.answer("Hello?")
    assert [m.content for m in ans.context if m.role == "tool"] == ["No results for: anything",
                                                                    "No results found for keywords: ['a']"]
    other = build(models, encoder, tmp_path, name="other")
    other.restore(tmp_path / "snap")
    assert other.answer("Hello?").context == ans.context


def test_config_params_construct_the_system(models, encoder, tmp_path, repo_root):
    cfg = yaml.safe_load((repo_root / "conf" / "system" / "a_rag.yaml").read_text())
    assert cfg["name"] == "a_rag"
    mem = SYSTEMS.get(cfg["name"])(models, encoder, tmp_path / "w", **cfg["params"])
    assert (mem.chunk_unit, mem.max_loops, mem.max_token_budget, mem.default_top_k, mem.max_top_k) == (
        "exchange", 15, 128_000, 5, 20)
    with pytest.raises(TypeError, match="unknown parameter"):
        SYSTEMS.get("a_rag")(models, encoder, tmp_path / "x", top_k=3)
    with pytest.raises(ValueError, match="dense encoder"):
        SYSTEMS.get("a_rag")(models, None, tmp_path / "y")
