"""A-Mem: agentic memory with self-organising, interlinked notes (Xu et al. 2025, "A-MEM: Agentic Memory for LLM
Agents", arXiv:2502.12110).

Reimplemented (no PyPI release) from the paper reproduction ``WujiangXu/A-mem`` at 0c8039f (``memory_layer.py``:
``MemoryNote.analyze_content``, ``AgenticMemorySystem.add_note / process_memory / consolidate_memories /
find_related_memories / find_related_memories_raw``, ``SimpleEmbeddingRetriever``; ``test_advanced.py``:
``advancedMemAgent``; ``memory_layer_robust.py`` for dropping json_schema), checked against the library
``agiresearch/A-mem`` at ceffb86 (``agentic_memory/memory_system.py``).

Write path, per trace turn (user and assistant turns alike, as the reproduction adds every LoCoMo turn):
  1. the turn becomes a note "Speaker <role> says : <text>" dated with the session's trace date;
  2. LLM call ``analyze_content`` -> {keywords, context, tags};
  3. the k=5 nearest notes to the note's content (cosine over the stored note documents) are shown, with their
     global memory index, to the LLM evolution call -> {should_evolve, actions, suggested_connections,
     tags_to_update, new_context_neighborhood, new_tags_neighborhood}; ``strengthen`` appends the suggested
     memory indices to the new note's links and replaces its tags, ``update_neighbor`` rewrites the i-th shown
     neighbour's context and tags in order;
  4. the note is embedded as "content:… context:… keywords: … tags: …"; every ``evo_threshold`` evolutions
     the whole retriever is rebuilt from the current notes ("<content> , <context> <keywords> <tags>").
  The evolution call is made even for the first note (empty neighbour list), as in the reproduction.
Read path (``test_advanced.py``), split for the answer modes: ``recall`` makes one LLM call that turns the
question into keywords, then ``find_related_memories_raw`` takes the top ``retrieve_k`` notes for those keywords and,
after each, up to k+1 of its linked notes, each line "talk start time:…memory content: …memory context: …memory
keywords: […]memory tags: […]"; every line is one ``note`` item.

Answer modes: ``shared`` (default) gives those lines to the shared prompt of ``inmind_exp.memory.answering``; ``native``
sends the reproduction's default answer prompt (``test_advanced.py`` ``answer_question``, the one it sends for LoCoMo
categories 1, 3 and 4: "write an answer in the form of a short phrase … Answer with exact words from the context
whenever possible", then "Short answer:") with its JSON output ``{"answer": …}``; an unparseable reply is used as the
answer text as is, as the reproduction does (and counted as a fault). ``answer_prompt`` in the meta names which.

Provenance (origin and derived, ``ContextItem``): a note's origin is the id of the trace turn it was made from.
An evolution call rewrites fields of notes (``strengthen`` the new note's tags, ``update_neighbor`` the shown
neighbours' context and tags). By the one rule (``inmind_exp.memory.kept_provenance``), a note whose fields the
call changed gains as origin the turn of each shown note (the new note and the neighbours: a note's content is its
turn) whose content its new context and tags still state; every other shown turn, and what the shown notes carry
besides their own turn, is derived, so a tag-only edit does not make the shown turns origin and nothing propagates
transitively through origin. A note the call returned unchanged gains them all as derived. Links add no sources: a linked note appears in the context as its own item.

Faults (``MemorySystem.fault``, with the turn id of the note being written): an analysis or evolution reply that
is never valid JSON of the asked shape after ``json_attempts`` (``malformed_reply``, or ``empty_reply`` when blank;
upstream falls back to an empty analysis / no evolution), an evolution field that is missing or ill-typed and so
skipped, or a suggested connection that is not a shown memory index (``malformed_reply`` at ``a_mem.evolution``);
on the read path a keyword reply that is not the JSON asked for (the raw reply is used, as upstream) and a native
answer that is not ``{"answer": "…"}`` (turns empty: nothing is being written).

Deliberate deviations:
  - Prompts are upstream's text, verbatim with its indentation (``systems/prompts/a_mem.py``, where the one
    change is listed). json_schema is replaced by json_object: the analysis, evolution and keyword prompts already
    describe their JSON, so they are sent unchanged (examples such as ``True or False`` included); the answer
    call's system message names its key ``"answer"``, which upstream set through the schema. A reply that is not
    valid JSON, or lacks a key, is re-asked by the shared client
    (``json_attempts``), then falls back as upstream does: empty analysis (context "General"), no evolution,
    the raw reply as keywords. A missing or ill-typed evolution field makes its part of the action a no-op.
    Each of these fallbacks is counted as a fault (see above).
  - A neighbour rewritten by ``update_neighbor`` is re-embedded at once (requested by the issue); upstream keeps
    its stale vector until the next consolidation.
  - Links are stored as note ids (upstream stores memory indices; notes are never deleted, so they coincide);
    suggested connections that are not valid memory indices are dropped instead of crashing the read path.
  - Note ids and timestamps come from the trace (the turn id: ``<session id>#<turn index>`` or the injected pair's
    ids; ``session.date``), not uuid4 and the wall clock; a space is added in "Speaker <role> says" (upstream glues
    the name to "says").
  - Sampling parameters are the roles' configured defaults (upstream: temperature 0.7, max_tokens 1000); the
    answer is made by the answerer role, the other calls by the memory role.
  - Note fields that no prompt or ranking reads (category, importance_score, retrieval_count, last_accessed,
    evolution_history) are not kept.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from inmind_exp.memory import (SYSTEMS, Answer, CallProfile, ContextItem, MemorySystem, Message, Recall, Session,
                               TextIndex, at_least, kept_provenance, parse_json_object, read_json, union_sources,
                               write_json)
from systems.prompts.a_mem import (ANALYZE_PROMPT, ANSWER_PROMPT, ANSWER_SYSTEM_PROMPT, EVOLUTION_PROMPT,
                                   JSON_SYSTEM_PROMPT, PROMPTS_VERSION, QUERY_KEYWORDS_PROMPT)

PROMPT_VERSION = "a_mem-v3"
ANSWER_PROMPT_VERSION = "a_mem-answer-v2"

@dataclass
class Note:
    """One memory note; ``links`` are ids of notes the evolution step connected it to (duplicates kept);
    ``sources`` its origin turns (its own turn, plus the shown turns of evolution calls that changed it),
    ``derived`` the turns it only inherited (evolution calls that echoed it unchanged, inputs' derived sources)."""

    id: str
    content: str
    timestamp: str
    keywords: list[str] = field(default_factory=list)
    context: str = "General"
    tags: list[str] = field(default_factory=list)
    links: list[str] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    derived: list[str] = field(default_factory=list)

    def rewritten(self, written: str, shown: list[tuple[str, list[str], list[str]]]) -> None:
        """Provenance of an evolution rewrite, by the one rule (``kept_provenance``): the inputs are the ``shown``
        notes (content, own turn, other sources); the text of the fields the call changed (``written``: the new
        context and/or tags, "" if it changed nothing) keeps as origin the turn of each shown note it states;
        everything else is derived."""
        origin, derived = kept_provenance(written, shown, keep=self.sources)
        self.sources = origin
        self.derived = [t for t in union_sources(self.derived, derived) if t not in origin]


def note_document(n: Note) -> str:
    """The text a note is embedded under when added (``add_note``)."""
    return f"content:{n.content} context:{n.context} keywords: {', '.join(n.keywords)} tags: {', '.join(n.tags)}"


def consolidated_document(n: Note) -> str:
    """The text a note is embedded under after ``consolidate_memories``."""
    return f"{n.content} , {n.context} {' '.join(n.keywords)} {' '.join(n.tags)}"


def raw_memory_line(n: Note) -> str:
    """One line of ``find_related_memories_raw`` (the fields run together, lists in Python repr, as upstream)."""
    return (f"talk start time:{n.timestamp}memory content: {n.content}memory context: {n.context}"
            f"memory keywords: {n.keywords!r}memory tags: {n.tags!r}\n")


def _str_list(v: Any) -> list[str] | None:
    if isinstance(v, str):
        return [v] if v.strip() else []
    if isinstance(v, list):
        return [x if isinstance(x, str) else str(x) for x in v if x is not None and not isinstance(x, (dict, list))]
    return None


def _as_bool(v: Any) -> bool | None:
    if isinstance(v, bool):
        return v
    if isinstance(v, str) and v.strip().lower() in ("true", "false"):
        return v.strip().lower() == "true"
    return None


def _check_analysis(obj: dict[str, Any]) -> str | None:
    missing = [k for k in ("keywords", "context", "tags") if k not in obj]
    if missing:
        return f"missing key(s) {', '.join(missing)}"
    if _str_list(obj["keywords"]) is None or _str_list(obj["tags"]) is None:
        return "keywords and tags must be lists of strings"
    if not isinstance(obj["context"], (str, list)):
        return "context must be a string"
    return None


def _check_evolution(obj: dict[str, Any]) -> str | None:
    if _as_bool(obj.get("should_evolve")) is None:
        return "should_evolve must be true or false"
    return None



def _memory_index(v: Any) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, str) and v.strip().isdigit():
        return int(v.strip())
    return None


