"""HippoRAG 2: NER → OpenIE write path and the graph it builds (fact, passage–entity and synonymy edges), the
personalized PageRank, the recognition-memory filter, the PPR and dense-fallback read paths, and exact
snapshot/restore, against the fake OpenAI-compatible server."""

from __future__ import annotations

import json
import math

import networkx as nx
import numpy as np
import pytest
import yaml

from inmind_exp.memory.answering import Answerer
from inmind_exp.llm.embed import Encoder
from inmind_exp.llm import LLMCallError
from inmind_exp.records import FACT_REPLY_TURN_ID, FACT_TURN_ID, Session, Task, Turn
from inmind_exp.memory import SYSTEMS
from systems.hipporag2 import (FILTER_SYSTEM, NATIVE_ANSWER_VERSION, NER_SYSTEM, TRIPLE_SYSTEM, HippoRAG2,
                               close_truncated_json, fact_text, mdhash_id, min_max, personalized_pagerank)
from tests.conftest import make_trace
from tests.fake_openai import Fault

NATIVE = Answerer("native")  # the run's answer=native: the system's own answer prompt

D1, D2 = "2024/01/01 (Mon) 10:00", "2024/02/03 (Sat) 09:30"


class TableEncoder(Encoder):
    """Fixed unit vectors for known texts, so similarities are set by hand; an unknown text is an error."""

    name = "table"

    def __init__(self, table: dict[str, list[float]]):
        self.table = {t: np.asarray(v, dtype=np.float32) / np.linalg.norm(v) for t, v in table.items()}
        self.dim = len(next(iter(table.values())))

    def encode(self, texts):
        return np.vstack([self.table[t] for t in texts]) if texts else np.zeros((0, self.dim), dtype=np.float32)


def unit(dim: int, **coords: float) -> list[float]:
    """A vector with the given coordinates (``e0=0.9``) and the rest of its norm on its own spare axis."""
    v = [0.0] * dim
    for k, x in coords.items():
        v[int(k[1:])] = x
    return v


def mixed(dim: int, cos: float, spare: int) -> list[float]:
    """A unit vector with cosine ``cos`` to e0, the rest on axis ``spare``."""
    v = [0.0] * dim
    v[0], v[spare] = cos, math.sqrt(1 - cos * cos)
    return v


def session(sid: str, date: str, *turns: tuple[str, str]) -> Session:
    return Session(id=sid, date=date, turns=tuple(Turn(r, c) for r, c in turns))


def passage(date: str, role: str, content: str) -> str:
    return f"{date}\n{role}: {content}"


def E(text: str) -> str:
    return mdhash_id(text, "entity-")


def P(text: str) -> str:
    return mdhash_id(text, "chunk-")


def kind(body: dict) -> str:
    system = body["messages"][0]["content"]
    return {NER_SYSTEM: "ner", TRIPLE_SYSTEM: "triples", FILTER_SYSTEM: "filter"}.get(system, "qa")


def script(fake, ner: dict[str, list[str]], triples: dict[str, list], keep=None, answer="Thought: ok.\nAnswer: done"):
    """Route every request by its system prompt: NER and OpenIE replies by a substring of the passage (the last user
    message), the filter through ``keep(candidates) -> kept``, anything else (the QA call) gets ``answer``."""

    def reply(body):
        last = body["messages"][-1]["content"]
        k = kind(body)
        if k == "ner":
            return {"named_entities": next((v for s, v in ner.items() if s in last), [])}
        if k == "triples":
            return {"triples": next((v for s, v in triples.items() if s in last), [])}
        if k == "filter":
            before = json.loads(last.split("[[ ## fact_before_filter ## ]]\n")[1].split("\n\n")[0])["fact"]
            return {"fact": keep(before) if keep else before}
        return answer

    fake.add_rule("", reply)


def calls(fake, which: str) -> list[dict]:
    return [b for b in fake.chat_requests() if kind(b) == which]


# -- write path ---------------------------------------------------------------------------------------------------

