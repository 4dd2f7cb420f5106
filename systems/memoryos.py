"""MemoryOS (Kang et al. 2025, "Memory OS of AI Agent"): a three-tier memory of QA pages with heat-driven promotion.

Reimplemented from BAI-LAB/MemoryOS at commit 1d71706, ``memoryos-pypi/`` (memoryos.py, short_term.py, mid_term.py,
long_term.py, updater.py, retriever.py, prompts.py, utils.py); no upstream code is vendored, its prompt texts are quoted (Apache-2.0) in
``systems/prompts/memoryos.py``.

Write path (``Memoryos.add_memory``), one QA pair (a user turn and the assistant's reply) at a time:
  * short-term memory holds the last ``short_term_capacity`` pairs; adding to a full one first evicts the oldest
    pair as a *page*, making upstream's three calls for it: a continuity check against the previously evicted page,
    a meta-info chain summary (continued from that page's meta info when continuous, fresh otherwise; a continuous
    chain already in mid-term gets the new meta info propagated along it) and a multi-topic summary of the batch;
  * for each topic, the pages join the mid-term session whose summary scores best (cosine of summary embeddings +
    keyword Jaccard) when the score reaches ``mid_term_similarity_threshold``, else a new session; over
    ``mid_term_capacity`` sessions, the least-frequently-retrieved one is evicted (LFU);
  * heat = N_visit + L_interaction + exp(-hours since last visit / 24); after every add, when the hottest session
    reaches ``mid_term_heat_threshold`` and holds unanalysed pages, the profile-rewrite call and the user/assistant
    knowledge-extraction call run on those pages; the profile is replaced (when the reply is at least 30 characters),
    knowledge lines are appended to two bounded FIFO stores (``long_term_knowledge_capacity`` each), and the
    session's pages are marked analysed and its visit and length counts reset.
Read path (``Memoryos.get_response``): the top ``top_k_sessions`` mid-term sessions by summary similarity
(>= ``segment_similarity_threshold``) and their pages (>= ``page_similarity_threshold``), the best
``retrieval_queue_capacity`` pages overall, the top ``top_k_knowledge`` user and assistant knowledge entries
(>= ``knowledge_threshold``), the whole short-term history and the whole profile.

Answer modes: ``recall`` renders those blocks as upstream formats them (【Historical Memory】 pages with their chain
overview, 【User Profile】 and 【Relevant User Knowledge Entries】, 【Assistant Knowledge Base】) under upstream's
<CONTEXT>/<MEMORY>/<USER TRAITS> tags (``SHARED_RENDERING``); ``answer=shared`` (the default) answers it with the
shared prompt of ``inmind_exp.memory.answering``. ``answer=native`` uses upstream's answer prompt, memoryos-pypi/prompts.py
GENERATE_SYSTEM_RESPONSE_SYSTEM_PROMPT / _USER_PROMPT, verbatim: the role-play as the user's ``relationship``
("friend", as ``get_response``'s default) and "maximum 30 words, must be in English" (``answer_word_limit``; null
drops the clause). ``meta.answer_prompt`` names the prompt used.

Provenance (``Turn.id``s; origin and derived, ``ContextItem``): a short-term pair and its page have the pair's two
turns as origin. The chain overview (meta info) and the profile follow the one rule of
``inmind_exp.memory.kept_provenance``: a rewrite keeps as origin the origin of each input (the previous overview or
profile, each page's dialogue) whose content its new text still states, the rest of what the call saw is derived;
a profile call that returns the text unchanged leaves its origin and adds the call's inputs as derived. The
overview follows the meta info along the chain, so a page shown in the context has as origin its own pair and its
overview's origin (the overview is part of the page's text), as derived the overview's derived turns. A new
mid-term session's summary carries the turns of the evicted batch it summarises (a merge keeps the old summary and
its sources). Knowledge entries have as origin the turns of the pages of
the call that extracted them (the whole batch: the call gives no line-to-page link). Items in the context: every
short-term pair and the profile (query-independent: ``visible``), each retrieved page and each knowledge entry
(the top ``top_k_knowledge`` by similarity to the query: retrieved; when that search excluded nothing, every entry
of the store shown whatever the query, its entries are visible and the recall's meta names the store under
``knowledge_saturated``).

Faults (``MemorySystem.fault`` with the turns being written): an empty memory reply (``empty_reply``); a
continuity verdict that is neither true nor false, taken as false (``malformed_reply``); a multi-summary reply with
no topic, replaced by upstream's general segment (``malformed_reply``); a profile reply under 30 characters or
"None", which leaves the old profile (``malformed_reply``), and, ours, a profile reply that is a refusal or chat reply
or no longer states most of the previous profile (``inmind_exp.memory.unusable_state``; the old profile is kept),
and the same for a chain overview (meta info: the previous overview is kept); a knowledge reply with neither section marker, which
stores nothing (``malformed_reply``); a half pair dropped on eviction (``fallback``). Upstream's behaviour is kept.
Retrieval counts a visit on each session it returns pages from (heat, LFU counts), and, as upstream's
``get_response`` does, the answered Q/A is then written into memory with ``add_memory`` (``write_answers``). Both
happen after the answer's context is fixed; the InMind protocol answers every query from a fresh restore of the
post-ingestion snapshot and discards the post-answer state, and ``snapshot`` after an answer captures that state
exactly.

Deliberate deviations:
  * Time is the trace clock: pair timestamps, knowledge timestamps, session creation and visit times are the date
    of the session being ingested (the latest ingested session's date at answer time), not the wall clock; recency
    decay parses those dates (unparseable dates give upstream's fallback recency 0.1).
  * Ids are counters kept in the state (``page_000001``, ``session_000001``, ``know_000001``), not uuid4; ties for
    the hottest session are broken by id as upstream's heap does, so by creation order.
  * Sampling parameters come from the ``memory``/``answerer`` endpoint configuration; upstream passes T=0/10 tokens
    (continuity), T=0.3/100 tokens (meta info), T=0.7/2000 tokens (other memory calls), T=0.7/1500 tokens (answer),
    which reasoning models reject or cannot answer within. The ``<think>`` stripping of every reply is kept.
  * The profile and knowledge calls run one after the other (upstream: two threads); results are the same.
  * Multi-summary replies are parsed leniently (code fences, surrounding prose, an object wrapping the list, a single
    topic object); anything else falls back to upstream's single general segment. Off-schema topic items are skipped.
    The continuity verdict tolerates surrounding quotes and a trailing full stop.
  * Embeddings come from the project encoder (MiniLM or text-embedding-3-large) with exact numpy inner products in
    place of per-search faiss IndexFlatIP; state is kept in memory and written only on ``snapshot``.
  * The memory-call prompts are upstream's ``memoryos-pypi/prompts.py`` verbatim (``systems/prompts/memoryos.py``;
    the profile prompt's "90 dimensions" that lists 51 included). The answer prompt is upstream's verbatim (see
    Answer modes).
  * As upstream, a lone user or assistant turn (no partner in the pair) is stored in short-term memory and dropped
    on eviction (recorded as a ``fallback`` fault); an evicted page is duplicated into every topic session the
    multi-summary names.
"""