@SYSTEMS.register("a_mem")
class AMem(MemorySystem):
    """A-Mem: per-turn notes with LLM-derived metadata, LLM-driven linking and neighbour rewriting."""

    version = "3"  # 2: upstream's analysis, evolution, keyword and answer prompts verbatim; 3: evolution
    # provenance by the one rule (kept_provenance): a tag/context edit keeps only the shown turns it states

    embeddings = ("minilm", "emb3")
    # two notes (user + assistant turn) per user turn, two memory calls each; one keyword call per query
    cost = CallProfile(memory_calls_per_user_turn=4.0, memory_calls_per_query=1.0, answer_calls_per_query=1.0,
                       prompt_tokens_per_memory_call=1200, prompt_tokens_per_answer_call=6000)

    param_ranges = {"evolution_k": at_least(0), "retrieve_k": at_least(1), "evo_threshold": at_least(1),
                    "json_attempts": at_least(1)}

    def __init__(self, llm, encoder, workdir: Path, evolution_k: int = 5, retrieve_k: int = 10,
                 evo_threshold: int = 100, json_attempts: int = 3, **params) -> None:
        super().__init__(llm, encoder, workdir, **params)
        if encoder is None:
            raise ValueError("system 'a_mem' needs a dense embedding (minilm or emb3), not bm25")
        self.evolution_k = int(evolution_k)
        self.retrieve_k = int(retrieve_k)
        self.evo_threshold = int(evo_threshold)
        self.json_attempts = int(json_attempts)
        self.notes: list[Note] = []  # insertion order; a note's position is its "memory index"
        self.position: dict[str, int] = {}
        self.index = TextIndex(encoder)  # same order as self.notes
        self.evo_cnt = 0

    # -- write path ---------------------------------------------------------------------------------------------
    def ingest_session(self, session: Session) -> None:
        for turn in session.with_turn_ids().turns:
            self.add_note(turn.id, f"Speaker {turn.role} says : {turn.content}", session.date)

    def add_note(self, note_id: str, content: str, timestamp: str) -> Note:
        """Add the note for trace turn ``note_id`` (its id and its source)."""
        if note_id in self.position:
            raise ValueError(f"a_mem: note {note_id!r} already exists (session ingested twice?)")
        note = Note(id=note_id, content=content, timestamp=timestamp, sources=[note_id],
                    **self.analyze_content(content, (note_id,)))
        evolved = self.process_memory(note)
        self.position[note.id] = len(self.notes)
        self.notes.append(note)
        self.index.add([note.id], [note_document(note)])
        if evolved:
            self.evo_cnt += 1
            if self.evo_threshold > 0 and self.evo_cnt % self.evo_threshold == 0:
                self.consolidate_memories()
        return note

    def _ask_json(self, prompt: str, validate, where: str, turns: tuple[str, ...]) -> dict[str, Any] | None:
        """One JSON-mode memory call; None when the model never produced a valid object (upstream's fallback),
        which is recorded as a fault on ``turns``."""
        messages = (Message("system", JSON_SYSTEM_PROMPT), Message("user", prompt))
        # the note's turns: a cut reply is the note's fault, not its neighbours' (shown in the prompt)
        return self.memory_json(messages, where, turns, attempts=self.json_attempts, validate=validate)

    def analyze_content(self, content: str, turns: tuple[str, ...] = ()) -> dict[str, Any]:
        """Keywords, context and tags of a note's content (``MemoryNote.analyze_content``)."""
        obj = self._ask_json(ANALYZE_PROMPT + content, _check_analysis, "a_mem.analyze_content", turns)
        if obj is None:
            return {"keywords": [], "context": "General", "tags": []}
        context = obj["context"]
        if isinstance(context, list):
            context = " ".join(str(c) for c in context)
        return {"keywords": _str_list(obj["keywords"]) or [], "context": context or "General",
                "tags": _str_list(obj["tags"]) or []}

    def find_related_memories(self, query: str, k: int) -> tuple[str, list[int]]:
        """The k nearest notes to ``query`` as the evolution prompt shows them, and their memory indices."""
        if not self.notes:
            return "", []
        indices = [self.position[i] for i, _ in self.index.search(query, k)]
        text = "".join(
            f"memory index:{i}\t talk start time:{n.timestamp}\t memory content: {n.content}\t memory context: "
            f"{n.context}\t memory keywords: {n.keywords!r}\t memory tags: {n.tags!r}\n"
            for i, n in ((i, self.notes[i]) for i in indices)
        )
        return text, indices

    def process_memory(self, note: Note) -> bool:
        """The evolution step: link/retag the new note and rewrite its neighbours; returns should_evolve.

        Every note this call rewrites gets the union of the sources of its input notes (the new note and the
        neighbours shown); fields that are missing or ill-typed are skipped and counted as one fault."""
        neighbours, indices = self.find_related_memories(note.content, self.evolution_k)
        prompt = EVOLUTION_PROMPT.format(context=note.context, content=note.content, keywords=repr(note.keywords),
                                         nearest_neighbors_memories=neighbours, neighbor_number=len(indices))
        turns = tuple(note.sources)
        obj = self._ask_json(prompt, _check_evolution, "a_mem.evolution", turns)
        if obj is None or not _as_bool(obj["should_evolve"]):
            return False
        # the call's inputs: each shown note's content (its own turn) and what else it carries (derived)
        shown = [(n.content, [n.id], [t for t in union_sources(n.sources, n.derived) if t != n.id])
                 for n in (note, *(self.notes[i] for i in indices))]
        problems: list[str] = []
        actions = _str_list(obj.get("actions"))
        if actions is None:
            problems.append(f"actions is not a list: {obj.get('actions')!r}")
        for action in actions or []:
            if action.strip() == "strengthen":
                connections = obj.get("suggested_connections")
                if not isinstance(connections, list):
                    problems.append(f"suggested_connections is not a list: {connections!r}")
                for v in connections if isinstance(connections, list) else []:
                    idx = _memory_index(v)
                    if idx is not None and 0 <= idx < len(self.notes):
                        note.links.append(self.notes[idx].id)
                    else:
                        problems.append(f"suggested connection {v!r} is not a memory index")
                tags = _str_list(obj.get("tags_to_update"))
                if tags is None:
                    problems.append(f"tags_to_update is not a list: {obj.get('tags_to_update')!r}")
                else:
                    written = " ".join(tags) if tags != note.tags else ""
                    note.tags = tags
                    note.rewritten(written, shown)
            elif action.strip() == "update_neighbor":
                problems += self._update_neighbours(indices, obj.get("new_context_neighborhood"),
                                                    obj.get("new_tags_neighborhood"), shown)
        if problems:
            self.fault("malformed_reply", "a_mem.evolution", "; ".join(problems), turns)
        return True

    def _update_neighbours(self, indices: list[int], contexts: Any, tags_lists: Any,
                           shown: list[tuple[str, list[str], list[str]]]) -> list[str]:
        """Rewrite the i-th shown neighbour's tags (and context, when given); returns what had to be skipped."""
        problems = []
        if not isinstance(contexts, list):
            problems.append(f"new_context_neighborhood is not a list: {contexts!r}")
            contexts = []
        if not isinstance(tags_lists, list):
            problems.append(f"new_tags_neighborhood is not a list: {tags_lists!r}")
            tags_lists = []
        # as upstream, a shorter list than there are neighbours updates the first ones only
        for i in range(min(len(indices), len(tags_lists))):
            tags = _str_list(tags_lists[i])
            if tags is None:
                problems.append(f"new_tags_neighborhood[{i}] is not a list: {tags_lists[i]!r}")
                continue
            n = self.notes[indices[i]]
            before = (n.context, n.tags)
            n.tags = tags
            if i < len(contexts):
                if isinstance(contexts[i], str):
                    n.context = contexts[i]
                else:
                    problems.append(f"new_context_neighborhood[{i}] is not a string: {contexts[i]!r}")
            n.rewritten(" ".join([n.context] * (n.context != before[0]) + n.tags * (n.tags != before[1])), shown)
            self.index.replace(n.id, note_document(n))
        return problems

    def consolidate_memories(self) -> None:
        """Rebuild the retriever from the current notes (``consolidate_memories``)."""
        index = TextIndex(self.encoder)
        index.add([n.id for n in self.notes], [consolidated_document(n) for n in self.notes])
        self.index = index

    # -- read path ----------------------------------------------------------------------------------------------
    def generate_query(self, question: str) -> str:
        """Keywords for retrieval (``generate_query_llm``); the raw reply when it is not the JSON asked for."""
        messages = (Message("system", JSON_SYSTEM_PROMPT), Message("user", QUERY_KEYWORDS_PROMPT.format(question=question)))
        obj = self.memory_json(
            messages, "a_mem.generate_query", attempts=self.json_attempts,
            validate=lambda o: None if isinstance(o.get("keywords"), (str, list)) else "missing string 'keywords'",
            repair=lambda raw: {"keywords": raw}, fallback="the raw reply is the retrieval query")
        kw = (obj or {"keywords": ""})["keywords"]
        return kw if isinstance(kw, str) else ", ".join(str(x) for x in kw)

    def related_notes(self, query: str, k: int) -> list[Note]:
        """Top-k notes for ``query``, each followed by up to k+1 of its linked notes (upstream's loop bound)."""
        if not self.notes:
            return []
        out = []
        for doc_id, _ in self.index.search(query, k):
            n = self.notes[self.position[doc_id]]
            out.append(n)
            for j, link in enumerate(n.links):
                out.append(self.notes[self.position[link]])
                if j >= k:
                    break
        return out

    def find_related_memories_raw(self, query: str, k: int) -> str:
        """``find_related_memories_raw``: the lines of ``related_notes``."""
        return "".join(raw_memory_line(n) for n in self.related_notes(query, k))

    def recall(self, query: str) -> Recall:
        """The keyword call, then the notes and linked notes upstream puts in the answer prompt, one item per line."""
        keywords = self.generate_query(query)
        notes = self.related_notes(keywords, self.retrieve_k)
        items = tuple(ContextItem("note", raw_memory_line(n), tuple(n.sources), tuple(n.derived)) for n in notes)
        return Recall("".join(it.text for it in items), items,
                      {"keywords": keywords, "notes": len(self.notes), "prompt_version": PROMPT_VERSION})

    def native_answer(self, query: str, recall: Recall) -> Answer:
        """The reproduction's short-phrase answer prompt with JSON output ``{"answer": ...}``."""
        context = (Message("system", ANSWER_SYSTEM_PROMPT),
                   Message("user", ANSWER_PROMPT.format(context=recall.text, question=query)))
        comp = self.llm.answerer.chat(context, response_format={"type": "json_object"})
        text = comp.text
        try:
            ans = parse_json_object(comp.text).get("answer")
        except ValueError as e:
            ans, problem = None, str(e)
        else:
            problem = "no string 'answer'"
        if isinstance(ans, str):
            text = ans
        else:  # upstream uses the raw reply as the answer; so do we, but not silently
            self.fault("empty_reply" if not comp.text.strip() else "malformed_reply", "a_mem.native_answer",
                       f"{problem}; the raw reply is the answer: {comp.text[:300]}")
        return Answer(text, context, meta={**recall.meta, "raw": comp.text, "answer_prompt": ANSWER_PROMPT_VERSION},
                      items=recall.items)

    # -- persistence --------------------------------------------------------------------------------------------
    def snapshot(self, directory: Path) -> None:
        self.index.save(directory / "index")
        write_json(directory / "state.json",
                   {"prompt_version": PROMPT_VERSION, "evo_cnt": self.evo_cnt, "notes": [asdict(n) for n in self.notes]})

    def restore(self, directory: Path) -> None:
        state = read_json(directory / "state.json")
        self.notes = [Note(**d) for d in state["notes"]]  # a snapshot without sources loads with empty ones
        self.position = {n.id: i for i, n in enumerate(self.notes)}
        self.evo_cnt = int(state["evo_cnt"])
        self.index = TextIndex(self.encoder)
        self.index.load(directory / "index")
