"""HippoRAG 2 (Gutierrez et al. 2025, "From RAG to Memory: Non-Parametric Continual Learning for Large Language
Models", arXiv:2502.14802): an OpenIE knowledge graph over passages, searched by personalized PageRank seeded from
the query's facts after an LLM "recognition memory" filter.

Reimplemented (the ``hipporag`` package pins torch 2.5.1, vllm 0.6.6 and igraph) from ``OSU-NLP-Group/HippoRAG``
at c617143: ``src/hipporag/HippoRAG.py`` (``index``, ``add_fact_edges``, ``add_passage_edges``,
``add_synonymy_edges``, ``add_new_edges``, ``retrieve``, ``get_fact_scores``, ``rerank_facts``,
``graph_search_with_fact_entities``, ``get_top_k_weights``, ``dense_passage_retrieval``, ``run_ppr``, ``qa``),
``information_extraction/openie_openai.py``, ``prompts/templates/ner.py``, ``triple_extraction.py``,
``rag_qa_musique.py``, ``rerank.py`` (``DSPyFilter``) with ``prompts/dspy_prompts/filter_llama3.3-70B-Instruct.json``,
``embedding_store.py``, ``utils/misc_utils.py`` (``text_processing``, ``compute_mdhash_id``, ``min_max_normalize``),
``utils/llm_utils.py`` (``filter_invalid_triples``, ``fix_broken_generated_json``), ``utils/embed_utils.py``
(``retrieve_knn``) and ``utils/config_utils.py`` (defaults).

Passage unit: one trace turn (``passage_unit: turn``, the default) or one whole session (``session``). A turn is
about 230 tokens, the size of the paragraphs HippoRAG 2 was built and evaluated on (MuSiQue/2Wiki/HotpotQA
passages, NarrativeQA chunks); a LongMemEval session is about 2.5k tokens, so one NER and one OpenIE call over it
would have to list every entity and triple of a long conversation in one reply (upstream caps replies at 2,048
tokens), and the QA prompt's top 5 passages would hold about 12k tokens of mostly unrelated chat. Per-turn
passages cost about 1,000 calls and 1M tokens for the 47-session trace against 94 calls and 0.35M tokens per
session (memory-systems.md), but OpenIE of a passage does not depend on any other passage, so the call cache makes
the shared trace a one-time cost and each task pays only for the injected turns. A passage reads
"<session date>\\n<role>: <content>" (per session: one "<role>: <content>" line per turn): the first line plays the
part of upstream's "Title" line and gives the answerer the time of the turn.

Write path, per new passage (ids are upstream's ``compute_mdhash_id``: "chunk-"/"entity-"/"fact-" + md5 of the
text; an identical passage is stored once, as upstream):
  1. NER: one-shot prompt, JSON ``{"named_entities": [...]}`` (entities de-duplicated in order);
  2. OpenIE: one-shot prompt conditioned on the passage and ``{"named_entities": ...}``, JSON
     ``{"triples": [[s, p, o], ...]}``; triples that are not lists of 3 are dropped and duplicates removed
     (``filter_invalid_triples``), then every element is normalised by ``text_processing`` (lower case, anything
     but [a-z0-9 ] to a space);
  3. passage, entity (triple subjects and objects) and fact (``str`` of the triple tuple) embedding stores filled
     with ``self.encoder``;
  4. graph: fact edges between subject and object counted in both directions per occurrence, passage-entity
     edges (weight 1) from each passage to the entities of its triples, synonymy edges from every entity with more
     than 2 alphanumeric characters to its nearest entities (top ``synonymy_edge_topk``) whose cosine similarity
     is >= ``synonymy_edge_sim_threshold`` (at most 101 each), weighted by that similarity. As upstream's
     ``node_to_node_stats`` holds one weight per directed pair, a synonymy weight replaces a fact count on the same
     pair, and the undirected graph's weight of {u, v} is the sum of the (u, v) and (v, u) weights.
Read path, per query:
  1. fact scores: min-max normalised cosine of the query with every fact; the top ``linking_top_k`` (5) facts go
     to the recognition-memory filter (one JSON call; skipped when there are no facts), which returns the facts to
     keep; each returned fact is mapped to its closest candidate with difflib, as upstream;
  2. no fact survives: dense passage retrieval (min-max normalised cosine) ranks the passages; otherwise each
     surviving fact's subject and object get the fact's score divided by the number of passages the entity
     occurs in (averaged over facts), only the top ``linking_top_k`` entities keep their weight, every passage
     node gets ``passage_node_weight`` x its normalised dense score, and personalized PageRank (``damping``
     0.5, undirected, weighted; walkers on nodes without edges restart by the reset vector as in igraph's PRPACK
     solver) ranks the passages by their PageRank;
  3. the top ``qa_top_k`` (5) passages are what the answerer sees.

Answer modes (``answer=shared|native``): ``recall`` returns the top ``qa_top_k`` passages in rank order, rendered as
the passage texts separated by blank lines (no facts: upstream's QA step shows passages only). ``shared`` (the
default) answers them with the shared prompt of ``inmind_exp.memory.answering``; ``native`` uses upstream's QA prompt,
``prompts/templates/rag_qa_musique.py`` verbatim (system prompt, the Neville A. Stanton one-shot demonstration)
laid out as ``HippoRAG.qa`` does ("Wikipedia Title: <passage>" blocks, "Question: <query>", "Thought: "), and the
answer is the text after "Answer:" (the whole reply when there is none). ``meta.answer_prompt`` names the prompt.

Provenance: a passage carries the ids of the turns it was built from (one turn, or a whole session; an identical
passage stored once carries every turn that produced it); a fact carries the passages it was extracted from and an
entity the passages whose triples name it (``fact_sources`` / ``entity_sources`` give their turns). The items put
in the answerer's context are passages, each with its turns. Snapshots keep all of it (older ones load empty).

Faults (``MemorySystem.fault``, with the passage's turn ids while writing): a NER, OpenIE or filter reply that is
empty (``empty_reply``), unusable or only usable after upstream's cut-off repair (``malformed_reply``), and a
passage whose well-formed OpenIE reply holds no valid triple, which upstream leaves out of the graph silently
(``empty_extraction``, a diagnostic, not a fault: an acknowledgement turn often names no entity). Upstream's
behaviour is kept: the passage is still stored and reachable by dense retrieval. The NER and OpenIE calls declare
the passage's turns (``MemorySystem.memory_json``), so a cut reply is charged to them.

Deliberate deviations:
  - The NER, OpenIE and QA prompts are upstream's verbatim, one-shots included (the Radio City paragraph, the
    Neville A. Stanton question), and so are the recognition filter's system prompt and its ten DSPy
    demonstrations (upstream's multi-hop film and geography questions; ``systems/prompts/hipporag2.py``).
  - A passage's first line is its session date, in the place of upstream's title line, so the QA prompt reads
    "Wikipedia Title: <date>" followed by the turn: upstream's ``qa`` puts that label before every passage of
    every dataset, and we keep it rather than change upstream's prompt.
  - The filter asks for a JSON object (json_object mode) instead of DSPy's "[[ ## fact_after_filter ## ]] ...
    [[ ## completed ## ]]" markers, so its demonstrations answer with their bare ``fact_after_filter`` JSON and
    the input template's closing sentence asks for that JSON; upstream's system prompt is sent unchanged.
  - Incremental indexing equals one upstream ``index`` call over all passages so far: after each session the
    synonymy edges are brought up to date over all entities (the new ones and the old ones that gained a
    neighbour above the threshold) instead of being appended again on every ``index`` call (upstream re-adds
    every old synonymy edge, duplicating it, on each call).
  - igraph's PRPACK personalized PageRank is replaced by an exact sparse solve (scipy) of the same equations.
  - Ties are broken by insertion order (rankings: a stable sort reversed, as upstream's ``argsort()[::-1]``, so
    the later item first; synonymy neighbours: the earlier entity first); new entities and facts are stored in
    sorted order (upstream: ``np.unique`` and an unordered set).
  - Upstream's ``assert`` that every kept entity has a non-zero weight (it fails when a kept fact's normalised
    score is 0) is dropped; an empty memory answers from no passages instead of failing.
  - JSON replies: the shared client asks for json_object and re-asks ``json_attempts - 1`` times (1 = upstream's
    single call); a final unparseable reply is repaired as upstream repairs truncated replies (cut after the last
    comma, close open brackets), and anything still off-schema is an empty NER/OpenIE/filter result, as upstream;
    both are recorded as faults (see above). Upstream repairs only replies cut off by the length limit; we try the
    repair on any unparseable reply. Endpoint failures propagate.
  - No query instructions for the encoder (upstream's OpenAI encoder drops them too); sampling parameters and
    max tokens are the roles' defaults (upstream: temperature 0, 2,048 tokens, 512 for the filter).
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from inmind_exp.memory import (SYSTEMS, Answer, CallProfile, ContextItem, MemorySystem, Message, Recall, Session,
                               at_least, non_negative, parse_json_object, read_json, similarity, unit, write_json)
from systems.prompts.hipporag2 import (FILTER_DEMOS, FILTER_INPUT, FILTER_SYSTEM, NER_SYSTEM, ONE_SHOT_NER_OUTPUT,
                                       ONE_SHOT_PASSAGE, ONE_SHOT_QA_INPUT, ONE_SHOT_QA_OUTPUT, ONE_SHOT_TRIPLE_OUTPUT,
                                       PROMPTS_VERSION, QA_DOC_LABEL, QA_SYSTEM, TRIPLE_FRAME, TRIPLE_SYSTEM)

PROMPT_VERSION = "hipporag2-v3"
#: version of the answer prompt used in ``answer=native`` (upstream's rag_qa_musique template and ``qa`` layout)
NATIVE_ANSWER_VERSION = "hipporag2-rag-qa-musique-v1"

PASSAGE_UNITS = ("turn", "session")


# -- helpers (our own versions of upstream's utilities) -----------------------------------------------------------

def mdhash_id(text: str, prefix: str) -> str:
    """Upstream's ``compute_mdhash_id``: the prefix and the md5 hex digest of the text."""
    return prefix + hashlib.md5(text.encode()).hexdigest()


