"""xMemory: boundary detection → episodes → predict-then-correct facts → themes (attach / split / merge), the
adaptive_hier read path with its logprob gate (and the no-logprob fallback), and exact snapshot/restore with a
non-empty message buffer, against the fake OpenAI-compatible server."""

from __future__ import annotations

import re

import numpy as np
import pytest
import yaml

from inmind_exp.memory.answering import Answerer
from inmind_exp.records import Session, Turn
from inmind_exp.memory import SYSTEMS
from systems.xmemory import XMemory
from tests.conftest import make_trace

NATIVE = Answerer("native")  # the run's answer=native: the system's own answer prompt

BOUNDARY = "dialogue boundary detection expert"
EPISODE = "episodic memory generation expert"
COLD = "knowledge extraction specialist"
COMPARE = "comparing original conversation with predicted"
PREDICT = "knowledge-based episode prediction system"
THEME = "stable high-level theme summary"
GATE = "# THEMES"
ANSWER = "Semantic Memories:"
D1, D2 = "2024/01/01 (Mon) 10:00", "2024/02/03 (Sat) 09:30"

F1 = "The user grows tomatoes in the backyard."
F2 = "The user grows cherry tomatoes in the backyard garden."
F3 = "The user drives a 2015 Honda Civic to work."
QUERY = "How should I look after my tomato plants?"


def session(sid: str, date: str, *texts: str) -> Session:
    return Session(id=sid, date=date, turns=tuple(Turn("user" if i % 2 == 0 else "assistant", t) for i, t in enumerate(texts)))


def prompt_of(body: dict) -> str:
    return "\n".join(str(m["content"]) for m in body["messages"])


def requests_with(fake, marker: str) -> list[dict]:
    return [b for b in fake.chat_requests() if marker in prompt_of(b)]


def words(n: int, tag: str = "w") -> str:
    return " ".join(f"{tag}{i}" for i in range(n))


def gate_reply(body: dict) -> str:
    """Fake reader: the fake server's logprob for token i is -0.1·(i+1), so a reply of n words has mean NLL
    0.05·(n+1). Themes+facts only: 12 words (NLL 0.65). With the planting episode 1 word (NLL 0.1, IG +0.55: kept
    and expanded); with the second tomato episode 9 words (NLL 0.5, IG +0.15: kept, not expanded); with any other
    episode 30 words (NLL 1.55, IG -0.9: dropped, and a low IG among the first 3 probes stops probing)."""
    eps = prompt_of(body).split("# EPISODES\n", 1)[1].split("\n\nQuestion:")[0]
    if eps == "(none)":
        return words(12)
    if "planted tomatoes" in eps:
        return "w"
    if "grows tomatoes in the backyard" in eps:
        return words(9)
    return words(30)


def dispatch(body: dict):
    """One scripted memory/reader LLM for the whole pipeline."""
    p = prompt_of(body)
    if BOUNDARY in p:
        new = p.split("Newly added messages:\n", 1)[1].split("\n\nPlease carefully", 1)[0]
        return {"should_end": "NEWTOPIC" in new, "reason": "topic change" if "NEWTOPIC" in new else "same topic"}
    if EPISODE in p:
        if "planted" in p:
            return {"title": "Planting tomatoes", "content": "The user planted tomatoes in the backyard garden.",
                    "timestamp": "2024-01-01T10:00:00"}
        if "tomatoes again" in p:
            return {"title": "The user grows tomatoes in the backyard", "content": "The user grows tomatoes in the backyard.",
                    "timestamp": "2024-01-01T10:00:00"}
        if "car" in p:
            return {"title": "Commuting by car", "content": "The user commutes to work in a 2015 Honda Civic.",
                    "timestamp": "2024-01-01T10:00:00"}
        return {"title": "Other chat", "content": "The user asked about a jazz concert in town.", "timestamp": "2024-01-01T10:00:00"}
    if COLD in p:
        return {"statements": [F1, F2]}
    if PREDICT in p:
        return "PREDICTED EPISODE"
    if COMPARE in p:
        return {"statements": [F3]} if "tomatoes again" in p else {"statements": []}
    if THEME in p:
        return "Theme: " + ("car" if "Honda" in p else "gardening")
    if GATE in p:
        return gate_reply(body)
    if ANSWER in p:
        return "Water them deeply."
    return "fake answer"


def garden_session() -> Session:
    """Boundaries fall before each NEWTOPIC message: episodes (0,1) and (2,3) close; (4,5) stays in the buffer."""
    return session("s1", D1, "I planted tomatoes last weekend.", "Great, keep the soil moist.",
                   "NEWTOPIC: about my tomatoes again, they grow well.", "Good to hear.",
                   "NEWTOPIC: my car needs new tyres.", "Check the tread depth first.")


def build(fake, models, tmp_path, encoder, **params) -> XMemory:
    fake.add_rule("", dispatch)
    mem = XMemory(models, encoder, tmp_path / "work", **params)
    mem.ingest_session(garden_session())
    return mem


