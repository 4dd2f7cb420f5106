"""The negative controls in the report (issue #22, item 1; issue #41, item 3): per configuration, application beside
over-application (like sensitivity beside a false-positive rate), with the mismatched control's own account (pairs
screened related, spurious recall, over-application given the fact reached the control answer's context), and
answer-only beside the no-fact warning (how much of the warning appears with nothing remembered), each with its
Wilson 95% interval. A rate and the control beside it are measured on the same tasks, so their difference is a
paired one: the Bonett–Price interval and exact McNemar over the tasks with both values (``within_row``), as
``analysis compare`` pairs two runs. Everything reads ``RunMetrics.controls`` and the task records, so a control
added to ``inmind_exp.protocol.controls.CONTROLS`` appears here without an edit."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import pandas as pd

from inmind_exp.protocol.controls import CONTROLS
from inmind_exp.protocol.metrics import Rate
from inmind_exp.protocol.rates import DERIVED

from analysis.compare import outcome
from analysis.load import Run
from analysis.stats import bonett_price_ci, discordant, mcnemar_exact
from analysis.table import METRIC_TITLES, Table, flag_note, fmt_delta, fmt_p, fmt_rate
from analysis.tables import _rate_cols, control_metrics
from analysis.pairwise import pairwise

#: what each control's rate is read beside: the rate it bounds (the same tasks, the same run)
BESIDE: dict[str, str] = {"over_application": "application", "no_fact_warning": "answer_only",
                          "no_fact_application": "application"}


@dataclass(frozen=True)
class WithinRow:
    """``base`` − ``control`` of one run, paired over the tasks with a value of both (points): the Bonett–Price
    interval and the exact McNemar p-value of the discordant counts."""

    base: str
    control: str
    n: int
    base_only: int
    control_only: int
    diff: float
    ci_low: float
    ci_high: float
    p_exact: float

    def cell(self) -> str:
        if not self.n:
            return "–"
        return (f"{fmt_delta(self.diff)} [{fmt_delta(self.ci_low)}, {fmt_delta(self.ci_high)}] "
                f"p={fmt_p(self.p_exact)} ({self.base_only}/{self.control_only} of {self.n})")


def within_row(run: Run, base: str, control: str) -> WithinRow:
    """Pair ``base`` and ``control`` task by task within ``run`` (a task without a valid value of either, e.g. a
    pair screened related, is left out of the pair)."""
    xs, ys = [], []
    for tid in sorted(run.by_task):
        r = run.by_task[tid]
        x, y = outcome(r, base), outcome(r, control)
        if x is not None and y is not None:
            xs.append(x)
            ys.append(y)
    _, a_only, b_only, _ = discordant(xs, ys)
    n = len(xs)
    lo, hi = bonett_price_ci(a_only, b_only, n) if n else (math.nan, math.nan)
    return WithinRow(base, control, n, a_only, b_only, 100.0 * (a_only - b_only) / n if n else math.nan,
                     100.0 * lo, 100.0 * hi, mcnemar_exact(a_only, b_only) if n else math.nan)


def _cell(r: Rate | None) -> str:
    return fmt_rate(r.pct, *r.ci, r.n) if r is not None and r.n else "–"


def controls_table(runs: Sequence[Run]) -> Table | None:
    """One row per configuration with controls: each control's metric beside the rate it bounds, the mismatched
    control's derived rates, and each paired difference; None when no run has a control."""
    metrics = control_metrics(runs)
    if not metrics:
        return None
    data, display = [], []
    for run in runs:
        m = run.metrics
        if not m.controls:
            continue
        row: dict[str, object] = {"configuration": run.label, "system": run.config.system,
                                  "config_hash": run.config.config_hash}
        disp: dict[str, str] = {"Configuration": run.label}
        for k in metrics:
            base = BESIDE.get(k)
            r = m.controls.get(k)
            b = m.rates.get(base) if base else None
            if base and b is not None:
                row.update(_rate_cols(base, b))
                disp[METRIC_TITLES[base]] = _cell(b)
            row.update(_rate_cols(k, r if r is not None else Rate(0, 0, 0)))
            disp[METRIC_TITLES[k]] = _cell(r)
            for d in (d for d in DERIVED.values() if d.control == CONTROLS_BY_METRIC[k]):
                dr = m.controls.get(d.metric)
                row.update(_rate_cols(d.metric, dr if dr is not None else Rate(0, 0, 0)))
                disp[METRIC_TITLES[d.metric]] = _cell(dr)
            if base:
                w = within_row(run, base, k)
                row.update({f"{base}_minus_{k}": w.diff, f"{base}_minus_{k}_ci_low": w.ci_low,
                            f"{base}_minus_{k}_ci_high": w.ci_high, f"{base}_minus_{k}_p_exact": w.p_exact,
                            f"{base}_minus_{k}_n": w.n})
                disp[f"{METRIC_TITLES[base]} − {METRIC_TITLES[k]} (paired)"] = w.cell()
        data.append(row)
        display.append(disp)
    shown = pd.DataFrame(display)
    means = "; ".join(f"{c.label}: {c.means}" for c in CONTROLS.values() if c.metric in metrics)
    derived = "; ".join(f"{d.label}: {d.means}" for d in DERIVED.values()
                        if any(d.metric in run.metrics.controls for run in runs))
    return Table(
        "controls", "Negative controls: application beside over-application and the no-fact application, answer-only "
        "beside the no-fact warning "
        "(%, Wilson 95% intervals; paired differences in points)", pd.DataFrame(data), shown,
        note=(f"{means}.{f' {derived}.' if derived else ''} Each control's rate is over the configuration's valid "
              "tasks whose control query and verdict succeeded (a failed control is left out, never scored; a pair "
              "screened related is left out and counted); the rate beside it is Table 1's. Each difference is paired "
              "over the tasks with both values: [Bonett–Price 95% interval], exact McNemar p, (tasks where only the "
              "first is 1 / only the second is 1 of the pairs). A high application with a high over-application is "
              "an agent that warns whatever it is asked; an answer-only rate near the no-fact warning is one the "
              f"memory adds little to.{flag_note(shown)}"))


#: the control each control metric belongs to
CONTROLS_BY_METRIC: dict[str, str] = {c.metric: c.name for c in CONTROLS.values()}


def control_pairwise(runs: Sequence[Run]) -> list[Table]:
    """The paired comparisons (Bonett–Price and domain intervals, exact McNemar, Holm/BH) of every control
    metric some run measured, over the runs that measured it."""
    out: list[Table] = []
    for k in control_metrics(runs):
        measured = [r for r in runs if k in r.metrics.controls]
        if len(measured) > 1:
            long, matrix = pairwise(measured, k)
            out += [matrix, long]
    return out