def test_write_path_extracts_entities_then_triples_and_builds_the_graph(fake, models, tmp_path, encoder):
    u = "My sister Ana lives in Lisbon and works at Tagus Bank."
    a = "Lisbon is a lovely city."
    script(fake,
           ner={"My sister Ana": ["Ana", "Lisbon", "Tagus Bank", "Ana"], "lovely city": ["Lisbon"]},
           triples={"My sister Ana": [["Ana", "lives in", "Lisbon"], ["Ana", "works at", "Tagus Bank"],
                                      ["Ana", "lives in", "Lisbon"], ["only", "two"], "bad"],
                    "lovely city": [["Lisbon", "is", "lovely city!"]]})
    mem = HippoRAG2(models, encoder, tmp_path / "w")
    mem.ingest_session(session("s1", D1, ("user", u), ("assistant", a)))
    p1, p2 = passage(D1, "user", u), passage(D1, "assistant", a)

    # two calls per passage: NER, then OpenIE conditioned on the (de-duplicated) NER output
    reqs = fake.chat_requests()
    assert [kind(b) for b in reqs] == ["ner", "triples", "ner", "triples"]
    assert all(b["response_format"] == {"type": "json_object"} for b in reqs)
    ner1, tri1 = reqs[0]["messages"], reqs[1]["messages"]
    assert [m["role"] for m in ner1] == ["system", "user", "assistant", "user"] and ner1[-1]["content"] == p1
    assert [m["role"] for m in tri1] == ["system", "user", "assistant", "user"]
    assert f"```\n{p1}\n```" in tri1[-1]["content"]
    assert tri1[-1]["content"].endswith(json.dumps({"named_entities": ["Ana", "Lisbon", "Tagus Bank"]}) + "\n")

    assert mem.passage_ids == [P(p1), P(p2)] and mem.passage_texts == [p1, p2]
    # invalid and duplicate triples dropped; elements normalised (lower case, punctuation to spaces)
    assert mem.openie[P(p1)]["triples"] == [["Ana", "lives in", "Lisbon"], ["Ana", "works at", "Tagus Bank"]]
    assert mem.fact_triples == [["ana", "lives in", "lisbon"], ["ana", "works at", "tagus bank"],
                                ["lisbon", "is", "lovely city"]]
    assert mem.fact_ids == [mdhash_id(fact_text(t), "fact-") for t in mem.fact_triples]
    assert fact_text(["ana", "lives in", "lisbon"]) == "('ana', 'lives in', 'lisbon')"
    assert mem.entity_texts == ["ana", "lisbon", "lovely city", "tagus bank"]
    np.testing.assert_allclose(mem.fact_vecs[0], encoder.encode(["('ana', 'lives in', 'lisbon')"])[0], atol=1e-6)
    assert mem.entity_passages[E("lisbon")] == sorted([P(p1), P(p2)])

    expected = {  # fact edges count both directions; passage-entity edges weigh 1
        tuple(sorted((E("ana"), E("lisbon")))): 2.0, tuple(sorted((E("ana"), E("tagus bank")))): 2.0,
        tuple(sorted((E("lisbon"), E("lovely city")))): 2.0,
        **{tuple(sorted((P(p1), E(e)))): 1.0 for e in ("ana", "lisbon", "tagus bank")},
        **{tuple(sorted((P(p2), E(e)))): 1.0 for e in ("lisbon", "lovely city")},
    }
    vec = dict(zip(mem.entity_texts, encoder.encode(mem.entity_texts)))
    for x in mem.entity_texts:  # synonymy edges wherever MiniLM similarity reaches 0.8, in both directions
        for y in mem.entity_texts:
            if x < y and float(vec[x] @ vec[y]) >= 0.8:
                key = tuple(sorted((E(x), E(y))))
                expected[key] = expected.get(key, 0.0) + 2 * float(vec[x] @ vec[y])
    assert mem.graph_edges() == pytest.approx(expected)


def test_synonymy_edges_at_the_threshold(fake, models, tmp_path):
    text = "I moved from York to New York City, which locals call New York; I wrote NY on the form."
    script(fake, ner={}, triples={"I moved": [["user", "moved from", "York"], ["user", "moved to", "New York City"],
                                              ["New York City", "called", "New York"], ["user", "wrote", "NY"]],
                                  "Big Apple": [["user", "loves", "Big Apple"]]})
    dim = 8
    table = {"new york city": unit(dim, e0=1.0), "new york": unit(dim, e0=0.81, e1=math.sqrt(1 - 0.81 ** 2)),
             "york": unit(dim, e0=0.79, e2=math.sqrt(1 - 0.79 ** 2)), "ny": unit(dim, e0=1.0),
             "user": unit(dim, e3=1.0), "big apple": unit(dim, e0=0.9, e4=math.sqrt(1 - 0.81))}
    p1, p2 = passage(D1, "user", text), passage(D2, "user", "The Big Apple is great.")
    facts = [fact_text(t) for t in ([
        ["user", "moved from", "york"], ["user", "moved to", "new york city"], ["new york city", "called", "new york"],
        ["user", "wrote", "ny"], ["user", "loves", "big apple"]])]
    table.update({t: unit(dim, e5=1.0) for t in facts + [p1, p2]})
    mem = HippoRAG2(models, TableEncoder(table), tmp_path / "w")
    mem.ingest_session(session("s1", D1, ("user", text)))

    syn = {(mem.entity_texts[mem.entity_ids.index(a)], mem.entity_texts[mem.entity_ids.index(b)]): w
           for a, nbrs in mem.synonyms.items() for b, w in nbrs}
    # 0.81 >= 0.8 links "new york city" and "new york" both ways; 0.79 does not link "york"; "ny" (2 characters)
    # gets no edges of its own but is the target of others; an entity is never its own synonym
    assert syn == pytest.approx({("new york city", "ny"): 1.0, ("new york city", "new york"): 0.81,
                                 ("new york", "new york city"): 0.81, ("new york", "ny"): 0.81})
    edges = mem.graph_edges()
    nyc, ny_, york, ny = E("new york city"), E("new york"), E("york"), E("ny")
    # a similarity replaces the fact count on the same pair (upstream keeps one weight per directed pair)
    assert edges[tuple(sorted((nyc, ny_)))] == pytest.approx(1.62, abs=1e-5)
    assert edges[tuple(sorted((nyc, ny)))] == pytest.approx(1.0, abs=1e-5)  # one direction only
    assert edges[tuple(sorted((ny_, ny)))] == pytest.approx(0.81, abs=1e-5)
    assert tuple(sorted((nyc, york))) not in edges and tuple(sorted((ny_, york))) not in edges
    assert edges[tuple(sorted((E("user"), york)))] == 2.0

    # a later session's entity gains edges with the old ones; the result equals a recomputation from scratch
    mem.ingest_session(session("s2", D2, ("user", "The Big Apple is great.")))
    assert [b for b, _ in mem.synonyms[nyc]] == [ny, E("big apple"), ny_]
    assert mem.graph_edges()[tuple(sorted((nyc, E("big apple"))))] == pytest.approx(1.8, abs=1e-5)
    incremental = mem.synonyms
    mem.synonyms = {}
    mem._update_synonymy_edges(0)
    assert mem.synonyms == incremental