def test_registered_with_upstream_defaults(repo_root):
    cfg = yaml.safe_load((repo_root / "conf" / "system" / "xmemory.yaml").read_text())
    assert cfg["name"] == "xmemory" and SYSTEMS.get("xmemory") is XMemory
    p = cfg["params"]
    assert (p["theme_attach_threshold"], p["merge_threshold"], p["theme_max_size"], p["theme_knn_k"]) == (0.62, 0.78, 12, 10)
    assert (p["sem_pool"], p["max_themes"], p["max_semantics"], p["episode_probe"]) == (40, 5, 20, 10)


def test_boundaries_create_episodes_where_the_fake_says(fake, models, tmp_path, encoder):
    mem = build(fake, models, tmp_path, encoder)
    bounds = requests_with(fake, BOUNDARY)
    assert len(bounds) == 5  # every message but the first of each episode
    assert all(b["response_format"] == {"type": "json_object"} and b["temperature"] == 0.1 for b in bounds)
    first = prompt_of(bounds[0])
    assert "Current conversation history:\nuser: I planted tomatoes last weekend.\n" in first
    assert "Newly added messages:\nassistant: Great, keep the soil moist." in first
    eps = list(mem.st.episodes.values())
    assert [[m["content"] for m in e["messages"]] for e in eps] == [
        ["I planted tomatoes last weekend.", "Great, keep the soil moist."],
        ["NEWTOPIC: about my tomatoes again, they grow well.", "Good to hear."]]
    assert [e["reason"] for e in eps] == ["topic change", "topic change"]
    assert eps[0]["title"] == "Planting tomatoes" and eps[0]["timestamp"] == "2024-01-01T10:00:00"
    ep_prompt = prompt_of(requests_with(fake, EPISODE)[0])
    assert "[2024-01-01T10:00:00] user: I planted tomatoes last weekend.\n[2024-01-01T10:00:00] assistant:" in ep_prompt
    assert [m["content"] for m in mem.st.buffer] == ["NEWTOPIC: my car needs new tyres.", "Check the tread depth first."]


def test_buffer_cap_forces_a_boundary_and_long_history_drops_the_last_message(fake, models, tmp_path, encoder):
    fake.add_rule("", dispatch)
    mem = XMemory(models, encoder, tmp_path / "cap", buffer_size_max=3, boundary_exclude_threshold=1)
    mem.ingest_session(session("s", D1, "m0", "m1", "m2", "m3"))
    bounds = requests_with(fake, BOUNDARY)
    assert len(bounds) == 2  # m1 and m2 are asked; m3 meets a full buffer and closes it without a call
    assert "Current conversation history:\nuser: m0\n\nNewly" in prompt_of(bounds[1])  # buffer (m0, m1) minus its last message
    (ep,) = mem.st.episodes.values()
    assert ep["reason"] == "Buffer reached maximum size" and len(ep["messages"]) == 3
    assert [m["content"] for m in mem.st.buffer] == ["m3"]


def test_facts_are_predicted_corrected_and_attached_to_themes(fake, models, tmp_path, encoder):
    mem = build(fake, models, tmp_path, encoder)
    cold = requests_with(fake, COLD)
    assert len(cold) == 1 and "Episode Title: Planting tomatoes" in prompt_of(cold[0])
    assert "Episode Time: 2024-01-01" in prompt_of(cold[0])
    # the second episode is predicted from the known facts scoring >= 0.7 as chroma scores them (2·cos - 1):
    # F1 (cosine 0.94 to the episode) qualifies, F2 (cosine 0.82, score 0.63) does not
    (pred,) = requests_with(fake, PREDICT)
    assert f"(your current world model):\n- {F1}\n\n## Your Task" in prompt_of(pred) and pred["temperature"] == 0.3
    (cmp_,) = requests_with(fake, COMPARE)
    assert "PREDICTED EPISODE" in prompt_of(cmp_)
    assert "Message 1 [2024-01-01T10:00:00] - user: NEWTOPIC: about my tomatoes again" in prompt_of(cmp_)
    facts = {s["content"]: s for s in mem.st.semantics.values()}
    assert list(facts) == [F1, F2, F3]
    e1, e2 = mem.st.episodes
    assert facts[F1]["source_episodes"] == [e1] and facts[F3]["source_episodes"] == [e2]
    s1, s2, s3 = mem.st.semantics
    assert [n for n, _ in mem.st.sem_knn[s3]][:1] in ([s1], [s2]) and s3 not in [n for n, _ in mem.st.sem_knn[s3]]
    # the two tomato facts share a theme; the car fact founds its own
    assert sorted(t["semantic_ids"] for t in mem.st.themes.values()) == [[s1, s2], [s3]]
    assert not mem.st.pending
    # summaries are written when read: none while ingesting, every theme dirty (its members not yet summarised)
    assert not requests_with(fake, THEME) and all(t["summarised"] is None for t in mem.st.themes.values())
    mem.end_ingestion()
    fake.reset_log()
    mem.recall(QUERY)  # the pool holds every fact, so both themes are read, each summarised once from its members
    summaries = [prompt_of(b) for b in requests_with(fake, THEME)]
    assert len(summaries) == 2 and f"- {F1}\n- {F2}\nReturn only the summary." in summaries[0]
    assert {t["summary"] for t in mem.st.themes.values()} == {"Theme: gardening", "Theme: car"}
    assert all(t["summarised"] == t["semantic_ids"] for t in mem.st.themes.values())
    fake.reset_log()
    mem.recall(QUERY)
    assert not requests_with(fake, THEME)  # clean themes are not summarised again


