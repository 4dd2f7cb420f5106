"""What a run produces for one task: judge verdicts, token usage, control results and the ``TaskRecord`` that holds
them beside both answers, and JSONL writing. Frozen dataclasses with a plain-dict round trip, so records cross Ray
and land in JSONL unchanged. ``RECORD_SCHEMA_VERSION`` is written into every task record.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterable

from inmind_exp.records.answers import Answer, Fault
from inmind_exp.records.payload import JsonDict

RECORD_SCHEMA_VERSION = 2


@dataclass(frozen=True)
class Verdict:
    """A binary judge verdict. ``score`` is None exactly when ``error`` says why no verdict was obtained; ``model``
    is the model the endpoint reported for it and ``host`` the judge endpoint's host."""

    judge: str
    score: int | None
    reason: str = ""
    raw: str = ""
    error: str | None = None
    prompt_version: str = ""
    model: str = ""
    host: str = ""

    @property
    def ok(self) -> bool:
        return self.error is None and self.score in (0, 1)


@dataclass(frozen=True)
class Usage:
    """Token usage of a set of calls. ``cached_*`` count calls answered from the cache (not paid)."""

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_calls: int = 0
    cached_prompt_tokens: int = 0
    cached_completion_tokens: int = 0
    #: of the paid prompt tokens, those the provider billed at its cached-input price (``cached_prompt_per_1m``)
    provider_cached_prompt_tokens: int = 0
    #: of the paid completion tokens, the hidden reasoning tokens a reasoning model reported (already in
    #: ``completion_tokens`` and priced with them; counted apart because no reply shows them)
    reasoning_tokens: int = 0

    def __add__(self, other: "Usage") -> "Usage":
        return Usage(*(a + b for a, b in zip(astuple_usage(self), astuple_usage(other))))

    def __sub__(self, other: "Usage") -> "Usage":
        return Usage(*(a - b for a, b in zip(astuple_usage(self), astuple_usage(other))))

    @property
    def paid_prompt_tokens(self) -> int:
        return self.prompt_tokens - self.cached_prompt_tokens

    @property
    def paid_completion_tokens(self) -> int:
        return self.completion_tokens - self.cached_completion_tokens


def astuple_usage(u: Usage) -> tuple[int, ...]:
    return (u.calls, u.prompt_tokens, u.completion_tokens, u.cached_calls, u.cached_prompt_tokens, u.cached_completion_tokens,
            u.provider_cached_prompt_tokens, u.reasoning_tokens)


@dataclass(frozen=True)
class ControlResult:
    """One negative control's extra query for a task (``inmind_exp.protocol.controls``): the query asked, the answer, the
    control judge's verdict, and for ``mismatched`` the pairing (a ``controls.Pairing`` as a dict). ``error`` is set
    when the query failed; a failed or errored-verdict control is left out of the control's rate, never scored."""

    control: str
    query: str
    answer: Answer | None = None
    verdict: Verdict | None = None
    error: str | None = None
    pairing: JsonDict | None = None
    #: ``mismatched``: the relevance screen's verdict of (fact x partner query); 1 = related, the query not asked
    screen: Verdict | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.verdict is not None and self.verdict.ok

    @property
    def related(self) -> bool:
        """The pair was screened related: left out of the control's rate by design (neither scored nor an error)."""
        return self.error is None and self.screen is not None and self.screen.ok and self.screen.score == 1

    def to_dict(self) -> JsonDict:
        return {"control": self.control, "query": self.query, "answer": self.answer.to_dict() if self.answer else None,
                "verdict": asdict(self.verdict) if self.verdict else None, "error": self.error,
                "pairing": dict(self.pairing) if self.pairing is not None else None,
                "screen": asdict(self.screen) if self.screen else None}

    @classmethod
    def from_dict(cls, d: JsonDict) -> "ControlResult":
        return cls(control=d["control"], query=d["query"],
                   answer=Answer.from_dict(d["answer"]) if d.get("answer") else None,
                   verdict=Verdict(**d["verdict"]) if d.get("verdict") else None, error=d.get("error"),
                   pairing=dict(d["pairing"]) if d.get("pairing") is not None else None,
                   screen=Verdict(**d["screen"]) if d.get("screen") else None)