def normalise_phrase(text: Any) -> str:
    """Upstream's ``text_processing``: lower case, every character outside [A-Za-z0-9 ] becomes a space, trimmed."""
    return re.sub("[^A-Za-z0-9 ]", " ", str(text).lower()).strip()


def fact_text(triple: Sequence[str]) -> str:
    """The text a fact is stored and embedded as: ``str`` of the triple tuple, as upstream's fact store."""
    return str(tuple(triple))


def min_max(x: np.ndarray) -> np.ndarray:
    """Upstream's ``min_max_normalize``: all ones when every value is equal."""
    lo, hi = float(np.min(x)), float(np.max(x))
    if hi - lo == 0:
        return np.ones_like(x)
    return (x - lo) / (hi - lo)


def descending(scores: np.ndarray) -> np.ndarray:
    """Indices by decreasing score, as upstream's ``np.argsort(scores)[::-1]`` with a stable sort."""
    return np.argsort(scores, kind="stable")[::-1]


def close_truncated_json(text: str) -> str:
    """Repair a cut-off JSON reply the way upstream's ``fix_broken_generated_json`` does: drop what follows the
    last comma, then close the brackets and braces still open (ignoring those inside strings)."""
    try:
        json.loads(text)
        return text
    except json.JSONDecodeError:
        pass
    cut = text.rfind(",")
    if cut != -1:
        text = text[:cut]
    stack: list[str] = []
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "{[":
            stack.append(ch)
        elif ch in "}]" and stack and {"}": "{", "]": "["}[ch] == stack[-1]:
            stack.pop()
    return text + "".join("}" if ch == "{" else "]" for ch in reversed(stack))


