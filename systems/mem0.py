"""Mem0 (Chhikara et al. 2025, "Mem0: Building Production-Ready AI Agents with Scalable Long-Term Memory",
arXiv:2504.19413): the paper's two-phase extract-then-update pipeline over a vector store of short facts.

Read from ``mem0ai/mem0`` (Apache-2.0) at 57f944e18, the last commit before the v2 pipeline (a488e1904), checked
against the paper-era tree 393a4fd5a (2025-04-29, the LoCoMo evaluation commit) and d85fcda03 (the last commit with
``evaluation/``): ``mem0/memory/main.py`` (``Memory._add_to_vector_store``, ``_create_memory``, ``_update_memory``,
``_delete_memory``, ``_resolve_mapped_id``), ``mem0/memory/utils.py`` (``parse_messages``, ``normalize_facts``),
``mem0/configs/prompts.py`` (``USER_MEMORY_EXTRACTION_PROMPT``, ``FACT_RETRIEVAL_PROMPT``,
``DEFAULT_UPDATE_MEMORY_PROMPT``, ``get_update_memory_messages``; the texts, verbatim, in ``systems/prompts/mem0.py``) and ``evaluation/`` (``src/memzero/add.py``, ``src/memzero/search.py``,
``prompts.py`` ``ANSWER_PROMPT``, ``run_experiments.py``, ``Makefile``).

Write path, per (user, assistant) exchange of a session (the evaluation adds two messages per ``add``):
  1. extraction: one JSON call (system = the extraction prompt dated with the session's trace date, user =
     "Input:" + the exchange as ``role: content`` lines) returns ``{"facts": [...]}``. ``extraction_prompt``
     chooses it: ``user`` (default) is ``USER_MEMORY_EXTRACTION_PROMPT``, what ``get_fact_retrieval_messages``
     sends at the cited commit without an agent id (facts from the user's messages only; the assistant's reply is
     in the input but not to be stored), the default the open-source library evaluates with; ``legacy`` is
     ``FACT_RETRIEVAL_PROMPT`` (``get_fact_retrieval_messages_legacy``: facts from user and assistant messages);
  2. for every fact, the top ``search_top_s`` (5) existing memories by embedding similarity, de-duplicated in
     first-seen order and shown under small integer ids "0", "1", ... (upstream's guard against id hallucination);
  3. one update call over those memories and all new facts returns ``{"memory": [{"id", "text", "event",
     "old_memory"}]}``; ADD stores a new memory, UPDATE replaces an existing memory's text, vector and timestamp,
     DELETE removes it, NONE leaves it. No facts means no update call (1.x behaviour).
Read path (``recall``): the top ``top_k`` memories by cosine similarity, rendered as upstream's ``search.py`` does,
a JSON list of ``"<timestamp>: <memory>"`` strings; each is one ``memory`` item.

Answer modes: ``shared`` (default) gives that JSON list to the shared prompt of ``inmind_exp.memory.answering``;
``native`` sends the evaluation's ``ANSWER_PROMPT`` (``evaluation/prompts.py``, rendered by
``src/memzero/search.py`` as one system message), including its rules "The answer should be less than 5-6 words"
and "based solely on the evidence in the memories"; ``answer_prompt`` in the answer's meta names which.

Provenance (origin and derived, ``ContextItem``), by the one rule of ``inmind_exp.memory.kept_provenance``: an
ADD's origin is the turn ids of the exchange it was extracted from (the "Input" messages of the extraction call).
An ADD or a text-changing UPDATE also keeps as origin the origin of every input of the update call whose content
its text still states: the facts (origin: the exchange), every memory the call was shown, as it stood before the
call (so an UPDATE that merges a memory the same call DELETEs carries the deleted memory's origin on); what else
the call saw is derived. An UPDATE that returns the same text keeps its origin and gains the call's inputs as
derived. The earlier messages shown as context (``recent_messages``, off by default) are neither origin nor
derived: out of the union, since with the paper's window of 10 they would put one exchange into the derived turns
of every memory written over the next five exchanges.

Faults (``MemorySystem.fault``, with the turn ids of the exchange being written): a malformed, off-schema or
empty extraction or update reply (``malformed_reply`` / ``empty_reply``: upstream logs it and stores nothing), and
an update entry upstream skips although it would have changed memory (an ADD/UPDATE/DELETE with empty text, an
UPDATE/DELETE with an id that was not shown or was already deleted, an unknown event, a non-object entry:
``malformed_reply`` at ``mem0.update.entry``). A valid reply with no facts is Mem0's own decision, not a fault.

Deliberate deviations:
  - Prompts are upstream's text, verbatim (``systems/prompts/mem0.py``; the update message keeps upstream's
    indentation and renders old memories and facts as ``str()`` of their lists, as its f-string does). Changes:
    the extraction prompt's "today's date" is the session's trace date (``session.date`` as YYYY-MM-DD), not the
    wall clock (determinism); one rule is appended when ``recent_messages`` > 0 (``CONTEXT_RULE``: upstream sends
    no earlier messages, so it has no rule for them); the answer prompt's indentation is removed.
  - The answer prompt is written for one user instead of LoCoMo's two speakers: "memories from two speakers in a
    conversation" becomes "memories from conversations with the user", one memory list ("Memories for the user:")
    instead of two, and rule 7 warns against confusing people mentioned in the memories with the user.
  - ``recent_messages: 0`` (default) sends the new exchange alone, as the cited open-source code does; the
    paper's variant (``system.params.recent_messages=10``, its m = 10) puts the last m earlier messages of the
    trace before the exchange as context only. The paper's asynchronously refreshed conversation summary S is not
    built: neither its prompt nor its refresh schedule is published, and the open-source code has none.
  - The evaluation ran against the hosted platform with LoCoMo-specific ``custom_instructions``, published at
    ``evaluation/src/memzero/add.py`` lines 16-42 (d85fcda03), written for LoCoMo's two named speakers. They are not
    offered as an ``extraction_prompt``: that file is their only copy, and the platform wraps them in an extraction
    prompt it does not publish. We use the open-source library's default at the cited commit, ``USER_MEMORY_EXTRACTION_PROMPT`` (which
    upstream describes as the platform's prompt), or the older ``FACT_RETRIEVAL_PROMPT`` with
    ``extraction_prompt: legacy`` (results before version 2 of this module used it).
  - Memory ids are a counter in the state ("m000001"), not uuid4; timestamps are trace dates, not wall-clock
    ``created_at``/``updated_at``. The SQLite history becomes a JSON event list in the state.
  - Endpoint failures propagate (upstream logs and continues); only malformed JSON is treated as a no-op (and
    counted as a fault). Event names are compared case-insensitively and ids as strings (a weak model may write
    "add" or 0).
  - Sampling parameters are the roles' configured defaults (upstream's OpenAI config uses temperature 0.1 and the
    evaluation's answerer 0.0; GPT-5-mini accepts neither). No graph store (Mem0^g is a separate variant).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Mapping

from inmind_exp.memory import (SYSTEMS, Answer, CallProfile, ContextItem, MemorySystem, Message, Recall, Session,
                               TextIndex, at_least, kept_provenance, read_json, turn_pairs, write_json)
from systems.prompts.mem0 import (ANSWER_PROMPT, CONTEXT_RULE, DEFAULT_UPDATE_MEMORY_PROMPT, FACT_RETRIEVAL_PROMPT,
                                  PROMPTS_VERSION, UPDATE_CURRENT_MEMORY, UPDATE_EMPTY_MEMORY, UPDATE_MEMORY_MESSAGE,
                                  USER_MEMORY_EXTRACTION_PROMPT)

PROMPT_VERSION = "mem0-v3"
ANSWER_PROMPT_VERSION = "mem0-answer-v2"
#: ``extraction_prompt`` -> the upstream prompt it names (``user``: the cited commit's default)
EXTRACTION_PROMPTS = {"user": USER_MEMORY_EXTRACTION_PROMPT, "legacy": FACT_RETRIEVAL_PROMPT}


def _day(date: str) -> str:
    """A trace timestamp such as ``2023/05/20 (Sat) 02:21`` as ``2023-05-20`` (upstream's format); else unchanged."""
    m = re.match(r"\s*(\d{4})[/-](\d{1,2})[/-](\d{1,2})", date)
    return f"{m.group(1)}-{int(m.group(2)):02d}-{int(m.group(3)):02d}" if m else date


def _lines(messages: list[tuple[str, str]]) -> str:
    """``parse_messages``: one ``role: content`` line per message."""
    return "".join(f"{role}: {content}\n" for role, content in messages)


def _facts_problem(obj: dict[str, Any]) -> str | None:
    return None if isinstance(obj.get("facts"), list) else 'expected a "facts" list'


def _actions_problem(obj: dict[str, Any]) -> str | None:
    return None if isinstance(obj.get("memory"), list) else 'expected a "memory" list'



def normalize_facts(raw: list[Any]) -> list[str]:
    """Facts as strings: a weak model may write ``{"fact": ...}`` or ``{"text": ...}`` objects (upstream 1.x)."""
    out: list[str] = []
    for item in raw:
        fact = (item.get("fact") or item.get("text")) if isinstance(item, dict) else item
        if fact is None:
            continue
        fact = fact if isinstance(fact, str) else str(fact)
        if fact.strip():
            out.append(fact)
    return out


@SYSTEMS.register("mem0")
class Mem0(MemorySystem):
    """Extract facts per exchange, reconcile them with similar memories (ADD/UPDATE/DELETE/NONE), retrieve top-k."""

    version = "4"  # 2: upstream's extraction prompt by default (extraction_prompt=user), update message verbatim;
    # empty extractions are diagnostics, JSON faults through MemorySystem.memory_json (issue 21); 3: provenance by
    # the one rule (a merge or DELETE transfers origin), recent_messages 0 by default (the cited code); 4: the
    # context-only messages out of the union

    cost = CallProfile(memory_calls_per_user_turn=2.0, prompt_tokens_per_memory_call=1500,
                       answer_calls_per_query=1.0, prompt_tokens_per_answer_call=1400)

    param_ranges = {"top_k": at_least(1), "search_top_s": at_least(1), "recent_messages": at_least(0),
                    "json_attempts": at_least(1)}

    @classmethod
    def check_params(cls, params: Mapping[str, Any]) -> list[str]:
        """The ranges, and ``extraction_prompt`` one of ``EXTRACTION_PROMPTS``, at planning (before anything runs)."""
        problems = super().check_params(params)
        choice = params.get("extraction_prompt", "user")
        if choice not in EXTRACTION_PROMPTS:
            problems.append(f"system.params.extraction_prompt={choice} (mem0): must be one of "
                            f"{', '.join(EXTRACTION_PROMPTS)}")
        return problems

    def __init__(self, llm, encoder, workdir: Path, top_k: int = 30, search_top_s: int = 5,
                 recent_messages: int = 0, json_attempts: int = 1, extraction_prompt: str = "user",
                 **params: Any) -> None:
        super().__init__(llm, encoder, workdir, **params)
        if encoder is None:
            raise ValueError("system 'mem0': needs a dense embedding (minilm or emb3), got none")
        if extraction_prompt not in EXTRACTION_PROMPTS:
            raise ValueError(f"system 'mem0': extraction_prompt must be one of {', '.join(EXTRACTION_PROMPTS)}, "
                             f"got {extraction_prompt!r}")
        self.extraction_prompt = extraction_prompt
        self.top_k = int(top_k)
        self.search_top_s = int(search_top_s)
        self.recent_messages = int(recent_messages)
        self.json_attempts = int(json_attempts)
        self.index = TextIndex(encoder)
        #: id -> {"text", "timestamp", "created", "sources": [turn ids]}
        self.memories: dict[str, dict[str, Any]] = {}
        self.counter = 0
        self.recent: list[tuple[str, str]] = []
        self.history: list[dict[str, Any]] = []
        self.n_batches = 0

    # -- write path -----------------------------------------------------------------------------------------------
    def ingest_session(self, session: Session) -> None:
        for user, assistant in turn_pairs(session.with_turn_ids()):
            turns = [t for t in (user, assistant) if t is not None]
            self.add([(t.role, t.content) for t in turns], session.date, tuple(t.id for t in turns))

    def add(self, messages: list[tuple[str, str]], date: str, turns: tuple[str, ...] = ()) -> list[dict[str, Any]]:
        """``Memory.add(messages, infer=True)`` for one batch dated ``date`` whose messages are the trace turns
        ``turns``; returns the applied events."""
        context = self.recent[-self.recent_messages:] if self.recent_messages > 0 else []
        facts = self.extract_facts(messages, context, date, turns)
        if self.recent_messages > 0:
            self.recent = (self.recent + list(messages))[-self.recent_messages:]
        self.n_batches += 1
        if not facts:
            return []

        candidates: dict[str, str] = {}  # real id -> text, in first-seen order
        for fact in facts:
            for mem_id, _ in self.index.search(fact, self.search_top_s):
                candidates.setdefault(mem_id, self.memories[mem_id]["text"])
        temp_ids = {str(i): mem_id for i, mem_id in enumerate(candidates)}
        old = [{"id": str(i), "text": text} for i, text in enumerate(candidates.values())]
        actions = self.decide(old, facts, turns)
        return self.apply(actions, temp_ids, date, turns, facts)

    def _json_call(self, messages: tuple[Message, ...], validate, where: str, turns: tuple[str, ...]) -> dict | None:
        """One JSON memory call; on a reply that never parses (or is off-schema) record the fault and return None,
        upstream's no-op."""
        # the update prompt holds facts, not the turns' text: the call says which turns it writes
        return self.memory_json(messages, where, turns, fallback="upstream's no-op", attempts=self.json_attempts,
                                validate=validate)

    def extract_facts(self, messages: list[tuple[str, str]], context: list[tuple[str, str]], date: str,
                      turns: tuple[str, ...] = ()) -> list[str]:
        rule = CONTEXT_RULE if self.recent_messages > 0 else ""
        system = EXTRACTION_PROMPTS[self.extraction_prompt].format(date=_day(date), context_rule=rule)
        user = f"Input:\n{_lines(messages)}"
        if context:
            user = f"Earlier messages (context only, oldest first):\n{_lines(context)}\n{user}"
        obj = self._json_call((Message("system", system), Message("user", user)), _facts_problem,
                              "mem0.extract_facts", turns)
        if obj is None:
            return []
        facts = normalize_facts(obj["facts"])
        if not facts:  # a well-formed reply with nothing to keep (an acknowledgement): upstream writes nothing
            self.fault("empty_extraction", "mem0.extract_facts", "no fact in the exchange; nothing written", turns)
        return facts

    def decide(self, old: list[dict[str, str]], facts: list[str], turns: tuple[str, ...] = ()) -> list[Any]:
        """The update call (``get_update_memory_messages``): one user message, JSON ``{"memory": [...]}``; the old
        memories and the facts are ``str()`` of their lists, as upstream's f-string renders them."""
        current = UPDATE_CURRENT_MEMORY.format(old_memory=old) if old else UPDATE_EMPTY_MEMORY
        prompt = UPDATE_MEMORY_MESSAGE.format(update_prompt=DEFAULT_UPDATE_MEMORY_PROMPT, current_memory=current,
                                              facts=facts)
        obj = self._json_call((Message("user", prompt),), _actions_problem, "mem0.decide", turns)
        return [] if obj is None else obj["memory"]

    def apply(self, actions: list[Any], temp_ids: dict[str, str], date: str, turns: tuple[str, ...] = (),
              facts: list[str] = ()) -> list[dict[str, Any]]:
        """Apply the update call's entries. Provenance by the one rule (``kept_provenance``): the call's inputs
        are the facts (origin: the exchange ``turns``), every memory it was shown as it was before the call (a
        DELETE in the same call thereby transfers the removed memory's origin to an ADD or UPDATE that still
        states it); an ADD is made from the exchange regardless. Context-only messages are not inputs."""
        inputs = [(m["text"], m.get("sources", ()), m.get("derived", ()))
                  for m in (self.memories.get(i) for i in temp_ids.values()) if m is not None]
        inputs += [(f, turns, ()) for f in facts] or [("", turns, ())]
        applied: list[dict[str, Any]] = []
        skipped: list[str] = []
        for resp in actions:
            if not isinstance(resp, dict):
                skipped.append(f"not an object: {resp!r}"[:120])
                continue
            text = resp.get("text")
            event = str(resp.get("event") or "").strip().upper()
            if not isinstance(text, str) or not text.strip():
                if event in ("ADD", "UPDATE", "DELETE"):  # upstream skips it silently; it would have changed memory
                    skipped.append(f"{event} with empty text")
                continue
            if event == "ADD":
                self.counter += 1
                mem_id = f"m{self.counter:06d}"
                sources, derived = kept_provenance(text, inputs, keep=turns)
                self.memories[mem_id] = {"text": text, "timestamp": date, "created": date, "sources": sources,
                                         **({"derived": derived} if derived else {})}
                self.index.add([mem_id], [text])
                applied.append({"event": "ADD", "id": mem_id, "text": text, "sources": sources})
            elif event in ("UPDATE", "DELETE"):
                mem_id = temp_ids.get(str(resp.get("id")))
                if mem_id is None or mem_id not in self.memories:  # hallucinated id, or already deleted
                    skipped.append(f"{event} of unknown id {resp.get('id')!r}")
                    continue
                previous = self.memories[mem_id]
                if event == "UPDATE":
                    if text == previous["text"]:  # echoed: its origin stands, the call's inputs are derived
                        sources = list(previous.get("sources", ()))
                        derived = [t for t in kept_provenance("", inputs)[1] if t not in sources]
                    else:
                        sources, derived = kept_provenance(text, inputs)
                    applied.append({"event": "UPDATE", "id": mem_id, "text": text, "previous": previous["text"],
                                    "sources": sources})
                    previous.update(text=text, timestamp=date, sources=sources)
                    previous.pop("derived", None)
                    previous.update({"derived": derived} if derived else {})
                    self.index.replace(mem_id, text)
                else:
                    del self.memories[mem_id]
                    self.index.remove(mem_id)
                    applied.append({"event": "DELETE", "id": mem_id, "text": previous["text"],
                                    "sources": list(previous.get("sources", ()))})
            elif event != "NONE":
                skipped.append(f"unknown event {resp.get('event')!r}")
        if skipped:
            self.fault("malformed_reply", "mem0.update.entry", "; ".join(skipped), turns)
        for event in applied:
            self.history.append({"batch": self.n_batches, "date": date, **event})
        return applied

    # -- read path ------------------------------------------------------------------------------------------------
    def search(self, query: str) -> list[tuple[str, float]]:
        return self.index.search(query, self.top_k)

    def recall(self, query: str) -> Recall:
        """The top-k memories as ``search.py`` renders them: a JSON list of ``"<timestamp>: <memory>"``."""
        hits = self.search(query)
        items = tuple(ContextItem("memory", f"{self.memories[i]['timestamp']}: {self.memories[i]['text']}",
                                  tuple(self.memories[i].get("sources", ())), tuple(self.memories[i].get("derived", ())))
                      for i, _ in hits)
        text = json.dumps([it.text for it in items], ensure_ascii=False, indent=4) if items else ""
        return Recall(text, items, {"retrieved": len(hits), "memory_ids": [i for i, _ in hits],
                                    "n_memories": len(self.memories)})

    def native_answer(self, query: str, recall: Recall) -> Answer:
        """The evaluation's ``ANSWER_PROMPT`` as one system message (``search.py``)."""
        memories = json.dumps([it.text for it in recall.items], ensure_ascii=False, indent=4)
        context = (Message("system", ANSWER_PROMPT.format(memories=memories, question=query)),)
        comp = self.llm.answerer.chat(context)
        return Answer(comp.text, context, meta={**recall.meta, "answer_prompt": ANSWER_PROMPT_VERSION},
                      items=recall.items)

    # -- state ----------------------------------------------------------------------------------------------------
    def snapshot(self, directory: Path) -> None:
        directory = Path(directory)
        self.index.save(directory / "index")
        write_json(directory / "state.json", {
            "prompt_version": PROMPT_VERSION,
            "memories": self.memories,
            "counter": self.counter,
            "recent": [list(m) for m in self.recent],
            "history": self.history,
            "n_batches": self.n_batches,
        })

    def restore(self, directory: Path) -> None:
        """Load a snapshot; one written before provenance existed loads with empty sources."""
        directory = Path(directory)
        self.index.load(directory / "index")
        state = read_json(directory / "state.json")
        self.memories = {k: {**v, "sources": list(v.get("sources", ()))} for k, v in sorted(state["memories"].items())}
        self.counter = int(state["counter"])
        self.recent = [(r, c) for r, c in state["recent"]]
        self.history = list(state["history"])
        self.n_batches = int(state["n_batches"])
        if sorted(self.index.ids) != sorted(self.memories):
            raise ValueError(f"mem0 snapshot {directory}: index ids and memory store disagree")