# -- personalized PageRank ----------------------------------------------------------------------------------------

def test_personalized_pagerank_matches_hand_computed_values():
    # path A-B-C, restart at A, damping 0.5: pA = pB/4 + 1/2, pB = (pA + pC)/2, pC = pB/4  =>  (7, 4, 1)/12
    p = personalized_pagerank(3, [(0, 1, 1.0), (1, 2, 1.0)], np.array([1.0, 0, 0]), 0.5)
    np.testing.assert_allclose(p, [7 / 12, 4 / 12, 1 / 12], atol=1e-12)
    # an isolated node D restarts by the reset vector (igraph/PRPACK): reset (1, 0, 0, 1) gives pD = pD/4 + 1/4 = 1/3,
    # pB = pB/4 + 1/6 = 2/9, pA = pB/4 + 1/3 = 7/18, pC = 1/18
    p = personalized_pagerank(4, [(0, 1, 1.0), (1, 2, 1.0)], np.array([1.0, 0, 0, 1.0]), 0.5)
    np.testing.assert_allclose(p, [7 / 18, 2 / 9, 1 / 18, 1 / 3], atol=1e-12)
    assert list(np.argsort(-p)) == [0, 3, 1, 2]
    # weights split the walk: star B-A (3), B-C (1), restart at B: pA = 3pB/8, pC = pB/8, pB = pB/4 + 1/2
    p = personalized_pagerank(3, [(1, 0, 3.0), (1, 2, 1.0)], np.array([0, 5.0, 0]), 0.5)
    np.testing.assert_allclose(p, [1 / 4, 2 / 3, 1 / 12], atol=1e-12)
    # parallel edges add up
    parallel = personalized_pagerank(3, [(1, 0, 1.0), (0, 1, 2.0), (1, 2, 1.0)], np.array([0, 5.0, 0]), 0.5)
    np.testing.assert_allclose(parallel, p, atol=1e-12)


def test_personalized_pagerank_agrees_with_networkx_on_a_random_graph():
    rng = np.random.default_rng(0)
    n = 30
    edges = sorted({(int(a), int(b)) for a, b in rng.integers(0, n - 3, size=(60, 2)) if a != b})
    edges = [(a, b, float(rng.uniform(0.5, 3))) for a, b in edges]  # nodes n-3.. stay isolated
    reset = np.where(rng.uniform(size=n) < 0.3, rng.uniform(size=n), 0.0)
    reset[n - 1] = 0.2
    g = nx.Graph()
    g.add_nodes_from(range(n))
    for a, b, w in edges:
        g.add_edge(a, b, weight=g.get_edge_data(a, b, {"weight": 0.0})["weight"] + w)
    pers = {i: float(x) for i, x in enumerate(reset)}
    want = nx.pagerank(g, alpha=0.5, personalization=pers, dangling=pers, weight="weight", tol=1e-14, max_iter=1000)
    np.testing.assert_allclose(personalized_pagerank(n, edges, reset, 0.5), [want[i] for i in range(n)], atol=1e-9)


# -- read path ----------------------------------------------------------------------------------------------------

READ_TURNS = (
    ("user", "My sister Ana lives in Lisbon."),
    ("user", "Ana loves custard tarts."),
    ("user", "I booked a flight to Lisbon."),
    ("assistant", "Enjoy the trip!"),
    ("user", "Chess club meets on Tuesdays."),
)
READ_TRIPLES = {"Ana lives": [["Ana", "lives in", "Lisbon"]], "custard": [["Ana", "loves", "custard tarts"]],
                "flight": [["user", "booked flight to", "Lisbon"]], "Chess": [["chess club", "meets on", "Tuesdays"]]}
QUERY = "What gift should I bring Ana?"


def read_memory(models, path, **params) -> tuple[HippoRAG2, list[str]]:
    """Five passages; query-fact cosines 0.9/0.7/0.5/0.1 (normalised 1, .75, .5, 0), query-passage cosines
    .2/0/.6/1/.4 (normalised the same), entities orthogonal to each other (no synonymy edges)."""
    dim = 20
    texts = [passage(D1, r, c) for r, c in READ_TURNS]
    table = {QUERY: unit(dim, e0=1.0)}
    for i, e in enumerate(["ana", "lisbon", "custard tarts", "user", "chess club", "tuesdays"]):
        table[e] = unit(dim, **{f"e{i + 1}": 1.0})
    for i, (t, c) in enumerate([(["ana", "lives in", "lisbon"], 0.9), (["ana", "loves", "custard tarts"], 0.7),
                                (["user", "booked flight to", "lisbon"], 0.5),
                                (["chess club", "meets on", "tuesdays"], 0.1)]):
        table[fact_text(t)] = mixed(dim, c, 7 + i)
    for i, (t, c) in enumerate(zip(texts, [0.2, 0.0, 0.6, 1.0, 0.4])):
        table[t] = mixed(dim, c, 11 + i)
    mem = HippoRAG2(models, TableEncoder(table), path, **params)
    mem.ingest_session(session("s1", D1, *READ_TURNS))
    return mem, texts