def test_eager_theme_summaries_resummarise_every_changed_theme_while_ingesting(fake, models, tmp_path, encoder):
    mem = build(fake, models, tmp_path, encoder, lazy_theme_summaries=False)
    summaries = [prompt_of(b) for b in requests_with(fake, THEME)]
    assert len(summaries) == 3  # found theme 1, found theme 2, re-summarise theme 1 after the attach
    assert f"- {F1}\n- {F2}\nReturn only the summary." in summaries[-1]
    assert {t["summary"] for t in mem.st.themes.values()} == {"Theme: gardening", "Theme: car"}


def _unit_vec(dim: int, deg: float, extra: int = -1, eps: float = 0.0) -> np.ndarray:
    v = np.zeros(dim, dtype=np.float32)
    v[0], v[1] = np.cos(np.deg2rad(deg)), np.sin(np.deg2rad(deg))
    if extra >= 0:
        v[extra] = eps
    return v / np.linalg.norm(v)


def _add_fact(mem: XMemory, vec: np.ndarray) -> str:
    sid = mem.st.new_id("semantic")
    mem.st.semantics[sid] = {"content": f"fact {sid}", "created_at": "2024-01-01T10:00:00", "source_episodes": []}
    mem.st.sem_vec[sid] = vec
    mem.st.pending.append(sid)
    return sid


def test_theme_splits_past_max_size(fake, models, tmp_path, encoder):
    """13 facts in two tight groups 37° apart: they share one centroid (cosine 0.89 >= 0.62, the second group
    joins through the lenient 0.52 floor) until the 13th exceeds 12, and the 0.66 similarity graph splits them."""
    mem = XMemory(models, encoder, tmp_path / "split")
    a_ids, b_ids = [], []
    for i in range(13):
        vec = _unit_vec(384, 26.57 if i % 2 == 0 else -26.57, extra=3 + i % 5, eps=0.05)
        (a_ids if i % 2 == 0 else b_ids).append(_add_fact(mem, vec))
    mem._update_themes(mem.st)
    assert sorted(sorted(t["semantic_ids"]) for t in mem.st.themes.values()) == sorted([a_ids, b_ids])
    (t1, t2) = mem.st.themes.values()
    assert t1["neighbors"] and t2["neighbors"]  # theme kNN recomputed
    # twelve facts are not split
    mem12 = XMemory(models, encoder, tmp_path / "nosplit")
    for i in range(12):
        _add_fact(mem12, _unit_vec(384, 26.57 if i % 2 == 0 else -26.57, extra=3 + i % 5, eps=0.05))
    mem12._update_themes(mem12.st)
    assert [len(t["semantic_ids"]) for t in mem12.st.themes.values()] == [12]


@pytest.mark.parametrize("n_drift,merged", [(6, True), (4, False)])
def test_themes_merge_at_the_merge_threshold(fake, models, tmp_path, encoder, n_drift, merged):
    """Theme A (two facts at 0°) and theme B (one fact at 61°, a new theme since cos 0.48 < 0.52). Facts at 35°
    join B (cos 0.90 > 0.82 to A) and pull its centroid towards A: with 6 of them the centroids reach cosine 0.783
    >= 0.78 and the score gain merges them; with 4 they stay at 0.767 and both themes remain."""
    mem = XMemory(models, encoder, tmp_path / f"merge{n_drift}")
    a = [_add_fact(mem, _unit_vec(384, 0.0, 2, 0.01)), _add_fact(mem, _unit_vec(384, 0.0, 2, -0.01))]
    b = [_add_fact(mem, _unit_vec(384, 61.0))]
    mem._update_themes(mem.st)
    ta, tb = mem.st.themes
    assert [mem.st.themes[ta]["semantic_ids"], mem.st.themes[tb]["semantic_ids"]] == [a, b]
    drift = [_add_fact(mem, _unit_vec(384, 35.0, 2, 0.001 * i)) for i in range(n_drift)]
    c = mem.st.centroid
    mem._update_themes(mem.st)
    if merged:
        assert list(mem.st.themes) == [ta] and mem.st.themes[ta]["semantic_ids"] == a + b + drift
        assert tb not in c and tb not in mem.st.theme_emb
    else:
        assert [t["semantic_ids"] for t in mem.st.themes.values()] == [a, b + drift]
        cos = float(c[ta] @ c[tb] / np.linalg.norm(c[ta]) / np.linalg.norm(c[tb]))
        assert 0.75 < cos < 0.78


