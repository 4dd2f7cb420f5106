"""Rates and the negative controls' metrics: a binary metric over tasks as a ``Rate`` with its Wilson 95% interval,
which tasks count (``valid``), and each control's rate (``control_rate``) with, for the mismatched control, the
rates that say what its over-application means (issue #41, item 3): how many pairs the relevance screen judged
related (``over_application_related``), how often the fact reached the control answer's context at all
(``spurious_recall``: a retrieval system pulling the fact up for a request it does not bear on) and over-application
among those answers (``over_application_given_recalled``). "Reached the context" is the judge-free union provenance
of the control answer's items (``bounds.provenance_recall_union``, the same code as the main answer's), so it is
measured only for a system that reports its items.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from inmind_exp.protocol.bounds import provenance_recall_union
from inmind_exp.protocol.controls import CONTROL_METRICS, CONTROLS
from inmind_exp.records import ControlResult, TaskRecord

Z95 = 1.959963984540054


def wilson_interval(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion, as fractions in [0, 1]."""
    if n <= 0:
        return (float("nan"), float("nan"))
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


@dataclass(frozen=True)
class Rate:
    """A binary metric over tasks: successes of n valid verdicts, ``errors`` excluded, in percent."""

    successes: int
    n: int
    errors: int

    @property
    def pct(self) -> float:
        return 100.0 * self.successes / self.n if self.n else float("nan")

    @property
    def ci(self) -> tuple[float, float]:
        lo, hi = wilson_interval(self.successes, self.n)
        return (100.0 * lo, 100.0 * hi)


def valid(record: TaskRecord) -> bool:
    """A task counts towards the rates only if it ran (its answers exist); each rate then takes the tasks whose
    value for it exists (a failed verdict leaves only its own metric)."""
    return record.error is None and record.indirect is not None


def control_rate(records: list[TaskRecord], metric: str) -> Rate:
    """A negative control's metric (``controls.CONTROL_METRICS``) over the valid tasks that ran the control;
    ``errors`` counts those left out by a failure: the task errored, or the control's screen, query or verdict did.
    A mismatched pair the relevance screen judged related is left out by design: neither scored nor an error."""
    name = CONTROL_METRICS[metric].name
    ran = [r for r in records if name in r.controls and not r.controls[name].related]
    vals = [int(r.controls[name].verdict.score) for r in ran  # type: ignore[union-attr, arg-type]
            if valid(r) and r.controls[name].ok]
    return Rate(sum(vals), len(vals), len(ran) - len(vals))


@dataclass(frozen=True)
class DerivedControlMetric:
    """A rate read from one control's results beside its own metric; shown like a control's."""

    metric: str
    control: str
    label: str
    short: str
    order: int
    means: str


#: the mismatched control's account of itself, in column order after ``over_application``
DERIVED: dict[str, DerivedControlMetric] = {d.metric: d for d in (
    DerivedControlMetric("over_application_related", "mismatched", "Pairs related (screen)", "Rel", 71,
                         "the share of mismatched pairs the relevance screen judged related (not asked, not in "
                         "over-application)"),
    DerivedControlMetric("spurious_recall", "mismatched", "Spurious recall (control)", "SpR", 72,
                         "the fact reached the control answer's context (union provenance) for a request it does not "
                         "bear on"),
    DerivedControlMetric("over_application_given_recalled", "mismatched", "Over-application | recalled", "OA|R", 73,
                         "over-application among the control answers whose context held the fact (union provenance)"),
)}


def _asked(records: list[TaskRecord], name: str) -> list[ControlResult]:
    """The control's results on valid tasks, less the pairs screened related (their query was never asked)."""
    return [r.controls[name] for r in records if valid(r) and name in r.controls and not r.controls[name].related]


def derived_rate(records: list[TaskRecord], metric: str) -> Rate:
    """One of ``DERIVED``: ``errors`` counts the controls that could not say (a failed screen, query or verdict);
    a system that reports no items leaves the provenance-based rates empty (n = 0, not an error)."""
    name = DERIVED[metric].control
    if metric == "over_application_related":
        ran = [r.controls[name] for r in records if valid(r) and name in r.controls]
        screened = [c for c in ran if c.screen is not None and c.screen.ok]
        return Rate(sum(c.related for c in screened), len(screened), len(ran) - len(screened))
    asked = _asked(records, name)
    reached = [(c, provenance_recall_union(c.answer)) for c in asked]
    if metric == "spurious_recall":
        vals = [p for c, p in reached if p is not None]
        return Rate(sum(vals), len(vals), sum(1 for c in asked if c.answer is None))
    recalled = [c for c, p in reached if p == 1]
    scored = [int(c.verdict.score) for c in recalled if c.ok]  # type: ignore[union-attr, arg-type]
    return Rate(sum(scored), len(scored), len(recalled) - len(scored))


def control_metrics(records: list[TaskRecord]) -> dict[str, Rate]:
    """The rate of each control some record ran, in registry order, each followed by its derived rates (none for a
    run without controls)."""
    out: dict[str, Rate] = {}
    for c in CONTROLS.values():
        if any(c.name in r.controls for r in records):
            out[c.metric] = control_rate(records, c.metric)
            out.update({d.metric: derived_rate(records, d.metric) for d in DERIVED.values() if d.control == c.name})
    return out


#: every metric ``control_metrics`` may report → its label (the controls' and their derived rates')
CONTROL_LABELS: dict[str, str] = {**{c.metric: c.label for c in CONTROLS.values()},
                                  **{d.metric: d.label for d in DERIVED.values()}}
