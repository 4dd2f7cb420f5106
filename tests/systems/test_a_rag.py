"""A-RAG against the fake OpenAI server: the sentence index built on write without LLM calls, the three tools on
hand-made data, the tool-calling loop (scripted trajectory, max-loops and token-budget forced answers, malformed
tool calls) and snapshot/restore."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import yaml

from inmind_exp.memory.answering import Answerer
from inmind_exp.llm.embed import Encoder
from inmind_exp.records import Session, Turn
from systems.a_rag import (ARAG, FORCE_ANSWER_PROMPT, PROBE_RESULT, PROBE_TOOL, clear_tool_support_cache,
                           split_sentences)
from inmind_exp.memory import SYSTEMS
from tests.fake_openai import ToolCalls

NATIVE = Answerer("native")  # the run's answer=native: the system's own answer prompt

SYSTEM_MARK = "earlier conversations with this user"  # in the agent's system prompt
DATE = "2024/03/05 (Tue) 09:30"


@pytest.fixture(autouse=True)
def fresh_probe_cache():
    """Fake servers may reuse a port, so no probe result may outlive its test."""
    clear_tool_support_cache()
    yield
    clear_tool_support_cache()


def is_probe(body) -> bool:
    return [t["function"]["name"] for t in body.get("tools") or []] == [PROBE_TOOL["function"]["name"]]


def probe_reply(body):
    """A tool-using model's side of the probe's round trip: call the tool, then state the time it returned."""
    last = body["messages"][-1]
    return f"It is {last['content']}." if last["role"] == "tool" else ToolCalls([("get_current_time", {})])


def loop_requests(fake) -> list[dict]:
    """The chat requests of the agent loop and the answer, without the tool-support probe."""
    return [b for b in fake.chat_requests() if not is_probe(b)]


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
    assert loop_requests(fake) == []
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
    assert loop_requests(fake) == []
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
    ans = mem.answer("Can you give me a macaron recipe?", NATIVE)

    reqs = loop_requests(fake)
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
    assert meta["steps"] == 4 and meta["llm_calls"] == 4 and meta["tool_calls"] == 4
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
    ans = mem.answer("How should I water my plants?", NATIVE)

    reqs = loop_requests(fake)
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
    ans = mem.answer("How should I water my plants?", NATIVE)
    reqs = loop_requests(fake)
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
    ans = mem.answer("How should I water my plants?", NATIVE)

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
    faults = mem.take_faults()
    assert [f.kind for f in faults] == ["bad_tool_call"] * 4 and all(f.where == "agent_loop" for f in faults)
    assert "no_such_tool" in faults[1].detail


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
    ans = mem.answer("Hello?", NATIVE)
    assert [m.content for m in ans.context if m.role == "tool"] == ["No results for: anything",
                                                                    "No results found for keywords: ['a']"]
    other = build(models, encoder, tmp_path, name="other")
    other.restore(tmp_path / "snap")
    assert other.answer("Hello?", NATIVE).context == ans.context
    assert ans.items == () and other.recall("Hello?").text == ""  # "No results" returns no memory


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


# -- answer modes, provenance, tool calls written as text, the tool-support probe ----------------------------------

from inmind_exp.memory.answering import SHARED_ANSWER_VERSION, shared_messages  # noqa: E402
from inmind_exp.llm import CallCache, Models  # noqa: E402
from inmind_exp.protocol.task import run_task  # noqa: E402
from inmind_exp.records import FACT_REPLY_TURN_ID, FACT_TURN_ID, Task  # noqa: E402
from systems.a_rag import NATIVE_ANSWER_VERSION, ToolSupportError, a_rag_tool_support, tool_call_text  # noqa: E402
from tests.conftest import fake_endpoints, make_trace  # noqa: E402

BEES = "I keep two beehives on the flat roof of my apartment building."
TASK = Task(id="bees", domain="other", user_message=BEES, assistant_message="Good to know, thanks for telling me.",
            naive_query="Where do I keep my beehives?", query="Where do my beehives live?", explanation="-")


def agent(search: list[str], top_k: int = 5, read_first: bool = True, final: str = "On the roof."):
    """An agent that runs one keyword search, reads the first chunk it found, then answers; judges get a verdict."""

    def reply(body):
        if is_probe(body):
            return probe_reply(body)
        if not body.get("tools"):
            return {"score": 1, "reason": "fake"} if body.get("response_format") else "Shared answer."
        tool_msgs = [m for m in body["messages"] if m["role"] == "tool"]
        if not tool_msgs:
            return ToolCalls([("keyword_search", {"keywords": search, "top_k": top_k})])
        if len(tool_msgs) == 1 and read_first and "Chunk ID: " in tool_msgs[0]["content"]:
            cid = re.search(r"Chunk ID: (\d+)", tool_msgs[0]["content"]).group(1)
            return ToolCalls([("read_chunk", {"chunk_ids": [cid]})])
        return final

    return reply


def run(fake, models, encoder, tmp_path, reply, task=TASK, **params):
    fake.add_rule("", reply)
    make = lambda wd: SYSTEMS.get("a_rag")(models, encoder, wd, **params)  # noqa: E731
    return run_task(task, make_trace(n_sessions=3), 1, make, models, tmp_path / "w", config_hash="h",
                    system_name="a_rag", keep_workdir=True)


def test_fact_found_and_read_gives_provenance_recall_1(fake, models, encoder, tmp_path):
    rec = run(fake, models, encoder, tmp_path, agent(["beehives"]))
    assert rec.error is None and rec.target_recall_provenance == 1 and rec.naive_recall_provenance == 1
    kinds = [(it.kind, it.sources) for it in rec.indirect.items]
    # the snippet shows only the user's sentence, so it carries only the fact turn; the chunk read carries both
    assert kinds == [("snippet", (FACT_TURN_ID,)), ("chunk", (FACT_TURN_ID, FACT_REPLY_TURN_ID))]
    assert rec.indirect.meta["answer_prompt"] == SHARED_ANSWER_VERSION and rec.indirect.text == "Shared answer."
    assert rec.indirect.meta["agent_answer"] == "On the roof." and rec.indirect.meta["stop_reason"] == "answered"
    stored = SYSTEMS.get("a_rag")(models, encoder, tmp_path / "check")
    stored.restore(tmp_path / "w" / "post_ingest")
    (cid,) = [c for c in stored.chunk_ids if FACT_TURN_ID in stored.chunk_sources(c)]
    assert stored.chunk_sources(cid) == (FACT_TURN_ID, FACT_REPLY_TURN_ID)
    assert [t for s, t in zip(stored.sentences, stored.sentence_turns) if "beehives" in s] == [FACT_TURN_ID]
    assert all(re.fullmatch(r"bg_\d\d#\d+", t) for c in stored.chunk_ids if c != cid for t in stored.chunk_sources(c))


def test_fact_stored_but_not_retrieved_gives_provenance_recall_0(fake, models, encoder, tmp_path):
    rec = run(fake, models, encoder, tmp_path, agent(["tomato"], top_k=1))
    assert rec.error is None and rec.target_recall_provenance == 0 and rec.naive_recall_provenance == 0
    assert rec.indirect.items and all(FACT_TURN_ID not in it.sources for it in rec.indirect.items)
    assert all(it.sources for it in rec.indirect.items)
    assert "beehives" not in rec.indirect.context_text().replace(TASK.query, "")


def test_shared_and_native_answers(fake, models, encoder, tmp_path):
    fake.add_rule("", agent(["nut"]))
    shared = build(models, encoder, tmp_path, name="s")
    shared.ingest_session(ALLERGY)
    shared.snapshot(tmp_path / "snap")
    ans = shared.answer("Any dessert ideas?")
    recall = shared.recall("Any dessert ideas?")
    # the shared prompt over everything the tools returned: the search's snippets, then the chunk read
    assert ans.context == shared_messages("Any dessert ideas?", recall.text)
    assert recall.text.startswith("Chunk ID: 0, Matched keywords in chunk: ... user: I have a severe tree nut allergy")
    assert "[Chunk 0]" in recall.text and shared.chunk_texts[0] in recall.text
    assert ans.items == recall.items and ans.meta["answer_prompt"] == SHARED_ANSWER_VERSION
    native = build(models, encoder, tmp_path, name="n")
    native.restore(tmp_path / "snap")
    nat = native.answer("Any dessert ideas?", NATIVE)
    assert nat.text == "On the roof." and nat.meta["answer_prompt"] == NATIVE_ANSWER_VERSION
    assert [m.role for m in nat.context] == ["system", "user", "assistant", "tool", "assistant", "tool"]
    assert nat.items == ans.items


@pytest.mark.parametrize("text", [
    '<tools>{"name": "keyword_search", "arguments": {"keywords": ["beehives"]}}</tools>',
    '<tool_call>\n{"name": "semantic_search", "arguments": {"query": "bees"}}\n</tool_call>',
    'I will search first. {"name": "read_chunk", "arguments": {"chunk_ids": ["3"]}}',
    '<function=keyword_search>{"keywords": ["bees"]}</function>',
    'keyword_search(keywords=["bees"])',
])
def test_tool_call_written_as_text_is_a_fault_and_marks_the_answer(fake, models, encoder, tmp_path, text):
    rec = run(fake, models, encoder, tmp_path, lambda b: (
        probe_reply(b) if is_probe(b) else
        text if b.get("tools") else {"score": 1, "reason": "fake"} if b.get("response_format") else "Shared."))
    assert rec.error is None
    assert rec.indirect.meta["stop_reason"] == rec.naive.meta["stop_reason"] == "tool_call_as_text"
    assert rec.fault_counts() == {"tool_call_as_text": 2}
    assert {f.phase for f in rec.faults} == {"naive", "indirect"} and not rec.fact_write_fault
    assert text[:20] in rec.faults[0].detail


def test_ordinary_answers_are_not_taken_for_tool_calls():
    for text in ("Water them at dawn [Chunk 2].", "Use {curly} braces as you like.",
                 'The JSON {"name": "Ann"} has no arguments.', "I searched the keywords and found nothing."):
        assert tool_call_text(text) is None


def test_tool_call_as_text_in_native_mode(fake, models, encoder, tmp_path):
    fake.add_rule("", lambda b: probe_reply(b) if is_probe(b) else
                  '<tools>{"name": "keyword_search", "arguments": {"keywords": ["nut"]}}</tools>')
    mem = build(models, encoder, tmp_path)
    mem.ingest_session(ALLERGY)
    ans = mem.answer("Any dessert ideas?", NATIVE)
    assert ans.meta["stop_reason"] == "tool_call_as_text" and ans.text.startswith("<tools>")
    assert [f.kind for f in mem.take_faults()] == ["tool_call_as_text"]


def test_endpoint_without_tool_calls_is_refused_naming_it(fake, models, encoder, tmp_path):
    fake.add_rule("", "I cannot call tools, but it is noon.")  # every reply is text, the probe's too
    assert a_rag_tool_support(models.answerer) is False
    (probe,) = fake.chat_requests()
    assert probe["tool_choice"] == "auto" and probe["tools"] == [PROBE_TOOL]
    assert "get_current_time" in probe["messages"][-1]["content"]
    assert a_rag_tool_support(models.answerer) is False and len(fake.chat_requests()) == 1  # once per process
    with pytest.raises(ToolSupportError, match=re.escape(f"{fake.base_url} (model fake-model)")):
        ARAG.preflight(models)
    rec = run(fake, models, encoder, tmp_path, "unused")
    assert rec.error.startswith("ToolSupportError") and fake.base_url in rec.error
    assert len(fake.chat_requests()) == 1  # no loop call was ever made
    # a second process (fresh probe cache) is answered by the call cache, not the server
    clear_tool_support_cache()
    again = Models.build(fake_endpoints(fake.base_url), CallCache(tmp_path / "cache"))
    assert a_rag_tool_support(again.answerer) is False and len(fake.chat_requests()) == 1


def test_the_probe_is_a_round_trip_the_model_calls_the_tool_gets_its_result_and_uses_it(fake, models):
    assert a_rag_tool_support(models.answerer) is True  # the fake calls the tool the prompt names, then quotes it
    ARAG.preflight(models)
    first, second = fake.chat_requests()
    assert [m["role"] for m in first["messages"]] == ["user"]
    assert [m["role"] for m in second["messages"]] == ["user", "assistant", "tool"]
    (call,) = second["messages"][1]["tool_calls"]
    assert call["function"]["name"] == "get_current_time"
    assert second["messages"][2] == {"role": "tool", "content": PROBE_RESULT, "tool_call_id": call["id"]}
    assert second["tools"] == [PROBE_TOOL] and second["tool_choice"] == "auto"


@pytest.mark.parametrize("after_result", [
    "I cannot tell the time.",  # the result never reached the model: a format that drops tool messages
    ToolCalls([("get_current_time", {})]),  # it asks again, as a model that saw no result does
])
def test_an_endpoint_that_drops_tool_results_is_refused_naming_a_format_that_keeps_them(fake, models, after_result):
    """What llama-cpp-python's chatml-function-calling does: a structured call, but the tool message never reaches
    the prompt, so the model cannot use the result; the one-request probe passed it."""
    fake.add_rule("", lambda b: after_result if b["messages"][-1]["role"] == "tool" else
                  "I cannot tell the time." if "tools" not in b else ToolCalls([("get_current_time", {})]))
    asked_again = isinstance(after_result, ToolCalls)  # then asked for a final answer without tools: still blind
    n = 3 if asked_again else 2
    assert a_rag_tool_support(models.answerer) is False and len(fake.chat_requests()) == n
    with pytest.raises(ToolSupportError) as e:
        ARAG.preflight(models)
    msg = str(e.value)
    assert fake.base_url in msg and "fake-model" in msg and "did not state it" in msg
    assert "gguf-tool-calls" in msg and "chatml-function-calling, which drops tool results" in msg
    assert ("even when asked for a final answer without tools" in msg) is asked_again
    assert len(fake.chat_requests()) == n  # kept for the process


def test_a_model_that_calls_again_but_states_the_result_when_asked_for_a_final_answer_passes(fake, models):
    """The embedded 1.5B model on gguf-tool-calls: with the tool's result in its prompt it calls the tool again, and
    states the time once asked for a final answer without tools, as A-RAG's loop asks at ``max_loops``."""
    fake.add_rule("", lambda b: "It is 2031-05-17 07:43." if "tools" not in b else ToolCalls([("get_current_time", {})]))
    assert a_rag_tool_support(models.answerer) is True
    first, again, final = fake.chat_requests()
    assert [m["role"] for m in again["messages"]] == ["user", "assistant", "tool"]
    assert "tools" not in final and "tool_choice" not in final
    assert final["messages"][:3] == again["messages"] and final["messages"][3] == {
        "role": "user", "content": FORCE_ANSWER_PROMPT}


