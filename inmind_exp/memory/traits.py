"""What analysis needs to know about a run's memory system, from the system's class attributes: whether it is a
control (and which), whether it retrieves at query time, whether it routes facts at write time into an always-visible
state (``routing``: MemGPT's core block, LangMem's profile), whether it uses the embedding, whether it is asked the
naive query. Written into every task record and the run's MLflow params, so ``analysis/`` reads them from what a run
logged and never from a system's name or class: a plug-in control is grouped like a built-in one, and a run stays
readable after its system is gone. Runs logged before the traits existed fall back to the built-ins' names
(``LEGACY``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Iterable, Mapping

from inmind_exp.records.payload import JsonDict, JsonValue

if TYPE_CHECKING:
    from inmind_exp.memory.base import MemorySystem

#: The controls a system can declare (``MemorySystem.control``), each beside what it controls for.
CONTROLS: dict[str, str] = {
    "in_context": "the fact turns in the answerer's context, no memory system (the paper's backbone)",
    "naive_retrieval": "single-shot retrieval over raw trace turns (the paper's Naive RAG)",
    "always_in_state": "a memory kept whole in front of the answerer, no retrieval (the paper's Section 5.2 probe)",
}
#: Table order: the in-context control, the naive retrieval control, memory systems, then the always-in-state probe.
CONTROL_ORDER: dict[str, int] = {"in_context": 0, "naive_retrieval": 1, "": 50, "always_in_state": 99}
#: Where routing systems go in that order: after the retrieval systems, before the always-in-state probe.
ROUTING_ORDER = 60

#: MLflow param keys (beside ``inmind.config_hash``): not config keys, so no config or result identity changes.
PARAM_PREFIX = "inmind.traits."
#: ``inmind.traits.control`` of a memory system (no control)
NO_CONTROL = "none"


@dataclass(frozen=True)
class Traits:
    """One configuration's memory-system traits; ``control`` is "" for a memory system."""

    control: str = ""
    retrieval: bool = True
    uses_embedding: bool = True
    asks_naive: bool = True
    #: write-time routing into an always-visible state (``MemorySystem.routing``): analysis puts retrieval, routing
    #: and the controls in separate blocks (``block``)
    routing: bool = False

    @property
    def block(self) -> str:
        """The analysis block of a configuration: ``control``, ``routing`` or ``retrieval``."""
        return "control" if self.control else "routing" if self.routing else "retrieval"

    @classmethod
    def of(cls, system_cls: type[MemorySystem], params: Mapping[str, JsonValue] | None = None) -> "Traits":
        """From a ``MemorySystem`` subclass and its ``system.params`` (the naive query can depend on them)."""
        control = str(getattr(system_cls, "control", "") or "")
        if control and control not in CONTROLS:
            raise ValueError(f"system {system_cls.name!r}: control={control!r} is not one of "
                             f"{', '.join(CONTROLS)} (or '' for a memory system)")
        return cls(control=control, retrieval=bool(system_cls.retrieval),
                   uses_embedding=bool(system_cls.uses_embedding), asks_naive=bool(system_cls.asks_naive(dict(params or {}))),
                   routing=bool(getattr(system_cls, "routing", False)))

    @property
    def order(self) -> int:
        """Table order of the block: controls as ``CONTROL_ORDER``, retrieval systems, then routing systems."""
        return CONTROL_ORDER.get(self.control, 50) if self.control or not self.routing else ROUTING_ORDER

    def to_dict(self) -> JsonDict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, JsonValue]) -> "Traits":
        return cls(control=str(d.get("control") or ""), retrieval=bool(d.get("retrieval", True)),
                   uses_embedding=bool(d.get("uses_embedding", True)), asks_naive=bool(d.get("asks_naive", True)),
                   routing=bool(d.get("routing", False)))

    def params(self) -> dict[str, str]:
        """The MLflow params (strings, as MLflow keeps them; a memory system's control is ``NO_CONTROL``, since an
        empty param is not logged)."""
        return {f"{PARAM_PREFIX}{k}": str(v) for k, v in {**self.to_dict(), "control": self.control or NO_CONTROL}.items()}

    @classmethod
    def from_params(cls, params: Mapping[str, str]) -> "Traits | None":
        """From a run's MLflow params; None when the run logged none (made before the traits existed)."""
        keys = {k[len(PARAM_PREFIX):]: v for k, v in params.items() if k.startswith(PARAM_PREFIX)}
        if "control" not in keys:
            return None
        return cls(control="" if keys["control"] == NO_CONTROL else keys["control"], retrieval=keys.get("retrieval", "True") == "True",
                   uses_embedding=keys.get("uses_embedding", "True") == "True",
                   asks_naive=keys.get("asks_naive", "True") == "True", routing=keys.get("routing", "False") == "True")


#: The traits of the built-in systems whose class attributes differ from a plain memory system's, for runs logged before
#: the traits were (and, for the routing systems, before the routing trait was): by name, for old runs only.
LEGACY: dict[str, Traits] = {
    "backbone": Traits(control="in_context", retrieval=False, uses_embedding=False, asks_naive=False),
    "naive_rag": Traits(control="naive_retrieval"),
    "always_in_state": Traits(control="always_in_state", retrieval=False, uses_embedding=False),
    "memgpt": Traits(routing=True),
    "langmem": Traits(routing=True),
}


def logged(system: str, params: Mapping[str, str] | None = None, records: Iterable[object] = ()) -> Traits:
    """A finished run's traits: from its records (the first that has them), else its MLflow params, else, for a run
    logged before either did, the built-in controls' by name (``LEGACY``; any other system: a memory system)."""
    for rec in records:
        traits = getattr(rec, "traits", None)
        if traits:
            return Traits.from_dict(traits)
    from_params = Traits.from_params(params or {})
    if from_params is not None:
        return from_params
    return LEGACY.get(system, Traits())
