"""What the report says about the official benchmark: each run's protocol fidelity (``inmind_exp.fidelity``), the
release's own aggregate beside our paired rates (``inmind_exp.official_aggregate``), and the paper's reported
figures (``analysis.paper``) beside the measured ones of runs of the official tasks.
"""

from __future__ import annotations

from typing import Callable, Sequence

import pandas as pd

from inmind_exp.fidelity import Fidelity
from inmind_exp.official_aggregate import NOTE as OFFICIAL_NOTE
from inmind_exp.official_aggregate import official_rates

from analysis.load import Run
from analysis.paper import PAPER_FIGURES, PaperFigure

#: Which runs a paper figure is compared with: by the control each run's system logged (``inmind_exp.traits``;
#: a control or the probe is not one of the paper's "memory systems").
GROUPS: dict[str, Callable[[Run], bool]] = {
    "backbone": lambda r: r.config.control == "in_context",
    "always_in_state": lambda r: r.config.control == "always_in_state",
    "best_retrieval": lambda r: r.config.is_retrieval,
    "memory_systems": lambda r: r.config.is_retrieval and not r.config.control,
}
OFFICIAL_METRICS = ("application", "target_recall", "naive")


#: The fidelity of a run that stored no fidelity record (older than the record, or a ledger without its job
#: directory): never recomputed from its flattened params, which do not say what the endpoints served.
UNKNOWN = Fidelity(deviations=("fidelity not recorded (the run stored no fidelity.json)",))


def run_fidelity(run: Run) -> Fidelity:
    """A logged run's protocol fidelity: the record it stored when it ended (``fidelity.json``)."""
    return UNKNOWN if run.fidelity is None else Fidelity.from_dict(run.fidelity)


def protocol_cell(run: Run) -> str:
    """Table 1's ``protocol`` cell: the fidelity level (``paper``, ``leaderboard``), or what tasks ran and how many
    deviations (listed in the protocol table)."""
    f = run_fidelity(run)
    if f.official:
        return f.level
    if f is UNKNOWN:
        return "unknown (no fidelity recorded)"
    what = "demo tasks" if f.demo else ("official tasks" if f.official_data else "custom tasks")
    return f"{what}, {len(f.deviations)} deviation{'s' if len(f.deviations) != 1 else ''}"


def protocol_cols(run: Run) -> dict[str, object]:
    """Table 1's CSV columns: the fidelity, the task set and, for official tasks, the release's aggregate."""
    f = run_fidelity(run)
    cols: dict[str, object] = {"fidelity": f.tag, "task_set": f.task_set}
    if f.official_data:
        for name, r in official_rates(run.records).items():
            cols[r.name], cols[f"{r.name}_k"] = r.pct, r.successes
    return cols


def protocol_table(runs: Sequence[Run]):
    """Per run: the task set, the protocol fidelity line and, for runs of the official tasks, the release's
    aggregate (score-1 / 125) beside our paired rate, named apart."""
    from analysis.tables import Table, fmt_rate

    data, display = [], []
    for run in runs:
        f = run_fidelity(run)
        row: dict[str, object] = {"configuration": run.label, **protocol_cols(run)}
        disp = {"Configuration": run.label, "tasks": f.task_set,
                "fidelity": f.tag}
        off = official_rates(run.records) if f.official_data else {}
        for m in OFFICIAL_METRICS:
            rate = run.metrics.rates[m]
            disp[f"{m} (paired)"] = fmt_rate(rate.pct, *rate.ci, rate.n) if rate.n else "–"
            disp[f"{m}_official (/125)"] = (f"{off[m].pct:.1f} ({off[m].successes}/{off[m].total})"
                                            if m in off else "– (not the official tasks)")
        data.append(row)
        display.append(disp)
    return Table("protocol", "Protocol fidelity and the release's own aggregate, per configuration",
                 pd.DataFrame(data), pd.DataFrame(display),
                 note=("fidelity, as each run recorded it from what ran: 'leaderboard' when the tasks, trace, "
                       "injection timeline, answer prompt, judge prompts and request envelope, token caps, and "
                       "gpt-5-mini as the OpenAI API served it answering and judging all match the release's "
                       "setting (evaluation/README.md); 'paper' when also the memory model and the system's paper "
                       "settings do; otherwise every deviation. Runs of the bundled tasks are demo tasks. "
                       f"{OFFICIAL_NOTE}."))


def _measured(fig: PaperFigure, runs: Sequence[Run]) -> tuple[str, list[Run]]:
    """The measured counterpart of one paper figure over ``runs`` (already of the official tasks)."""
    pool = [r for r in runs if GROUPS[fig.group](r) and (fig.embedding is None or r.config.embedding == fig.embedding)
            and r.metrics.rates[fig.metric].n]
    if not pool:
        return "– (no such run of the official tasks)", []

    def cell(r: Run) -> str:
        rate = r.metrics.rates[fig.metric]
        off = official_rates(r.records)[fig.metric] if fig.metric in OFFICIAL_METRICS else None
        lo, hi = rate.ci
        text = f"{rate.pct:.1f}% ({rate.successes}/{rate.n}, Wilson [{lo:.1f}, {hi:.1f}])"
        return f"{r.label}: {text}" + (f"; {off.name} {off.successes}/{off.total} = {off.pct:.1f}%" if off else "")

    if fig.group in ("backbone", "always_in_state"):
        return "; ".join(cell(r) for r in pool), pool
    pcts = sorted(pool, key=lambda r: (r.metrics.rates[fig.metric].pct, r.label))
    if fig.low != fig.high:  # a range over runs
        lo_run, hi_run = pcts[0], pcts[-1]
        return (f"{lo_run.metrics.rates[fig.metric].pct:.1f}–{hi_run.metrics.rates[fig.metric].pct:.1f}% over "
                f"{len(pool)} run(s) (lowest {lo_run.label}, highest {hi_run.label})"), pool
    return f"highest: {cell(pcts[-1])}", [pcts[-1]]


def paper_table(runs: Sequence[Run]):
    """The paper's reported figures beside the measured ones of the runs of the official tasks, each with the
    fidelity of the runs it reads; None when no run is of the official tasks."""
    from analysis.tables import Table

    official = [r for r in runs if run_fidelity(r).official_data]
    if not official:
        return None
    data, display = [], []
    for fig in PAPER_FIGURES:
        measured, used = _measured(fig, official)
        fids = sorted({run_fidelity(r).tag for r in used})
        data.append({"figure": fig.key, "metric": fig.metric, "paper_low": fig.low, "paper_high": fig.high,
                     "paper_section": fig.section, "measured": measured, "runs": ";".join(r.label for r in used),
                     "fidelity": " | ".join(fids)})
        display.append({"Figure": fig.label, "Paper": fig.reported, "Section": fig.section, "Measured": measured,
                        "Fidelity of the measured run(s)": " | ".join(fids) or "–"})
    return Table("paper_figures", "The paper's reported figures beside the measured ones (runs of the official tasks)",
                 pd.DataFrame(data), pd.DataFrame(display),
                 note=("Paper: the figures as printed in the paper's text (analysis/paper.py names the section). "
                       "Measured: our paired rate with its Wilson interval, and the release's aggregate (score-1 / "
                       "125). A measured run whose fidelity is not 'paper' is not an exact reproduction: its "
                       "deviations are listed beside it."))
