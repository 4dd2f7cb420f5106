"""xMemory: Hu et al. 2026, "Beyond RAG for Agent Memory: Retrieval by Decoupling and Aggregation" (arXiv 2602.02007).

Reimplemented from HU-xiaobai/xMemory at commit 375ae14 (MIT): src/core/memory_system.py (message loop, semantic
kNN), src/core/boundary_detector.py, src/generation/{prompts,episode_generator,semantic_generator,
prediction_correction_engine}.py, src/core/memory_hierarchy.py (ThemeManager), src/config.py,
evaluation/locomo/{add.py,config.json} (run order and run config) and evaluation/locomo/xMemory_search_framework.py
(the ``adaptive_hier`` read path and answer prompt). Upstream is 13.5k GPU-bound lines; this keeps the algorithm.

Write path, per message: while the buffer is non-empty one boundary call decides whether the new message closes the
buffered episode (the history leaves out the last buffered message once the buffer holds more than 10). At a
boundary, one call writes the episode (title, third-person content, timestamp; messages carry the trace date), then
semantic facts are extracted: a cold-start call for the very first episode, otherwise predict-then-correct (predict
the episode from up to 10 known facts scoring >= 0.7, then extract what the prediction missed; no prediction call
when no fact qualifies). Each new fact gets its k=10 nearest facts (the semantic kNN graph). After each session the
session's facts join themes: attach to the nearest centroid at cosine >= 0.62 (>= 0.52 if the theme has room),
else found a new theme; themes over 12 facts split (threshold-graph components at 0.66, chunks of 12); a full,
incoherent theme (mean intra similarity < 0.72) is re-split by the sparsity+semantics score; theme pairs at centroid
cosine >= 0.78 merge when that score gains (2 passes); singletons are absorbed likewise (floor 0.50); theme kNN
(k=10) is recomputed. A theme whose members changed is dirty; its summary is written (one call) when the read
path first reads it (below), not during ingestion (``lazy_theme_summaries``; a deviation, see the list).

Read path (adaptive_hier): pool the top 40 facts by cosine; candidate themes are those holding pooled facts; pick up
to 5 by greedy coverage over the theme kNN graph (alpha 0.7); keep up to 20 pooled facts of those themes by the same
greedy coverage over the fact kNN graph; probe up to 10 episodes (sources of kept facts plus the top 10 by vector,
ranked by vector score + 0.5 * best parent-fact score). The gate asks the reader for 20 greedy tokens with logprobs,
first with themes+facts only, then with each probed episode: IG = NLL(before) - NLL(after); an episode is kept when
IG > -0.4 and its raw messages are added when IG > 0.25; probing stops after 1 low-IG probe among the first 3 or 2
overall; at most 10 are kept and the best-ranked is kept if none is. ``recall`` renders upstream's timestamped
"Semantic Memories" and "Episodic Memories" blocks (raw messages under expanded episodes). With no facts at all the
upstream baseline is used instead (top 10 episodes by vector, no raw messages).

Answer modes: ``shared`` (default) gives the two blocks to the shared prompt of ``inmind_exp.memory.answering`` with the
answerer's defaults; ``native`` uses upstream's ``ANSWER_PROMPT`` of evaluation/locomo/xMemory_search_framework.py
word for word (dedented; its LoCoMo "two speakers" wording and "less than 5-8 words" limit included), as one user
message at temperature 0 with upstream's 64-token cap. ``Answer.meta['answer_prompt']`` names the prompt used.

Provenance, by the one rule (``inmind_exp.memory.kept_provenance``): every buffered message keeps its turn id; an
episode's origin is the turns of the messages its content still states, a fact's the turns of its episode's messages
it states, a theme summary's the origin of the facts it states (``summary_sources``; themes only reach the gate, not
the answerer); every other message or fact the call saw is derived. ``recall`` items are the facts, the episodes and
the raw messages shown. Snapshots keep all of it; older snapshots load with empty sources.

Faults (``MemorySystem.fault``, with the turn ids being written): a boundary reply that is not JSON or lacks
``should_end`` (no boundary, upstream's default), an episode reply that is not JSON or lacks title/content
(upstream's fallback episode) or has an unparsable timestamp, a fact reply that is not JSON or lacks a
``statements`` list (no facts from that episode, as upstream), an empty prediction or theme summary, a refusal or
chat reply as a prediction (``malformed_reply``; extracted against no prediction) or as a theme summary
(``malformed_reply``; the previous summary is kept, ``inmind_exp.memory.unusable_state``); a logprob
gate without logprobs is the diagnostic ``logprobs_unavailable`` (what ran: ``gate_ran``). An empty ``statements`` list is a legitimate answer ("return an
empty list if there is none"): an ``empty_extraction`` diagnostic, not a fault, as in every system. Every memory
call declares the turns it writes (``MemorySystem.writing``): the buffered messages for a boundary or an episode,
the episode's turns for its facts, the facts' turns for a theme summary, so a reply cut while a later session is
read is charged to the turns it writes.

Reasoning endpoints (``Endpoint.reasoning``): the client sends no temperature, top_p or logprobs, so the memory
calls run with the model's defaults; the gate is not called at all (no probe could be scored), the fallback below
is taken and ``logprobs_unavailable`` is recorded once per query; upstream's fixed caps (theme summary 256, answer
64) give way to the role's own limit, since a reasoning model's cap also counts its hidden reasoning.

Deliberate deviations:
- Synchronous, ordered semantic extraction (upstream uses a thread pool); ids are counters, not uuids.
- Themes are updated after every session (upstream: once per conversation, after the final flush). Theme summaries
  are computed over all members (upstream builds a fresh ThemeManager per update whose caches only hold the current
  batch, so in incremental use it summarised only the new members); unchanged themes are not re-summarised.
- Theme summaries are written lazily (a cost-only change): upstream summarises every changed theme while ingesting,
  but a summary is only read at query time (the candidate themes' embeddings and the gate's theme block), so a
  theme whose members changed is marked dirty (``summarised`` differs from ``semantic_ids``; snapshots carry it) and
  summarised when it is first read, from the members it then has: the very prompt the eager write would have sent
  last, so contexts and answers are unchanged (tested), while themes changed again before they are read, or never
  read, cost nothing. Provenance (``kept_provenance``) and the refusal check (``malformed_reply``, the previous
  summary kept, the theme stays dirty) are as before; such a fault is now recorded while answering, still on the
  facts' turns. A summary written while answering stays in memory (it is the one ingestion would have written).
  ``lazy_theme_summaries: false`` restores upstream's eager writes.
- The buffer persists across sessions and snapshots; the tail is flushed once (upstream's end-of-conversation
  flush) at the end of a task's ingestion (``end_ingestion``). A state with a buffered tail (the shared prefix, an
  instance never told ingestion ended) is flushed on a copy at query time, so answering never changes memory.
- ``buffer_size_max`` is enforced as a forced boundary without an LLM call; upstream's check sits in an ``elif``
  that is unreachable while smart boundaries are on, so its buffer is unbounded.
- Buffer 20 / min episode 1 message follow evaluation/locomo/config.json (the run config); src/config.py says 25 / 2.
- The fact search score is chroma's default (squared L2 on unit vectors): score = 1 - |a-b|^2 = 2cos - 1.
- Upstream's duplicate-fact filter (cosine > 1.0) never fires and is omitted; so is the networkx graph, which the
  adaptive read path never reads. JSON failures fall back as upstream (no boundary, no facts, the fallback episode)
  and are recorded as faults.
- Memory calls take the role's max_tokens (upstream 8192) except theme summaries (256) and gate probes (20).
- The gate runs on the answerer (the reader, as upstream; ``gate_role: memory`` moves it) through the API's token
  logprobs, with its prompt as one chat message, instead of a raw-text HF generation with a prefix KV cache. When the
  endpoint returns no logprobs (``Answer.meta['gate'] == 'fallback_no_logprobs'``, a ``logprobs_unavailable``
  diagnostic) the top 10 probe candidates are kept without raw messages: exactly what upstream's constant 5.0 entropy
  then yields (every IG is 0: above the keep threshold, below the expand threshold).
- The memory-call prompts are upstream's verbatim: boundary, episode, prediction, cold-start and comparison
  extraction in ``systems/prompts/xmemory.py`` (placeholders renamed only), the theme summary and gate prompts here.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from inmind_exp.memory import (SYSTEMS, Answer, CallProfile, ContextItem, MemorySystem, Message, Range, Recall,
                               Session, at_least, kept_provenance, read_json, similarity, unit, unusable_state,
                               write_json)
from systems.prompts.xmemory import (ANSWER_PROMPT, BOUNDARY_PROMPT, COLD_START_PROMPT, COMPARISON_PROMPT,
                                     EPISODE_PROMPT, GATE_PROMPT, NO_KNOWLEDGE_PREDICTION, PREDICTION_PROMPT,
                                     PROMPTS_VERSION, THEME_PROMPT)

PROMPT_VERSION = "xmemory-v3"

ANSWER_PROMPT_VERSION = "xmemory-answer-upstream-375ae14"
ANSWER_TEMPERATURE, ANSWER_MAX_TOKENS = 0.0, 64  # upstream's generation for the answer
MEMORY_BLOCKS = "Semantic Memories:\n{semantic}\n\nEpisodic Memories:\n{episodic}"


def _iso(date: str) -> str:
    """The trace date ("2024/01/01 (Mon) 10:00") as an ISO timestamp; the raw string if it does not parse."""
    m = re.search(r"(\d{4})[/-](\d{1,2})[/-](\d{1,2})(?:\D+?(\d{1,2}):(\d{2}))?", date)
    if not m:
        return date
    y, mo, d, h, mi = (int(x) if x else 0 for x in m.groups())
    try:
        return datetime(y, mo, d, h, mi).isoformat()
    except ValueError:
        return date


def _unit(V: np.ndarray) -> np.ndarray:
    V = np.asarray(V, dtype=np.float64)
    if V.ndim == 1:
        return V / (np.linalg.norm(V) + 1e-12)
    return V / (np.linalg.norm(V, axis=1, keepdims=True) + 1e-12)


def _turn_ids(msgs: list[dict[str, str]]) -> list[str]:
    """The trace turn ids of buffered messages, in order (messages restored from old snapshots have none)."""
    return [m["id"] for m in msgs if m.get("id")]


def _statements(obj: dict[str, Any]) -> list[str]:
    items = obj.get("statements", [])
    return [s.strip() for s in items if isinstance(s, str) and s.strip()] if isinstance(items, list) else []


class _State:
    """Everything the memory holds: buffer, episodes, facts, kNN graph, themes, vectors and id counters."""

    def __init__(self) -> None:
        self.buffer: list[dict[str, str]] = []  # {"role", "content", "timestamp", "id" (the turn id)}
        self.episodes: dict[str, dict[str, Any]] = {}  # id -> {title, content, timestamp, reason, messages, sources}
        self.semantics: dict[str, dict[str, Any]] = {}  # id -> {content, created_at, source_episodes, sources}
        self.sem_knn: dict[str, list[list[Any]]] = {}  # id -> [[neighbour id, sim], ...]
        # id -> {summary, semantic_ids, summarised, summary_sources, neighbors, ...}
        self.themes: dict[str, dict[str, Any]] = {}
        self.ep_vec: dict[str, np.ndarray] = {}
        self.sem_vec: dict[str, np.ndarray] = {}
        self.theme_emb: dict[str, np.ndarray] = {}  # summary embedding (read path)
        self.centroid: dict[str, np.ndarray] = {}  # member mean (write path and theme kNN)
        self.pending: list[str] = []  # facts not yet assimilated into themes
        self.counters = {"episode": 0, "semantic": 0, "theme": 0}

    def new_id(self, kind: str) -> str:
        self.counters[kind] += 1
        return f"{kind[:2]}{self.counters[kind]:06d}"

    def save(self, d: Path) -> None:
        d.mkdir(parents=True, exist_ok=True)
        write_json(d / "state.json", {
            "buffer": self.buffer, "counters": self.counters, "pending": self.pending, "sem_knn": self.sem_knn,
            "episodes": [[k, v] for k, v in self.episodes.items()],
            "semantics": [[k, v] for k, v in self.semantics.items()],
            "themes": [[k, v] for k, v in self.themes.items()],
        })
        for name, vecs in (("ep_vec", self.ep_vec), ("sem_vec", self.sem_vec), ("theme_emb", self.theme_emb),
                           ("centroid", self.centroid)):
            write_json(d / f"{name}_ids.json", list(vecs))
            np.save(d / f"{name}.npy", np.stack(list(vecs.values())) if vecs else np.zeros((0, 0)))

    @classmethod
    def load(cls, d: Path) -> "_State":
        st, s = cls(), read_json(d / "state.json")
        st.buffer, st.counters, st.pending, st.sem_knn = s["buffer"], s["counters"], s["pending"], s["sem_knn"]
        st.episodes, st.semantics, st.themes = (dict(map(tuple, s[n])) for n in ("episodes", "semantics", "themes"))
        for name in ("ep_vec", "sem_vec", "theme_emb", "centroid"):
            ids, arr = read_json(d / f"{name}_ids.json"), np.load(d / f"{name}.npy")
            setattr(st, name, {i: arr[j] for j, i in enumerate(ids)})
        return st


@dataclass(frozen=True)
class Params:
    """Upstream defaults: evaluation/locomo/config.json and src/config.py (write path), src/core/memory_hierarchy.py
    (themes), evaluation/locomo/xMemory_search_framework.py (adaptive_hier with its llama thresholds, CLI top-k)."""

    buffer_size_max: int = 20
    episode_min_messages: int = 1
    boundary_exclude_threshold: int = 10
    max_statements_for_prediction: int = 10
    statement_similarity_threshold: float = 0.7
    semantic_knn_k: int = 10
    theme_attach_threshold: float = 0.62
    theme_lenient_floor: float = 0.52
    theme_max_size: int = 12
    split_cluster_size: int = 8
    split_graph_threshold: float = 0.66
    min_intra_sim: float = 0.72
    merge_threshold: float = 0.78
    theme_knn_k: int = 10
    score_ctx_k: int = 10
    sem_pool: int = 40
    max_themes: int = 5
    max_semantics: int = 20
    episode_vec_top: int = 10
    episode_probe: int = 10
    top_k_episodes: int = 10
    include_original_messages_top_k: int = 10
    alpha_coverage: float = 0.7
    beta_sem: float = 0.5
    tau_ep_stop: float = -0.4
    tau_ep: float = -0.45
    tau_ep_expand: float = 0.25
    gate_max_tokens: int = 20
    theme_summary_max_tokens: int = 256
    logprob_gate: bool = True
    gate_role: str = "answerer"  # the reader whose uncertainty the gate measures
    lazy_theme_summaries: bool = True  # a theme's summary is written when it is read (False: upstream, eagerly)


def _message_inputs(msgs: list[dict[str, str]]) -> list[tuple[str, list[str], list[str]]]:
    """The buffered messages as inputs of the one rule (``kept_provenance``): each its text and its turn."""
    return [(m["content"], [m["id"]] if m.get("id") else [], []) for m in msgs]


def _provenance(item: dict[str, Any]) -> list[str]:
    """An episode's or fact's origin and derived turns (its union), origin first."""
    return [*item.get("sources", ()), *item.get("derived", ())]


def _episode_turns(ep: dict[str, Any]) -> list[str]:
    """The turns an episode was written from (every buffered message, whatever its text states)."""
    return [m["id"] for m in ep.get("messages", []) if m.get("id")] or list(ep.get("sources", []))


@SYSTEMS.register("xmemory")
class XMemory(MemorySystem):
    # ~1.8 boundary calls per exchange + ~0.3 episodes (1 episode call + 1-2 fact calls) per exchange; at most ~4 theme
    # summaries per session (eager's count, a bound: written when read, fewer); the tail flush once per task
    # (counted here per query: ~3 calls on the memory role),
    # the answer plus ~4 gate probes (base + early-stopped episode probes) on the answerer.
    # version 2: upstream's boundary, episode, prediction and extraction prompts verbatim (were paraphrased);
    version = "5"  # empty extractions are diagnostics, JSON faults through MemorySystem.memory_json (issue 21);
    # 3: the tail flushed once at the end of ingestion; gate_ran=False on the baseline path; 4: episodes, facts and
    # theme summaries by the one rule (kept_provenance); a refused theme summary or prediction is a fault
    # 5: theme summaries written when read, not at every change while ingesting (cost only; answers unchanged)
    cost = CallProfile(memory_calls_per_user_turn=2.6, memory_calls_per_session=4.0, memory_calls_per_query=2.0,
                       answer_calls_per_query=5.0, prompt_tokens_per_memory_call=2000,
                       prompt_tokens_per_answer_call=2500)

    param_ranges = {**{k: at_least(1) for k in ("buffer_size_max", "episode_min_messages", "max_statements_for_prediction",
                                            "semantic_knn_k", "theme_max_size", "split_cluster_size", "theme_knn_k",
                                            "score_ctx_k", "sem_pool", "max_themes", "max_semantics", "episode_vec_top",
                                            "episode_probe", "top_k_episodes", "gate_max_tokens",
                                            "theme_summary_max_tokens")},
                    **{k: at_least(0) for k in ("boundary_exclude_threshold", "include_original_messages_top_k")},
                    **{k: similarity() for k in ("statement_similarity_threshold", "theme_attach_threshold",
                                                 "theme_lenient_floor", "split_graph_threshold", "min_intra_sim",
                                                 "merge_threshold")},
                    **{k: unit() for k in ("alpha_coverage", "beta_sem")},
                    **{k: Range() for k in ("tau_ep_stop", "tau_ep", "tau_ep_expand")}}

    def __init__(self, llm, encoder, workdir: Path, **params: Any) -> None:
        known = {k: params.pop(k) for k in list(params) if k in Params.__dataclass_fields__}
        super().__init__(llm, encoder, workdir, **params)
        if encoder is None:
            raise ValueError("xmemory needs a dense encoder (embedding=minilm or emb3)")
        self.p = Params(**known)
        if self.p.gate_role not in ("answerer", "memory"):
            raise ValueError(f"xmemory: gate_role must be 'answerer' or 'memory', got {self.p.gate_role!r}")
        self.st = _State()

    # -- write path -------------------------------------------------------------------------------------------
    def ingest_session(self, session: Session) -> None:
        ts = _iso(session.date)
        for t in session.with_turn_ids().turns:
            self._add_message(self.st, {"role": t.role, "content": t.content, "timestamp": ts, "id": t.id})
        self._update_themes(self.st)

    def end_ingestion(self) -> None:
        """Upstream's end-of-conversation flush: the buffered tail becomes an episode (and its facts) once, while
        ingesting, so a fault writing it is a write fault on its turns."""
        if self.st.buffer:
            self._create_episode(self.st, list(self.st.buffer), "Force episode creation")
            self.st.buffer.clear()
            self._update_themes(self.st)

    @staticmethod
    def _cap(client: Any, n: int) -> Any:
        """Upstream's fixed token cap, or the role's own limit on a reasoning endpoint (whose cap also counts the
        hidden reasoning, so a 256-token cap would often leave no visible text)."""
        return ... if client.endpoint.reasoning else n

    def _add_message(self, st: _State, msg: dict[str, str]) -> None:
        """Upstream ``add_messages``: detect a boundary before buffering the message; a boundary closes the buffer."""
        if st.buffer:
            if len(st.buffer) >= self.p.buffer_size_max:
                end, reason = True, "Buffer reached maximum size"
            else:
                end, reason = self._detect_boundary(st.buffer, msg)
            if end:
                self._create_episode(st, list(st.buffer), reason)
                st.buffer.clear()
        st.buffer.append(msg)

    def _detect_boundary(self, buffer: list[dict[str, str]], msg: dict[str, str]) -> tuple[bool, str]:
        hist = buffer[:-1] if len(buffer) > self.p.boundary_exclude_threshold else buffer
        prompt = BOUNDARY_PROMPT.format(history="\n".join(f"{m['role']}: {m['content']}" for m in hist),
                                        new=f"{msg['role']}: {msg['content']}")
        turns = _turn_ids(buffer + [msg])  # the call decides where the buffered messages' episode ends
        obj = self.memory_json([Message("user", prompt)], "boundary", turns, temperature=0.1,
                               fallback="no boundary (upstream's default)")
        if obj is None:
            return False, ""
        if "should_end" not in obj:
            self.fault("malformed_reply", "boundary", f"no 'should_end'; no boundary (upstream's default): {obj}",
                       turns)
        end = obj.get("should_end", False)
        end = end if isinstance(end, bool) else str(end).strip().lower() == "true"
        return end, str(obj.get("reason") or "LLM boundary detection")

    def _create_episode(self, st: _State, msgs: list[dict[str, str]], reason: str) -> None:
        if len(msgs) < self.p.episode_min_messages:
            return
        conversation = "\n".join(f"[{m['timestamp']}] {m['role']}: {m['content']}" for m in msgs)
        turns = _turn_ids(msgs)
        prompt = EPISODE_PROMPT.format(conversation=conversation, reason=reason)
        # the buffered messages, whichever session is being ingested
        obj = self.memory_json([Message("user", prompt)], "episode", turns, temperature=0.3,
                               fallback="upstream's fallback episode")
        title, content = str((obj or {}).get("title", "")).strip(), str((obj or {}).get("content", "")).strip()
        earliest = min(m["timestamp"] for m in msgs)
        if obj is not None and not ("title" in obj and "content" in obj):
            self.fault("malformed_reply", "episode", f"no 'title'/'content'; upstream's fallback episode: {obj}", turns)
        if obj is not None and "title" in obj and "content" in obj:
            if not (title and content):
                self.fault("empty_reply", "episode", "empty title or content; upstream's placeholder text", turns)
            try:
                ts = datetime.fromisoformat(str(obj.get("timestamp", "")).strip().replace("Z", "+00:00")).isoformat()
            except ValueError:
                self.fault("fallback", "episode", f"unparsed timestamp {obj.get('timestamp')!r}; the earliest "
                           "message's is used (upstream)", turns)
                ts = earliest
            ep = {"title": title or "Generated Episode", "content": content or "Episode content not generated",
                  "timestamp": ts}
        else:  # upstream's fallback episode
            ep = {"title": f"Conversation {self._fmt(earliest, '%Y-%m-%d %H:%M')} ({len(msgs)} messages)",
                  "content": " ".join([
                      f"Episode created at {self._fmt(earliest, '%Y-%m-%d %H:%M:%S')} with {len(msgs)} messages.",
                      "Participants exchanged messages about various topics.",
                      f"Episode created due to: {reason}" if reason else "Episode created automatically.",
                      f"First message from {msgs[0]['role']}: {msgs[0]['content'][:100]}...",
                      *([f"Last message from {msgs[-1]['role']}: {msgs[-1]['content'][:100]}..."]
                        if len(msgs) > 1 else []),
                  ]), "timestamp": earliest}
        eid = st.new_id("episode")
        origin, derived = kept_provenance(ep["content"], _message_inputs(msgs))
        st.episodes[eid] = {**ep, "reason": reason, "messages": msgs, "sources": origin, "derived": derived}
        st.ep_vec[eid] = self.encoder.encode([ep["content"]])[0]
        self._extract_semantics(st, eid)

    @staticmethod
    def _fmt(ts: str, fmt: str) -> str:
        try:
            return datetime.fromisoformat(ts).strftime(fmt)
        except ValueError:
            return ts

    def _extract_semantics(self, st: _State, eid: str) -> None:
        """Upstream ``learn_from_episode_simplified``: cold start, or predict from known facts and extract the gap."""
        ep = st.episodes[eid]
        if not st.semantics:
            prompt = COLD_START_PROMPT.format(title=ep["title"], content=ep["content"],
                                              date=self._fmt(ep["timestamp"], "%Y-%m-%d"))
        else:
            q = _unit(self.encoder.encode([f"{ep['title']}. {ep['content']}"])[0])
            ids = list(st.semantics)
            cos = _unit(np.stack([st.sem_vec[i] for i in ids])) @ q
            order = np.argsort(-cos, kind="stable")[: self.p.max_statements_for_prediction]
            known = [st.semantics[ids[j]]["content"] for j in order
                     if 2.0 * cos[j] - 1.0 >= self.p.statement_similarity_threshold]  # chroma: 1 - squared L2
            if known:
                with self.writing(_episode_turns(ep)):
                    prediction = self.llm.memory.chat([Message("user", PREDICTION_PROMPT.format(
                        title=ep["title"], statements="\n".join(f"- {s}" for s in known)))], temperature=0.3).text
                if not prediction.strip():
                    self.fault("empty_reply", "prediction", "empty prediction; the gap is extracted against it",
                               _episode_turns(ep))
                elif problem := unusable_state(prediction, ""):
                    self.fault("malformed_reply", "prediction", f"{problem}; extracted against no prediction",
                               _episode_turns(ep))
                    prediction = NO_KNOWLEDGE_PREDICTION.format(title=ep["title"])
            else:
                prediction = NO_KNOWLEDGE_PREDICTION.format(title=ep["title"])
            lines = "\n".join(f"Message {i} [{m['timestamp']}] - {m['role']}: {m['content']}"
                              for i, m in enumerate(ep["messages"], 1))
            prompt = COMPARISON_PROMPT.format(messages=lines, prediction=prediction)
        turns = _episode_turns(ep)
        reply = self.memory_json([Message("user", prompt)], "facts", turns, temperature=0.2, attempts=5,
                                 fallback="no facts from this episode (upstream)")
        obj = reply or {"statements": []}
        if not isinstance(obj.get("statements"), list):
            self.fault("malformed_reply", "facts",
                       f"no 'statements' list; no facts from this episode (upstream): {obj}", turns)
        statements = _statements(obj)
        if not statements:
            if reply is not None and isinstance(reply.get("statements"), list):  # well-formed, nothing in it
                self.fault("empty_extraction", "facts", f"no fact from episode {eid}; nothing written (upstream)",
                           turns)
            return
        vecs = self.encoder.encode(statements)
        new = []
        for text, v in zip(statements, vecs):
            sid = st.new_id("semantic")
            origin, derived = kept_provenance(text, _message_inputs(ep["messages"]))
            st.semantics[sid] = {"content": text, "created_at": ep["timestamp"], "source_episodes": [eid],
                                 "sources": origin, "derived": derived}
            st.sem_vec[sid] = v
            st.pending.append(sid)
            new.append(sid)
        ids = list(st.semantics)
        V = _unit(np.stack([st.sem_vec[i] for i in ids]))
        if len(ids) > 1:  # upstream ``_update_semantic_knn``: lists of the new facts only
            for sid in new:
                sims = V @ V[ids.index(sid)]
                sims[ids.index(sid)] = -1.0
                top = np.argsort(sims)[::-1][: self.p.semantic_knn_k]
                st.sem_knn[sid] = [[ids[j], float(sims[j])] for j in top if sims[j] > 0]

    # -- themes (upstream ThemeManager.assimilate_and_accommodate) --------------------------------------------
    def _summarise(self, st: _State, tid: str) -> None:
        t = st.themes[tid]
        if t["summarised"] == t["semantic_ids"]:
            return
        facts = "\n".join(f"- {st.semantics[s]['content']}" for s in t["semantic_ids"])
        # the summary derives from exactly the facts in this call's prompt; a cut reply is charged to their turns
        # (earlier sessions' episodes as a rule), not to the session being read when the theme is resummarised
        sources = sorted({x for s in t["semantic_ids"] for x in _provenance(st.semantics[s])})
        with self.writing(sources):
            comp = self.llm.memory.chat([Message("user", THEME_PROMPT.format(facts=facts))], temperature=0.0,
                                        max_tokens=self._cap(self.llm.memory, self.p.theme_summary_max_tokens))
        summary = comp.text.strip()
        if not summary:
            self.fault("empty_reply", "theme_summary", f"empty summary of theme {tid}; kept empty (upstream)", sources)
        elif problem := unusable_state(summary, ""):
            self.fault("malformed_reply", "theme_summary", f"{problem}; the previous summary of {tid} is kept",
                       sources)
            if tid not in st.theme_emb:  # a new theme keeps an embedding, of its (empty) previous summary
                st.theme_emb[tid] = self.encoder.encode([t["summary"]])[0]
            return
        origin, derived = kept_provenance(summary, [
            (st.semantics[s]["content"], st.semantics[s].get("sources", ()), st.semantics[s].get("derived", ()))
            for s in t["semantic_ids"]])
        t["summary"], t["summarised"], t["summary_sources"] = summary, list(t["semantic_ids"]), origin
        t["summary_derived"] = derived
        st.theme_emb[tid] = self.encoder.encode([summary])[0]

    def _changed(self, st: _State, tid: str) -> None:
        """A theme's members may have changed: its summary is written now (``lazy_theme_summaries: false``,
        upstream's eager writes) or, by default, when the read path next reads it (``_search``). A theme is dirty
        while ``summarised`` differs from its members, so snapshots carry the dirty state as they are."""
        if not self.p.lazy_theme_summaries:
            self._summarise(st, tid)

    def _new_theme(self, st: _State, members: list[str]) -> str:
        tid = st.new_id("theme")
        st.themes[tid] = {"summary": "", "semantic_ids": list(members), "summarised": None,
                          "neighbors": [], "neighbor_sims": []}
        st.centroid[tid] = self._mean(st, members)
        self._changed(st, tid)
        return tid

    def _drop_theme(self, st: _State, tid: str) -> None:
        for d in (st.themes, st.centroid, st.theme_emb):
            d.pop(tid, None)

    @staticmethod
    def _mean(st: _State, members: list[str]) -> np.ndarray:
        return np.stack([np.asarray(st.sem_vec[s], dtype=np.float64) for s in members]).mean(axis=0)

    def _update_themes(self, st: _State) -> None:
        batch, st.pending = st.pending, []
        if not batch:
            return
        p = self.p
        for sid in batch:  # 1) attach, or found a theme
            v = np.asarray(st.sem_vec[sid], dtype=np.float64)
            if not st.themes:
                self._new_theme(st, [sid])
                continue
            ids = list(st.themes)
            sims = _unit(np.stack([st.centroid[t] for t in ids])) @ _unit(v)
            best = int(np.argmax(sims))
            tid, t = ids[best], st.themes[ids[best]]
            if sims[best] < p.theme_attach_threshold and not (
                    sims[best] >= p.theme_lenient_floor and len(t["semantic_ids"]) < p.theme_max_size):
                self._new_theme(st, [sid])
                continue
            t["semantic_ids"].append(sid)
            n = len(t["semantic_ids"])
            st.centroid[tid] = (st.centroid[tid] * (n - 1) + v) / n
            if n > p.theme_max_size:
                self._online_split(st, tid)
        self._split_pass(st)  # 2) split oversized / incoherent themes, refresh changed summaries
        self._merge_pass(st)  # 3) merge close themes
        self._coalesce_singletons(st)  # 4) absorb singletons
        self._theme_knn(st)  # 5) theme kNN

    def _cluster_local(self, V: np.ndarray) -> list[list[int]]:
        n = len(V)
        if n <= self.p.split_cluster_size:
            return [list(range(n))]
        adj = (_unit(V) @ _unit(V).T) >= self.p.split_graph_threshold
        np.fill_diagonal(adj, True)
        visited: set[int] = set()
        comps: list[list[int]] = []
        for i in range(n):
            if i in visited:
                continue
            stack, comp = [i], []
            while stack:
                j = stack.pop()
                if j in visited:
                    continue
                visited.add(j)
                comp.append(j)
                stack.extend(k for k in range(n) if k not in visited and adj[j, k])
            comps.append(comp)
        m = self.p.theme_max_size
        return [c[i:i + m] for c in comps for i in range(0, len(c), m)]

    def _force_partition(self, V: np.ndarray) -> list[list[int]]:
        n, m = len(V), self.p.theme_max_size
        if n <= m:
            return [list(range(n))]
        X = V - V.mean(axis=0, keepdims=True)
        order = np.argsort(X @ np.linalg.svd(X, full_matrices=False)[2][0], kind="stable")
        return [order[i:i + m].tolist() for i in range(0, n, m)]

    def _online_split(self, st: _State, tid: str) -> None:
        members = list(st.themes[tid]["semantic_ids"])
        V = np.stack([st.sem_vec[s] for s in members]).astype(np.float64)
        clusters = self._cluster_local(V)
        if len(clusters) == 1 and len(clusters[0]) <= self.p.theme_max_size:
            return
        first = [members[i] for i in clusters[0]]
        st.themes[tid]["semantic_ids"] = first
        st.centroid[tid] = self._mean(st, first)
        self._changed(st, tid)
        for c in clusters[1:]:
            self._new_theme(st, [members[i] for i in c])

    def _context(self, st: _State, seeds: list[str]) -> list[str]:
        out: set[str] = set()
        k = self.p.score_ctx_k
        for sid in seeds:
            if sid not in st.themes:
                continue
            out.add(sid)
            neigh = st.themes[sid]["neighbors"]
            if neigh:
                out.update(n for n in neigh[:k] if n in st.themes)
                continue
            others = [x for x in st.themes if x != sid]
            if others:
                sims = _unit(np.stack([st.centroid[x] for x in others])) @ _unit(st.centroid[sid])
                out.update(others[int(j)] for j in np.argsort(sims)[::-1][:k])
        return sorted(out)

    def _score(self, st: _State, ids: list[str], overrides: dict[str, tuple[list[str], np.ndarray]] | None = None,
               removed: set[str] | None = None) -> float:
        """Upstream ``_score_subgraph``: f = SparsityScore + SemScore over a subgraph of themes."""
        overrides, removed = overrides or {}, removed or set()
        nodes = []
        for tid in dict.fromkeys(ids):
            if tid in removed:
                continue
            if tid in overrides:
                nodes.append(overrides[tid])
            elif tid in st.themes:
                nodes.append((st.themes[tid]["semantic_ids"], st.centroid[tid]))
        K = len(nodes)
        if K == 0:
            return 0.0
        nks = np.array([max(1, len(m)) for m, _ in nodes], dtype=np.float64)
        N = nks.sum()
        sparsity = (N / (K + 1e-8)) * (N / (float(np.sum(nks * nks)) + 1e-8))
        coh = np.array([float(np.mean(_unit(np.stack([st.sem_vec[s] for s in m])) @ _unit(c))) if m else 0.0
                        for m, c in nodes])
        C = _unit(np.stack([c for _, c in nodes]))
        sims = C @ C.T
        np.fill_diagonal(sims, -1e9)
        s = sims.max(axis=1) if K > 1 else np.zeros(1)
        med = float(np.median(s))
        sigma = float(np.median(np.abs(s - med))) + 1e-8
        g = np.exp(-((s - med) ** 2) / (2.0 * sigma ** 2))
        return float(sparsity + float(np.mean(coh * g)))

    def _split_pass(self, st: _State) -> None:
        """Upstream ``_maybe_split_overlarge_or_hetero``: pick the best-scoring split of a full incoherent theme."""
        p, bucket = self.p, {}
        for tid in list(st.themes):
            members = list(st.themes[tid]["semantic_ids"])
            m = len(members)
            V = np.stack([st.sem_vec[s] for s in members]).astype(np.float64)
            need = False
            if m >= p.theme_max_size:
                U = _unit(V)
                intra = float((np.sum(U @ U.T) - m) / (m * (m - 1) + 1e-6))
                need = m > p.theme_max_size or (m >= 8 and intra < p.min_intra_sim)
            if not need:
                self._changed(st, tid)
                bucket[tid] = st.themes[tid]
                continue
            cands: list[list[list[int]]] = []
            for cl in (self._cluster_local(V), self._force_partition(V)):
                if sorted(sorted(c) for c in cl) not in [sorted(sorted(c) for c in x) for x in cands]:
                    cands.append(cl)
            ctx = [x for x in self._context(st, [tid]) if x != tid]
            best, best_score = cands[0], -1e18
            for ci, cl in enumerate(cands):
                over = {f"{tid}~{ci}~{j}": ([members[i] for i in c], V[c].mean(axis=0)) for j, c in enumerate(cl)}
                score = self._score(st, ctx + list(over), overrides=over, removed={tid})
                if score > best_score:
                    best, best_score = cl, score
            for c in best:
                nid = self._new_theme(st, [members[i] for i in c])
                bucket[nid] = st.themes[nid]
            self._drop_theme(st, tid)
        for tid in [t for t in st.themes if t not in bucket]:
            self._drop_theme(st, tid)
        st.themes.clear()
        st.themes.update(bucket)

    def _absorb(self, st: _State, keep: str, gone: str, centroid: np.ndarray) -> None:
        st.themes[keep]["semantic_ids"].extend(st.themes[gone]["semantic_ids"])
        st.centroid[keep] = centroid
        self._changed(st, keep)
        self._drop_theme(st, gone)

    def _merge_gain(self, st: _State, keep: str, gone: str) -> tuple[float, np.ndarray]:
        ctx = self._context(st, [keep, gone])
        ctx += [x for x in (keep, gone) if x not in ctx]
        merged = st.themes[keep]["semantic_ids"] + st.themes[gone]["semantic_ids"]
        centroid = self._mean(st, merged)
        gain = self._score(st, ctx, overrides={keep: (merged, centroid)}, removed={gone}) - self._score(st, ctx)
        return gain, centroid

    def _merge_pass(self, st: _State) -> None:
        """Upstream ``_maybe_merge_themes``: greedy best-gain merge of pairs at centroid cosine >= 0.78, 2 passes."""
        p = self.p
        for _ in range(2):
            ids = list(st.themes)
            if len(ids) < 2:
                return
            C = _unit(np.stack([st.centroid[t] for t in ids]))
            S = C @ C.T
            pairs = sorted(((ids[i], ids[j], float(S[i, j])) for i in range(len(ids)) for j in range(i + 1, len(ids))
                            if S[i, j] >= p.merge_threshold), key=lambda x: -x[2])
            best = (0.0, None, None)
            for a, b, _ in pairs:
                if len(st.themes[a]["semantic_ids"]) + len(st.themes[b]["semantic_ids"]) > p.theme_max_size:
                    continue
                gain, centroid = self._merge_gain(st, a, b)
                if gain > best[0]:
                    best = (gain, (a, b), centroid)
            if best[1] is None:
                return
            (a, b), centroid = best[1], best[2]
            self._absorb(st, a, b, centroid)
            if len(st.themes[a]["semantic_ids"]) > p.theme_max_size:
                self._online_split(st, a)

    def _coalesce_singletons(self, st: _State, floor: float = 0.99, hard_min: float = 0.50) -> None:
        """Upstream ``_coalesce_micro_themes(0.99, 0.99, small_size=1)``: singletons effectively need cosine >= 0.50."""
        if len(st.themes) < 2:
            return
        while True:
            merged_any = False
            for sid in [t for t, v in st.themes.items() if len(v["semantic_ids"]) <= 1]:
                if sid not in st.themes:
                    continue
                others = [t for t in st.themes if t != sid]
                if not others:
                    continue
                sims = _unit(np.stack([st.centroid[t] for t in others])) @ _unit(st.centroid[sid])
                best = (0.0, None, None)
                for j in np.argsort(-sims, kind="stable"):
                    tgt, sim = others[int(j)], float(sims[int(j)])
                    thr = hard_min if len(st.themes[sid]["semantic_ids"]) == 1 and hard_min <= sim < floor else floor
                    size = len(st.themes[sid]["semantic_ids"]) + len(st.themes[tgt]["semantic_ids"])
                    if sim < thr or size > self.p.theme_max_size:
                        continue
                    gain, centroid = self._merge_gain(st, tgt, sid)
                    if gain > best[0]:
                        best = (gain, tgt, centroid)
                if best[1] is not None:
                    self._absorb(st, best[1], sid, best[2])
                    merged_any = True
            if not merged_any:
                return

    def _theme_knn(self, st: _State) -> None:
        ids = list(st.themes)
        if len(ids) == 1:
            st.themes[ids[0]]["neighbors"], st.themes[ids[0]]["neighbor_sims"] = [], []
        if len(ids) < 2:
            return
        C = _unit(np.stack([st.centroid[t] for t in ids]))
        S = C @ C.T
        np.fill_diagonal(S, -1.0)
        for i, tid in enumerate(ids):
            top = [j for j in np.argsort(S[i])[::-1][: self.p.theme_knn_k] if S[i, j] > 0]
            st.themes[tid]["neighbors"] = [ids[j] for j in top]
            st.themes[tid]["neighbor_sims"] = [float(S[i, j]) for j in top]

    # -- read path --------------------------------------------------------------------------------------------
    def _final_view(self) -> tuple[_State, int]:
        """The memory as upstream queries it: after the end-of-conversation flush, computed on a copy."""
        if not self.st.buffer and not self.st.pending:
            return self.st, 0
        st = copy.deepcopy(self.st)
        n = len(st.buffer)
        if st.buffer:
            self._create_episode(st, list(st.buffer), "Force episode creation")
            st.buffer.clear()
        self._update_themes(st)
        return st, n

    @staticmethod
    def _pick(cands: list[str], neigh: dict[str, list[tuple[str, float]]], base: dict[str, float], k: int,
              alpha: float) -> list[str]:
        """Upstream ``_pick_representatives``: greedy weighted coverage of the candidate kNN graph plus query score."""
        if not cands:
            return []
        cset = set(cands)
        cover: dict[str, dict[str, float]] = {}
        for c in cands:
            w: dict[str, float] = {}
            for n, s in neigh.get(c, []):
                if n in cset:
                    w[n] = max(w.get(n, s), s)
            w.setdefault(c, 1.0)
            cover[c] = w
        lo, hi = min(base.get(c, 0.0) for c in cands), max(base.get(c, 0.0) for c in cands)
        norm = {c: (base.get(c, 0.0) - lo) / (hi - lo) if hi > lo else 0.5 for c in cands}
        total = sum(w for c in cands for w in cover[c].values() if w > 0) or 1.0
        covered: set[str] = set()
        reps: list[str] = []
        while len(covered) < len(cset):
            best, best_obj = None, -1.0
            for c in cands:
                if c in reps:
                    continue
                gain = sum(cover[c][n] for n in cover[c] if n not in covered) / total
                obj = alpha * gain + (1.0 - alpha) * norm[c]
                if obj > best_obj:
                    best, best_obj = c, obj
            if best is None or best_obj <= 0.0:
                break
            reps.append(best)
            covered |= set(cover[best])
            if len(reps) >= k:
                break
        return reps or [cands[0]]

    def _gate_client(self) -> Any:
        return self.llm.answerer if self.p.gate_role == "answerer" else self.llm.memory

    def _nll(self, question: str, st: _State, themes: list[str], sems: list[str], eps: list[str]) -> float | None:
        """Mean NLL of the reader's greedy 20-token answer; None when the endpoint returns no logprobs."""
        block = lambda lines: "\n".join(f"- {x}" for x in lines if x) or "(none)"  # noqa: E731
        prompt = GATE_PROMPT.format(themes=block(st.themes[t]["summary"] for t in themes),
                                    semantics=block(st.semantics[s]["content"] for s in sems),
                                    episodes=block(st.episodes[e]["content"] for e in eps), question=question)
        comp = self._gate_client().chat([Message("user", prompt)], temperature=0.0, max_tokens=self.p.gate_max_tokens,
                                        logprobs=True, top_logprobs=1)
        if comp.logprobs:
            return float(np.mean([-float(t["logprob"]) for t in comp.logprobs]))
        return None if comp.text.strip() else 5.0  # upstream scores an empty generation as 5.0

    def _search(self, st: _State, question: str, meta: dict[str, Any]) -> tuple[list[str], list[str], set[str]]:
        p = self.p
        q = _unit(self.encoder.encode([question])[0])
        ep_ids = list(st.episodes)
        ep_score = dict(zip(ep_ids, (_unit(np.stack([st.ep_vec[e] for e in ep_ids])) @ q).tolist())) if ep_ids else {}
        ep_ranked = sorted(ep_ids, key=lambda e: -ep_score[e])
        sem_ids = list(st.semantics)
        if not sem_ids:  # upstream falls back to its baseline vector search
            meta.update(path="baseline", gate="none", gate_ran=False)
            return [], ep_ranked[: p.top_k_episodes], set()
        sem_score = dict(zip(sem_ids, (_unit(np.stack([st.sem_vec[s] for s in sem_ids])) @ q).tolist()))
        pool = sorted(sem_ids, key=lambda s: -sem_score[s])[: p.sem_pool]
        lo, hi = min(sem_score.values()), max(sem_score.values())
        sem_norm = {s: (v - lo) / (hi - lo) if hi > lo else 0.5 for s, v in sem_score.items()}
        # themes: those holding pooled facts, picked by coverage of the theme kNN graph
        order, pooled = {t: i for i, t in enumerate(st.themes)}, set(pool)
        tcands = sorted({t for t, v in st.themes.items() for s in v["semantic_ids"] if s in pooled}, key=order.get)
        if p.lazy_theme_summaries:  # the only themes whose summary (and its embedding) is read
            for t in tcands:
                self._summarise(st, t)
        tscore = {t: float(_unit(st.theme_emb[t]) @ q) for t in tcands}
        tcands.sort(key=lambda t: -tscore[t])
        tneigh = {t: list(zip(st.themes[t]["neighbors"], st.themes[t]["neighbor_sims"])) for t in tcands}
        themes = self._pick(tcands, tneigh, tscore, p.max_themes, p.alpha_coverage)[: p.max_themes]
        allowed = {s for t in themes for s in st.themes[t]["semantic_ids"]}
        scands = [s for s in pool if s in allowed] if themes else list(pool)
        sneigh = {s: [(n, float(w)) for n, w in st.sem_knn.get(s, [])] for s in scands}
        sems = self._pick(scands, sneigh, {s: sem_score[s] for s in scands}, p.max_semantics, p.alpha_coverage)
        sems = sems[: p.max_semantics] or pool[:1]
        # episodes: sources of kept facts plus top by vector, ranked, then gated by the reader's uncertainty
        parents: dict[str, set[str]] = {}
        for s in sems:
            for e in st.semantics[s]["source_episodes"]:
                if e in st.episodes:
                    parents.setdefault(e, set()).add(s)
        epool = sorted(set(parents) | set(ep_ranked[: p.episode_vec_top]))
        vlo, vhi = min(ep_score[e] for e in epool), max(ep_score[e] for e in epool)
        vhi = vhi if vhi != vlo else vlo + 1e-6
        prio = {e: (ep_score[e] - vlo) / (vhi - vlo)
                + p.beta_sem * max((sem_norm[s] for s in parents.get(e, ())), default=0.0) for e in epool}
        probe = sorted(epool, key=lambda e: -prio[e])[: p.episode_probe]
        kept, expand, ig = [], set(), {}
        ep_ = self._gate_client().endpoint
        no_logprobs = (f"the {ep_.role} endpoint ({ep_.base_url}, model {ep_.model}) returns no token logprobs; "
                       f"the top {p.top_k_episodes} probe candidates are kept without raw messages")
        base = None
        if p.logprob_gate and ep_.reasoning:  # a reasoning API refuses logprobs: no probe can be scored
            self.fault("logprobs_unavailable", "gate", "reasoning endpoint: " + no_logprobs)
        elif p.logprob_gate:
            base = self._nll(question, st, themes, sems, [])
            if base is None:
                self.fault("logprobs_unavailable", "gate", no_logprobs)
        meta["gate_ran"] = base is not None  # what ran (``inmind_exp.protocol.budget``): the gate read the reader's logprobs
        if base is None:
            meta["gate"] = "fallback_no_logprobs" if p.logprob_gate else "disabled"
            kept = probe[: p.top_k_episodes]
        else:
            meta["gate"] = "logprobs"
            low = 0
            for n, e in enumerate(probe, 1):
                after = self._nll(question, st, themes, sems, [e])
                if after is None:
                    self.fault("logprobs_unavailable", "gate", f"probe of episode {e} came back without logprobs; "
                               "scored as upstream's constant 5.0")
                ig[e] = base - (5.0 if after is None else after)
                if ig[e] > p.tau_ep_stop:
                    if ig[e] > p.tau_ep:
                        kept.append(e)
                        if ig[e] > p.tau_ep_expand:
                            expand.add(e)
                    if len(kept) >= p.top_k_episodes:
                        break
                else:
                    low += 1
                if (n <= 3 and low >= 1) or (n <= 10 and low >= 2):  # upstream's early-stop gate
                    break
            kept = kept or probe[:1]
            meta["base_nll"] = base
        meta.update(path="adaptive_hier", themes=themes, ig=ig)
        return sems, kept, expand

    def recall(self, query: str) -> Recall:
        """The adaptive_hier retrieval rendered as upstream's two memory blocks; items are the facts, the episodes
        and the raw messages of expanded episodes, each with its turn ids."""
        st, flushed = self._final_view()
        meta: dict[str, Any] = {"flushed_tail_messages": flushed}
        sems, eps, expand = self._search(st, query, meta)
        items: list[ContextItem] = []
        sem_lines = []
        for s in sems:
            line = f"- [{st.semantics[s]['created_at']}] {st.semantics[s]['content']}"
            sem_lines.append(line)
            items.append(ContextItem("fact", line, tuple(st.semantics[s].get("sources", ())),
                                     tuple(st.semantics[s].get("derived", ()))))
        ep_lines, shown = [], 0
        for e in eps:
            line = f"- [{st.episodes[e]['timestamp']}] {st.episodes[e]['content']}"
            ep_lines.append(line)
            items.append(ContextItem("episode", line, tuple(st.episodes[e].get("sources", ())),
                                     tuple(st.episodes[e].get("derived", ()))))
            if e in expand and shown < self.p.include_original_messages_top_k:
                ep_lines.append("    Original Messages:")
                for m in st.episodes[e]["messages"]:
                    raw = f"    • {m['role']}: {m['content']}"
                    ep_lines.append(raw)
                    items.append(ContextItem("message", raw.strip(), (m["id"],) if m.get("id") else ()))
                shown += 1
        meta.update(semantics=sems, episodes=eps, expanded=sorted(expand), prompt_version=PROMPT_VERSION)
        text = MEMORY_BLOCKS.format(semantic="\n".join(sem_lines), episodic="\n".join(ep_lines))
        return Recall(text, tuple(items), meta)

    def native_answer(self, query: str, recall: Recall) -> Answer:
        """Upstream's answer prompt as one user message, at temperature 0 with its 64-token cap (the role's own
        limit on a reasoning endpoint, whose cap also counts hidden reasoning)."""
        context = (Message("user", ANSWER_PROMPT.format(memories=recall.text, question=query)),)
        comp = self.llm.answerer.chat(context, temperature=ANSWER_TEMPERATURE,
                                      max_tokens=self._cap(self.llm.answerer, ANSWER_MAX_TOKENS))
        return Answer(comp.text, context, meta={**recall.meta, "answer_prompt": ANSWER_PROMPT_VERSION},
                      items=recall.items)

    # -- state ------------------------------------------------------------------------------------------------
    def snapshot(self, directory: Path) -> None:
        self.st.save(Path(directory))

    def restore(self, directory: Path) -> None:
        self.st = _State.load(Path(directory))