from __future__ import annotations

import heapq
import json
import math
import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from inmind_exp.memory.answering import SHARED
from inmind_exp.memory import (SYSTEMS, Answer, Answerer, CallProfile, ContextItem, MemorySystem, Message, Recall,
                               Session, at_least, kept_provenance, non_negative, read_json, similarity, turn_pairs,
                               unusable_state, write_json)
from systems.prompts.memoryos import CONTINUITY_CHECK_SYSTEM_PROMPT as CONTINUITY_SYSTEM_PROMPT
from systems.prompts.memoryos import CONTINUITY_CHECK_USER_PROMPT as CONTINUITY_USER_PROMPT
from systems.prompts.memoryos import KNOWLEDGE_EXTRACTION_SYSTEM_PROMPT as KNOWLEDGE_SYSTEM_PROMPT
from systems.prompts.memoryos import KNOWLEDGE_EXTRACTION_USER_PROMPT as KNOWLEDGE_USER_PROMPT
from systems.prompts.memoryos import META_INFO_SYSTEM_PROMPT, META_INFO_USER_PROMPT, MULTI_SUMMARY_SYSTEM_PROMPT
from systems.prompts.memoryos import MULTI_SUMMARY_USER_PROMPT, PROMPTS_VERSION
from systems.prompts.memoryos import PERSONALITY_ANALYSIS_SYSTEM_PROMPT as PROFILE_SYSTEM_PROMPT
from systems.prompts.memoryos import PERSONALITY_ANALYSIS_USER_PROMPT as PROFILE_USER_PROMPT

PROMPT_VERSION = "memoryos-v3"
#: version of the answer prompt used in ``answer=native`` (upstream's GENERATE_SYSTEM_RESPONSE prompts, verbatim)
NATIVE_ANSWER_VERSION = "memoryos-generate-system-response-v1"

# -- heat (mid_term.py) -------------------------------------------------------------------------------------------
HEAT_ALPHA = 1.0  # weight of N_visit
HEAT_BETA = 1.0  # weight of L_interaction
HEAT_GAMMA = 1.0  # weight of R_recency
RECENCY_TAU_HOURS = 24.0
KEYWORD_SIMILARITY_ALPHA = 1.0
FALLBACK_SEGMENT_SUMMARY = "General conversation segment from short-term memory."
FALLBACK_TOPIC_SUMMARY = "General summary of recent interactions."
NONE_LINES = ("none", "- none", "- none.")
MIN_PROFILE_CHARS = 30

# -- prompts: the memory calls' are memoryos-pypi/prompts.py verbatim (systems/prompts/memoryos.py, imported above)
# The answer prompt (``answer=native``) is upstream's GENERATE_SYSTEM_RESPONSE_SYSTEM/USER_PROMPT verbatim; only the
# length clause is a parameter, and ``answer_word_limit: 30`` gives upstream's text exactly.
ANSWER_SYSTEM_PROMPT = (
    "As a communication expert with outstanding communication habits, you embody the role of {relationship} throughout the following dialogues.\n"
    "Here are some of your distinctive personal traits and knowledge:\n{assistant_knowledge_text}\n"
    "User's profile:\n"
    "{meta_data_text}\n"
    "Your task is to generate responses that align with these traits and maintain the tone.\n"
)
ANSWER_USER_PROMPT = (
    "<CONTEXT>\n"
    "Drawing from your recent conversation with the user:\n"
    "{history_text}\n\n"
    "<MEMORY>\n"
    "The memories linked to the ongoing conversation are:\n"
    "{retrieval_text}\n\n"
    "<USER TRAITS>\n"
    "During the conversation process between you and the user in the past, you found that the user has the following characteristics:\n"
    "{background}\n\n"
    "Now, please role-play as {relationship} to continue the dialogue between you and the user.\n"
    "The user just said: {query}\n"
    "Please respond to the user's statement using the following format{limit}:\n "
    "When answering questions, be sure to check whether the timestamp of the referenced information matches the timeframe of the question"
)
ANSWER_LIMIT_CLAUSE = " (maximum {n} words, must be in English)"
# The shared answerer (``answer=shared``) gets the same retrieved blocks under upstream's section tags, without the
# role-play and reply instructions.
SHARED_RENDERING = (
    "<CONTEXT>\n"
    "Recent conversation with the user:\n"
    "{history_text}\n\n"
    "<MEMORY>\n"
    "Memories linked to the ongoing conversation:\n"
    "{retrieval_text}\n\n"
    "<USER TRAITS>\n"
    "{background}\n\n"
    "{assistant_knowledge_text}"
)
NO_META_DATA = "【Current Conversation Metadata】\nNone provided for this turn."


