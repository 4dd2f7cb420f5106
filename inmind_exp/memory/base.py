"""The memory-system interface every system implements, and the ``SYSTEMS`` registry that maps config names to classes.

A system instance is one user's memory for one task. The protocol builds it fresh (or restores it from the
shared prefix snapshot), feeds it sessions in order, then asks it queries. Systems never retry, cache or count
tokens: they call ``llm.memory`` (their internal calls) and ``llm.answerer`` (the answer) from ``inmind_exp.llm``.

The answerer is a controlled factor the protocol chooses (``answer=shared|native|paper``, an
``inmind_exp.memory.answering.Answerer``): a system ``recall``s what it would show the answerer (its own rendering plus the
items, with provenance) and supplies its upstream answer prompt (``native_answer``); the answerer picks the prompt.
Systems register in ``systems/`` with ``@SYSTEMS.register("name")``, or are plug-ins outside the repo (the
entry-point group ``inmind_exp.systems``, or a ``pkg.mod:Class`` name; ``docs/plugins.md``); this core module never
imports them except through the registry's lazy lookup. It is the plug-in surface: ``__all__`` is what a system
needs, and ``python -m inmind_exp.testing.check_system module:Class`` checks one.
"""

from __future__ import annotations

import abc
import contextlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, ClassVar, Iterable, Mapping, Sequence

from inmind_exp.memory.answering import SHARED, Answerer, shared_answer
from inmind_exp.llm.embed import Encoder, TextIndex
from inmind_exp.llm import EndpointError, JSONReplyError, Models, parse_json_object
from inmind_exp.memory.ranges import Range, at_least, check_params, non_negative, similarity, unit
from inmind_exp.records import Answer, ContextItem, Fault, Message, Session, Turn
from inmind_exp.records.payload import JsonDict, JsonValue
from inmind_exp.registry import Registry

#: the plug-in surface: what a memory system imports (``from inmind_exp.memory import ...``)
__all__ = [
    # the contract and its registry
    "MemorySystem", "SYSTEMS", "Recall", "CallProfile", "Range", "at_least", "non_negative", "similarity", "unit",
    # what a system is given and returns
    "Models", "Encoder", "TextIndex", "Session", "Turn", "Message", "ContextItem", "Answer", "Answerer",
    # helpers: provenance by the one rule, state checks, exchanges, persistence
    "kept_provenance", "union_sources", "states", "content_words", "unusable_state", "turn_pairs", "read_json",
    "write_json", "parse_json_object", "EndpointError",
]


@dataclass(frozen=True)
class Recall:
    """What a system puts in front of the answerer for one query: its rendering (``text``) of the retrieved
    ``items`` (each with the turn ids it derives from), plus diagnostics for the record (``meta``)."""

    text: str
    items: tuple[ContextItem, ...]
    meta: JsonDict = field(default_factory=dict)


@dataclass(frozen=True)
class CallProfile:
    """Rough LLM calls of a system, for dry-run estimates: per user turn and per session written, per query read."""

    memory_calls_per_user_turn: float = 0.0
    memory_calls_per_session: float = 0.0
    memory_calls_per_query: float = 0.0
    answer_calls_per_query: float = 1.0
    prompt_tokens_per_memory_call: int = 1500
    prompt_tokens_per_answer_call: int = 1500
    completion_tokens_per_memory_call: int = 300
    completion_tokens_per_answer_call: int = 400