def expected_ppr_order(texts: list[str]) -> list[str]:
    """The passage ranking worked out independently with networkx on the hand-written graph: seeds "ana"
    (0.75 / 2 passages) and "custard tarts" (0.75 / 1 passage), passages 0.05 x their dense score."""
    g = nx.Graph()
    g.add_nodes_from(["ana", "lisbon", "custard tarts", "user", "chess club", "tuesdays", *range(5)])
    for a, b in [("ana", "lisbon"), ("ana", "custard tarts"), ("user", "lisbon"), ("chess club", "tuesdays")]:
        g.add_edge(a, b, weight=2.0)
    for p, ents in [(0, ["ana", "lisbon"]), (1, ["ana", "custard tarts"]), (2, ["user", "lisbon"]),
                    (4, ["chess club", "tuesdays"])]:
        for e in ents:
            g.add_edge(p, e, weight=1.0)
    reset = {n: 0.0 for n in g.nodes}
    reset.update({"ana": 0.375, "custard tarts": 0.75})
    reset.update({i: 0.05 * s for i, s in enumerate([0.2, 0.0, 0.6, 1.0, 0.4])})
    pr = nx.pagerank(g, alpha=0.5, personalization=reset, dangling=reset, weight="weight", tol=1e-14, max_iter=1000)
    return [texts[i] for i in sorted(range(5), key=lambda i: -pr[i])]


def test_filter_keeps_what_the_fake_keeps_and_ppr_ranks_the_passages(fake, models, tmp_path):
    # the fake keeps only the second candidate, slightly misspelt: it is mapped back to the closest candidate
    script(fake, ner={}, triples=READ_TRIPLES, keep=lambda before: [["ana", "loves", "custard tart"]])
    mem, texts = read_memory(models, tmp_path / "w", qa_top_k=3)
    fake.reset_log()
    ans = mem.answer(QUERY, NATIVE)

    (flt,) = calls(fake, "filter")
    shown = json.loads(flt["messages"][-1]["content"].split("[[ ## fact_before_filter ## ]]\n")[1].split("\n\n")[0])
    assert shown == {"fact": [["ana", "lives in", "lisbon"], ["ana", "loves", "custard tarts"],
                              ["user", "booked flight to", "lisbon"], ["chess club", "meets on", "tuesdays"]]}
    assert flt["messages"][-1]["content"].startswith(f"[[ ## question ## ]]\n{QUERY}\n\n")
    assert len(flt["messages"]) == 1 + 2 * 10 + 1  # system, ten demonstrations, the query
    # upstream's DSPy program: its system prompt and first demonstration, the kept facts as its bare JSON string
    assert flt["messages"][0]["content"].startswith("Your input fields are:\n1. `question` (str): Query for retrieval")
    assert flt["messages"][1]["content"].startswith("[[ ## question ## ]]\nAre Imperial River (Florida) and Amaradia "
                                                    "(Dolj) both located in the same country?\n\n")
    assert flt["messages"][2] == {"role": "assistant", "content": '{"fact":[["imperial river","is located in","florida"],'
                                  '["imperial river","is a river in","united states"],["amaradia","flows through",'
                                  '"ro ia de amaradia"]]}'}
    assert ans.meta["mode"] == "ppr" and ans.meta["retrieval_mode"] == "ppr"
    assert ans.meta["facts_after_filter"] == [["ana", "loves", "custard tarts"]]

    # the reset vector: each kept fact's normalised score (.75) over its entity's passage count, passages 0.05 x
    # their normalised dense score; with linking_top_k 1 only the best entity keeps its weight
    q = mem.encoder.encode([QUERY])[0]
    fact_scores, dpr = min_max(mem.fact_vecs @ q), min_max(mem.passage_vecs @ q)
    kept = [mem.fact_triples.index(["ana", "loves", "custard tarts"])]
    nodes, _, _ = mem._graph()
    seeds = {E("ana"): 0.375, E("custard tarts"): 0.75}
    dense = {P(t): 0.05 * s for t, s in zip(texts, [0.2, 0.0, 0.6, 1.0, 0.4]) if s}
    reset = mem.reset_vector(kept, fact_scores, dpr)
    assert {nodes[i]: w for i, w in enumerate(reset) if w} == pytest.approx({**seeds, **dense}, abs=1e-6)
    mem.linking_top_k = 1
    reset = mem.reset_vector(kept, fact_scores, dpr)
    only_best = {E("custard tarts"): 0.75, **dense}
    assert {nodes[i]: w for i, w in enumerate(reset) if w} == pytest.approx(only_best, abs=1e-6)

    top = expected_ppr_order(texts)[:3]
    assert top[0] == texts[1]  # the passage holding both seed entities
    assert top != [texts[3], texts[2], texts[4]]  # differs from the dense ranking
    assert ans.context == mem.qa_messages(QUERY, top)
    user = ans.context[-1].content
    assert user == "".join(f"Wikipedia Title: {t}\n\n" for t in top) + f"Question: {QUERY}\nThought: "
    (qa,) = calls(fake, "qa")
    assert [m["content"] for m in qa["messages"]] == [m.content for m in ans.context]
    assert ans.text == "done"  # the text after "Answer:"
    assert ans.meta["answer_prompt"] == NATIVE_ANSWER_VERSION and ans.meta["response"] == "Thought: ok.\nAnswer: done"
    assert [it.text for it in ans.items] == top and all(it.kind == "passage" for it in ans.items)


def test_no_surviving_fact_falls_back_to_dense_passage_retrieval(fake, models, tmp_path):
    script(fake, ner={}, triples=READ_TRIPLES, keep=lambda before: [])
    mem, texts = read_memory(models, tmp_path / "w", qa_top_k=3)
    ans = mem.answer(QUERY, NATIVE)
    assert ans.meta["mode"] == "dpr" and ans.meta["facts_after_filter"] == []
    assert ans.meta["retrieval_mode"] == "dense"  # what ran, on the record (retrieval_mode_ppr_rate)
    assert ans.context == mem.qa_messages(QUERY, [texts[3], texts[2], texts[4]])  # dense cosines 1, .6, .4