# -- helpers ------------------------------------------------------------------------------------------------------
_THINK = re.compile(r"<think>.*?</think>", re.DOTALL)
_BLANKS = re.compile(r"\n\s*\n\s*\n")
_DATE = re.compile(r"(\d{4})[/-](\d{1,2})[/-](\d{1,2})(?:\D+?(\d{1,2}):(\d{2})(?::(\d{2}))?)?")


def clean_reply(text: str) -> str:
    """Drop ``<think>`` blocks and surplus blank lines, as upstream's client does to every reply."""
    return _BLANKS.sub("\n\n", _THINK.sub("", text or "")).strip()


def parse_time(stamp: str) -> datetime | None:
    """The first ``YYYY-MM-DD[ HH:MM[:SS]]`` (any of ``/``/``-``, other text ignored) in a trace date, or None."""
    m = _DATE.search(stamp or "")
    if m is None:
        return None
    y, mo, d, h, mi, s = (int(g) if g else 0 for g in m.groups())
    try:
        return datetime(y, mo, d, h, mi, s)
    except ValueError:
        return None


def time_decay(event: str, now: str, tau_hours: float = RECENCY_TAU_HOURS) -> float:
    """exp(-hours elapsed / tau); upstream's 0.1 when either date does not parse."""
    t0, t1 = parse_time(event), parse_time(now)
    if t0 is None or t1 is None:
        return 0.1
    return float(math.exp(-((t1 - t0).total_seconds() / 3600.0) / tau_hours))


def parse_topics(text: str) -> list[dict[str, Any]]:
    """The multi-summary topics as ``{"theme", "keywords", "content"}`` dicts; [] when the reply has none."""
    s = text.strip()
    if s.startswith("```"):
        s = s.strip("`")
        s = s[s.find("\n") + 1:] if "\n" in s else s
    obj: Any = None
    try:
        obj = json.loads(s)
    except json.JSONDecodeError:
        for lo, hi in (("[", "]"), ("{", "}")):
            a, b = s.find(lo), s.rfind(hi)
            if 0 <= a < b:
                try:
                    obj = json.loads(s[a:b + 1])
                    break
                except json.JSONDecodeError:
                    continue
    if isinstance(obj, dict):
        inner = next((obj[k] for k in ("summaries", "topics", "themes") if isinstance(obj.get(k), list)), None)
        obj = inner if inner is not None else ([obj] if "content" in obj else [])
    if not isinstance(obj, list):
        return []
    topics = []
    for item in obj:
        if not isinstance(item, dict):
            continue
        content = item.get("content", FALLBACK_TOPIC_SUMMARY)
        keywords = item.get("keywords", [])
        topics.append({
            "theme": str(item.get("theme", "")),
            "content": content if isinstance(content, str) else json.dumps(content, ensure_ascii=False),
            "keywords": [str(k) for k in keywords] if isinstance(keywords, list) else [],
        })
    return topics


def parse_knowledge(text: str) -> tuple[str, str]:
    """Split a knowledge-extraction reply at its 【User Private Data】 / 【Assistant Knowledge】 markers."""
    user_tag, asst_tag = "【User Private Data】", "【Assistant Knowledge】"
    private, assistant = "None", "None"
    if user_tag in text:
        start = text.find(user_tag) + len(user_tag)
        if asst_tag in text:
            private = text[start:text.find(asst_tag)].strip()
            assistant = text[text.find(asst_tag) + len(asst_tag):].strip()
        else:
            private = text[start:].strip()
    elif asst_tag in text:
        assistant = text[text.find(asst_tag) + len(asst_tag):].strip()
    return private or "None", assistant or "None"


def knowledge_lines(block: str) -> list[str]:
    """The entries of one knowledge block: its non-empty lines other than "None" variants."""
    if not block or block.lower() == "none":
        return []
    return [ln.strip() for ln in block.split("\n") if ln.strip() and ln.strip().lower() not in NONE_LINES]


def _page_text(page: dict[str, Any]) -> str:
    return f"User: {page.get('user_input', '')} Assistant: {page.get('agent_response', '')}"


def _dialogue_with_times(pages: list[dict[str, Any]]) -> str:
    return "\n".join(
        f"User: {p.get('user_input', '')} (Timestamp: {p.get('timestamp', '')})\n"
        f"Assistant: {p.get('agent_response', '')} (Timestamp: {p.get('timestamp', '')})"
        for p in pages
    )


def _union(*groups: Any) -> list[str]:
    """Sorted union of turn-id lists (provenance of an item built from several inputs)."""
    return sorted({t for g in groups for t in (g or ()) if t})


def _page_text(page: dict[str, Any]) -> str:
    return f"{page.get('user_input', '')}\n{page.get('agent_response', '')}"


def _pages_sources(pages: list[dict[str, Any]]) -> list[str]:
    return _union(*(p.get("sources", ()) for p in pages))


@dataclass(frozen=True)
class MemoryOSRecall(Recall):
    """A recall that also keeps the rendered blocks, so ``native_answer`` lays out upstream's prompt from exactly
    what was retrieved (retrieval counts visits, so it must not run twice)."""

    blocks: dict[str, str] = field(default_factory=dict)


def _top_k_desc(scores: np.ndarray, k: int) -> list[int]:
    """Indices of the ``k`` highest scores, highest first, ties in index order."""
    return [int(i) for i in np.argsort(-scores, kind="stable")[: max(0, k)]]


