"""What a memory system shows and what an LLM sees: chat messages, the memory items put in front of the answerer
(with the trace turns each derives from), the faults a system records, and answers. Frozen dataclasses with a
plain-dict round trip (re-exported by ``inmind_exp.records``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from inmind_exp.records.payload import JsonDict


@dataclass(frozen=True)
class ContextItem:
    """One memory item a system put in front of the answerer, with the ids of the trace turns it derives from.

    ``kind`` says what it is in the system's own terms (``memory``, ``note``, ``passage``, ``triple``, ``episode``,
    ``profile``, ``chunk``, ``file`` ...). ``sources`` are the item's *origin*: the turns whose content the item
    states (the turns an extraction, note, page or triple was made from; for a rewrite or merge, the origin of each
    input whose content the new text still states, by the one rule of ``inmind_exp.memory.kept_provenance``).
    ``derived`` are the rest of what the calls that wrote it saw; ``sources`` and ``derived`` together are the
    looser union.

    ``visible`` marks an item that is query-independent (always in the answer context: a profile, a short-term
    history, an always-in-state file, the backbone's turns); the rest were retrieved for the query.
    """

    kind: str
    text: str
    sources: tuple[str, ...] = ()
    derived: tuple[str, ...] = ()
    visible: bool = False

    def to_dict(self) -> JsonDict:
        d: JsonDict = {"kind": self.kind, "text": self.text, "sources": list(self.sources)}
        if self.derived:
            d["derived"] = list(self.derived)
        if self.visible:
            d["visible"] = True
        return d

    @classmethod
    def from_dict(cls, d: JsonDict) -> "ContextItem":
        return cls(kind=d["kind"], text=d["text"], sources=tuple(d.get("sources", ())),
                   derived=tuple(d.get("derived", ())), visible=bool(d.get("visible", False)))


#: kinds that are diagnostics, not faults: no reply went unused, and upstream's own outcome is kept (an extraction
#: legitimately empty, e.g. an acknowledgement with no entity; xMemory's gate not run for want of logprobs, which the
#: run reports as ``gate_ran_rate``); on the record and counted by kind, never a memory fault nor a fact-write fault
DIAGNOSTIC_KINDS: frozenset[str] = frozenset({"empty_extraction", "logprobs_unavailable", "bad_usage",
                                              "invalid_cache_entry"})


@dataclass(frozen=True)
class Fault:
    """A place where a memory system fell back: a malformed or empty reply, an unparsed tool call, an empty
    extraction, a logprob gate without logprobs. Upstream behaviour is kept (an item may be dropped), but never
    silently: every fault lands on the task record.

    Kinds in use: ``malformed_reply``, ``empty_reply``, ``truncated_reply``, ``tool_call_as_text``,
    ``bad_tool_call``, ``fallback``; and the diagnostics (``DIAGNOSTIC_KINDS``, no fault) ``empty_extraction`` (a
    well-formed extraction with nothing in it), ``logprobs_unavailable`` (a logprob gate that could not run),
    ``bad_usage`` (an endpoint's reply whose token counts were no count, taken as 0) and ``invalid_cache_entry`` (an
    unusable call cache entry, asked again and rewritten). ``turns`` are the turn ids being written when it happened
    (empty when reading); ``phase`` is set by the protocol (``ingest``, ``naive``, ``indirect``, ``judge``).
    """

    kind: str
    where: str
    detail: str = ""
    turns: tuple[str, ...] = ()
    phase: str = ""

    @property
    def diagnostic(self) -> bool:
        """A diagnostic (``DIAGNOSTIC_KINDS``), not a fault: counted by kind, never in a fault rate."""
        return self.kind in DIAGNOSTIC_KINDS

    def to_dict(self) -> JsonDict:
        return {"kind": self.kind, "where": self.where, "detail": self.detail, "turns": list(self.turns), "phase": self.phase}

    @classmethod
    def from_dict(cls, d: JsonDict) -> "Fault":
        return cls(kind=d["kind"], where=d.get("where", ""), detail=d.get("detail", ""),
                   turns=tuple(d.get("turns", ())), phase=d.get("phase", ""))


@dataclass(frozen=True)
class Message:
    """One chat message exactly as sent to (or returned by) an LLM; tool fields kept for agentic systems."""

    role: str
    content: str | None = None
    tool_calls: tuple[JsonDict, ...] | None = None
    tool_call_id: str | None = None
    name: str | None = None

    def to_openai(self) -> JsonDict:
        d: JsonDict = {"role": self.role, "content": self.content}
        if self.tool_calls:
            d["tool_calls"] = [dict(tc) for tc in self.tool_calls]
        if self.tool_call_id is not None:
            d["tool_call_id"] = self.tool_call_id
        if self.name is not None:
            d["name"] = self.name
        return d

    @classmethod
    def from_dict(cls, d: JsonDict) -> "Message":
        tcs = d.get("tool_calls")
        return cls(
            role=d["role"],
            content=d.get("content"),
            tool_calls=tuple(tcs) if tcs else None,
            tool_call_id=d.get("tool_call_id"),
            name=d.get("name"),
        )


def msgs(*pairs: tuple[str, str]) -> tuple[Message, ...]:
    """Shorthand: ``msgs(("system", s), ("user", u))``."""
    return tuple(Message(role=r, content=c) for r, c in pairs)


@dataclass(frozen=True)
class Answer:
    """An answer, the exact context (the message list) the answerer saw, and the memory items in that context.

    ``items`` is None when a system does not report provenance (then provenance recall is not measured for it).
    ``visible`` is the context text the answerer was shown, when the answer prompt names one (``answer=paper``: the
    text that replaced the release prompt's ``{context}``); then it is the context judges and exact recall read.
    ``model`` is the model the endpoint reported for the answerer's calls and ``host`` the endpoint's host (set by
    the protocol; each distinct value once, joined by ``, ``).
    """

    text: str
    context: tuple[Message, ...]
    meta: JsonDict = field(default_factory=dict)
    items: tuple[ContextItem, ...] | None = None
    visible: str | None = None
    model: str = ""
    host: str = ""

    def sources(self) -> set[str]:
        """Every turn id that is the origin of some item in the context."""
        return {s for it in self.items or () for s in it.sources}

    def union_sources(self) -> set[str]:
        """Every turn id some item in the context derives from, origin or inherited (``ContextItem.derived``)."""
        return {s for it in self.items or () for s in (*it.sources, *it.derived)}

    def visible_sources(self, visible: bool) -> set[str]:
        """The origin turns of the query-independent items (``visible=True``) or of the retrieved ones."""
        return {s for it in self.items or () if it.visible == visible for s in it.sources}

    def context_text(self) -> str:
        """The context as judges and exact recall see it: ``visible`` when set, else the messages flattened to text
        (final answer excluded)."""
        if self.visible is not None:
            return self.visible
        parts = []
        for m in self.context:
            if m.content:
                parts.append(f"[{m.role}] {m.content}")
            for tc in m.tool_calls or ():
                fn = tc.get("function", {})
                parts.append(f"[{m.role} tool call] {fn.get('name')}({fn.get('arguments')})")
        return "\n".join(parts)

    def to_dict(self) -> JsonDict:
        d = {"text": self.text, "context": [m.to_openai() for m in self.context], "meta": self.meta,
             "items": None if self.items is None else [it.to_dict() for it in self.items]}
        if self.visible is not None:  # only then: records of the other answer modes keep their bytes
            d["visible"] = self.visible
        if self.model or self.host:
            d["model"], d["host"] = self.model, self.host
        return d

    @classmethod
    def from_dict(cls, d: JsonDict) -> "Answer":
        items = d.get("items")
        return cls(text=d["text"], context=tuple(Message.from_dict(m) for m in d["context"]), meta=d.get("meta", {}),
                   items=None if items is None else tuple(ContextItem.from_dict(i) for i in items),
                   visible=d.get("visible"), model=d.get("model", ""), host=d.get("host", ""))