def test_no_facts_means_no_filter_call_and_dense_retrieval(fake, models, tmp_path, encoder):
    script(fake, ner={}, triples={})
    mem = HippoRAG2(models, encoder, tmp_path / "w")
    mem.ingest_session(session("s1", D1, ("user", "I grow tomatoes."), ("assistant", "Nice, water them often.")))
    assert mem.fact_ids == [] and mem.graph_edges() == {}
    # upstream would drop both passages from the graph silently: here each is an empty_extraction fault
    assert [(f.kind, f.where, f.turns) for f in mem.take_faults()] == [
        ("empty_extraction", "openie", ("s1#0",)), ("empty_extraction", "openie", ("s1#1",))]
    ans = mem.answer("How do I water tomatoes?", NATIVE)
    assert calls(fake, "filter") == [] and ans.meta["mode"] == "dpr"
    assert len(ans.context) == 4 and ans.context[-1].content.count("Wikipedia Title: ") == 2


# -- robustness, units, persistence -------------------------------------------------------------------------------

def test_malformed_replies_fall_back_like_upstream(fake, models, tmp_path, encoder):
    def reply(body):
        cut_off = '{"triples": [["Ana", "likes", "tea"], ["Ana", "li'
        return "Sorry, I cannot do that." if kind(body) == "ner" else cut_off

    fake.add_rule("", reply)
    mem = HippoRAG2(models, encoder, tmp_path / "w")
    mem.ingest_session(session("s1", D1, ("user", "Ana likes tea.")))
    tri = calls(fake, "triples")[0]["messages"][-1]["content"]
    assert tri.endswith('{"named_entities": []}\n')  # NER failed: empty entity list, extraction still runs
    assert mem.fact_triples == [["ana", "likes", "tea"]]  # the cut-off reply repaired as upstream does
    # both fallbacks are on the record with the passage's turn
    assert [(f.kind, f.where, f.turns) for f in mem.take_faults()] == [
        ("malformed_reply", "ner", ("s1#0",)), ("malformed_reply", "openie", ("s1#0",))]
    assert close_truncated_json('{"a": [[1, 2], [3') == '{"a": [[1, 2]]}'


def test_endpoint_failure_propagates(fake, models, tmp_path, encoder):
    mem = HippoRAG2(models, encoder, tmp_path / "w")
    fake.fail_next(Fault(status=400))
    with pytest.raises(LLMCallError):
        mem.ingest_session(session("s1", D1, ("user", "Ana likes tea.")))


def test_session_passages(fake, models, tmp_path, encoder):
    script(fake, ner={}, triples={})
    mem = HippoRAG2(models, encoder, tmp_path / "w", passage_unit="session")
    mem.ingest_session(session("s1", D1, ("user", "Hi there."), ("assistant", "Hello!")))
    assert mem.passage_texts == [f"{D1}\nuser: Hi there.\nassistant: Hello!"]
    assert [kind(b) for b in fake.chat_requests()] == ["ner", "triples"]
    with pytest.raises(ValueError):
        HippoRAG2(models, encoder, tmp_path / "x", passage_unit="exchange")


def tomato_script(fake):
    def triples(body):
        last = body["messages"][-1]["content"]
        week = last.split("week ")[-1].split("?")[0].split(".")[0]
        return [["user", "grows", "tomato plants"], ["tomato plants", "need care in", f"week {week}"]]

    def reply(body):
        k = kind(body)
        if k == "ner":
            return {"named_entities": ["tomato plants"]}
        if k == "triples":
            return {"triples": triples(body)}
        if k == "filter":
            before = json.loads(body["messages"][-1]["content"].split("[[ ## fact_before_filter ## ]]\n")[1]
                                .split("\n\n")[0])["fact"]
            return {"fact": before[:2]}
        return "Thought: water.\nAnswer: Stake them."

    fake.add_rule("", reply)


def test_snapshot_restore_round_trips(fake, models, tmp_path, encoder):
    tomato_script(fake)
    trace = make_trace(n_sessions=3, user_turns_per_session=2)
    a = HippoRAG2(models, encoder, tmp_path / "a")
    for s in trace.sessions[:2]:
        a.ingest_session(s)
    a.snapshot(tmp_path / "snap")
    b = HippoRAG2(models, encoder, tmp_path / "b")
    b.restore(tmp_path / "snap")
    first, second = (m.answer("What should I plant next week?", NATIVE) for m in (a, b))
    assert first.meta["mode"] == "ppr" and second.context == first.context
    assert second.text == first.text == "Stake them."
    assert b.graph_edges() == a.graph_edges() and b.synonyms == a.synonyms and b.openie == a.openie
    assert second.items == first.items and all(it.sources for it in first.items)  # provenance survives the restore
    assert b.passage_sources == a.passage_sources and b.fact_passages == a.fact_passages
    for name in ("passage", "entity", "fact"):
        np.testing.assert_array_equal(getattr(a, f"{name}_vecs"), getattr(b, f"{name}_vecs"))
    # both go on identically after the restore point
    a.ingest_session(trace.sessions[2])
    b.ingest_session(trace.sessions[2])
    assert b.graph_edges() == a.graph_edges() and b.synonyms == a.synonyms
    query = "When do tomato plants need care?"
    assert b.answer(query, NATIVE).context == a.answer(query, NATIVE).context
    with pytest.raises(ValueError):
        HippoRAG2(models, encoder, tmp_path / "c", passage_unit="session").restore(tmp_path / "snap")


