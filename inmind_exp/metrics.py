"""Pure functions from task records to the paper's metrics: rates in percent with Wilson 95% intervals, the three
Δ columns of Table 1, error counts and token totals. Errored verdicts are excluded from a rate's denominator and
counted, never scored.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Iterable

from inmind_exp.records import TaskRecord, Usage

Z95 = 1.959963984540054
METRICS: tuple[str, ...] = ("naive", "target_recall", "target_recall_exact", "application", "answer_only")


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


def _values(records: Iterable[TaskRecord], metric: str) -> tuple[list[int], int]:
    vals, errors = [], 0
    for r in records:
        if metric == "target_recall_exact":
            v = r.target_recall_exact if r.indirect is not None else None
            if v is None:
                errors += 1
            else:
                vals.append(v)
            continue
        verdict = r.verdicts.get(metric)
        if verdict is None:
            if metric == "naive" and r.indirect is not None and r.naive is None and r.error is None:
                continue  # not evaluated for this system (the backbone control)
            errors += 1
        elif verdict.ok:
            vals.append(int(verdict.score))  # type: ignore[arg-type]
        else:
            errors += 1
    return vals, errors


def rate(records: list[TaskRecord], metric: str) -> Rate:
    vals, errors = _values(records, metric)
    return Rate(sum(vals), len(vals), errors)


@dataclass(frozen=True)
class RunMetrics:
    """Everything a run reports: the five rates, the Δ columns, counts and usage."""

    rates: dict[str, Rate]
    n_tasks: int
    n_errors: int
    usage: dict[str, Usage]

    @property
    def deltas(self) -> dict[str, float]:
        """Table 1's Δ columns in percentage points: Recall−Naive, Application−Recall, Application−Naive."""
        r = {k: v.pct for k, v in self.rates.items()}
        return {
            "delta_recall_naive": r["target_recall"] - r["naive"],
            "delta_application_recall": r["application"] - r["target_recall"],
            "delta_application_naive": r["application"] - r["naive"],
        }

    def flat(self) -> dict[str, float]:
        """MLflow metric names → values (NaN values are dropped: MLflow cannot chart them)."""
        out: dict[str, float] = {"n_tasks": self.n_tasks, "n_errors": self.n_errors}
        for name, r in self.rates.items():
            lo, hi = r.ci
            out.update({name: r.pct, f"{name}_ci_low": lo, f"{name}_ci_high": hi, f"{name}_n": r.n, f"{name}_errors": r.errors})
        out.update(self.deltas)
        total = Usage()
        for role, u in sorted(self.usage.items()):
            total = total + u
            for k, v in asdict(u).items():
                out[f"{role}_{k}"] = v
        for k, v in asdict(total).items():
            out[f"total_{k}"] = v
        return {k: float(v) for k, v in out.items() if not (isinstance(v, float) and math.isnan(v))}


def compute(records: list[TaskRecord]) -> RunMetrics:
    usage: dict[str, Usage] = {}
    for r in records:
        for role, u in r.usage.items():
            usage[role] = usage.get(role, Usage()) + u
    return RunMetrics(
        rates={m: rate(records, m) for m in METRICS},
        n_tasks=len(records),
        n_errors=sum(1 for r in records if r.error),
        usage=usage,
    )


def cost_usd(usage: dict[str, Usage], prices: dict[str, tuple[float, float]], models: dict[str, str]) -> float | None:
    """Estimated cost of paid (non-cached) tokens from a price table {model: (usd per 1M prompt, per 1M completion)}."""
    total, known = 0.0, False
    for role, u in usage.items():
        price = prices.get(models.get(role, ""))
        if price is None:
            continue
        known = True
        total += u.paid_prompt_tokens * price[0] / 1e6 + u.paid_completion_tokens * price[1] / 1e6
    return round(total, 6) if known else None


def results_table(rows: list[tuple[str, RunMetrics]]) -> str:
    """Table 1 as Markdown: one row per configuration, rates with Wilson intervals and the Δ columns."""
    head = ("| configuration | n | err | Naive | Target recall | Recall (exact) | Application | Answer-only "
            "| Δ R−N | Δ A−R | Δ A−N |")
    lines = [head, "|" + "---|" * 11]

    def cell(r: Rate) -> str:
        if not r.n:
            return "–"
        lo, hi = r.ci
        return f"{r.pct:.1f} [{lo:.1f}, {hi:.1f}]"

    def d(v: float) -> str:
        return "–" if math.isnan(v) else f"{v:+.1f}"

    for name, m in rows:
        dl = m.deltas
        lines.append(
            f"| {name} | {m.n_tasks} | {m.n_errors} | " + " | ".join(cell(m.rates[k]) for k in METRICS)
            + f" | {d(dl['delta_recall_naive'])} | {d(dl['delta_application_recall'])} | {d(dl['delta_application_naive'])} |"
        )
    return "\n".join(lines)