def valid_triples(raw: Any) -> list[list[str]]:
    """Upstream's ``filter_invalid_triples``: lists of exactly three items, as strings, first occurrence kept."""
    seen: set[tuple[str, ...]] = set()
    out: list[list[str]] = []
    for t in raw if isinstance(raw, list) else []:
        if not isinstance(t, list) or len(t) != 3:
            continue
        t = [str(x) for x in t]
        if tuple(t) not in seen:
            seen.add(tuple(t))
            out.append(t)
    return out


def personalized_pagerank(n: int, edges: Sequence[tuple[int, int, float]], reset: np.ndarray,
                          damping: float) -> np.ndarray:
    """Personalized PageRank on an undirected weighted graph, as igraph's PRPACK solver computes it.

    ``edges`` are undirected (u, v, w) with u != v; parallel edges add up. A walker moves to a neighbour with
    probability ``damping`` (in proportion to edge weight) and otherwise restarts by ``reset`` (normalised to sum
    1); on a node without edges it always restarts by ``reset``. Hence p = d Pᵀp + c r for a scalar c, so p is
    (I - d Pᵀ)⁻¹ r normalised to sum 1, which is solved exactly here.
    """
    r = np.asarray(reset, dtype=np.float64)
    r = np.where(np.isnan(r) | (r < 0), 0.0, r)
    if r.shape != (n,) or r.sum() <= 0:
        raise ValueError("personalized_pagerank: reset must be a non-negative vector of length n with a positive sum")
    r = r / r.sum()
    if not edges:
        return r
    import scipy.sparse as sp
    from scipy.sparse.linalg import spsolve

    u = np.array([e[0] for e in edges], dtype=np.int64)
    v = np.array([e[1] for e in edges], dtype=np.int64)
    w = np.array([e[2] for e in edges], dtype=np.float64)
    adj = sp.coo_matrix((np.concatenate([w, w]), (np.concatenate([u, v]), np.concatenate([v, u]))),
                        shape=(n, n)).tocsr()
    strength = np.asarray(adj.sum(axis=1)).ravel()
    inv = np.divide(1.0, strength, out=np.zeros_like(strength), where=strength > 0)
    transition = sp.diags(inv) @ adj  # row-stochastic except for rows of nodes without edges
    system = (sp.identity(n, format="csc") - damping * transition.T).tocsc()
    p = spsolve(system, r)
    p = np.maximum(np.asarray(p, dtype=np.float64), 0.0)
    return p / p.sum()


# -- the system ---------------------------------------------------------------------------------------------------