def test_registered_with_its_config(models, tmp_path, encoder, repo_root):
    cfg = yaml.safe_load((repo_root / "conf" / "system" / "hipporag2.yaml").read_text())
    assert cfg["name"] == "hipporag2" and SYSTEMS.get("hipporag2") is HippoRAG2
    mem = HippoRAG2(models, encoder, tmp_path / "w", **cfg["params"])
    assert (mem.linking_top_k, mem.qa_top_k, mem.passage_node_weight, mem.damping,
            mem.synonymy_edge_sim_threshold, mem.passage_unit) == (5, 5, 0.05, 0.5, 0.8, "turn")
    with pytest.raises(TypeError):
        HippoRAG2(models, encoder, tmp_path / "x", top_k=3)
    with pytest.raises(ValueError):
        HippoRAG2(models, None, tmp_path / "y")


# -- upstream one-shots, provenance, faults, answer modes, the ``hipporag`` alias ---------------------------------

def test_prompts_carry_upstreams_one_shots(fake, models, tmp_path, encoder):
    script(fake, ner={}, triples={"tea": [["Ana", "likes", "tea"]]})
    mem = HippoRAG2(models, encoder, tmp_path / "w")
    mem.ingest_session(session("s1", D1, ("user", "Ana likes tea.")))
    mem.answer("What does Ana like?", NATIVE)
    ner, tri = calls(fake, "ner")[0]["messages"], calls(fake, "triples")[0]["messages"]
    radio_city = ("Radio City\nRadio City is India's first private FM radio station and was started on 3 July 2001.\n"
                  "It plays Hindi, English and regional songs.\n")
    assert ner[1]["content"].startswith(radio_city) and '"PlanetRadiocity.com"]' in ner[2]["content"]
    assert radio_city in tri[1]["content"] and '["PlanetRadiocity.com", "offers", "songs"]' in tri[2]["content"]
    assert ner[0]["content"].startswith("Your task is to extract named entities from the given paragraph.")
    qa = calls(fake, "qa")[0]["messages"]
    assert qa[0]["content"].startswith("As an advanced reading comprehension assistant")
    assert qa[1]["content"].startswith("Wikipedia Title: The Last Horse\n")
    assert qa[1]["content"].endswith("\n\nQuestion: When was Neville A. Stanton's employer founded?\nThought: ")
    assert qa[2]["content"].endswith("\nAnswer: 1862.")
    # nothing personal is left in any of the one-shots (the old ones were an asthma inhaler and a lactose intolerance)
    every = " ".join(m["content"] for b in fake.chat_requests() for m in b["messages"][:3]).lower()
    for word in ("asthma", "inhaler", "lactose", "allerg", "pediatrician", "brother", "daughter"):
        assert word not in every


FACT = "I started learning the cello last month with a teacher named Mira."
REPLY = "Nice, enjoy the lessons with Mira."
TASK = Task(id="t1", domain="other", user_message=FACT, assistant_message=REPLY,
            naive_query="Which instrument did I start learning?",
            query="Can you suggest a weekly practice routine for my cello lessons?", explanation="-")


def protocol_script(fake, fact_triples=None):
    """Tomato triples for trace passages, cello triples for the injected pair (or ``fact_triples`` for the fact
    turn: a reply string sent as is), a filter that keeps everything, the judges' default JSON verdict."""
    def reply(body):
        last = body["messages"][-1]["content"]
        k = kind(body)
        if k == "ner":
            return {"named_entities": []}
        if k == "triples":
            if FACT in last and fact_triples is not None:
                return fact_triples
            if FACT in last:
                return {"triples": [["user", "learns", "cello"], ["Mira", "teaches", "cello"]]}
            if REPLY in last:
                return {"triples": [["assistant", "wishes well for", "lessons with Mira"]]}
            return {"triples": [["user", "grows", "tomato plants"]]}
        if k == "filter":
            before = json.loads(last.split("[[ ## fact_before_filter ## ]]\n")[1].split("\n\n")[0])["fact"]
            return {"fact": before}
        if (body.get("response_format") or {}).get("type") == "json_object":
            return {"score": 1, "reason": "fake"}
        return "Thought: ok.\nAnswer: done"

    fake.add_rule("", reply)


def run(models, tmp_path, encoder, **params):
    from inmind_exp.protocol.task import run_task

    return run_task(TASK, make_trace(n_sessions=3, user_turns_per_session=2), 0,
                    lambda wd: HippoRAG2(models, encoder, wd, **params), models, tmp_path / "run",
                    config_hash="h", system_name="hipporag2")


def test_fact_passage_retrieved_gives_provenance_recall_1(fake, models, tmp_path, encoder):
    protocol_script(fake)
    rec = run(models, tmp_path, encoder, qa_top_k=2)
    assert rec.error is None and rec.faults == () and not rec.fact_write_fault
    assert rec.target_recall_provenance == 1 and rec.naive_recall_provenance == 1
    [item] = [it for it in rec.indirect.items if FACT_TURN_ID in it.sources]
    assert item.kind == "passage" and item.sources == (FACT_TURN_ID,) and item.text.endswith(f"user: {FACT}")
    assert rec.indirect.meta["mode"] == "ppr"  # the cello facts survived the filter and seeded the graph search