def test_read_path_gates_episodes_with_logprobs(fake, models, tmp_path, encoder):
    mem = build(fake, models, tmp_path, encoder)
    buffer_before, episodes_before = list(mem.st.buffer), list(mem.st.episodes)
    fake.reset_log()
    ans = mem.answer(QUERY, NATIVE)
    # the end-of-conversation flush of the buffered tail ran on a copy: memory itself is unchanged
    assert mem.st.buffer == buffer_before and list(mem.st.episodes) == episodes_before
    assert ans.meta["flushed_tail_messages"] == 2 and len(requests_with(fake, EPISODE)) == 1
    e1, e2 = episodes_before
    e3 = "ep000003"  # the flushed car episode
    gates = requests_with(fake, GATE)
    assert all(g["logprobs"] is True and g["max_tokens"] == 20 and g["temperature"] == 0.0 for g in gates)
    base = prompt_of(gates[0])
    assert "# THEMES\n- Theme: gardening\n\n# SEMANTICS\n- The user grows" in base and "# EPISODES\n(none)" in base
    assert [[mem.st.semantics[s]["content"] for s in mem.st.themes[t]["semantic_ids"]] for t in ans.meta["themes"]] \
        == [[F1, F2]]
    assert ans.meta["gate"] == "logprobs" and ans.meta["base_nll"] == pytest.approx(0.65) and ans.meta["gate_ran"]
    probes = [prompt_of(g).split("# EPISODES\n")[1].split("\n\nQuestion")[0] for g in gates[1:]]
    assert probes == ["- The user planted tomatoes in the backyard garden.", "- The user grows tomatoes in the backyard.",
                      "- The user commutes to work in a 2015 Honda Civic."]
    assert ans.meta["ig"] == pytest.approx({e1: 0.55, e2: 0.15, e3: -0.9})
    # IG 0.55 > 0.25: kept with raw messages; IG 0.15: kept; IG -0.9 < -0.4: dropped (and probing stops)
    assert ans.meta["episodes"] == [e1, e2] and ans.meta["expanded"] == [e1]
    (ctx,) = ans.context
    assert ctx.role == "user" and requests_with(fake, ANSWER)[-1]["messages"] == [{"role": "user", "content": ctx.content}]
    # one theme and one fact suffice: each representative also covers its kNN neighbours among the candidates
    # (gardening covers the car theme, F1 covers F2), so greedy coverage stops there
    s1, s2, _ = mem.st.semantics
    assert ans.meta["semantics"] == [s1] and mem.st.sem_knn[s1][0][0] == s2
    sem_block = ctx.content.split("Semantic Memories:\n")[1].split("\n\nEpisodic Memories:")[0]
    assert sem_block == f"- [2024-01-01T10:00:00] {F1}"
    ep_block = ctx.content.split("Episodic Memories:\n")[1].split("\n\nQuestion:")[0]
    assert ep_block.splitlines() == [
        "- [2024-01-01T10:00:00] The user planted tomatoes in the backyard garden.",
        "    Original Messages:",
        "    • user: I planted tomatoes last weekend.",
        "    • assistant: Great, keep the soil moist.",
        "- [2024-01-01T10:00:00] The user grows tomatoes in the backyard."]
    assert ctx.content.endswith(f"Question: {QUERY}\n\nAnswer:") and ans.text == "Water them deeply."
    assert requests_with(fake, ANSWER)[-1]["max_tokens"] == 64  # upstream's cap in native mode


def test_gate_stops_probing_after_a_low_gain_probe_among_the_first_three(fake, models, tmp_path, encoder):
    mem = build(fake, models, tmp_path, encoder)
    e1, e2 = mem.st.episodes

    def second_probe_low(body: dict) -> str:
        eps = prompt_of(body).split("# EPISODES\n", 1)[1]
        return words(30) if eps.startswith("- The user grows tomatoes") else gate_reply(body)

    fake.rules.insert(0, (GATE, second_probe_low))
    fake.reset_log()
    ans = mem.answer(QUERY)
    assert len(requests_with(fake, GATE)) == 3  # base + 2 probes: the flushed car episode is never probed
    assert list(ans.meta["ig"]) == [e1, e2] and ans.meta["episodes"] == [e1] and ans.meta["expanded"] == [e1]


def strip_logprobs(fake) -> None:
    """Make the fake answer like an ordinary endpoint that returns no logprobs even when asked."""
    chat = fake._chat

    def without_logprobs(body):
        out = chat(body)
        out["choices"][0].pop("logprobs", None)
        return out

    fake._chat = without_logprobs


def test_read_path_falls_back_when_no_logprobs_come_back(fake, models, tmp_path, encoder):
    mem = build(fake, models, tmp_path, encoder)
    strip_logprobs(fake)
    fake.reset_log()
    ans = mem.answer(QUERY)
    assert ans.meta["gate"] == "fallback_no_logprobs" and ans.meta["ig"] == {} and ans.meta["gate_ran"] is False
    assert len(requests_with(fake, GATE)) == 1  # only the themes+facts probe; no per-episode probes
    assert len(ans.meta["episodes"]) == 3 and ans.meta["expanded"] == []  # every probe candidate, no raw messages
    assert "Original Messages:" not in ans.context[0].content
    off = XMemory(models, encoder, tmp_path / "off", logprob_gate=False)
    mem.snapshot(tmp_path / "snap")
    off.restore(tmp_path / "snap")
    fake.reset_log()
    assert off.answer(QUERY).meta["gate"] == "disabled" and not requests_with(fake, GATE)