@SYSTEMS.register("memoryos")
class MemoryOS(MemorySystem):
    """Short-term QA queue, heat-ranked mid-term sessions of pages, long-term profile and knowledge (see module doc)."""

    version = "4"  # 2: upstream's memory-call prompts verbatim (were paraphrased); 3: profile, overview and page
    # provenance by the one rule (kept_provenance); a refusal or a profile dropping most of the old one is a fault;
    # 4: the same check on chain overviews; a saturated knowledge search's entries are visible, not retrieved

    embeddings = ("minilm", "emb3")
    # ~250 pairs: each pair past the first 10 is evicted with 3 calls; a session reaches heat 5 about every 4 pages,
    # costing 2 calls (profile ~1.5k tokens, the others a few hundred). A query's Q/A write evicts one more page.
    cost = CallProfile(
        memory_calls_per_user_turn=3.5,
        memory_calls_per_query=3.5,
        answer_calls_per_query=1.0,
        prompt_tokens_per_memory_call=700,
        prompt_tokens_per_answer_call=9000,
    )

    param_ranges = {**{k: at_least(1) for k in ("short_term_capacity", "mid_term_capacity", "long_term_knowledge_capacity",
                                            "retrieval_queue_capacity", "top_k_sessions", "top_k_knowledge")},
                    **{k: similarity() for k in ("mid_term_similarity_threshold", "segment_similarity_threshold",
                                                 "page_similarity_threshold", "knowledge_threshold")},
                    "mid_term_heat_threshold": non_negative(), "answer_word_limit": at_least(1, nullable=True)}

    def __init__(
        self,
        llm,
        encoder,
        workdir: Path,
        short_term_capacity: int = 10,
        mid_term_capacity: int = 2000,
        long_term_knowledge_capacity: int = 100,
        retrieval_queue_capacity: int = 7,
        mid_term_heat_threshold: float = 5.0,
        mid_term_similarity_threshold: float = 0.6,
        segment_similarity_threshold: float = 0.1,
        page_similarity_threshold: float = 0.1,
        knowledge_threshold: float = 0.01,
        top_k_sessions: int = 5,
        top_k_knowledge: int = 20,
        relationship: str = "friend",
        answer_word_limit: int | None = 30,
        write_answers: bool = True,
        **params: Any,
    ) -> None:
        super().__init__(llm, encoder, workdir, **params)
        if encoder is None:
            raise ValueError("system 'memoryos' needs a dense encoder (embedding=minilm or emb3), not bm25")
        if int(short_term_capacity) < 1:
            raise ValueError(f"memoryos: short_term_capacity must be >= 1, got {short_term_capacity}")
        self.short_term_capacity = int(short_term_capacity)
        self.mid_term_capacity = int(mid_term_capacity)
        self.knowledge_capacity = int(long_term_knowledge_capacity)
        self.retrieval_queue_capacity = int(retrieval_queue_capacity)
        self.heat_threshold = float(mid_term_heat_threshold)
        self.similarity_threshold = float(mid_term_similarity_threshold)
        self.segment_similarity_threshold = float(segment_similarity_threshold)
        self.page_similarity_threshold = float(page_similarity_threshold)
        self.knowledge_threshold = float(knowledge_threshold)
        self.top_k_sessions = int(top_k_sessions)
        self.top_k_knowledge = int(top_k_knowledge)
        self.relationship = str(relationship)
        self.answer_word_limit = None if answer_word_limit is None else int(answer_word_limit)
        self.write_answers = bool(write_answers)
        # state (all of it is written by snapshot)
        self.clock = ""  # trace time: the date of the latest ingested session
        self.short_term: list[dict[str, Any]] = []
        self.last_evicted: dict[str, Any] | None = None  # the previous evicted page, for the continuity check
        self.sessions: list[dict[str, Any]] = []  # mid-term sessions in creation order
        self.profile: str | None = None
        self.profile_updated = ""
        self.profile_sources: list[str] = []  # origin: the pages of the last profile call that changed the text
        self.profile_derived: list[str] = []  # inherited: earlier profiles' turns, calls that left it unchanged
        self.user_knowledge: list[dict[str, Any]] = []
        self.assistant_knowledge: list[dict[str, Any]] = []
        self.counters = {"page": 0, "session": 0, "know": 0}
        self.vectors: dict[str, np.ndarray] = {}  # "s:<session id>", "p:<page id>", "k:<knowledge id>"

    # -- small utilities -----------------------------------------------------------------------------------------
    def _next_id(self, kind: str) -> str:
        self.counters[kind] += 1
        return f"{kind}_{self.counters[kind]:06d}"

    def _embed(self, text: str) -> np.ndarray:
        return self.encoder.encode([text])[0].astype(np.float32)

    def _vector(self, key: str, text: str) -> np.ndarray:
        if key not in self.vectors:
            self.vectors[key] = self._embed(text)
        return self.vectors[key]

    def _chat(self, system: str, user: str, where: str = "", turns: list[str] | tuple[str, ...] = ()) -> str:
        """One memory call; an empty reply (after ``<think>`` stripping) is recorded as an ``empty_reply`` fault."""
        with self.writing(turns):  # deferred calls (pages, profile, knowledge) write earlier sessions' turns
            comp = self.llm.memory.chat((Message("system", system), Message("user", user)))
        text = clean_reply(comp.text)
        if not text.strip():
            self.fault("empty_reply", where, "empty reply from the memory model", turns)
        return text

    def _heat(self, session: dict[str, Any]) -> float:
        session["R_recency"] = time_decay(session["last_visit_time"], self.clock) if session.get("last_visit_time") else 1.0
        return HEAT_ALPHA * session["N_visit"] + HEAT_BETA * session["L_interaction"] + HEAT_GAMMA * session["R_recency"]

    def _find_page(self, page_id: str) -> dict[str, Any] | None:
        for s in self.sessions:
            for p in s["details"]:
                if p.get("page_id") == page_id:
                    return p
        return None

    # -- write path ----------------------------------------------------------------------------------------------
    def ingest_session(self, session: Session) -> None:
        self.clock = session.date
        for user, assistant in turn_pairs(session.with_turn_ids()):
            self.add_memory(user.content if user else "", assistant.content if assistant else "", session.date,
                            _union([user.id] if user else [], [assistant.id] if assistant else []))

    def add_memory(self, user_input: str, agent_response: str, timestamp: str, sources: list[str] = ()) -> None:
        """Upstream ``add_memory``: evict to mid-term when full, append the pair, then check for a hot session.
        ``sources`` are the ids of the trace turns of the pair (none for an answered query)."""
        if len(self.short_term) >= self.short_term_capacity:
            self._short_to_mid()
        self.short_term.append({"user_input": user_input, "agent_response": agent_response, "timestamp": timestamp,
                                "sources": list(sources)})
        self._promote_if_hot()

    def _continuous(self, prev: dict[str, Any] | None, page: dict[str, Any]) -> bool:
        turns = page.get("sources", [])
        reply = self._chat(CONTINUITY_SYSTEM_PROMPT, CONTINUITY_USER_PROMPT.format(
            prev_user=prev.get("user_input", "") if prev else "",
            prev_agent=prev.get("agent_response", "") if prev else "",
            curr_user=page["user_input"], curr_agent=page["agent_response"],
        ), "continuity", turns)
        verdict = reply.strip().strip("'\"`").rstrip(".").strip().lower()
        if reply.strip() and verdict not in ("true", "false"):  # upstream: anything but "true" is false
            self.fault("malformed_reply", "continuity", f"neither true nor false, taken as false: {reply[:200]}", turns)
        return verdict == "true"

    def _meta_info(self, last_meta: str | None, page: dict[str, Any]) -> str:
        """The chain overview rewritten with ``page``'s dialogue; a refusal or chat reply, or one no longer stating
        most of ``last_meta`` (``unusable_state``), is a ``malformed_reply`` fault and ``last_meta`` stays."""
        dialogue = f"User: {page['user_input']}\nAssistant: {page['agent_response']}"
        reply = self._chat(META_INFO_SYSTEM_PROMPT, META_INFO_USER_PROMPT.format(
            last_meta=last_meta if last_meta else "None", new_dialogue=dialogue), "meta_info", page.get("sources", []))
        if reply.strip() and (problem := unusable_state(reply, last_meta or "")):
            self.fault("malformed_reply", "meta_info", f"{problem}; the previous chain overview is kept: {reply[:200]}",
                       page.get("sources", []))
            return last_meta or ""
        return reply

    def _propagate_meta(self, start_id: str, meta: str, meta_sources: list[str], meta_derived: list[str]) -> None:
        """Give a whole chain (linked through pre_page/next_page) the new meta info, breadth first from a page;
        the meta info carries its provenance (origin and derived) from the call that wrote it."""
        queue, seen, head = [start_id], {start_id}, 0
        while head < len(queue):
            page = self._find_page(queue[head])
            head += 1
            if page is None:
                continue
            page["meta_info"] = meta
            page["meta_sources"] = list(meta_sources)
            page["meta_derived"] = list(meta_derived)
            for nb in (page.get("pre_page"), page.get("next_page")):
                if nb and nb not in seen:
                    queue.append(nb)
                    seen.add(nb)

    def _connect(self, prev_id: str | None, next_id: str | None) -> None:
        if prev_id and (prev := self._find_page(prev_id)) is not None:
            prev["next_page"] = next_id
        if next_id and (nxt := self._find_page(next_id)) is not None:
            nxt["pre_page"] = prev_id

    def _short_to_mid(self) -> None:
        """Upstream ``Updater.process_short_term_to_mid_term``: evict until not full, page up, summarise, insert."""
        evicted = []
        while len(self.short_term) >= self.short_term_capacity:
            qa = self.short_term.pop(0)
            if qa.get("user_input") and qa.get("agent_response"):
                evicted.append(qa)
            else:  # upstream drops a half pair on eviction without a word
                self.fault("fallback", "short_to_mid", "a pair without a user or an assistant turn is dropped on "
                           "eviction (upstream)", qa.get("sources", []))
        if not evicted:
            return
        batch: list[dict[str, Any]] = []
        prev = self.last_evicted
        for qa in evicted:
            sources = list(qa.get("sources", []))
            page: dict[str, Any] = {
                "page_id": self._next_id("page"), "user_input": qa["user_input"], "agent_response": qa["agent_response"],
                "timestamp": qa["timestamp"], "preloaded": False, "analyzed": False,
                "pre_page": None, "next_page": None, "meta_info": None, "sources": sources, "meta_sources": [],
            }
            if self._continuous(prev, page) and prev is not None:
                page["pre_page"] = prev["page_id"]
                page["meta_info"] = self._meta_info(prev.get("meta_info"), page)
                # the one rule over the call's inputs: the previous meta info (with its provenance), this dialogue
                page["meta_sources"], page["meta_derived"] = kept_provenance(page["meta_info"], [
                    (prev.get("meta_info") or "", prev.get("meta_sources") or (), prev.get("meta_derived") or ()),
                    (_page_text(page), sources, ())])
                if self._find_page(prev["page_id"]) is not None:
                    self._propagate_meta(prev["page_id"], page["meta_info"], page["meta_sources"],
                                         page["meta_derived"])
            else:
                page["meta_info"] = self._meta_info(None, page)
                page["meta_sources"], page["meta_derived"] = kept_provenance(page["meta_info"],
                                                                             [(_page_text(page), sources, ())])
            batch.append(page)
            prev = page
        self.last_evicted = json.loads(json.dumps(batch[-1]))
        text = "\n".join(f"User: {p['user_input']}\nAssistant: {p['agent_response']}" for p in batch)
        batch_sources = _pages_sources(batch)
        reply = self._chat(MULTI_SUMMARY_SYSTEM_PROMPT, MULTI_SUMMARY_USER_PROMPT.format(text=text), "multi_summary",
                           batch_sources)
        topics = parse_topics(reply)
        if topics:
            for t in topics:
                self._insert_pages(t["content"], t["keywords"], batch, batch_sources)
        else:
            if reply.strip():  # an empty reply was recorded by _chat
                self.fault("malformed_reply", "multi_summary", "no topic parsed; upstream's general segment used: "
                           + reply[:200], batch_sources)
            self._insert_pages(FALLBACK_SEGMENT_SUMMARY, [], batch, batch_sources)
        for p in batch:
            if p.get("pre_page"):
                self._connect(p["pre_page"], p["page_id"])
            if p.get("next_page"):
                self._connect(p["page_id"], p["next_page"])

    def _insert_pages(self, summary: str, keywords: list[str], pages: list[dict[str, Any]],
                      summary_sources: list[str]) -> str:
        """Upstream ``MidTermMemory.insert_pages_into_session``: merge into the best-scoring session or open one.
        A new session's summary carries ``summary_sources`` (the turns of the batch the summary call saw); merging
        keeps the old summary and its sources, and every page keeps its own."""
        if not self.sessions:
            return self._add_session(summary, pages, keywords, summary_sources)
        vec = self._embed(summary)
        new_kw = set(keywords)
        best: dict[str, Any] | None = None
        best_score = -1.0
        for s in self.sessions:
            score = float(np.dot(self.vectors[f"s:{s['id']}"], vec))
            old_kw = set(s.get("summary_keywords", []))
            if old_kw and new_kw:
                score += KEYWORD_SIMILARITY_ALPHA * len(old_kw & new_kw) / len(old_kw | new_kw)
            if score > best_score:
                best, best_score = s, score
        if best is None or best_score < self.similarity_threshold:
            return self._add_session(summary, pages, keywords, summary_sources)
        for p in pages:
            self._vector(f"p:{p['page_id']}", _page_text(p))
            best["details"].append({**p, "page_keywords": list(p.get("page_keywords") or keywords)})
        best["L_interaction"] += len(pages)
        best["last_visit_time"] = self.clock
        best["H_segment"] = self._heat(best)
        return best["id"]

    def _add_session(self, summary: str, pages: list[dict[str, Any]], keywords: list[str],
                     summary_sources: list[str]) -> str:
        sid = self._next_id("session")
        self.vectors[f"s:{sid}"] = self._embed(summary)
        details = []
        for p in pages:
            self._vector(f"p:{p['page_id']}", _page_text(p))
            details.append({**p, "page_keywords": list(p.get("page_keywords") or []),
                            "preloaded": p.get("preloaded", False), "analyzed": p.get("analyzed", False)})
        session = {
            "id": sid, "summary": summary, "summary_keywords": list(keywords), "details": details,
            "summary_sources": list(summary_sources),
            "L_interaction": len(details), "R_recency": 1.0, "N_visit": 0, "H_segment": 0.0,
            "timestamp": self.clock, "last_visit_time": self.clock, "access_count_lfu": 0,
        }
        session["H_segment"] = self._heat(session)
        self.sessions.append(session)
        if len(self.sessions) > self.mid_term_capacity:
            self._evict_lfu()
        return sid

    def _evict_lfu(self) -> None:
        """Drop the session retrieved least often (the oldest among ties), as upstream's ``evict_lfu``."""
        victim = min(range(len(self.sessions)), key=lambda i: self.sessions[i].get("access_count_lfu", 0))
        gone = self.sessions.pop(victim)
        self.vectors.pop(f"s:{gone['id']}", None)

    def _hottest(self) -> dict[str, Any] | None:
        if not self.sessions:
            return None
        return min(self.sessions, key=lambda s: (-s["H_segment"], s["id"]))

    def _promote_if_hot(self) -> None:
        """Upstream ``_trigger_profile_and_knowledge_update_if_needed``: analyse the hottest session's new pages."""
        session = self._hottest()
        if session is None or session["H_segment"] < self.heat_threshold:
            return
        pages = [p for p in session["details"] if not p.get("analyzed", False)]
        if not pages:
            return
        conversation = _dialogue_with_times(pages)
        turns = _pages_sources(pages)  # the dialogue both calls see (page texts only, not their meta info)
        existing = self.profile if self.profile and self.profile.lower() != "none" else "No existing profile data."
        profile_reply = self._chat(PROFILE_SYSTEM_PROMPT, PROFILE_USER_PROMPT.format(
            existing_user_profile=existing, conversation=conversation), "profile", turns).strip()
        new_profile = profile_reply or "None"
        unusable = unusable_state(new_profile, self.profile if existing == self.profile else "")
        if unusable and new_profile.lower() != "none" and len(new_profile.strip()) >= MIN_PROFILE_CHARS:
            self.fault("malformed_reply", "profile", f"{unusable}; the previous profile is kept: {new_profile[:200]}",
                       turns)
        elif new_profile.lower() != "none" and len(new_profile.strip()) >= MIN_PROFILE_CHARS:
            # the one rule over the call's inputs: the existing profile (with its provenance) and each page
            inputs = [(_page_text(p), p.get("sources") or (), ()) for p in pages]
            if existing == self.profile:
                inputs.append((self.profile, self.profile_sources, self.profile_derived))
            if new_profile != self.profile:
                self.profile_sources, self.profile_derived = kept_provenance(new_profile, inputs)
            else:  # echoed: its origin stands, the call's inputs are derived
                self.profile_derived = [t for t in kept_provenance("", inputs)[1] if t not in self.profile_sources]
            self.profile = new_profile
            self.profile_updated = self.clock
        elif profile_reply:  # an empty reply was recorded by _chat
            self.fault("malformed_reply", "profile", f"profile reply under {MIN_PROFILE_CHARS} characters or "
                       f"'None'; the previous profile is kept (upstream): {new_profile[:200]}", turns)
        knowledge_reply = self._chat(KNOWLEDGE_SYSTEM_PROMPT, KNOWLEDGE_USER_PROMPT.format(conversation=conversation),
                                     "knowledge", turns)
        private, assistant = parse_knowledge(knowledge_reply)
        if knowledge_reply.strip() and not any(m in knowledge_reply for m in ("【User Private Data】",
                                                                                "【Assistant Knowledge】")):
            self.fault("malformed_reply", "knowledge", "neither section marker in the reply; nothing stored "
                       "(upstream): " + knowledge_reply[:200], turns)
        for line in knowledge_lines(private):
            self._add_knowledge(self.user_knowledge, line, turns)
        for line in knowledge_lines(assistant):
            self._add_knowledge(self.assistant_knowledge, line, turns)
        for p in session["details"]:
            p["analyzed"] = True
        session["N_visit"] = 0
        session["L_interaction"] = 0
        session["H_segment"] = self._heat(session)
        session["last_visit_time"] = self.clock

    def _add_knowledge(self, store: list[dict[str, Any]], text: str, sources: list[str]) -> None:
        kid = self._next_id("know")
        self.vectors[f"k:{kid}"] = self._embed(text)
        store.append({"id": kid, "knowledge": text, "timestamp": self.clock, "sources": list(sources)})
        while len(store) > self.knowledge_capacity:
            old = store.pop(0)
            self.vectors.pop(f"k:{old['id']}", None)

    # -- read path -----------------------------------------------------------------------------------------------
    def _search_sessions(self, qvec: np.ndarray) -> list[dict[str, Any]]:
        """Upstream ``MidTermMemory.search_sessions``; every session that yields pages counts a visit."""
        if not self.sessions:
            return []
        summaries = np.stack([self.vectors[f"s:{s['id']}"] for s in self.sessions])
        sims = summaries @ qvec
        results = []
        for i in _top_k_desc(sims, min(self.top_k_sessions, len(self.sessions))):
            session, score = self.sessions[i], float(sims[i])
            if score < self.segment_similarity_threshold:
                continue
            matched = []
            for page in session["details"]:
                ps = float(np.dot(self.vectors[f"p:{page['page_id']}"], qvec))
                if ps >= self.page_similarity_threshold:
                    matched.append({"page": page, "score": ps})
            if matched:
                session["N_visit"] += 1
                session["last_visit_time"] = self.clock
                session["access_count_lfu"] = session.get("access_count_lfu", 0) + 1
                session["H_segment"] = self._heat(session)
                results.append({"session_id": session["id"], "score": score,
                                "pages": sorted(matched, key=lambda m: m["score"], reverse=True)})
        return sorted(results, key=lambda r: r["score"], reverse=True)

    def _retrieve_pages(self, qvec: np.ndarray) -> list[dict[str, Any]]:
        """Upstream ``Retriever._retrieve_mid_term_context``: the best ``retrieval_queue_capacity`` pages overall."""
        heap: list[tuple[float, int, int]] = []
        pages: list[dict[str, Any]] = []
        for match in self._search_sessions(qvec):
            for m in match["pages"]:
                item = (m["score"], len(pages), len(pages))
                if len(heap) < self.retrieval_queue_capacity:
                    heapq.heappush(heap, item)
                    pages.append(m["page"])
                elif m["score"] > heap[0][0]:
                    heapq.heappop(heap)
                    heapq.heappush(heap, item)
                    pages.append(m["page"])
        return [pages[i] for _, _, i in sorted(heap, key=lambda x: x[0], reverse=True)]

    def _search_knowledge(self, store: list[dict[str, Any]], qvec: np.ndarray) -> tuple[list[dict[str, Any]], bool]:
        """The top ``top_k_knowledge`` entries at or above ``knowledge_threshold``, best first, and whether the
        search was saturated (it excluded nothing: every entry is shown, whatever the query)."""
        if not store:
            return [], False
        sims = np.stack([self.vectors[f"k:{e['id']}"] for e in store]) @ qvec
        hits = [i for i in _top_k_desc(sims, min(self.top_k_knowledge, len(store)))
                if float(sims[i]) >= self.knowledge_threshold]
        return [store[i] for i in sorted(hits, key=lambda i: float(sims[i]), reverse=True)], len(hits) == len(store)

    def _blocks(self, query: str) -> tuple[dict[str, str], tuple[ContextItem, ...], dict[str, Any]]:
        """Retrieve (counting visits) and render upstream's blocks: the short-term history, the retrieved pages,
        the profile with the user knowledge, the assistant knowledge; with the items in them and retrieval stats."""
        qvec = self._embed(query)
        pages = self._retrieve_pages(qvec)
        # a saturated search (every entry shown) is no retrieval: its items are visible, as the profile
        user_kn, user_all = self._search_knowledge(self.user_knowledge, qvec)
        asst_kn, asst_all = self._search_knowledge(self.assistant_knowledge, qvec)
        items: list[ContextItem] = []

        history = [f"User: {qa['user_input']}\nAssistant: {qa['agent_response']} (Time: {qa['timestamp']})"
                   for qa in self.short_term]
        items += [ContextItem("short_term", h, tuple(qa.get("sources", ())), visible=True)
                  for h, qa in zip(history, self.short_term)]
        retrieved = [f"【Historical Memory】\nUser: {p['user_input']}\nAssistant: {p['agent_response']}\n"
                     f"Time: {p['timestamp']}\nConversation chain overview: {p.get('meta_info', 'N/A')}" for p in pages]
        for r, p in zip(retrieved, pages):  # the page states its dialogue and the chain overview it shows
            origin = _union(p.get("sources"), p.get("meta_sources"))
            items.append(ContextItem("page", r, tuple(origin),
                                     tuple(t for t in _union(p.get("meta_derived")) if t not in origin)))
        has_profile = bool(self.profile) and self.profile.lower() != "none"
        profile = self.profile if has_profile else "No detailed profile available yet."
        if has_profile:
            items.append(ContextItem("profile", profile, tuple(self.profile_sources), tuple(self.profile_derived),
                                     visible=True))
        user_kn_text = ""
        if user_kn:
            lines = [f"- {e['knowledge']} (Recorded: {e['timestamp']})\n" for e in user_kn]
            user_kn_text = "\n【Relevant User Knowledge Entries】\n" + "".join(lines)
            items += [ContextItem("user_knowledge", ln.strip(), tuple(e.get("sources", ())), visible=user_all)
                      for ln, e in zip(lines, user_kn)]
        asst_lines = [f"- {e['knowledge']} (Recorded: {e['timestamp']})\n" for e in asst_kn]
        items += [ContextItem("assistant_knowledge", ln.strip(), tuple(e.get("sources", ())), visible=asst_all)
                  for ln, e in zip(asst_lines, asst_kn)]
        blocks = {
            "history_text": "\n".join(history),
            "retrieval_text": "\n".join(retrieved),
            "background": f"【User Profile】\n{profile}\n{user_kn_text}",
            "assistant_knowledge_text": "【Assistant Knowledge Base】\n" + (
                "".join(asst_lines) if asst_lines else "- No relevant assistant knowledge found for this query.\n"),
        }
        stats = {"short_term": len(self.short_term), "pages": [p["page_id"] for p in pages],
                 "user_knowledge": len(user_kn), "assistant_knowledge": len(asst_kn),
                 "knowledge_saturated": [k for k, full in (("user", user_all), ("assistant", asst_all)) if full],
                 "mid_term_sessions": len(self.sessions), "has_profile": self.profile is not None}
        return blocks, tuple(items), stats

    def recall(self, query: str) -> MemoryOSRecall:
        """Upstream's retrieval for ``query`` (``Retriever.retrieve_context`` plus the short-term history and the
        profile), rendered under upstream's section tags; each item carries its turn ids."""
        blocks, items, stats = self._blocks(query)
        return MemoryOSRecall(SHARED_RENDERING.format(**blocks), items, stats, blocks=blocks)

    def native_messages(self, query: str, blocks: dict[str, str]) -> tuple[Message, ...]:
        """Upstream's ``get_response`` prompt around the rendered blocks (no conversation metadata, as InMind)."""
        limit = ANSWER_LIMIT_CLAUSE.format(n=self.answer_word_limit) if self.answer_word_limit else ""
        system = ANSWER_SYSTEM_PROMPT.format(relationship=self.relationship,
                                             assistant_knowledge_text=blocks["assistant_knowledge_text"],
                                             meta_data_text=NO_META_DATA)
        user = ANSWER_USER_PROMPT.format(history_text=blocks["history_text"], retrieval_text=blocks["retrieval_text"],
                                         background=blocks["background"], relationship=self.relationship, query=query,
                                         limit=limit)
        return Message("system", system), Message("user", user)

    def native_answer(self, query: str, recall: Recall) -> Answer:
        """Upstream's answer call; the reply is cleaned of ``<think>`` blocks as upstream's client does."""
        blocks = recall.blocks if isinstance(recall, MemoryOSRecall) else self._blocks(query)[0]
        context = self.native_messages(query, blocks)
        comp = self.llm.answerer.chat(context)
        return Answer(clean_reply(comp.text), context, meta={**recall.meta, "answer_prompt": NATIVE_ANSWER_VERSION},
                      items=recall.items)

    def answer(self, query: str, answerer: Answerer = SHARED) -> Answer:
        """Answer with the protocol's answerer from one retrieval; then, as upstream's ``get_response``, write the
        answered Q/A into memory when ``write_answers`` (the protocol discards that state)."""
        ans = super().answer(query, answerer)
        if self.write_answers:
            self.add_memory(query, ans.text, self.clock)
        return ans

    # -- persistence ---------------------------------------------------------------------------------------------
    def _live_vector_keys(self) -> list[str]:
        keys = {f"s:{s['id']}" for s in self.sessions}
        keys |= {f"p:{p['page_id']}" for s in self.sessions for p in s["details"]}
        keys |= {f"k:{e['id']}" for e in self.user_knowledge + self.assistant_knowledge}
        return sorted(keys)

    def snapshot(self, directory: Path) -> None:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        keys = self._live_vector_keys()
        dim = self.encoder.dim if not keys else len(self.vectors[keys[0]])
        matrix = np.stack([self.vectors[k] for k in keys]).astype(np.float32) if keys else np.zeros((0, dim), np.float32)
        np.save(directory / "vectors.npy", matrix, allow_pickle=False)
        write_json(directory / "state.json", {
            "prompt_version": PROMPT_VERSION, "clock": self.clock, "short_term": self.short_term,
            "last_evicted": self.last_evicted, "sessions": self.sessions, "profile": self.profile,
            "profile_updated": self.profile_updated, "profile_sources": self.profile_sources,
            "profile_derived": self.profile_derived,
            "user_knowledge": self.user_knowledge,
            "assistant_knowledge": self.assistant_knowledge, "counters": self.counters, "vector_keys": keys,
        })

    def restore(self, directory: Path) -> None:
        directory = Path(directory)
        st = read_json(directory / "state.json")
        matrix = np.load(directory / "vectors.npy", allow_pickle=False)
        self.clock = st["clock"]
        self.short_term = st["short_term"]
        self.last_evicted = st["last_evicted"]
        self.sessions = st["sessions"]
        self.profile = st["profile"]
        self.profile_updated = st["profile_updated"]
        self.profile_sources = st.get("profile_sources", [])  # older snapshots: no provenance
        self.profile_derived = st.get("profile_derived", [])
        self.user_knowledge = st["user_knowledge"]
        self.assistant_knowledge = st["assistant_knowledge"]
        self.counters = {k: int(v) for k, v in st["counters"].items()}
        self.vectors = {k: matrix[i].astype(np.float32) for i, k in enumerate(st["vector_keys"])}