def test_fact_passage_stored_but_not_retrieved_gives_0(fake, models, tmp_path, encoder):
    from dataclasses import replace

    from inmind_exp.protocol.task import run_task

    protocol_script(fake)
    task = replace(TASK, query="How deep should I water my tomato plants in week 1?")  # unrelated to the fact
    rec = run_task(task, make_trace(n_sessions=3, user_turns_per_session=2), 0,
                   lambda wd: HippoRAG2(models, encoder, wd, qa_top_k=1), models, tmp_path / "run",
                   config_hash="h", system_name="hipporag2", keep_workdir=True)
    assert rec.error is None and rec.faults == ()
    assert rec.target_recall_provenance == 0 and rec.naive_recall_provenance == 1
    assert len(rec.indirect.items) == 1 and "tomato" in rec.indirect.items[0].text
    stored = HippoRAG2(models, encoder, tmp_path / "check")
    stored.restore(tmp_path / "run" / "post_ingest")
    assert [p for p in stored.passage_ids if FACT_TURN_ID in stored.passage_turns(p)]  # the fact was stored


def test_entities_and_facts_carry_the_turns_of_their_passages(fake, models, tmp_path, encoder):
    protocol_script(fake)
    from inmind_exp.protocol.task import inject

    mem = HippoRAG2(models, encoder, tmp_path / "w")
    for s in inject(make_trace(n_sessions=2, user_turns_per_session=1), TASK, 1):
        mem.ingest_session(s)
    fid = mdhash_id(fact_text(["user", "learns", "cello"]), "fact-")
    assert mem.fact_sources(fid) == (FACT_TURN_ID,)
    assert mem.entity_sources(E("cello")) == (FACT_TURN_ID,)
    # "user" is named by the fact passage and by every passage of the trace (all get the tomato triple)
    assert mem.entity_sources(E("user")) == ("bg_00#0", "bg_00#1", "bg_01#0", "bg_01#1", FACT_TURN_ID)
    assert mem.entity_sources(E("lessons with mira")) == (FACT_REPLY_TURN_ID,)
    tomato = mdhash_id(fact_text(["user", "grows", "tomato plants"]), "fact-")
    assert mem.fact_sources(tomato) == ("bg_00#0", "bg_00#1", "bg_01#0", "bg_01#1")
    # an identical passage (same date, role and text) is stored once and derives from both turns
    mem.ingest_session(Session("again", D1, (Turn("user", "Hello there.", id="again#0"),
                                             Turn("user", "Hello there.", id="again#1"))))
    pid = P(passage(D1, "user", "Hello there."))
    assert mem.passage_turns(pid) == ("again#0", "again#1") and mem.passage_ids.count(pid) == 1


def test_truncated_openie_reply_on_the_injected_exchange_is_a_fact_write_fault(fake, models, tmp_path, encoder):
    protocol_script(fake, fact_triples='{"triples": [["user", "learns", "cel')  # cut off mid-triple
    rec = run(models, tmp_path, encoder, qa_top_k=2)
    assert rec.error is None and rec.fact_write_fault
    assert rec.fault_counts() == {"malformed_reply": 1}
    [f] = rec.faults
    assert (f.kind, f.where, f.turns, f.phase) == ("malformed_reply", "openie", (FACT_TURN_ID,), "ingest")


def test_empty_extraction_on_the_injected_exchange_is_a_diagnostic_not_a_fault(fake, models, tmp_path, encoder):
    """A well-formed OpenIE reply with no triple (an acknowledgement naming no entity) is upstream's outcome, not a
    fallback: on the record by kind, but neither a memory fault nor a fact-write fault."""
    from inmind_exp.protocol.metrics import compute

    protocol_script(fake, fact_triples={"triples": []})
    rec = run(models, tmp_path, encoder, qa_top_k=2)
    assert rec.error is None and not rec.fact_write_fault and rec.fault_counts() == {"empty_extraction": 1}
    assert rec.faults[0].turns == (FACT_TURN_ID,) and rec.faults[0].diagnostic
    m = compute([rec])
    assert m.memory_fault_rate == 0.0 and m.fact_write_fault_rate == 0.0 and m.faults_by_kind == {"empty_extraction": 1}
    # upstream keeps the passage for dense retrieval: it is still found by the cello query
    assert rec.target_recall_provenance == 1


@pytest.mark.parametrize("cut_fact", [False, True])
def test_a_cut_openie_reply_is_charged_to_the_passage_it_writes(fake, models, tmp_path, encoder, cut_fact):
    """The NER and OpenIE calls declare their passage's turns: a reply cut while writing another session's passage
    is no fact-write fault; one cut while writing the fact's passage is."""
    from tests.fake_openai import CutReply

    protocol_script(fake)
    script = fake.rules[-1][1]
    target = FACT if cut_fact else "bg_01"

    def reply(body):
        last = body["messages"][-1]["content"]
        if kind(body) == "triples" and (FACT in last if cut_fact else "Session 1 question 0" in last):
            return CutReply(json.dumps(script(body)))
        return script(body)

    fake.rules[-1] = ("", reply)
    rec = run(models, tmp_path, encoder, qa_top_k=2)
    cuts = [f for f in rec.faults if f.kind == "truncated_reply" and f.phase == "ingest"]
    assert rec.error is None and len(cuts) == 1, (target, rec.faults)
    assert rec.fact_write_fault is cut_fact
    assert cuts[0].turns == ((FACT_TURN_ID,) if cut_fact else ("bg_01#0",))