def test_snapshot_restore_round_trips_a_non_empty_buffer(fake, models, tmp_path, encoder):
    mem = build(fake, models, tmp_path, encoder)
    assert len(mem.st.buffer) == 2
    mem.snapshot(tmp_path / "snap")
    other = XMemory(models, encoder, tmp_path / "other")
    other.restore(tmp_path / "snap")
    assert other.st.buffer == mem.st.buffer and other.st.counters == mem.st.counters
    assert list(other.st.themes) == list(mem.st.themes) and other.st.sem_knn == mem.st.sem_knn
    assert all(np.array_equal(other.st.centroid[t], mem.st.centroid[t]) for t in mem.st.themes)
    first, second = mem.answer(QUERY), other.answer(QUERY)
    assert second.context == first.context and second.meta == first.meta
    # the restored buffer carries on: the next session's first message is judged against it
    nxt = session("s2", D2, "Does rain matter for tyres?", "Yes, tread matters in the wet.")
    fake.reset_log()
    mem.ingest_session(nxt)
    a_prompts = [prompt_of(b) for b in fake.chat_requests()]
    assert "Current conversation history:\nuser: NEWTOPIC: my car needs new tyres.\nassistant: Check the tread" in a_prompts[0]
    fake.reset_log()
    other.ingest_session(nxt)
    assert fake.chat_requests() == []  # every prompt byte-identical, so all answered by the shared call cache
    assert other.st.buffer == mem.st.buffer and len(other.st.buffer) == 4
    assert mem.st.buffer[-1]["timestamp"] == "2024-02-03T09:30:00"


def test_default_fake_replies_keep_everything_buffered_and_answer(fake, models, tmp_path, encoder):
    """JSON replies without ``should_end``/``title``/``statements`` mean: no boundary, fallback episode, no facts."""
    mem = XMemory(models, encoder, tmp_path / "d")
    for s in make_trace(n_sessions=2, user_turns_per_session=2).sessions:
        mem.ingest_session(s)
    assert len(mem.st.buffer) == 8 and not mem.st.episodes
    ans = mem.answer("What should I plant next week?")
    assert ans.meta["path"] == "baseline" and ans.meta["flushed_tail_messages"] == 8
    assert re.search(r"- \[2024-01-01T10:00:00\] Episode created at 2024-01-01 10:00:00 with 8 messages\.", ans.context[0].content)


# -- provenance, faults, answer modes and reasoning endpoints on the whole protocol ------------------------------

from inmind_exp.memory.answering import SHARED_ANSWER_SYSTEM, SHARED_ANSWER_VERSION  # noqa: E402
from inmind_exp.llm import CallCache, Models  # noqa: E402
from inmind_exp.protocol.task import run_task  # noqa: E402
from inmind_exp.records import FACT_REPLY_TURN_ID, FACT_TURN_ID, Task  # noqa: E402
from systems.xmemory import ANSWER_PROMPT_VERSION  # noqa: E402
from tests.conftest import fake_endpoints  # noqa: E402
from tests.systems.test_reasoning_endpoint import reasoning_refusal  # noqa: E402

BEES = "I keep two beehives on the flat roof of my apartment building."
BEE_FACT = "The user keeps two beehives on the roof of their apartment building."
TASK = Task(id="bees", domain="other", user_message=BEES, assistant_message="Good to know, thanks for telling me.",
            naive_query="Where do I keep my beehives?", query="Where do my beehives live?",
            explanation="The hives are on the roof.")


def protocol_dispatch(truncate_fact_episode: bool = False):
    """A memory LLM for whole-protocol runs: every user message opens an episode, an episode's content is its
    conversation, facts are extracted from bee and tomato episodes, everything else gets a neutral reply."""

    def reply(body: dict):
        p = prompt_of(body)
        if BOUNDARY in p:
            new = p.split("Newly added messages:\n", 1)[1].split("\n\nPlease carefully", 1)[0]
            return {"should_end": new.startswith("user:"), "reason": "new exchange"}
        if EPISODE in p:
            conv = p.split("Conversation content:\n", 1)[1].split("\n\nBoundary detection reason", 1)[0]
            if truncate_fact_episode and "beehives" in conv:
                return '{"title": "Beehives on the roof", "content": "The user keeps'  # cut off mid-reply
            return {"title": "Exchange", "content": "Conversation: " + conv, "timestamp": "2024-01-01T10:00:00"}
        if COLD in p or COMPARE in p:
            if "beehives" in p:
                return {"statements": [BEE_FACT]}
            m = re.search(r"Session (\d+) question", p)
            return {"statements": [f"The user grows tomato plants in week {m.group(1)}."]} if m else {"statements": []}
        if PREDICT in p:
            return "PREDICTED EPISODE"
        if THEME in p:
            return "Theme: " + ("bees" if "beehives" in p else "gardening")
        if GATE in p:
            return words(5)
        if body.get("response_format"):
            return {"score": 1, "reason": "fake"}  # judges
        return "Answer."

    return reply


def run(fake, models, tmp_path, encoder, task: Task = TASK, **params):
    fake.add_rule("", protocol_dispatch(params.pop("truncate_fact_episode", False)))
    trace = make_trace(n_sessions=3, user_turns_per_session=2)
    make = lambda wd: XMemory(models, encoder, wd, **params)  # noqa: E731
    rec = run_task(task, trace, 1, make, models, tmp_path / "w", config_hash="h", system_name="xmemory",
                   keep_workdir=True)
    stored = XMemory(models, encoder, tmp_path / "check")
    stored.restore(tmp_path / "w" / "post_ingest")
    return rec, stored


