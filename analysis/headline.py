"""The report's headline table: ``inmind_exp.display.headline`` (the terminal's and MLflow ``results.md``'s table, one
definition) over the analysis runs, as a ``Table`` (Markdown, LaTeX, CSV, HTML) with Table 1 one link away."""

from __future__ import annotations

import math
from typing import Sequence

import pandas as pd

from inmind_exp.display import headline as H

from analysis.caveats import FLAG, FLAG_NOTE, flag
from analysis.load import Run
from analysis.table import Table

FAULT_KEYS = ("memory_fault_rate", "fact_write_fault_rate", "memory_fault_tasks", "fact_write_fault_tasks")


def flat(run: Run) -> dict[str, float]:
    """The run's metrics as MLflow stores them; the fault rates left out for records that predate fault counting
    (shown "–", never 0)."""
    out = dict(run.metrics.flat())
    fm = run.fault_metrics
    for k in FAULT_KEYS:
        out.pop(k, None)
    if fm is not None:
        out.update({k: v for k, v in fm.flat().items() if k in FAULT_KEYS})
    return out


def flagged(run: Run) -> bool:
    """The run's fact-write fault rate is above ``inmind_exp.display.headline.FACT_WRITE_FAULT_LIMIT``."""
    return H.fact_write_flagged(flat(run))


def in_context(runs: Sequence[Run]) -> set[str]:
    """The labels of the in-context control's runs (the backbone): their Naive is shown "–"."""
    return {r.label for r in runs if r.config.control == H.IN_CONTEXT}


def headline_table(runs: Sequence[Run]) -> Table:
    rows = [(r.label, flat(r)) for r in runs]
    ctx = in_context(runs)
    display = pd.DataFrame([H.cells(n, m, flag, n in ctx) for n, m in rows], columns=list(H.HEADERS))
    data = pd.DataFrame([{
        "configuration": n, "n_valid": m.get("application_n", math.nan), "n_tasks": m.get("n_tasks", math.nan),
        **{f"{k}{s}": m.get(f"{k}{s}", math.nan) for k in ("application", "target_recall")
           for s in ("", "_ci_low", "_ci_high")},
        "naive": m.get("naive", math.nan), "memory_fault_rate": m.get("memory_fault_rate", math.nan),
        "fact_write_fault_rate": m.get("fact_write_fault_rate", math.nan),
        "fact_write_flagged": H.fact_write_flagged(m)} for n, m in rows])
    names = [n for n, m in rows if H.fact_write_flagged(m)]
    marked = any(FLAG in str(v) for v in display.to_numpy().ravel())
    return Table("headline", "Headline: application and target recall per configuration (full table: Table 1)",
                 data, display, note=H.NOTE + (f" {FLAG_NOTE}" if marked else "")
                 + (f" {H.IN_CONTEXT_NOTE}" if any(H.naive_hidden(m, n in ctx) for n, m in rows) else ""),
                 items=(H.flag_note(names),) if names else ())


def terminal(runs: Sequence[Run]) -> str:
    """The headline for ``python -m analysis``'s terminal: 100 columns, intervals flagged as in the report."""
    return H.table([(r.label, flat(r)) for r in runs], width=H.TERMINAL_WIDTH, mark=flag, mark_note=FLAG_NOTE,
                   in_context=in_context(runs))