@dataclass(frozen=True)
class TaskRecord:
    """Everything one task produced under one configuration; one JSONL line in the ledger and in MLflow."""

    config_hash: str
    task_id: str
    domain: str
    system: str
    injection_session: int
    naive: Answer | None
    indirect: Answer | None
    verdicts: dict[str, Verdict]
    target_recall_exact: int | None
    usage: dict[str, Usage]
    latency_s: float
    error: str | None = None
    attempts: int = 1
    naive_recall_provenance: int | None = None
    target_recall_provenance: int | None = None
    faults: tuple[Fault, ...] = ()
    fact_write_fault: bool = False
    schema_version: int = RECORD_SCHEMA_VERSION
    #: the looser provenance (origin or inherited sources, ``ContextItem.derived``); the two above are on origin
    naive_recall_provenance_union: int | None = None
    target_recall_provenance_union: int | None = None
    #: the indirect query's provenance split by the part of the context: always visible / retrieved for the query
    visible_state_recall_provenance: int | None = None
    retrieved_recall_provenance: int | None = None
    #: the indirect answer's context budget (``inmind_exp.protocol.budget``) and what ran for it (``Answer.meta`` keys
    #: ``retrieval_mode``, ``gate_ran``, ``tool_calls``, ``steps`` when the system reports them)
    context_tokens: int | None = None
    context_items: int | None = None
    #: the whole prompt of the indirect answer (the memory block with the answer prompt around it, and the query)
    prompt_tokens: int | None = None
    ran: JsonDict = field(default_factory=dict)
    #: 1-based rank (retrieval order; position for the controls) of the first item in the answerer's context derived
    #: from the injected fact turn, per query; None when no item is, or the system reports no items
    naive_fact_rank: int | None = None
    target_fact_rank: int | None = None
    #: the system's traits (``inmind_exp.memory.traits.Traits``: control, retrieval, ...), which analysis reads, not names
    traits: JsonDict = field(default_factory=dict)
    #: the negative controls' extra queries by control name (``controls=``); empty when the run has none
    controls: dict[str, ControlResult] = field(default_factory=dict)
    #: per role, each distinct ``model @ host`` the endpoints reported for this task's chat calls
    served: dict[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def failed_verdicts(self) -> tuple[str, ...]:
        """The judges whose verdict errored (each an error of its own metric, not of the task)."""
        return tuple(sorted(k for k, v in self.verdicts.items() if not v.ok))

    @property
    def rejudgeable(self) -> bool:
        """The task ran (its answers exist) and some verdict failed: a rerun asks only those verdicts again."""
        return self.error is None and self.indirect is not None and bool(self.failed_verdicts)

    def fault_counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for f in self.faults:
            out[f.kind] = out.get(f.kind, 0) + 1
        return dict(sorted(out.items()))

    def to_dict(self) -> JsonDict:
        return {
            "schema_version": self.schema_version,
            "config_hash": self.config_hash,
            "task_id": self.task_id,
            "domain": self.domain,
            "system": self.system,
            "injection_session": self.injection_session,
            "naive": self.naive.to_dict() if self.naive else None,
            "indirect": self.indirect.to_dict() if self.indirect else None,
            "verdicts": {k: asdict(v) for k, v in sorted(self.verdicts.items())},
            "target_recall_exact": self.target_recall_exact,
            "usage": {k: asdict(v) for k, v in sorted(self.usage.items())},
            "latency_s": self.latency_s,
            "error": self.error,
            "attempts": self.attempts,
            "naive_recall_provenance": self.naive_recall_provenance,
            "target_recall_provenance": self.target_recall_provenance,
            "faults": [f.to_dict() for f in self.faults],
            "fact_write_fault": self.fact_write_fault,
            "naive_recall_provenance_union": self.naive_recall_provenance_union,
            "target_recall_provenance_union": self.target_recall_provenance_union,
            "visible_state_recall_provenance": self.visible_state_recall_provenance,
            "retrieved_recall_provenance": self.retrieved_recall_provenance,
            "context_tokens": self.context_tokens,
            "context_items": self.context_items,
            "prompt_tokens": self.prompt_tokens,
            "ran": dict(self.ran),
            "naive_fact_rank": self.naive_fact_rank,
            "target_fact_rank": self.target_fact_rank,
            "traits": dict(self.traits),
            **({"controls": {k: c.to_dict() for k, c in sorted(self.controls.items())}} if self.controls else {}),
            **({"served": {k: list(v) for k, v in sorted(self.served.items())}} if self.served else {}),
        }

    @classmethod
    def from_dict(cls, d: JsonDict) -> "TaskRecord":
        return cls(
            config_hash=d["config_hash"],
            task_id=d["task_id"],
            domain=d["domain"],
            system=d["system"],
            injection_session=d["injection_session"],
            naive=Answer.from_dict(d["naive"]) if d.get("naive") else None,
            indirect=Answer.from_dict(d["indirect"]) if d.get("indirect") else None,
            verdicts={k: Verdict(**v) for k, v in d.get("verdicts", {}).items()},
            target_recall_exact=d.get("target_recall_exact"),
            usage={k: Usage(**v) for k, v in d.get("usage", {}).items()},
            latency_s=d.get("latency_s", 0.0),
            error=_task_error(d),
            attempts=d.get("attempts", 1),
            naive_recall_provenance=d.get("naive_recall_provenance"),
            target_recall_provenance=d.get("target_recall_provenance"),
            faults=tuple(Fault.from_dict(f) for f in d.get("faults", ())),
            fact_write_fault=bool(d.get("fact_write_fault", False)),
            schema_version=d.get("schema_version", RECORD_SCHEMA_VERSION),
            naive_recall_provenance_union=d.get("naive_recall_provenance_union"),
            target_recall_provenance_union=d.get("target_recall_provenance_union"),
            visible_state_recall_provenance=d.get("visible_state_recall_provenance"),
            retrieved_recall_provenance=d.get("retrieved_recall_provenance"),
            context_tokens=d.get("context_tokens"),
            context_items=d.get("context_items"),
            prompt_tokens=d.get("prompt_tokens"),
            ran=dict(d.get("ran", {})),
            naive_fact_rank=d.get("naive_fact_rank"),
            target_fact_rank=d.get("target_fact_rank"),
            traits=dict(d.get("traits") or {}),
            controls={k: ControlResult.from_dict(c) for k, c in (d.get("controls") or {}).items()},
            served={k: tuple(v) for k, v in (d.get("served") or {}).items()},
        )


#: how records written before verdicts were the unit of failure marked a task whose only failure was a verdict
_OLD_JUDGE_FAILED = "judge failed: "


def _task_error(d: JsonDict) -> str | None:
    """The record's task-level error. An older record with answers whose only error was a failed verdict reads as
    it is now written: the failure is that verdict's alone (its ``Verdict.error``), not the task's."""
    error = d.get("error")
    if error and error.startswith(_OLD_JUDGE_FAILED) and d.get("indirect") and any(
            v.get("error") is not None or v.get("score") not in (0, 1) for v in (d.get("verdicts") or {}).values()):
        return None
    return error


def write_jsonl(path: Path, rows: Iterable[JsonDict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n")