def test_injected_fact_stored_and_retrieved_gives_provenance_recall_1(fake, models, tmp_path, encoder):
    rec, mem = run(fake, models, tmp_path, encoder)
    assert rec.error is None
    (fact,) = [s for s in mem.st.semantics.values() if s["content"] == BEE_FACT]
    # the one rule: the fact states the user's message, not the reply it was written with (derived)
    assert (fact["sources"], fact["derived"]) == ([FACT_TURN_ID], [FACT_REPLY_TURN_ID])
    (ep,) = [mem.st.episodes[e] for e in fact["source_episodes"]]
    assert FACT_TURN_ID in ep["sources"] and set(ep["sources"] + ep["derived"]) == {FACT_TURN_ID, FACT_REPLY_TURN_ID}
    other = [s for s in mem.st.semantics.values() if s["content"] != BEE_FACT]
    assert other and all(s["sources"] and FACT_TURN_ID not in s["sources"] for s in other)
    assert all(re.fullmatch(r"bg_\d\d#\d+", t) for s in other for t in s["sources"])
    # a theme summary's origin is the origin of facts it states; the rest of what it summarised is derived
    assert all(t["summarised"] is None for t in mem.st.themes.values())  # written when read, not while ingesting
    mem.recall(TASK.query)
    assert any(t["summarised"] for t in mem.st.themes.values())
    for t in (t for t in mem.st.themes.values() if t["summarised"]):
        facts = [mem.st.semantics[s] for s in t["summarised"]]
        assert set(t["summary_sources"]) <= {x for f in facts for x in f["sources"]}
        assert set(t["summary_sources"] + t["summary_derived"]) == {x for f in facts for x in f["sources"] + f["derived"]}
        assert all(set(f["sources"]) <= set(t["summary_sources"]) for f in facts if f["content"] in t["summary"])
    assert rec.target_recall_provenance == 1 and rec.naive_recall_provenance == 1
    kinds = {it.kind for it in rec.indirect.items}
    assert {"fact", "episode"} <= kinds
    assert any(it.kind == "fact" and BEE_FACT in it.text and FACT_TURN_ID in it.sources for it in rec.indirect.items)
    assert all(it.text in rec.indirect.context_text() for it in rec.indirect.items)  # items are what the answerer saw


def test_injected_fact_stored_but_not_retrieved_gives_provenance_recall_0(fake, models, tmp_path, encoder):
    unrelated = Task(id="bees2", domain="other", user_message=BEES, assistant_message=TASK.assistant_message,
                     naive_query="How do I stake tomato plants in week 2?",
                     query="How do I stake tomato plants in week 2?", explanation="-")
    rec, mem = run(fake, models, tmp_path, encoder, unrelated, sem_pool=1, max_semantics=1, episode_vec_top=1,
                   episode_probe=1, top_k_episodes=1)
    assert rec.error is None
    assert any(s["content"] == BEE_FACT and FACT_TURN_ID in s["sources"] for s in mem.st.semantics.values())
    assert rec.indirect.items and not any(FACT_TURN_ID in it.sources for it in rec.indirect.items)
    assert "beehives" not in rec.indirect.context_text()
    assert rec.target_recall_provenance == 0 and rec.naive_recall_provenance == 0


def test_truncated_episode_reply_on_the_injected_exchange_is_a_fact_write_fault(fake, models, tmp_path, encoder):
    rec, mem = run(fake, models, tmp_path, encoder, truncate_fact_episode=True)
    assert rec.error is None and rec.fact_write_fault is True
    assert rec.fault_counts()["malformed_reply"] == 1
    (f,) = [f for f in rec.faults if f.kind == "malformed_reply"]
    assert f.where == "episode" and f.phase == "ingest" and FACT_TURN_ID in f.turns and FACT_REPLY_TURN_ID in f.turns
    assert "The user keeps" in f.detail
    # upstream's fallback episode is stored, and still carries the injected turns
    (ep,) = [e for e in mem.st.episodes.values() if FACT_TURN_ID in e["sources"]]
    assert ep["content"].startswith("Episode created at")


def test_boundary_and_fact_fallbacks_name_the_turns_being_written(fake, models, tmp_path, encoder):
    def reply(body):
        p = prompt_of(body)
        if BOUNDARY in p:
            return "not json at all"
        return protocol_dispatch()(body)

    fake.add_rule("", reply)
    mem = XMemory(models, encoder, tmp_path / "b")
    mem.ingest_session(session("s1", D1, "first", "second").with_turn_ids())
    (f,) = mem.take_faults()
    assert (f.kind, f.where, f.turns) == ("malformed_reply", "boundary", ("s1#0", "s1#1"))
    fake.rules.insert(0, (COLD, {"facts": ["wrong key"]}))
    st = mem.st
    eid = st.new_id("episode")
    st.episodes[eid] = {"title": "t", "content": "c", "timestamp": "2024-01-01T10:00:00", "reason": "",
                        "messages": [], "sources": ["s1#0"]}
    mem._extract_semantics(st, eid)
    (f,) = mem.take_faults()
    assert (f.kind, f.where, f.turns) == ("malformed_reply", "facts", ("s1#0",))


