"""Pure functions from task records to the paper's metrics: rates in percent with Wilson 95% intervals, the three
Δ columns of Table 1, the judge-free bounds, the judge's self-audit, memory faults, error counts and token totals.

Rates are paired: every rate of a row is computed over the tasks that ran. A task whose run errored is left out of
every rate (and listed in ``excluded``); a failed verdict is an error of its metric only: the task leaves that
metric's rate (``verdict_errors``) and stays in the others, as the release scores per metric.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Mapping

from inmind_exp.protocol.controls import CONTROL_METRICS
from inmind_exp.protocol.judges import JUDGES, Judge
# the rates' primitives live in ``rates`` (with the controls' rates) and are imported from here too
from inmind_exp.protocol.rates import Z95, Rate, control_metrics, control_rate, valid, wilson_interval  # noqa: F401
from inmind_exp.records import TaskRecord, Usage


@dataclass(frozen=True)
class JudgeFreeMetric:
    """A metric read from a ``TaskRecord`` field rather than a verdict; shown like a judge's (see ``judges.Judge``)."""

    name: str
    reads: str
    label: str
    short: str
    order: int


#: ``target_recall_exact`` keeps its key (older runs) but says what it is: a verbatim lower bound.
JUDGE_FREE: dict[str, JudgeFreeMetric] = {m.name: m for m in (
    JudgeFreeMetric("target_recall_exact", "indirect", "Target recall (verbatim, lower bound)", "TRv", 20),
    # the fact turn is an item's origin: not a bound (a rewrite that only inherited the fact may still state it)
    JudgeFreeMetric("target_recall_provenance", "indirect", "Target recall, provenance (origin)", "TRp", 30),
    JudgeFreeMetric("naive_recall_provenance", "naive", "Naive recall, provenance (origin)", "NRp", 40),
    # origin and inherited sources together (``ContextItem.derived``): the upper bound, comparable to older runs
    JudgeFreeMetric("target_recall_provenance_union", "indirect", "Target recall, provenance (union: upper bound)",
                    "TRpu", 31),
    JudgeFreeMetric("naive_recall_provenance_union", "naive", "Naive recall, provenance (union: upper bound)", "NRpu",
                    41),
    # the routing decision: did the fact's origin reach the always-visible part, or the part retrieved for the query
    JudgeFreeMetric("visible_state_recall_provenance", "indirect", "Visible-state recall (provenance)", "VSp", 32),
    JudgeFreeMetric("retrieved_recall_provenance", "indirect", "Retrieved recall (provenance)", "RRp", 33),
)}
#: Every metric a run reports, in column order: the judges' (from the judge registry) and the judge-free ones.
METRIC_INFO: dict[str, Judge | JudgeFreeMetric] = {
    m.name: m for m in sorted([*JUDGES.values(), *JUDGE_FREE.values()], key=lambda m: m.order)}
METRICS: tuple[str, ...] = tuple(METRIC_INFO)
#: Column labels of the results table.
LABELS: dict[str, str] = {k: m.label for k, m in METRIC_INFO.items()}


def _value(r: TaskRecord, metric: str) -> int | None:
    """The task's 0/1 for ``metric``, or None when the metric does not apply (naive for the backbone, provenance
    for a system that reports no items)."""
    if metric in JUDGE_FREE:
        return getattr(r, metric)
    verdict = r.verdicts.get(metric)
    return int(verdict.score) if verdict is not None and verdict.ok else None  # type: ignore[arg-type]


def rate(records: list[TaskRecord], metric: str) -> Rate:
    """``metric`` over the tasks that ran; ``errors`` counts the tasks left out because they errored or because
    this metric's verdict did."""
    if metric in CONTROL_METRICS:
        return control_rate(records, metric)
    ok = [r for r in records if valid(r)]
    vals = [v for v in (_value(r, metric) for r in ok) if v is not None]
    failed = sum(1 for r in ok if metric in r.failed_verdicts)
    return Rate(sum(vals), len(vals), len(records) - len(ok) + failed)


@dataclass(frozen=True)
class JudgeAudit:
    """The judges audited against the judge-free bounds on every task, without human labels. The union provenance
    (an item derived in any way from the fact turn reached the answerer's context) is an upper bound on the fact
    being there, so a target-recall verdict of 1 or an application verdict of 1 where it is 0 is a certain false
    positive; a target-recall 0 where the verbatim metric (a lower bound) is 1 is a certain false negative. The
    origin provenance is no bound (a rewrite that only inherited the fact may still state it) and is not used."""

    false_positives: tuple[str, ...]
    false_negatives: tuple[str, ...]
    checked: int
    #: application verdict 1 while the fact never reached the context (union provenance 0), of ``application_checked``
    application_false_positives: tuple[str, ...] = ()
    application_checked: int = 0


def upper_bound(record: TaskRecord) -> int | None:
    """The union provenance of the indirect context; for records older than the union field, the provenance they
    carry (decided on origin and inherited sources together then; both are None together on newer records, for a
    system that reports no items); None when not measured."""
    union = record.target_recall_provenance_union
    return union if union is not None else record.target_recall_provenance