def test_shared_and_native_answer_prompts(fake, models, tmp_path, encoder):
    from inmind_exp.memory.answering import SHARED_ANSWER_VERSION, shared_messages
    from systems.hipporag2 import ONE_SHOT_QA_INPUT, ONE_SHOT_QA_OUTPUT, QA_SYSTEM

    protocol_script(fake)
    answers = {}
    for mode in ("shared", "native"):
        mem = HippoRAG2(models, encoder, tmp_path / mode, qa_top_k=2)
        for s in make_trace(n_sessions=2, user_turns_per_session=1).sessions:
            mem.ingest_session(s)
        answers[mode] = (mem.answer("How do I care for tomato plants?", Answerer(mode)), mem.recall("How do I care for tomato plants?"))
    (shared, recall), (native, _) = answers["shared"], answers["native"]
    assert shared.context == shared_messages("How do I care for tomato plants?", recall.text)
    assert recall.text == "\n\n".join(it.text for it in recall.items) and len(recall.items) == 2
    assert "Wikipedia" not in shared.context[0].content and "Thought" not in shared.context[0].content
    assert shared.meta["answer_prompt"] == SHARED_ANSWER_VERSION
    assert shared.text == "Thought: ok.\nAnswer: done"  # the shared answer is the whole reply
    assert [m.content for m in native.context[:3]] == [QA_SYSTEM, ONE_SHOT_QA_INPUT, ONE_SHOT_QA_OUTPUT]
    assert native.text == "done" and native.meta["answer_prompt"] == NATIVE_ANSWER_VERSION
    assert native.items == shared.items


def test_hipporag_is_an_alias_with_the_same_config_and_result_identity(repo_root):
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from inmind_exp.config.schema import register_configs
    from inmind_exp.config.identity import identity_hash, result_identity
    from inmind_exp.config.resolve import as_config

    register_configs()
    with initialize_config_dir(config_dir=str(repo_root / "conf"), version_base="1.3"):
        alias = compose("config", overrides=["system=hipporag"])
        canonical = compose("config", overrides=["system=hipporag2"])
        other = compose("config", overrides=["system=naive_rag"])
    assert OmegaConf.to_container(alias, resolve=True) == OmegaConf.to_container(canonical, resolve=True)
    assert alias.system.name == "hipporag2" and SYSTEMS.get(alias.system.name) is HippoRAG2
    ids = [identity_hash(result_identity(as_config(c), {}, "dataset", "trace")) for c in (alias, canonical, other)]
    assert ids[0] == ids[1] != ids[2]


def test_reasoning_endpoint_gets_no_refused_parameter(fake, tmp_path, encoder):
    from inmind_exp.llm import CallCache, Models
    from tests.conftest import fake_endpoints

    models = Models.build(fake_endpoints(fake.base_url, reasoning=True), CallCache(tmp_path / "cache"))
    protocol_script(fake)
    mem = HippoRAG2(models, encoder, tmp_path / "w")
    for s in make_trace(n_sessions=2, user_turns_per_session=1).sessions:
        mem.ingest_session(s)
    assert mem.answer("How do I care for tomato plants?", NATIVE).text == "done"
    bodies = fake.chat_requests()
    assert {kind(b) for b in bodies} == {"ner", "triples", "filter", "qa"}
    for b in bodies:
        assert not {"temperature", "top_p", "max_tokens", "logprobs", "top_logprobs"} & set(b)
        assert b["max_completion_tokens"] == 256


def test_no_prompt_piece_is_close_to_a_bundled_task(encoder, repo_root):
    """Every paragraph of every prompt (and each filter demonstration) stays below MiniLM cosine 0.40 to every
    bundled task's fact, queries and explanation; the one-shot this replaced (an asthma inhaler) scored 0.47."""
    import systems.hipporag2 as mod

    tasks = [json.loads(line) for line in (repo_root / "inmind_exp/data/bundled/tasks.jsonl").read_text().splitlines()
             if line.strip()]
    task_vecs = encoder.encode([t[k] for t in tasks for k in ("user_message", "naive_query", "query", "explanation")])
    prompts = [v for k, v in vars(mod).items() if k.isupper() and isinstance(v, str) and len(v) > 40]
    prompts += [q + " " + before for q, before, _ in mod.FILTER_DEMOS]  # upstream's JSON strings
    pieces = [p for text in prompts for p in text.split("\n\n") if len(p.strip()) > 30]
    assert len(pieces) > 25
    assert float((encoder.encode(pieces) @ task_vecs.T).max()) < 0.40
    old_one_shot = ("2023/05/14 (Sun) 09:12\nuser: My daughter Lena starts at Brookfield Elementary in September, so "
                    "we are moving to Portland at the end of June. Her pediatrician, Dr. Okafor, told us to keep her "
                    "Flovent inhaler within reach during the drive because of her asthma.")
    assert float((encoder.encode([old_one_shot]) @ task_vecs.T).max()) > 0.40  # the check can fail


def test_old_snapshot_without_provenance_loads_with_empty_sources(fake, models, tmp_path, encoder):
    tomato_script(fake)
    a = HippoRAG2(models, encoder, tmp_path / "a")
    a.ingest_session(make_trace(n_sessions=1, user_turns_per_session=1).sessions[0])
    a.snapshot(tmp_path / "snap")
    state = json.loads((tmp_path / "snap" / "state.json").read_text())
    del state["passage_sources"], state["fact_passages"]
    (tmp_path / "snap" / "state.json").write_text(json.dumps(state))
    b = HippoRAG2(models, encoder, tmp_path / "b")
    b.restore(tmp_path / "snap")
    got, want = b.recall("tomato plants"), a.recall("tomato plants")
    assert [it.text for it in got.items] == [it.text for it in want.items] and len(got.items) == 2
    assert all(it.sources == () for it in got.items) and all(it.sources for it in want.items)