@SYSTEMS.register("hipporag2")
class HippoRAG2(MemorySystem):
    """HippoRAG 2: OpenIE graph memory over trace passages, read by fact filtering and personalized PageRank."""

    version = "2"  # 2: the recognition filter's upstream prompt and ten DSPy demonstrations (were ours); empty
    # extractions are diagnostics, JSON faults through MemorySystem.memory_json (issue 21)

    cost = CallProfile(memory_calls_per_user_turn=4.0, memory_calls_per_query=1.0, answer_calls_per_query=1.0,
                       prompt_tokens_per_memory_call=900, prompt_tokens_per_answer_call=1800)

    param_ranges = {"linking_top_k": at_least(1), "qa_top_k": at_least(1), "passage_node_weight": non_negative(),
                    "damping": unit(), "synonymy_edge_topk": at_least(1), "synonymy_edge_sim_threshold": similarity(),
                    "synonymy_edge_query_batch_size": at_least(1), "json_attempts": at_least(1)}

    def __init__(self, llm, encoder, workdir: Path, passage_unit: str = "turn", linking_top_k: int = 5,
                 qa_top_k: int = 5, passage_node_weight: float = 0.05, damping: float = 0.5,
                 synonymy_edge_topk: int = 2047, synonymy_edge_sim_threshold: float = 0.8,
                 synonymy_edge_query_batch_size: int = 1000, json_attempts: int = 1, **params) -> None:
        super().__init__(llm, encoder, workdir, **params)
        if encoder is None:
            raise ValueError("hipporag2: needs a dense encoder (embedding=minilm or emb3), not bm25")
        if passage_unit not in PASSAGE_UNITS:
            raise ValueError(f"hipporag2: passage_unit must be one of {', '.join(PASSAGE_UNITS)}, got {passage_unit!r}")
        self.passage_unit = passage_unit
        self.linking_top_k = int(linking_top_k)
        self.qa_top_k = int(qa_top_k)
        self.passage_node_weight = float(passage_node_weight)
        self.damping = float(damping)
        self.synonymy_edge_topk = int(synonymy_edge_topk)
        self.synonymy_edge_sim_threshold = float(synonymy_edge_sim_threshold)
        self.synonymy_edge_query_batch_size = int(synonymy_edge_query_batch_size)
        self.json_attempts = int(json_attempts)
        self._reset_state()

    # -- state ------------------------------------------------------------------------------------------------
    def _reset_state(self) -> None:
        # embedding stores: ids and texts in insertion order, vectors row-aligned (None while empty)
        self.passage_ids: list[str] = []
        self.passage_texts: list[str] = []
        self.passage_vecs: np.ndarray | None = None
        self.entity_ids: list[str] = []
        self.entity_texts: list[str] = []
        self.entity_vecs: np.ndarray | None = None
        self.fact_ids: list[str] = []
        self.fact_triples: list[list[str]] = []
        self.fact_vecs: np.ndarray | None = None
        # OpenIE results per passage id: raw entities and valid (unnormalised) triples
        self.openie: dict[str, dict[str, list]] = {}
        # directed edge weights, as upstream's node_to_node_stats
        self.fact_edges: dict[tuple[str, str], float] = {}
        self.passage_edges: dict[tuple[str, str], float] = {}
        self.synonyms: dict[str, list[list[Any]]] = {}  # entity id -> [[neighbour id, similarity], ...]
        self.entity_passages: dict[str, list[str]] = {}  # entity id -> passage ids whose triples mention it
        # provenance: passage id -> the trace turn ids it was built from; fact id -> the passages it was extracted from
        self.passage_sources: dict[str, list[str]] = {}
        self.fact_passages: dict[str, list[str]] = {}
        self.n_sessions = 0
        self._graph_cache: tuple[list[str], dict[str, int], list[tuple[int, int, float]]] | None = None

    # -- write path -------------------------------------------------------------------------------------------
    def passages_of(self, session: Session) -> list[tuple[str, tuple[str, ...]]]:
        """The passages a session is stored as (``passage_unit``): each text with the ids of its turns."""
        turns = session.with_turn_ids().turns
        if self.passage_unit == "turn":
            return [(f"{session.date}\n{t.role}: {t.content}", (t.id,)) for t in turns]
        return [(f"{session.date}\n" + "\n".join(f"{t.role}: {t.content}" for t in turns), tuple(t.id for t in turns))]

    def ingest_session(self, session: Session) -> None:
        new: dict[str, str] = {}
        for text, turns in self.passages_of(session):
            pid = mdhash_id(text, "chunk-")
            # an identical passage is stored once (upstream); it derives from every turn that produced it
            self.passage_sources[pid] = sorted(set(self.passage_sources.get(pid, ())) | set(turns))
            if pid not in new and pid not in self.openie:
                new[pid] = text
        for pid, text in new.items():
            turns = tuple(self.passage_sources[pid])
            entities = self._ner(text, turns)
            triples, ok = self._triples(text, entities, turns)
            if ok and not triples:  # upstream keeps the passage out of the graph without a word
                self.fault("empty_extraction", "openie", f"no valid triple for passage {pid} "
                           f"({len(entities)} named entities); it is reachable by dense retrieval only", turns)
            self.openie[pid] = {"entities": entities, "triples": triples}
        if new:
            self._index(list(new), list(new.values()))
        self.n_sessions += 1

    # -- provenance ---------------------------------------------------------------------------------------------
    def passage_turns(self, pid: str) -> tuple[str, ...]:
        return tuple(self.passage_sources.get(pid, ()))

    def fact_sources(self, fid: str) -> tuple[str, ...]:
        """The turns a fact derives from: those of every passage it was extracted from."""
        return tuple(sorted({t for pid in self.fact_passages.get(fid, ()) for t in self.passage_turns(pid)}))

    def entity_sources(self, eid: str) -> tuple[str, ...]:
        """The turns an entity derives from: those of every passage whose triples name it."""
        return tuple(sorted({t for pid in self.entity_passages.get(eid, ()) for t in self.passage_turns(pid)}))

    def _index(self, pids: list[str], texts: list[str]) -> None:
        """Add new passages to the stores and the graph (upstream's ``index`` after OpenIE)."""
        self.passage_ids += pids
        self.passage_texts += texts
        self.passage_vecs = _stack(self.passage_vecs, self.encoder.encode(texts))

        chunk_triples = {pid: [[normalise_phrase(x) for x in t] for t in self.openie[pid]["triples"]] for pid in pids}
        known_entities = set(self.entity_texts)
        new_entities = sorted({x for pid in pids for t in chunk_triples[pid] for x in (t[0], t[2])} - known_entities)
        if new_entities:
            self.entity_ids += [mdhash_id(e, "entity-") for e in new_entities]
            self.entity_texts += new_entities
            self.entity_vecs = _stack(self.entity_vecs, self.encoder.encode(new_entities))
        known_facts = set(self.fact_ids)
        new_facts = sorted({fact_text(t): t for pid in pids for t in chunk_triples[pid]}.items())
        new_facts = [(fid, ft, t) for ft, t in new_facts if (fid := mdhash_id(ft, "fact-")) not in known_facts]
        if new_facts:
            self.fact_ids += [f[0] for f in new_facts]
            self.fact_triples += [list(f[2]) for f in new_facts]
            self.fact_vecs = _stack(self.fact_vecs, self.encoder.encode([f[1] for f in new_facts]))

        for pid in pids:  # add_fact_edges + add_passage_edges
            chunk_entities: set[str] = set()
            for t in chunk_triples[pid]:
                fid = mdhash_id(fact_text(t), "fact-")
                self.fact_passages[fid] = sorted(set(self.fact_passages.get(fid, ())) | {pid})
            for s, _, o in chunk_triples[pid]:
                a, b = mdhash_id(s, "entity-"), mdhash_id(o, "entity-")
                chunk_entities |= {a, b}
                self.fact_edges[(a, b)] = self.fact_edges.get((a, b), 0.0) + 1.0
                self.fact_edges[(b, a)] = self.fact_edges.get((b, a), 0.0) + 1.0
            for ent in sorted(chunk_entities):
                self.entity_passages[ent] = sorted(set(self.entity_passages.get(ent, [])) | {pid})
                self.passage_edges[(pid, ent)] = 1.0
        if new_entities:
            self._update_synonymy_edges(len(self.entity_ids) - len(new_entities))
        self._graph_cache = None

    def _update_synonymy_edges(self, first_new: int) -> None:
        """Synonymy edges (``add_synonymy_edges``) after entities ``first_new``... were added: an entity's edges
        depend only on the entities at least as similar as the threshold, so only the new entities and the old ones
        that gained such a neighbour are recomputed; the result equals a recomputation over all entities."""
        vecs, n = self.entity_vecs, len(self.entity_ids)
        thr, bs = self.synonymy_edge_sim_threshold, self.synonymy_edge_query_batch_size
        rows = set(range(first_new, n))
        for start in range(first_new, n, bs):
            block = vecs[start:start + bs] @ vecs[:first_new].T
            rows |= {int(i) for i in np.nonzero((block >= thr - 1e-6).any(axis=0))[0]}
        todo = sorted(rows)
        for start in range(0, len(todo), bs):
            idx = todo[start:start + bs]
            sims = vecs[idx] @ vecs.T
            for row, i in enumerate(idx):
                self.synonyms[self.entity_ids[i]] = self._neighbours(i, sims[row])

    def _neighbours(self, i: int, sims: np.ndarray) -> list[list[Any]]:
        """Entity ``i``'s synonymy edges [neighbour id, similarity]: its top ``synonymy_edge_topk`` entities by
        similarity (itself included, as upstream's kNN), those at or above the threshold, at most 101, none for
        entities with 2 or fewer alphanumeric characters and none to an empty entity."""
        if len(re.sub("[^A-Za-z0-9]", "", self.entity_texts[i])) <= 2:
            return []
        cand = np.nonzero(sims >= self.synonymy_edge_sim_threshold)[0]
        cand = cand[np.lexsort((cand, -sims[cand]))][: self.synonymy_edge_topk]  # by similarity, then insertion
        out: list[list[Any]] = []
        for j in (int(j) for j in cand):
            if len(out) > 100:
                break
            if j != i and self.entity_texts[j] != "":
                out.append([self.entity_ids[j], float(sims[j])])
        return out

    # -- LLM calls (write path) -------------------------------------------------------------------------------
    def _json_field(self, messages: tuple[Message, ...], key: str, check: Callable[[Any], str | None],
                    where: str, turns: tuple[str, ...] | None) -> tuple[Any | None, bool]:
        """One JSON-mode call (plus the client's re-asks) writing ``turns`` (None: the read path's filter): the value
        of ``key`` (None when the reply is unusable) and whether the reply was well-formed. A repaired or unusable
        reply is recorded as a fault on ``turns`` (``MemorySystem.memory_json``)."""
        def validate(obj: dict[str, Any]) -> str | None:
            return f'missing "{key}"' if key not in obj else check(obj[key])

        def repair(raw: str) -> dict[str, Any] | None:  # upstream's fallback: close a cut-off reply
            try:
                obj = parse_json_object(close_truncated_json(raw))
            except ValueError:
                return None
            return obj if validate(obj) is None else None

        before = len(self.faults)
        obj = self.memory_json(messages, where, turns, attempts=self.json_attempts, validate=validate, repair=repair,
                               fallback="cut-off JSON closed as upstream does, else upstream's empty result")
        return (None if obj is None else obj[key]), len(self.faults) == before

    def _ner(self, passage: str, turns: tuple[str, ...] = ()) -> list[str]:
        messages = (Message("system", NER_SYSTEM), Message("user", ONE_SHOT_PASSAGE),
                    Message("assistant", ONE_SHOT_NER_OUTPUT), Message("user", passage))
        raw, _ = self._json_field(messages, "named_entities",
                                  lambda v: None if isinstance(v, list) else "not a list", "ner", turns)
        ents = [str(e) for e in raw or [] if isinstance(e, (str, int, float)) and not isinstance(e, bool)]
        return list(dict.fromkeys(ents))

    def _triples(self, passage: str, entities: list[str], turns: tuple[str, ...] = ()) -> tuple[list[list[str]], bool]:
        """The valid triples of a passage, and whether the OpenIE reply was well-formed (else a fault is recorded)."""
        messages = (
            Message("system", TRIPLE_SYSTEM),
            Message("user", TRIPLE_FRAME.format(passage=ONE_SHOT_PASSAGE, named_entity_json=ONE_SHOT_NER_OUTPUT)),
            Message("assistant", ONE_SHOT_TRIPLE_OUTPUT),
            Message("user", TRIPLE_FRAME.format(passage=passage,
                                                named_entity_json=json.dumps({"named_entities": entities}))),
        )
        raw, ok = self._json_field(messages, "triples", lambda v: None if isinstance(v, list) else "not a list",
                                   "openie", turns)
        return valid_triples(raw), ok

    # -- read path --------------------------------------------------------------------------------------------
    def recognition_filter(self, query: str, candidates: list[tuple[str, str, str]]) -> list[int]:
        """The filter call: positions (into ``candidates``) of the facts it keeps, in its order (``DSPyFilter``)."""
        messages = [Message("system", FILTER_SYSTEM)]
        for question, before, after in FILTER_DEMOS:  # upstream's JSON strings, as make_template formats them
            messages.append(Message("user", FILTER_INPUT.format(question=question, fact_before_filter=before)))
            messages.append(Message("assistant", after))
        messages.append(Message("user", FILTER_INPUT.format(
            question=query, fact_before_filter=json.dumps({"fact": [list(c) for c in candidates]}))))

        def check(v: Any) -> str | None:
            ok = isinstance(v, list) and all(isinstance(f, list) and all(isinstance(x, str) for x in f) for f in v)
            return None if ok else "fact must be a list of lists of strings"

        kept = self._json_field(tuple(messages), "fact", check, "recognition_filter", None)[0] or []
        shown = [str(c) for c in candidates]
        positions = []
        for f in kept:  # each returned fact is mapped to its closest candidate, as upstream
            best = difflib.get_close_matches(str(f), shown, n=1, cutoff=0.0)
            if best:
                positions.append(shown.index(best[0]))
        return positions[: self.linking_top_k]

    def _graph(self) -> tuple[list[str], dict[str, int], list[tuple[int, int, float]]]:
        """Nodes (entities, then passages) and undirected weighted edges of the graph."""
        if self._graph_cache is None:
            nodes = self.entity_ids + self.passage_ids
            index = {n: i for i, n in enumerate(nodes)}
            directed = dict(self.fact_edges)
            for a in self.entity_ids:  # one weight per directed pair: a similarity replaces a fact count
                for b, sim in self.synonyms.get(a, []):
                    directed[(a, b)] = sim
            directed.update(self.passage_edges)
            undirected: dict[tuple[int, int], float] = {}
            for (a, b), w in directed.items():
                if a == b:
                    continue
                ia, ib = index[a], index[b]
                key = (min(ia, ib), max(ia, ib))
                undirected[key] = undirected.get(key, 0.0) + w
            self._graph_cache = (nodes, index, [(u, v, w) for (u, v), w in sorted(undirected.items())])
        return self._graph_cache

    def graph_edges(self) -> dict[tuple[str, str], float]:
        """The undirected graph as {(node id, node id) sorted: weight}, for inspection."""
        nodes, _, edges = self._graph()
        return {tuple(sorted((nodes[u], nodes[v]))): w for u, v, w in edges}

    def dense_passage_scores(self, q: np.ndarray) -> np.ndarray:
        return min_max(self.passage_vecs @ q)

    def retrieve(self, query: str) -> tuple[list[str], dict[str, Any]]:
        """Passage ids ranked for the query, and a log of the facts and the mode (``ppr`` or ``dpr``)."""
        log: dict[str, Any] = {"facts_before_filter": [], "facts_after_filter": [], "mode": "dpr"}
        if not self.passage_ids:
            return [], log
        q = self.encoder.encode([query])[0]
        kept: list[int] = []
        fact_scores = np.zeros(0, dtype=np.float32)
        if self.fact_ids:
            fact_scores = min_max(self.fact_vecs @ q)
            cand_idx = [int(i) for i in descending(fact_scores)[: self.linking_top_k]]
            candidates = [tuple(self.fact_triples[i]) for i in cand_idx]
            log["facts_before_filter"] = [list(c) for c in candidates]
            kept = [cand_idx[p] for p in self.recognition_filter(query, candidates)]
            log["facts_after_filter"] = [list(self.fact_triples[i]) for i in kept]
        dpr = self.dense_passage_scores(q)
        if not kept:
            order = descending(dpr)
            return [self.passage_ids[i] for i in order], log
        log["mode"] = "ppr"
        scores = self.ppr_passage_scores(kept, fact_scores, dpr)
        return [self.passage_ids[i] for i in descending(scores)], log

    def reset_vector(self, kept: list[int], fact_scores: np.ndarray, dpr: np.ndarray) -> np.ndarray:
        """The PageRank reset weights (``graph_search_with_fact_entities``): entities of the kept facts weighted by
        fact score over their passage count (top ``linking_top_k`` entities only), passages by 0.05 x dense score."""
        nodes, index, _ = self._graph()
        phrase = np.zeros(len(nodes))
        occurs = np.zeros(len(nodes))
        seen: dict[str, int] = {}  # phrase -> node, first-seen order
        for fi in kept:
            s, _, o = self.fact_triples[fi]
            for ph in (s.lower(), o.lower()):
                node = index.get(mdhash_id(ph, "entity-"))
                if node is None:
                    continue
                score = float(fact_scores[fi])
                n_passages = len(self.entity_passages.get(nodes[node], []))
                if n_passages > 0:
                    score /= n_passages
                phrase[node] += score
                occurs[node] += 1
                seen.setdefault(ph, node)
        phrase = np.divide(phrase, occurs, out=np.zeros_like(phrase), where=occurs != 0)
        if self.linking_top_k:
            top = sorted(seen.items(), key=lambda kv: phrase[kv[1]], reverse=True)[: self.linking_top_k]
            mask = np.zeros(len(nodes), dtype=bool)
            mask[[node for _, node in top]] = True
            phrase = np.where(mask, phrase, 0.0)
        passage = np.zeros(len(nodes))
        passage[[index[p] for p in self.passage_ids]] = min_max(dpr) * self.passage_node_weight
        return phrase + passage

    def ppr_passage_scores(self, kept: list[int], fact_scores: np.ndarray, dpr: np.ndarray) -> np.ndarray:
        nodes, index, edges = self._graph()
        ppr = personalized_pagerank(len(nodes), edges, self.reset_vector(kept, fact_scores, dpr), self.damping)
        return np.array([ppr[index[p]] for p in self.passage_ids])

    def qa_messages(self, query: str, passages: list[str]) -> tuple[Message, ...]:
        """Upstream's QA prompt (``answer=native``): system prompt, the one-shot demonstration, then the passages
        each after ``QA_DOC_LABEL`` and a blank line, "Question: <query>" and "Thought: " (``HippoRAG.qa``)."""
        user = "".join(f"{QA_DOC_LABEL}{p}\n\n" for p in passages) + f"Question: {query}\nThought: "
        return (Message("system", QA_SYSTEM), Message("user", ONE_SHOT_QA_INPUT), Message("assistant", ONE_SHOT_QA_OUTPUT),
                Message("user", user))

    def recall(self, query: str) -> Recall:
        """The top ``qa_top_k`` passages (the only memory the QA step shows), each with the turns it was built from;
        rendered as the passages in rank order separated by blank lines. Facts only steer retrieval."""
        ranked, log = self.retrieve(query)
        top = ranked[: self.qa_top_k]
        text_of = dict(zip(self.passage_ids, self.passage_texts))
        items = tuple(ContextItem("passage", text_of[p], self.passage_turns(p)) for p in top)
        # what ran (``inmind_exp.protocol.budget``): PPR over the graph, or the dense fallback when the filter kept no fact
        mode = "ppr" if log["mode"] == "ppr" else "dense"
        return Recall("\n\n".join(it.text for it in items), items, {**log, "passages": top, "retrieval_mode": mode})

    def native_answer(self, query: str, recall: Recall) -> Answer:
        """Upstream's QA call; the text after "Answer:" is the answer (the whole reply when there is none)."""
        context = self.qa_messages(query, [it.text for it in recall.items])
        comp = self.llm.answerer.chat(context)
        parts = comp.text.split("Answer:")
        text = parts[1].strip() if len(parts) > 1 else comp.text
        return Answer(text, context, meta={**recall.meta, "response": comp.text, "answer_prompt": NATIVE_ANSWER_VERSION},
                      items=recall.items)

    # -- persistence ------------------------------------------------------------------------------------------
    def snapshot(self, directory: Path) -> None:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        for name in ("passage", "entity", "fact"):
            vecs = getattr(self, f"{name}_vecs")
            if vecs is not None:
                np.save(directory / f"{name}_vectors.npy", vecs)
        write_json(directory / "state.json", {
            "version": PROMPT_VERSION,
            "passage_unit": self.passage_unit,
            "passages": [[i, t] for i, t in zip(self.passage_ids, self.passage_texts)],
            "entities": [[i, t] for i, t in zip(self.entity_ids, self.entity_texts)],
            "facts": [[i, t] for i, t in zip(self.fact_ids, self.fact_triples)],
            "openie": self.openie,
            "fact_edges": _edge_list(self.fact_edges),
            "passage_edges": _edge_list(self.passage_edges),
            "synonyms": self.synonyms,
            "entity_passages": self.entity_passages,
            "passage_sources": self.passage_sources,
            "fact_passages": self.fact_passages,
            "n_sessions": self.n_sessions,
        })

    def restore(self, directory: Path) -> None:
        directory = Path(directory)
        st = read_json(directory / "state.json")
        if st["passage_unit"] != self.passage_unit:
            raise ValueError(f"hipporag2: snapshot {directory} was written with passage_unit={st['passage_unit']!r}, "
                             f"this instance has {self.passage_unit!r}")
        self._reset_state()
        self.passage_ids = [p[0] for p in st["passages"]]
        self.passage_texts = [p[1] for p in st["passages"]]
        self.entity_ids = [e[0] for e in st["entities"]]
        self.entity_texts = [e[1] for e in st["entities"]]
        self.fact_ids = [f[0] for f in st["facts"]]
        self.fact_triples = [list(f[1]) for f in st["facts"]]
        for name in ("passage", "entity", "fact"):
            path = directory / f"{name}_vectors.npy"
            setattr(self, f"{name}_vecs", np.load(path) if path.is_file() else None)
        self.openie = st["openie"]
        self.fact_edges = _edge_dict(st["fact_edges"])
        self.passage_edges = _edge_dict(st["passage_edges"])
        self.synonyms = {k: [[b, float(w)] for b, w in v] for k, v in st["synonyms"].items()}
        self.entity_passages = st["entity_passages"]
        # snapshots written before provenance load with empty sources
        self.passage_sources = st.get("passage_sources", {})
        self.fact_passages = st.get("fact_passages", {})
        self.n_sessions = st["n_sessions"]


def _stack(old: np.ndarray | None, new: np.ndarray) -> np.ndarray:
    new = np.asarray(new, dtype=np.float32)
    return new if old is None or not len(old) else np.vstack([old, new])


def _edge_list(edges: dict[tuple[str, str], float]) -> list[list[Any]]:
    """Edges in insertion order (the order the graph is built in)."""
    return [[a, b, w] for (a, b), w in edges.items()]


def _edge_dict(rows: list[list[Any]]) -> dict[tuple[str, str], float]:
    return {(a, b): float(w) for a, b, w in rows}
