"""What a run reads: the tasks (with their domains and origins) and the background trace (sessions of turns, the
injected fact pair's turn ids), and where the fact is injected. Frozen dataclasses with a plain-dict round trip."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from inmind_exp.records.payload import JsonDict

DOMAINS: tuple[str, ...] = (
    "health_wellness",
    "professional_career",
    "relationships",
    "financial",
    "personal_development",
    "spirituality",
    "legal",
    "consumer",
    "parenting",
    "other",
)
#: The official release's domain names (``imlrz/InMind`` ``benchmark/dataset``): ours with two spelt out in full.
OFFICIAL_DOMAINS: tuple[str, ...] = (
    "health_and_wellness",
    "professional_and_career",
    *(d for d in DOMAINS if d not in ("health_wellness", "professional_career")),
)
#: Every domain name a task file may use: the bundled set's and the official release's.
ACCEPTED_DOMAINS: tuple[str, ...] = DOMAINS + tuple(d for d in OFFICIAL_DOMAINS if d not in DOMAINS)
ORIGINS: tuple[str, ...] = ("source", "expert")


@dataclass(frozen=True)
class Task:
    """One InMind task: a personal fact turn pair, a direct and an indirect query, and the bridge."""

    id: str
    domain: str
    user_message: str
    assistant_message: str
    naive_query: str
    query: str
    explanation: str
    source: str | None = None
    origin: str = "source"
    extra: JsonDict = field(default_factory=dict)

    def to_dict(self) -> JsonDict:
        d = asdict(self)
        extra = d.pop("extra")
        return {**d, **extra}

    @classmethod
    def from_dict(cls, d: JsonDict) -> "Task":
        known = {f for f in cls.__dataclass_fields__ if f != "extra"}
        return cls(**{k: d[k] for k in known if k in d}, extra={k: v for k, v in d.items() if k not in known})


#: Turn ids of the injected fact pair: every memory item derived from ``FACT_TURN_ID`` carries it in its sources.
FACT_TURN_ID = "inmind:fact"
FACT_REPLY_TURN_ID = "inmind:fact-reply"


@dataclass(frozen=True)
class Turn:
    """One message of the background trace. ``injected`` marks the task's fact pair (only the backbone reads it).

    ``id`` names the turn for provenance: ``<session id>#<index>`` for trace turns (set by the loader; the official
    trace keeps the release's ``<session>-turn-<k>``), ``FACT_TURN_ID`` / ``FACT_REPLY_TURN_ID`` for the injected pair.
    """

    role: str
    content: str
    injected: bool = False
    id: str = ""


@dataclass(frozen=True)
class Session:
    """One dated conversation session of the trace, in order."""

    id: str
    date: str
    turns: tuple[Turn, ...]

    def to_dict(self) -> JsonDict:
        return {"id": self.id, "date": self.date, "turns": [asdict(t) for t in self.turns]}

    @classmethod
    def from_dict(cls, d: JsonDict) -> "Session":
        return cls(id=d["id"], date=d["date"], turns=tuple(Turn(**t) for t in d["turns"]))

    def with_turn_ids(self) -> "Session":
        """This session with ``<session id>#<index>`` as the id of every turn that has none."""
        return Session(self.id, self.date, tuple(
            t if t.id else Turn(t.role, t.content, t.injected, f"{self.id}#{i}") for i, t in enumerate(self.turns)))


@dataclass(frozen=True)
class Trace:
    """A background trace: the sessions of one LongMemEval-style instance."""

    id: str
    sessions: tuple[Session, ...]

    def to_dict(self) -> JsonDict:
        return {"id": self.id, "sessions": [s.to_dict() for s in self.sessions]}

    @classmethod
    def from_dict(cls, d: JsonDict) -> "Trace":
        return cls(id=d["id"], sessions=tuple(Session.from_dict(s) for s in d["sessions"]))

    @property
    def n_user_turns(self) -> int:
        return sum(1 for s in self.sessions for t in s.turns if t.role == "user")


@dataclass(frozen=True)
class InjectionSpec:
    """Where the fact goes: the session holding the ``user_turn``-th user turn (1-based), or a ``fraction`` of them."""

    name: str
    user_turn: int | None = None
    fraction: float | None = None