def test_a_reply_that_states_the_time_in_its_own_words_passes(fake, models):
    fake.add_rule("", lambda b: "The current time is 7:43 AM on 17 May 2031." if b["messages"][-1]["role"] == "tool"
                  else ToolCalls([("get_current_time", {})]))
    assert a_rag_tool_support(models.answerer) is True


def test_a_tool_call_written_as_text_fails_the_probe(fake, models):
    """What the embedded model does on llama-cpp-python's server without a function-calling chat format."""
    fake.add_rule("get_current_time", '```json\n{\n  "name": "get_current_time",\n  "arguments": {}\n}\n```')
    assert a_rag_tool_support(models.answerer) is False
    with pytest.raises(ToolSupportError, match="fake-model"):
        ARAG.preflight(models)


def test_snapshot_restore_keeps_provenance(fake, models, encoder, tmp_path):
    a = build(models, encoder, tmp_path, name="a")
    a.ingest_session(ALLERGY.with_turn_ids())
    assert a.chunk_sources("0") == ("s_a#0", "s_a#1") and a.chunk_sources("1") == ("s_a#2", "s_a#3")
    assert a.sentence_turns[:5] == ["", "s_a#0", "s_a#0", "s_a#1", "s_a#1"]  # the date header has no turn
    a.snapshot(tmp_path / "snap")
    b = build(models, encoder, tmp_path, name="b")
    b.restore(tmp_path / "snap")
    assert b.chunk_line_turns == a.chunk_line_turns and b.sentence_turns == a.sentence_turns
    items_a, items_b = [], []
    a.run_tool("semantic_search", '{"query": "houseplant for a dark room", "top_k": 1}', {}, items_a)
    b.run_tool("semantic_search", '{"query": "houseplant for a dark room", "top_k": 1}', {}, items_b)
    assert items_a == items_b and items_a[0].sources and set(items_a[0].sources) <= {"s_a#2", "s_a#3"}
    state = json.loads((tmp_path / "snap" / "state.json").read_text())
    del state["chunk_line_turns"], state["sentence_turns"]
    (tmp_path / "snap" / "state.json").write_text(json.dumps(state))
    old = build(models, encoder, tmp_path, name="old")
    old.restore(tmp_path / "snap")
    items: list = []
    text, _ = old.run_tool("read_chunk", '{"chunk_ids": ["0"]}', {}, items)
    assert old.chunk_texts[0] in text and items[0].sources == ()


def test_the_probe_and_the_loop_send_requests_llama_cpp_pythons_server_accepts(fake, models, encoder, tmp_path):
    """llama-cpp-python's server (llm=local) validates each message against its request model, which wants an
    assistant message's content to be a string: ``None`` beside tool calls was an HTTP 500 at the probe's second
    request, so A-RAG failed every task on the embedded model (the nine-system run of session 8). Every request of
    the probe and of a whole agent loop must pass that model."""
    pytest.importorskip("llama_cpp.server.types")
    from llama_cpp.server.types import CreateChatCompletionRequest

    fake.add_rule(SYSTEM_MARK, scripted)
    ARAG.preflight(models)
    mem = build(models, encoder, tmp_path)
    mem.ingest_session(ALLERGY)
    mem.answer("Can you give me a macaron recipe?", NATIVE)
    requests = fake.chat_requests()
    assert any(m["role"] == "assistant" and m.get("tool_calls") for r in requests for m in r["messages"])
    for body in requests:
        CreateChatCompletionRequest.model_validate({"messages": body["messages"], "tools": body.get("tools")})