class MemorySystem(abc.ABC):
    """One user's memory for one task; built fresh (or restored) per task.

    Subclasses register with ``@SYSTEMS.register("name")`` and take their config ``params`` as keyword arguments.
    """

    name: ClassVar[str] = ""
    #: embedding names this system accepts (``bm25`` only for systems whose retriever takes a sparse scorer)
    embeddings: ClassVar[tuple[str, ...]] = ("minilm", "emb3")
    #: False for the in-context backbone, which the paper does not score on the naive query
    #: parameters the release's protocol fixes for this system on the official tasks (``dataset=official``), applied
    #: unless the user sets them: the backbone also answers the naive query, naive_rag is the single-shot control
    official_params: ClassVar[JsonDict] = {}
    evaluates_naive: ClassVar[bool] = True
    #: False for the controls that put memory in front of the answerer without retrieving (analysis groups them
    #: apart); unless a class says, a system that runs with ``embedding=none`` (no retriever at all) does not retrieve
    retrieval: ClassVar[bool] = True
    #: True for systems that route facts at write time into a state always in front of the answerer (MemGPT's core
    #: block, LangMem's profile) beside what they retrieve: analysis puts them in their own block (``inmind_exp.memory.traits``)
    routing: ClassVar[bool] = False
    #: False for systems that never call the encoder (backbone, always_in_state): their results are the same for
    #: every embedding, so the embedding is no part of their result identity and a sweep over embeddings runs them once
    uses_embedding: ClassVar[bool] = True
    #: "" for a memory system; for a control, which one (``inmind_exp.memory.traits.CONTROLS``): analysis groups and orders
    #: runs by it, read from the records and MLflow params (``inmind_exp.memory.traits``), never by a system's name
    control: ClassVar[str] = ""
    cost: ClassVar[CallProfile] = CallProfile()
    #: the implementation's readable version, in every result identity (``inmind_exp.config.code``) beside the hash
    #: of the system's code, which changes the identity by itself
    version: ClassVar[str] = "1"
    #: allowed ranges of the numeric parameters (``inmind_exp.memory.ranges``), checked when a configuration is planned
    param_ranges: ClassVar[Mapping[str, Range]] = {}

    @classmethod
    def check_params(cls, params: Mapping[str, JsonValue]) -> list[str]:
        """Every problem with ``params`` (the config's ``system.params``), each naming its key; checked at planning,
        before anything runs. Default: ``param_ranges``; override to add checks between parameters."""
        return check_params(cls.name, params, cls.param_ranges)

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if "retrieval" not in cls.__dict__:
            cls.retrieval = "none" not in cls.embeddings

    def __init__(self, llm: Models, encoder: Encoder | None, workdir: Path, **params: JsonValue) -> None:
        self.llm = llm
        self.encoder = encoder
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        #: faults since the protocol last collected them (not part of the snapshot)
        self.faults: list[Fault] = []
        if params:
            raise TypeError(f"system {self.name!r}: unknown parameter(s) {', '.join(sorted(params))}")

    @classmethod
    def asks_naive(cls, params: JsonDict) -> bool:
        """Whether this configuration (its ``params``) is asked the naive query; ``evaluates_naive`` unless a
        system lets a parameter decide (the backbone's ``answer_naive``)."""
        return cls.evaluates_naive

    @classmethod
    def preflight(cls, models: Models) -> None:
        """Check, once per run and before any task starts, that the endpoints can serve this system (e.g. A-RAG
        needs structured tool calls); raise an ``EndpointError`` naming the endpoint if not. Default: nothing."""

    @abc.abstractmethod
    def ingest_session(self, session: Session) -> None:
        """Write one session (in trace order) into memory; every stored item keeps the ids of its source turns."""

    def end_ingestion(self) -> None:
        """Called once after the task's last session, before any query: upstream's end-of-conversation work (e.g.
        xMemory's flush of its buffered tail), a write like any other, so its faults are ingest faults. Default:
        nothing."""

    @abc.abstractmethod
    def recall(self, query: str) -> Recall:
        """What this system shows the answerer for ``query``: its rendering and the items with provenance."""

    def native_answer(self, query: str, recall: Recall) -> Answer:
        """The system's upstream answer prompt over ``recall`` (used when the run says ``answer=native``); default:
        the shared prompt."""
        return shared_answer(self.llm.answerer, query, recall)

    def answer(self, query: str, answerer: Answerer = SHARED) -> Answer:
        """Answer a query from memory with the protocol's ``answerer``; ``Answer.context`` is exactly the message
        list the answerer saw and ``Answer.items`` the memory items in it. Never override it to choose a prompt:
        only an agent loop whose retrieval is its own answerer (A-RAG's native mode) or a system that writes after
        answering (MemoryOS) wraps it."""
        return answerer.answer(self, query)

    def fault(self, kind: str, where: str, detail: str = "", turns: Sequence[str] = ()) -> None:
        """Count a fallback on the task record (see ``records.Fault``); never raises."""
        self.faults.append(Fault(kind=kind, where=where, detail=str(detail)[:500], turns=tuple(turns)))

    def memory_json(self, messages: Sequence[Message], where: str, turns: Sequence[str] | None = None, *,
                    fallback: str = "upstream's fallback", repair: Callable[[str], JsonDict | None] | None = None,
                    **kwargs: JsonValue) -> JsonDict | None:
        """One JSON-mode call to the memory model (``chat_json``, its re-asks included) that writes ``turns``
        (declared with ``writing``; None for a read-path call, which writes none): the object, or None when the model
        never gave a valid one, recorded as a fault on ``turns``: ``empty_reply`` if its last reply was empty, else
        ``malformed_reply``, with ``fallback`` (what the system does instead) in the detail. ``repair`` may recover
        an object from the last raw reply (HippoRAG closes cut-off JSON as upstream does; A-Mem takes the raw text
        as its keywords): it is returned, and the reply is still a fault. The one place a system turns an unusable
        JSON reply into a fault."""
        try:
            with self.writing(turns) if turns is not None else contextlib.nullcontext():
                obj, _ = self.llm.memory.chat_json(messages, **kwargs)
            return obj
        except JSONReplyError as e:
            raw = e.raw.strip()
            fixed = repair(raw) if repair is not None and raw else None
            self.fault("malformed_reply" if raw else "empty_reply", where, f"{e}; {fallback}; reply: {raw[:300]}",
                       turns or ())
            return fixed

    def writing(self, turns: Sequence[str]) -> contextlib.AbstractContextManager[object]:
        """``with self.writing(turns):`` around a memory call that writes these trace turns, so that a reply cut at
        the token limit is counted on them (the protocol otherwise searches the cut prompt for the turns' text)."""
        meter = getattr(self.llm, "meter", None)
        return meter.about(turns) if meter is not None else contextlib.nullcontext()

    def take_faults(self) -> list[Fault]:
        """The faults recorded since the last call (the protocol collects them phase by phase)."""
        out, self.faults = self.faults, []
        return out

    @abc.abstractmethod
    def snapshot(self, directory: Path) -> None:
        """Write the complete state to ``directory`` so that ``restore`` gives an instance that answers identically."""

    @abc.abstractmethod
    def restore(self, directory: Path) -> None:
        """Load the state written by ``snapshot``."""