def judge_audit(records: list[TaskRecord]) -> JudgeAudit:
    fp, fn, app_fp, checked, app_checked = [], [], [], 0, 0
    for r in records:
        if not valid(r):
            continue
        bound = upper_bound(r)
        tr, app = r.verdicts.get("target_recall"), r.verdicts.get("application")
        if tr is not None and tr.ok:
            checked += 1
            if tr.score == 1 and bound == 0:
                fp.append(r.task_id)
            if tr.score == 0 and r.target_recall_exact == 1:
                fn.append(r.task_id)
        if app is not None and app.ok and bound is not None:
            app_checked += 1
            if app.score == 1 and bound == 0:
                app_fp.append(r.task_id)
    return JudgeAudit(tuple(fp), tuple(fn), checked, tuple(app_fp), app_checked)


#: usage counts only some providers report (a prompt cache, a reasoning model): logged only when non-zero
REPORTED_ONLY = ("provider_cached_prompt_tokens", "reasoning_tokens")


@dataclass(frozen=True)
class RunMetrics:
    """Everything a run reports: the five rates, the Δ columns, counts and usage."""

    rates: dict[str, Rate]
    n_tasks: int
    n_errors: int
    usage: dict[str, Usage]
    excluded: tuple[str, ...] = ()
    audit: JudgeAudit = JudgeAudit((), (), 0)
    #: tasks with at least one memory fault / with a fault while writing the injected exchange (of tasks that ran)
    fault_tasks: int = 0
    fact_write_fault_tasks: int = 0
    faults_by_kind: dict[str, int] = field(default_factory=dict)
    n_ran: int = 0
    #: the context budget and what ran (``inmind_exp.protocol.budget``), means / rates over the tasks that report them
    context_tokens: float = math.nan
    context_items: float = math.nan
    prompt_tokens: float = math.nan  # the whole answer prompt; context_tokens is its memory block
    ran: dict[str, float] = field(default_factory=dict)
    #: the negative controls' rates (``no_fact_warning``, ``over_application``) of the controls the run ran
    controls: dict[str, Rate] = field(default_factory=dict)
    #: per judge metric, the tasks that ran but whose verdict of it failed (left out of that rate only)
    verdict_errors: dict[str, tuple[str, ...]] = field(default_factory=dict)
    #: Table 1's Δ columns in percentage points (``DELTAS``), each paired over the tasks with both values
    deltas: dict[str, float] = field(default_factory=dict)
    #: the tasks the configuration planned (None: as many as ran); more than ``n_tasks`` for an incomplete run
    n_planned: int | None = None

    @property
    def memory_fault_rate(self) -> float:
        return 100.0 * self.fault_tasks / self.n_ran if self.n_ran else float("nan")

    @property
    def fact_write_fault_rate(self) -> float:
        return 100.0 * self.fact_write_fault_tasks / self.n_ran if self.n_ran else float("nan")

    def flat(self) -> dict[str, float]:
        """MLflow metric names → values (NaN values are dropped: MLflow cannot chart them)."""
        out: dict[str, float] = {"n_tasks": self.n_tasks, "n_errors": self.n_errors}
        if self.n_planned is not None:
            out["n_planned"] = self.n_planned
        for name, r in {**self.rates, **self.controls}.items():
            lo, hi = r.ci
            out.update({name: r.pct, f"{name}_ci_low": lo, f"{name}_ci_high": hi, f"{name}_n": r.n, f"{name}_errors": r.errors})
        out.update(self.deltas)
        out.update({"n_excluded": len(self.excluded),
                    "n_verdict_errors": sum(len(v) for v in self.verdict_errors.values()),
                    "judge_false_positives": len(self.audit.false_positives),
                    "judge_false_negatives": len(self.audit.false_negatives), "judge_audited": self.audit.checked,
                    "judge_application_false_positives": len(self.audit.application_false_positives),
                    "judge_application_audited": self.audit.application_checked,
                    "memory_fault_rate": self.memory_fault_rate, "fact_write_fault_rate": self.fact_write_fault_rate,
                    "memory_fault_tasks": self.fault_tasks, "fact_write_fault_tasks": self.fact_write_fault_tasks})
        for kind, n in self.faults_by_kind.items():
            out[f"faults_{kind}"] = n
        out.update({"context_tokens": self.context_tokens, "context_items": self.context_items,
                    "prompt_tokens": self.prompt_tokens, **self.ran})
        total = Usage()
        for role, u in sorted(self.usage.items()):
            total = total + u
            for k, v in asdict(u).items():
                if v or k not in REPORTED_ONLY:
                    out[f"{role}_{k}"] = v
        for k, v in asdict(total).items():
            if v or k not in REPORTED_ONLY:
                out[f"total_{k}"] = v
        return {k: float(v) for k, v in out.items() if not (isinstance(v, float) and math.isnan(v))}