def test_snapshot_restore_keeps_provenance_and_old_snapshots_load(fake, models, tmp_path, encoder):
    mem = build(fake, models, tmp_path, encoder)
    e1, e2 = mem.st.episodes
    union = lambda e: mem.st.episodes[e]["sources"] + mem.st.episodes[e]["derived"]  # noqa: E731
    assert sorted(union(e1)) == ["s1#0", "s1#1"] and sorted(union(e2)) == ["s1#2", "s1#3"]
    assert [m["id"] for m in mem.st.buffer] == ["s1#4", "s1#5"]
    mem.snapshot(tmp_path / "snap")
    other = XMemory(models, encoder, tmp_path / "other")
    other.restore(tmp_path / "snap")
    assert other.st.semantics == mem.st.semantics and other.st.episodes == mem.st.episodes
    assert other.st.buffer == mem.st.buffer
    assert other.st.themes == mem.st.themes  # the dirty state (``summarised``) included
    assert other.recall(QUERY).items == mem.recall(QUERY).items
    # a snapshot written before provenance existed loads with empty sources
    import json
    state = json.loads((tmp_path / "snap" / "state.json").read_text())
    for _, v in state["episodes"] + state["semantics"]:
        v.pop("sources")
    for m in state["buffer"] + [m for _, e in state["episodes"] for m in e["messages"]]:
        m.pop("id")
    (tmp_path / "snap" / "state.json").write_text(json.dumps(state))
    old = XMemory(models, encoder, tmp_path / "old")
    old.restore(tmp_path / "snap")
    items = old.recall(QUERY).items
    assert items and all(it.sources == () for it in items)


def test_shared_and_native_answer_prompts(fake, models, tmp_path, encoder):
    mem = build(fake, models, tmp_path, encoder)
    mem.snapshot(tmp_path / "snap")
    shared = mem.answer(QUERY)
    assert [m.role for m in shared.context] == ["system", "user"] and shared.context[1].content == QUERY
    assert shared.context[0].content.startswith(SHARED_ANSWER_SYSTEM.split("{memory}")[0])
    assert "Semantic Memories:\n- [2024-01-01T10:00:00] " in shared.context[0].content
    assert "Answer:" not in shared.context[0].content and shared.meta["answer_prompt"] == SHARED_ANSWER_VERSION
    native_mem = XMemory(models, encoder, tmp_path / "n")
    native_mem.restore(tmp_path / "snap")
    fake.reset_log()
    native = native_mem.answer(QUERY, NATIVE)
    (ctx,) = native.context
    assert ctx.role == "user" and native.meta["answer_prompt"] == ANSWER_PROMPT_VERSION
    assert "8. The answer should be less than 5-8 words." in ctx.content  # upstream's length limit
    assert "Take into account" not in ctx.content and "memories from two speakers" in ctx.content
    assert native.items == shared.items
    (req,) = requests_with(fake, "less than 5-8 words")
    assert req["max_tokens"] == 64 and req["temperature"] == 0.0  # upstream's generation settings


def test_reasoning_endpoint_memory_calls_work_and_the_gate_falls_back(tmp_path, encoder):
    from tests.fake_openai import FakeOpenAI

    with FakeOpenAI(validator=reasoning_refusal) as fake:
        fake.add_rule("", dispatch)
        models = Models.build(fake_endpoints(fake.base_url, reasoning=True, max_tokens=300),
                              CallCache(tmp_path / "cache"))
        mem = XMemory(models, encoder, tmp_path / "work")
        mem.ingest_session(garden_session())
        assert len(mem.st.episodes) == 2 and len(mem.st.semantics) == 3  # every memory call went through
        assert mem.take_faults() == []
        ans = mem.answer(QUERY, NATIVE)
        reqs = fake.chat_requests()
        assert all(reasoning_refusal(b) is None for b in reqs)
        assert all(b["max_completion_tokens"] == 300 for b in reqs)  # upstream's fixed caps give way to the role's
        assert not requests_with(fake, GATE)  # no probe can be scored, so none is sent
        assert ans.meta["gate"] == "fallback_no_logprobs" and ans.meta["expanded"] == []
        assert len(ans.meta["episodes"]) == 3 and ans.text == "Water them deeply."
        (f,) = [f for f in mem.take_faults() if f.kind != "empty_extraction"]  # flushing may extract nothing
        assert f.kind == "logprobs_unavailable" and f.where == "gate" and fake.base_url in f.detail
        assert f.diagnostic  # what ran is reported as gate_ran_rate, not as a memory fault


def test_gate_without_logprobs_on_an_ordinary_endpoint_is_a_fault(fake, models, tmp_path, encoder):
    mem = build(fake, models, tmp_path, encoder)
    mem.take_faults()
    strip_logprobs(fake)
    ans = mem.answer(QUERY)
    assert ans.meta["gate"] == "fallback_no_logprobs"
    assert [f.kind for f in mem.take_faults() if f.kind != "empty_extraction"] == ["logprobs_unavailable"]