#: built-ins in ``systems/``, plug-ins from the entry-point group ``inmind_exp.systems`` or a ``pkg.mod:Class`` name
SYSTEMS: Registry[MemorySystem] = Registry("memory system", MemorySystem,  # type: ignore[type-abstract]
                                           discover="systems",
                                           entry_points="inmind_exp.systems")


# -- helpers shared by systems ----------------------------------------------------------------------------------

def union_sources(*groups: Iterable[str]) -> list[str]:
    """Turn ids of all ``groups`` in first-seen order, without repeats: the provenance of an item built from several
    inputs (a merge, an update, an evolution rewrite)."""
    return list(dict.fromkeys(s for g in groups for s in g))


_WORD = re.compile(r"[a-z0-9]+")
_STOP = frozenset(
    "the and for with that this from have has had are was were will would can could should about into over under "
    "their them they there then than what when where which who whom whose why how not but all any each more most "
    "other some such only own same very just also does did doing been being user users user's assistant you your "
    "yours our out off per via its it's i'm".split()
)
#: the one rule's threshold: an item's text *states* an input when they share at least ``KEEP_WORDS`` content
#: words, or at least ``KEEP_SHARE`` of the smaller one's content words (and at least two, one for a one-word text)
KEEP_SHARE = 0.5
KEEP_WORDS = 3