def compute(records: list[TaskRecord]) -> RunMetrics:
    usage: dict[str, Usage] = {}
    for r in records:
        for role, u in r.usage.items():
            usage[role] = usage.get(role, Usage()) + u
    ran = [r for r in records if r.indirect is not None]
    kinds: dict[str, int] = {}
    for r in ran:
        for k, n in r.fault_counts().items():
            kinds[k] = kinds.get(k, 0) + n
    return RunMetrics(
        rates={m: rate(records, m) for m in METRICS},
        n_tasks=len(records),
        n_errors=sum(1 for r in records if r.error),
        usage=usage,
        excluded=tuple(r.task_id for r in records if not valid(r)),
        audit=judge_audit(records),
        # a memory-system fallback; the controlled answerer's own cut replies (where="answerer") are faults on the
        # record and in faults_by_kind, but not the memory system's; nor are diagnostics (an empty extraction)
        fault_tasks=sum(1 for r in ran if any(f.where != "answerer" and not f.diagnostic for f in r.faults)),
        fact_write_fault_tasks=sum(1 for r in ran if r.fact_write_fault),
        faults_by_kind=dict(sorted(kinds.items())),
        n_ran=len(ran),
        context_tokens=_mean([r.context_tokens for r in ran]),
        context_items=_mean([r.context_items for r in ran]),
        prompt_tokens=_mean([r.prompt_tokens for r in ran]),
        ran=ran_rates(ran),
        controls=control_metrics(records),
        verdict_errors=verdict_errors(records),
        deltas={name: paired_delta(records, a, b) for name, (a, b) in DELTAS.items()},
    )


#: Table 1's Δ columns: name → (minuend, subtrahend) metrics
DELTAS = {"delta_recall_naive": ("target_recall", "naive"), "delta_application_recall": ("application", "target_recall"),
          "delta_application_naive": ("application", "naive")}


def paired_delta(records: list[TaskRecord], a: str, b: str) -> float:
    """``a`` − ``b`` in percentage points over the tasks that have both values (a task whose verdict of one of them
    failed leaves this Δ, as it leaves that rate); NaN when none has both (the backbone's naive query)."""
    pairs = [(x, y) for r in records if valid(r)
             if (x := _value(r, a)) is not None and (y := _value(r, b)) is not None]
    return 100.0 * sum(x - y for x, y in pairs) / len(pairs) if pairs else math.nan


def verdict_errors(records: list[TaskRecord]) -> dict[str, tuple[str, ...]]:
    """Per judge metric (registry order), the tasks that ran whose verdict of it failed; metrics with none absent."""
    out = {m: tuple(r.task_id for r in records if valid(r) and m in r.failed_verdicts) for m in JUDGES}
    return {m: ids for m, ids in out.items() if ids}


def _mean(values: list[float | int | None]) -> float:
    vals = [v for v in values if v is not None]
    return sum(vals) / len(vals) if vals else math.nan


def ran_rates(records: list[TaskRecord]) -> dict[str, float]:
    """What ran, per run, over the tasks whose system reports it: ``retrieval_mode_ppr_rate`` (HippoRAG 2 ran PPR,
    not the dense fallback) and ``gate_ran_rate`` (xMemory's uncertainty gate read logprobs), in percent, and the
    mean ``tool_calls`` / ``steps`` (A-RAG); a key no task reports is absent."""
    out: dict[str, float] = {}
    modes = [r.ran["retrieval_mode"] for r in records if "retrieval_mode" in r.ran]
    if modes:
        out["retrieval_mode_ppr_rate"] = 100.0 * sum(m == "ppr" for m in modes) / len(modes)
    gates = [bool(r.ran["gate_ran"]) for r in records if "gate_ran" in r.ran]
    if gates:
        out["gate_ran_rate"] = 100.0 * sum(gates) / len(gates)
    for key in ("tool_calls", "steps"):
        vals = [r.ran[key] for r in records if key in r.ran]
        if vals:
            out[f"mean_{key}"] = sum(vals) / len(vals)
    return out


def fmt_ran(m: RunMetrics) -> str:
    """The "what ran" cell of a results table: the rates and means a run reports, or "–"."""
    names = {"retrieval_mode_ppr_rate": "PPR", "gate_ran_rate": "gate", "mean_tool_calls": "tool calls",
             "mean_steps": "steps"}
    parts = [f"{names[k]} {v:.0f}%" if k.endswith("_rate") else f"{names[k]} {v:.1f}"
             for k, v in m.ran.items() if k in names]
    return ", ".join(parts) or "–"


def cost_usd(usage: dict[str, Usage], prices: Mapping[str, tuple[float, ...]], models: dict[str, str]) -> float | None:
    """Estimated cost of paid (non-cached) tokens from a price table {model: (usd per 1M prompt, per 1M completion[,
    per 1M prompt tokens the provider served from its cache])}."""
    total, known = 0.0, False
    for role, u in usage.items():
        price = prices.get(models.get(role, ""))
        if price is None:
            continue
        known = True
        discounted = u.provider_cached_prompt_tokens if len(price) > 2 else 0
        total += ((u.paid_prompt_tokens - discounted) * price[0] + discounted * price[-1]
                  + u.paid_completion_tokens * price[1]) / 1e6
    return round(total, 6) if known else None


