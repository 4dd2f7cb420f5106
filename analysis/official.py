"""What the report says about the official benchmark: each run's protocol fidelity (``inmind_exp.official.fidelity``), the
release's own aggregate beside our paired rates (``inmind_exp.official.aggregate``), and the paper's reported
figures (``analysis.paper``) beside the measured ones of runs of the official tasks.
"""

from __future__ import annotations

from typing import Sequence

import pandas as pd

from inmind_exp.official.fidelity import Fidelity

from inmind_exp.official.setting import RELEASE_RETRIEVAL_TOP_K, top_k_note
from inmind_exp.display.headline import IN_CONTEXT, IN_CONTEXT_NOTE
from inmind_exp.official.aggregate import NOTE as OFFICIAL_NOTE
from inmind_exp.official.aggregate import official_rates

from analysis.load import Run
from analysis.paper import PAPER_FIGURES, PaperFigure
from analysis.table import Table, fmt_rate

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
        for _name, r in official_rates(run.records).items():
            cols[r.name], cols[f"{r.name}_k"] = r.pct, r.successes
    return cols


def protocol_table(runs: Sequence[Run]):
    """Per run: the task set, the protocol fidelity line and, for runs of the official tasks, the release's
    aggregate (score-1 / 125) beside our paired rate, named apart."""
    data, display = [], []
    hidden = False
    for run in runs:
        f = run_fidelity(run)
        row: dict[str, object] = {"configuration": run.label, **protocol_cols(run)}
        note = top_k_note(run.params)
        row["top_k"] = run.params.get("system.params.top_k") if note else None
        disp = {"Configuration": run.label, "tasks": f.task_set,
                "fidelity": f.tag + (f"; note: {note}" if note else "")}
        off = official_rates(run.records) if f.official_data else {}
        for m in OFFICIAL_METRICS:
            rate = run.metrics.rates[m]
            if m == "naive" and run.config.control == IN_CONTEXT:  # answered in context: no recall (its CSV keeps it)
                hidden = hidden or bool(rate.n)
                disp[f"{m} (paired)"] = disp[f"{m}_official (/125)"] = "– (in context)"
                continue
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
                       "settings do; otherwise every deviation. A system's top_k is noted beside it against the "
                       f"release's example configuration (retrieval_top_k {RELEASE_RETRIEVAL_TOP_K}), which its "
                       "protocol does not fix. Runs of the bundled tasks are demo tasks. "
                       f"{OFFICIAL_NOTE}." + (f" {IN_CONTEXT_NOTE}" if hidden else "")))


def matches(fig: PaperFigure, run: Run) -> bool:
    """The run is of the paper's configuration of ``fig``: one of its systems under one of its embeddings (any
    embedding for a system that uses none)."""
    return run.config.system in fig.systems and (not fig.embeddings or run.config.embedding in fig.embeddings)


def _measured(fig: PaperFigure, runs: Sequence[Run]) -> tuple[str, list[Run]]:
    """The measured counterpart of one paper figure over ``runs`` (already of the official tasks): the runs of the
    figure's system × embedding; over several configurations, their range or highest."""
    pool = [r for r in runs if matches(fig, r) and r.metrics.rates[fig.metric].n]
    if not pool:
        return "– (no run of this configuration on the official tasks)", []

    def cell(r: Run) -> str:
        rate = r.metrics.rates[fig.metric]
        off = official_rates(r.records)[fig.metric] if fig.metric in OFFICIAL_METRICS else None
        lo, hi = rate.ci
        text = f"{rate.pct:.1f}% ({rate.successes}/{rate.n}, Wilson [{lo:.1f}, {hi:.1f}])"
        return f"{r.label}: {text}" + (f"; {off.name} {off.successes}/{off.total} = {off.pct:.1f}%" if off else "")

    if fig.pairs == 1:
        return "; ".join(cell(r) for r in pool), pool
    pcts = sorted(pool, key=lambda r: (r.metrics.rates[fig.metric].pct, r.label))
    if fig.low != fig.high:  # a range over runs
        lo_run, hi_run = pcts[0], pcts[-1]
        return (f"{lo_run.metrics.rates[fig.metric].pct:.1f}–{hi_run.metrics.rates[fig.metric].pct:.1f}% over "
                f"{len(pool)} run(s) (lowest {lo_run.label}, highest {hi_run.label})"), pool
    return f"highest: {cell(pcts[-1])}", [pcts[-1]]


def paper_table(runs: Sequence[Run]):
    """The paper's reported figures beside the measured ones of the runs of the official tasks, row by row the
    paper's configuration (system × embedding) and the runs of that configuration, each with their fidelity; None
    when no run is of the official tasks."""
    official = [r for r in runs if run_fidelity(r).official_data]
    if not official:
        return None
    data, display = [], []
    for fig in PAPER_FIGURES:
        measured, used = _measured(fig, official)
        fids = sorted({run_fidelity(r).tag for r in used})
        data.append({"figure": fig.key, "metric": fig.metric, "paper_configuration": fig.configuration,
                     "systems": ";".join(fig.systems), "embeddings": ";".join(fig.embeddings),
                     "paper_low": fig.low, "paper_high": fig.high, "paper_section": fig.section,
                     "measured": measured, "runs": ";".join(r.label for r in used), "fidelity": " | ".join(fids)})
        display.append({"Figure": fig.label, "Paper's configuration": fig.configuration, "Paper": fig.reported,
                        "Section": fig.section, "Measured": measured,
                        "Fidelity of the measured run(s)": " | ".join(fids) or "–"})
    return Table("paper_figures", "The paper's reported figures beside the measured ones (runs of the official tasks)",
                 pd.DataFrame(data), pd.DataFrame(display),
                 note=("Paper: the figures as printed in the paper's text (analysis/paper.py names the section), each "
                       "beside the paper's configuration it was measured on; Measured reads only runs of that "
                       "system × embedding (a figure over several configurations: their range or highest). Measured: "
                       "our paired rate with its Wilson interval, and the release's aggregate (score-1 / 125). A "
                       "measured run whose fidelity is not 'paper' is not an exact reproduction: its deviations are "
                       "listed beside it."))