def _singular(w: str) -> str:
    if len(w) > 4 and w.endswith("ies"):
        return w[:-3] + "y"
    if len(w) > 4 and w.endswith(("oes", "xes", "ches", "shes", "sses")):
        return w[:-2]
    return w[:-1] if len(w) > 3 and w.endswith("s") and not w.endswith(("ss", "us", "is")) else w


def content_words(text: str) -> frozenset[str]:
    """Lower-cased words of three or more characters that carry content (not stop words), plurals and third
    persons made singular ("medications" states "medication", "tomatoes" "tomato")."""
    return frozenset(_singular(w) for w in _WORD.findall(text.lower()) if len(w) >= 3 and w not in _STOP)


def states(text: str, other: str) -> bool:
    """Whether ``text`` still states ``other``'s content: content-word overlap at the ``KEEP_SHARE``/``KEEP_WORDS``
    threshold (see there)."""
    a, b = content_words(text), content_words(other)
    shared, small = len(a & b), min(len(a), len(b))
    return small > 0 and shared >= min(2, small) and (shared >= KEEP_WORDS or shared >= KEEP_SHARE * small)


_REFUSAL = re.compile(r"^\W*(i'?m sorry|i am sorry|sorry,|i can(?:no|')t|i cannot|i'?m unable|i am unable|as an ai)\b",
                      re.I)


def unusable_state(new: str, old: str) -> str:
    """Why a reply that replaces a whole state (a profile, a memory file) must not: a refusal or chat reply, or one
    that no longer states most of the previous state (under ``KEEP_SHARE`` of its content words); "" if usable. The
    caller records a ``malformed_reply`` fault and keeps ``old``."""
    if _REFUSAL.match(new.strip()):
        return "a refusal or chat reply"
    before = content_words(old)
    if before and len(before & content_words(new)) < KEEP_SHARE * len(before):
        return "it drops most of the previous state"
    return ""


#: one input of a rewrite: (its text, its origin turns, its derived turns)
Input = tuple[str, Sequence[str], Sequence[str]]


def kept_provenance(text: str, inputs: Sequence[Input], keep: Sequence[str] = ()) -> tuple[list[str], list[str]]:
    """Provenance of an item an LLM call wrote, rewrote or merged from ``inputs`` (its previous self, the turns or
    facts being written, the other items the call saw, the items it deleted), by the one rule every system uses:
    its *origin* is ``keep`` (what the item is made from regardless, e.g. its own turn) plus the origin of every
    input whose content ``text`` still states (``states``); everything else the call saw is *derived*. No
    catch-all: an input the text does not state is derived, never origin. Returns (origin, derived), first-seen
    order, disjoint."""
    origin = union_sources(keep, *(src for t, src, _ in inputs if src and states(text, t)))
    derived = [s for s in union_sources(*(list(src) + list(der) for _, src, der in inputs)) if s not in origin]
    return origin, derived


def turn_pairs(session: Session) -> list[tuple[Turn | None, Turn | None]]:
    """Group a session's turns into (user, assistant) exchanges in order; a lone turn pairs with None."""
    pairs: list[tuple[Turn | None, Turn | None]] = []
    pending: Turn | None = None
    for t in session.turns:
        if t.role == "user":
            if pending is not None:
                pairs.append((pending, None))
            pending = t
        else:
            pairs.append((pending, t))
            pending = None
    if pending is not None:
        pairs.append((pending, None))
    return pairs


def write_json(path: Path, obj: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False, sort_keys=True)
    tmp.replace(path)


def read_json(path: Path) -> JsonValue:
    with open(path, encoding="utf-8") as f:
        return json.load(f)