def test_gate_role_memory_runs_the_gate_on_a_logprob_model_while_a_reasoning_model_answers(tmp_path, encoder):
    """The paper's setting (a reasoning answerer, no logprobs) switches the gate off; ``gate_role: memory`` scores
    the probes on the memory role's model instead, so the gate runs and the reasoning model still answers."""
    from inmind_exp.llm import Endpoint
    from tests.fake_openai import FakeOpenAI

    with FakeOpenAI(validator=lambda b: reasoning_refusal(b) if b.get("model") == "reasoner" else None) as fake:
        fake.add_rule("", dispatch)
        eps = fake_endpoints(fake.base_url, max_tokens=300)
        eps["answerer"] = Endpoint(role="answerer", base_url=fake.base_url, model="reasoner", reasoning=True,
                                   max_attempts=3, backoff_initial_s=0.01, backoff_max_s=0.05, timeout_s=10.0)
        models = Models.build(eps, CallCache(tmp_path / "cache"))
        for role, ran in (("answerer", False), ("memory", True)):
            mem = XMemory(models, encoder, tmp_path / role, gate_role=role)
            mem.ingest_session(garden_session())
            fake.reset_log()
            ans = mem.answer(QUERY)
            gates = requests_with(fake, GATE)
            assert ans.meta["gate_ran"] is ran and ans.meta["gate"] == ("logprobs" if ran else "fallback_no_logprobs")
            assert bool(gates) is ran and all(g["model"] == "fake-model" and g["logprobs"] for g in gates)
            (answer,) = [b for b in fake.chat_requests() if b["model"] == "reasoner"]  # the answer, nothing else
            assert QUERY in answer["messages"][-1]["content"] and "logprobs" not in answer
            kinds = [f.kind for f in mem.take_faults() if f.kind != "empty_extraction"]
            assert kinds == ([] if ran else ["logprobs_unavailable"])


def test_a_refused_theme_summary_is_a_fault_and_the_previous_summary_stays(fake, models, tmp_path, encoder):
    mem = build(fake, models, tmp_path, encoder)
    mem.end_ingestion()
    mem.recall(QUERY)  # the themes are read, so summarised
    mem.take_faults()
    tid, theme = next((t, v) for t, v in mem.st.themes.items() if v["summary"])
    before = (theme["summary"], list(theme["summary_sources"]))
    fake.rules.insert(0, (THEME, "I'm sorry, but I can't help with summarising these facts."))
    member = mem.st.semantics[theme["semantic_ids"][0]]
    member["content"] += " (restated)"  # a changed member: a new summary call (not the cached one)
    theme["summarised"] = None
    mem.recall(QUERY)  # the dirty theme is summarised when read
    [f] = [f for f in mem.take_faults() if f.where == "theme_summary"]
    assert f.kind == "malformed_reply" and "refusal" in f.detail and set(f.turns) == {
        x for s in theme["semantic_ids"] for x in mem.st.semantics[s]["sources"] + mem.st.semantics[s]["derived"]}
    assert (theme["summary"], theme["summary_sources"]) == before and theme["summarised"] is None


def test_lazy_theme_summaries_answer_identically_and_later_tasks_pay_fewer_memory_calls(fake, tmp_path, encoder):
    """Three tasks over one trace and one call cache, eager then lazy (each its own cache): the answers and the exact
    contexts the answerer saw are byte-identical, while the lazy run pays fewer memory calls for later tasks (eager
    re-summarises the theme holding the task's fact after every later session, lazily it is summarised once, read)."""
    base = protocol_dispatch()

    def reply(body):
        p = prompt_of(body)
        if (COLD in p or COMPARE in p) and (m := re.search(r"I grow (\w+) tomato plants on my roof", p)):
            return {"statements": [f"The user grows {m.group(1)} tomato plants on the roof."]}
        return base(body)

    fake.add_rule("", reply)
    trace = make_trace(n_sessions=5, user_turns_per_session=2)
    tasks = [Task(id=f"roof{n}", domain="other", user_message=f"I grow {n} tomato plants on my roof.",
                  assistant_message="Nice.", naive_query="How many tomato plants do I grow on my roof?",
                  query="How many stakes should I buy for my roof tomatoes?", explanation="-")
             for n in ("two", "three", "five")]
    runs = {}
    for lazy in (False, True):
        models = Models.build(fake_endpoints(fake.base_url), CallCache(tmp_path / f"cache{lazy}"))
        make = lambda wd, lazy=lazy: XMemory(models, encoder, wd, lazy_theme_summaries=lazy)  # noqa: E731
        recs = [run_task(t, trace, 1, make, models, tmp_path / f"w{lazy}" / t.id, config_hash="h",
                         system_name="xmemory") for t in tasks]
        assert all(r.error is None for r in recs)
        runs[lazy] = recs
    for eager, lazy in zip(runs[False], runs[True]):
        for a, b in ((eager.indirect, lazy.indirect), (eager.naive, lazy.naive)):
            assert (a.text, a.context) == (b.text, b.context)
        assert "tomato plants on the roof" in lazy.indirect.context_text()
    paid = {k: [r.usage["memory"].calls - r.usage["memory"].cached_calls for r in v] for k, v in runs.items()}
    assert all(x <= y for x, y in zip(paid[True], paid[False])) and sum(paid[True][1:]) < sum(paid[False][1:]), paid
