"""The negative controls in the report (issue #22, item 1): per configuration, application beside over-application
(like sensitivity beside a false-positive rate) and answer-only beside the no-fact warning (how much of the warning
appears with nothing remembered), each with its Wilson 95% interval; and the paired comparisons of the controls'
metrics between configurations. Everything reads ``RunMetrics.controls`` (``inmind_exp.protocol.metrics.control_metrics``),
so a control added to ``inmind_exp.protocol.controls.CONTROLS`` appears here without an edit."""

from __future__ import annotations

import math
from typing import Sequence

import pandas as pd

from inmind_exp.protocol.controls import CONTROLS
from inmind_exp.protocol.metrics import Rate

from analysis.load import Run
from analysis.table import METRIC_TITLES, Table, flag_note, fmt_delta, fmt_rate
from analysis.tables import _rate_cols, control_metrics
from analysis.pairwise import pairwise

#: what each control's rate is read beside: the rate it bounds (the same tasks, the same run)
BESIDE: dict[str, str] = {"over_application": "application", "no_fact_warning": "answer_only",
                          "no_fact_application": "application"}


def _cell(r: Rate | None) -> str:
    return fmt_rate(r.pct, *r.ci, r.n) if r is not None and r.n else "–"


def controls_table(runs: Sequence[Run]) -> Table | None:
    """One row per configuration with controls: each control's metric beside the rate it bounds, and their
    difference in points; None when no run has a control."""
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
            if base and b is not None and r is not None and r.n and b.n:
                diff = b.pct - r.pct
                row[f"{base}_minus_{k}"] = diff
                disp[f"{METRIC_TITLES[base]} − {METRIC_TITLES[k]}"] = fmt_delta(diff)
            elif base:
                row[f"{base}_minus_{k}"] = math.nan
                disp[f"{METRIC_TITLES[base]} − {METRIC_TITLES[k]}"] = "–"
        data.append(row)
        display.append(disp)
    shown = pd.DataFrame(display)
    means = "; ".join(f"{c.label}: {c.means}" for c in CONTROLS.values() if c.metric in metrics)
    return Table(
        "controls", "Negative controls: application beside over-application and the no-fact application, answer-only "
        "beside the no-fact warning "
        "(%, Wilson 95% intervals; differences in points)", pd.DataFrame(data), shown,
        note=(f"{means}. Each control's rate is over the configuration's valid tasks whose control query and verdict "
              "succeeded (a failed control is left out, never scored); the rate beside it is Table 1's. A high "
              "application with a high over-application is an agent that warns whatever it is asked; an answer-only "
              f"rate near the no-fact warning is one the memory adds little to.{flag_note(shown)}"))


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
