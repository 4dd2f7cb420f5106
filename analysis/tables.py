"""The paper's tables and the paired-comparison tables, as pandas frames rendered to Markdown, LaTeX and CSV.

Each ``Table`` keeps two frames: ``data`` (numbers, written as CSV) and ``display`` (formatted cells, written as
Markdown and LaTeX and shown in the HTML report). Rates are percentages with Wilson 95% intervals.
"""

from __future__ import annotations

import math
from typing import Sequence

import pandas as pd

from inmind_exp.protocol.controls import CONTROLS
from inmind_exp.display.headline import FACT_WRITE_FAULT_LIMIT, FAULT_FLAG, IN_CONTEXT, IN_CONTEXT_NOTE
from inmind_exp.protocol.metrics import METRIC_INFO, METRICS, Rate, RunMetrics, fmt_ran, upper_bound, valid

from analysis.compare import EXCLUSION_NOTE, compare, outcome
from analysis.load import Run
from analysis.official import protocol_cell, protocol_cols
from analysis.table import (CLUSTER_NOTE, DELTA_TITLES, METRIC_TITLES, Table, _comparison_row, flag_note,
                            fmt_count, fmt_delta, fmt_diff_ci, fmt_domain_cells, fmt_p, fmt_rate)
from analysis.agreement import cohen_kappa


CONTROLS_NOTE = (" Negative controls (controls=): " + "; ".join(f"{c.label} = {c.means}" for c in CONTROLS.values())
                 + ". A control's rate is over the row's valid tasks whose control query and verdict succeeded.")


# -- formatting ---------------------------------------------------------------------------------------------------


#: the rates read from the naive query, and the Δ columns built on the naive rate
NAIVE_METRICS = frozenset(k for k, m in METRIC_INFO.items() if m.reads == "naive")
NAIVE_DELTAS = frozenset(("delta_recall_naive", "delta_application_naive"))


def _hides_naive(run: Run) -> bool:
    """The in-context control (the backbone): its naive-query rates are shown "–" (``IN_CONTEXT_NOTE``)."""
    return run.config.control == IN_CONTEXT


def _rate_cells(m: RunMetrics, in_context: bool = False) -> dict[str, str]:
    """Display cells for every rate of a run: "pct [lo, hi]", or "–" where nothing was measured (and, for the
    in-context control, for the rates of the naive query: answered with the fact in context, not recall)."""
    return {METRIC_TITLES[k]: fmt_rate(m.rates[k].pct, *m.rates[k].ci, m.rates[k].n)
            if m.rates[k].n and not (in_context and k in NAIVE_METRICS) else "–" for k in METRICS}


# -- Table 1 ------------------------------------------------------------------------------------------------------

def _rate_cols(prefix: str, r: Rate) -> dict[str, float]:
    lo, hi = r.ci if r.n else (math.nan, math.nan)
    return {prefix: r.pct, f"{prefix}_ci_low": lo, f"{prefix}_ci_high": hi, f"{prefix}_k": r.successes,
            f"{prefix}_n": r.n, f"{prefix}_errors": r.errors}


def _fault_cells(run: Run) -> tuple[dict[str, object], str, str]:
    """CSV columns and the two display cells (memory faults, fact-write faults); "–" for records that predate
    fault counting (``load.FAULT_SCHEMA``)."""
    fm = run.fault_metrics
    if fm is None:
        cols = {"memory_fault_rate": math.nan, "fact_write_fault_rate": math.nan, "fault_measured_tasks": 0}
        return cols, "–", "–"
    cols: dict[str, object] = {
        "memory_fault_rate": fm.memory_fault_rate, "memory_fault_tasks": fm.fault_tasks,
        "fact_write_fault_rate": fm.fact_write_fault_rate, "fact_write_fault_tasks": fm.fact_write_fault_tasks,
        "fault_measured_tasks": fm.n_ran, **{f"faults_{k}": v for k, v in fm.faults_by_kind.items()}}
    fact = fmt_count(fm.fact_write_fault_tasks, fm.n_ran)
    return cols, fmt_count(fm.fault_tasks, fm.n_ran), fact + (f" {FAULT_FLAG}" if _fact_flagged(run) else "")


def _audit_cell(m: RunMetrics) -> str:
    """"FP / FN" of the judge-free audit of target recall; a side is "–" when its bound was not measured on any
    task."""
    fp = str(len(m.audit.false_positives)) if m.audit.application_checked else "–"
    fn = str(len(m.audit.false_negatives)) if m.rates["target_recall_exact"].n else "–"
    return f"{fp} / {fn}"


def control_metrics(runs: Sequence[Run]) -> list[str]:
    """The negative controls' metrics some run measured (``inmind_exp.protocol.controls``), in column order."""
    return [c.metric for c in sorted(CONTROLS.values(), key=lambda c: c.order)
            if any(c.metric in run.metrics.controls for run in runs)]


def _control_cells(m: RunMetrics, metrics: Sequence[str]) -> tuple[dict[str, float], dict[str, str]]:
    """CSV columns and display cells of the negative controls' rates ("–" for a run without that control)."""
    empty = Rate(0, 0, 0)
    data: dict[str, float] = {}
    shown: dict[str, str] = {}
    for k in metrics:
        r = m.controls.get(k, empty)
        data.update(_rate_cols(k, r))
        shown[METRIC_TITLES[k]] = fmt_rate(r.pct, *r.ci, r.n) if r.n else "–"
    return data, shown


def table1(runs: Sequence[Run]) -> Table:
    """Table 1 for every run: every rate with its Wilson 95% interval over the same (paired) tasks, the three Δ
    columns (Section 4.2), the judge's certain errors against the judge-free bounds, and memory-fault rates; the
    negative controls' rates when some run has them."""
    data, display, items = [], [], []
    controls = control_metrics(runs)
    hidden = False
    for run in runs:
        m, c = run.metrics, run.config
        row: dict[str, object] = {
            "configuration": run.label, "system": c.system, "embedding": c.embedding, "injection": c.injection,
            "llm": c.llm, "answerer_model": c.answerer_model, "judge_model": c.judge_model,
            "config_hash": c.config_hash, "run_id": run.run_id or "", "status": run.status,
            "n_tasks": m.n_tasks, "n_errors": m.n_errors, "n_left_out": len(m.excluded),
            "left_out_tasks": ";".join(m.excluded),
        }
        for k in METRICS:
            row.update(_rate_cols(k, m.rates[k]))
        control_data, control_shown = _control_cells(m, controls)
        row.update(control_data)
        row.update(m.deltas)
        row.update({"judge_audited": m.audit.checked, "judge_false_positives": len(m.audit.false_positives),
                    "judge_application_false_positives": len(m.audit.application_false_positives),
                    "judge_application_false_positive_tasks": ";".join(m.audit.application_false_positives),
                    "judge_false_negatives": len(m.audit.false_negatives),
                    "judge_false_positive_tasks": ";".join(m.audit.false_positives),
                    "judge_false_negative_tasks": ";".join(m.audit.false_negatives)})
        fault_cols, faults, fact_faults = _fault_cells(run)
        row.update(fault_cols)
        row.update(protocol_cols(run))
        row.update({"context_tokens": m.context_tokens, "context_items": m.context_items,
                    "prompt_tokens": m.prompt_tokens, **m.ran})
        data.append(row)
        ctx = _hides_naive(run)
        hidden = hidden or (ctx and any(m.rates[k].n for k in NAIVE_METRICS))
        disp = {"Configuration": run.label, "n": str(m.n_tasks), "left out": str(len(m.excluded)),
                **_rate_cells(m, ctx), **control_shown}
        disp.update({DELTA_TITLES[k]: "–" if ctx and k in NAIVE_DELTAS else fmt_delta(v)
                     for k, v in m.deltas.items()})
        disp.update({"judge FP / FN": _audit_cell(m), "memory faults": faults, "fact-write faults": fact_faults})
        disp.update({"context tokens": "–" if math.isnan(m.context_tokens) else f"{m.context_tokens:.0f}",
                     "what ran": fmt_ran(m), "protocol": protocol_cell(run)})
        display.append(disp)
        if m.excluded:
            items.append(f"{run.label}: left out of every rate (the task failed): {', '.join(m.excluded)}")
        for metric, ids in m.verdict_errors.items():
            items.append(f"{run.label}: left out of the {METRIC_TITLES.get(metric, metric)} rate only (its verdict "
                         f"failed): {', '.join(ids)}")
    shown = pd.DataFrame(display)
    return Table(
        "table1",
        "Table 1: results (%) per configuration with Wilson 95% intervals; Δ columns in percentage points",
        pd.DataFrame(data), shown,
        note=("Naive = direct recall (judge); Target recall (judge) = answer-blind judge of the indirect context; "
              "Target recall (verbatim, lower bound) = the fact turn's text appears verbatim in that context (misses "
              "paraphrased memories); Target recall, provenance (origin) = an item whose origin is the fact turn is "
              "in that context (no bound: an LLM rewrite that only inherited the fact may still state it); Target "
              "recall, provenance (union: upper bound) = an item derived in any way from the fact turn is in that "
              "context (it may have lost the fact when an LLM rewrote it); Naive recall, provenance the same for the "
              "direct query; Application = context-aware indirect judge; Answer-only = indirect answer judged "
              "without context. A task that failed is left out of every rate of its row ('left out', listed below); a "
              "failed verdict leaves the task out of that verdict's rate only; never scored 0. judge FP / FN: "
              "certain judge errors on target recall (verdict 1 with union provenance 0 / verdict 0 with verbatim "
              "1), task ids and the application judge's certain false positives in the judge-audit table. memory "
              "faults: tasks with at least one memory-system fallback; fact-write "
              "faults: tasks with a fallback while writing the injected exchange. Provenance (origin) is decided on "
              "each item's origin (the turns it states); the union adds what items only inherited; "
              "visible-state / retrieved recall: the fact's origin reached the query-independent part of the "
              "context (a profile, a history, the always-in-state file) / the part retrieved for the query. context "
              "tokens: mean size of the indirect answer's context (characters / 4). what ran: HippoRAG 2's PPR rate "
              "(else dense fallback), xMemory's gate rate (else no logprobs), A-RAG's mean tool calls and steps. "
              "'–': not measured (the backbone "
              "has no naive query; older records carry no provenance or faults). protocol: the fidelity each run "
              "recorded, 'leaderboard' or 'paper' (the protocol table says what each means), else the task set and "
              f"the number of deviations (listed in the protocol table).{CONTROLS_NOTE if controls else ''}"
              f"{flag_note(shown)}"
              + (f" {IN_CONTEXT_NOTE} Its naive-query rates and Δ columns are in the CSV." if hidden else "")),
        items=tuple(items),
    )


# -- the judge audited against the judge-free bounds ----------------------------------------------------------------

def _ids(ids: Sequence[str], limit: int = 20, where: str = "the CSV") -> str:
    if not ids:
        return ""
    shown = ", ".join(ids[:limit])
    return shown + (f", … (+{len(ids) - limit}; all in {where})" if len(ids) > limit else "")


def judge_self_audit(runs: Sequence[Run]) -> Table:
    """Per run, the target-recall and application judges against the judge-free bounds, without human labels
    (``metrics.judge_audit``): a verdict of 1 where the union provenance (the upper bound) is 0 is a certain false
    positive, a target-recall 0 where the verbatim metric is 1 a certain false negative; with the task ids, and the
    target-recall judge's agreement with the union bound."""
    data, display = [], []
    for run in runs:
        m = run.metrics
        a = m.audit
        bound_n, verb_n = a.application_checked, m.rates["target_recall_exact"].n
        pairs = [(o, p) for o, p in ((outcome(r, "target_recall"), upper_bound(r) if valid(r) else None)
                                      for r in run.records) if o is not None and p is not None]
        agree = sum(1 for o, p in pairs if o == p)
        kappa = cohen_kappa([o for o, _ in pairs], [p for _, p in pairs]) if pairs else math.nan
        fp, fn, app_fp = a.false_positives, a.false_negatives, a.application_false_positives
        measured = bool(pairs)
        data.append({"configuration": run.label, "audited": a.checked, "union_provenance_measured": len(pairs),
                     "verbatim_measured": verb_n, "false_positives": len(fp) if measured else math.nan,
                     "false_negatives": len(fn) if verb_n else math.nan, "false_positive_tasks": ";".join(fp),
                     "false_negative_tasks": ";".join(fn), "application_audited": bound_n,
                     "application_false_positives": len(app_fp) if bound_n else math.nan,
                     "application_false_positive_tasks": ";".join(app_fp),
                     "agreement_with_union_n": len(pairs),
                     "agreement_with_union": 100.0 * agree / len(pairs) if pairs else math.nan,
                     "kappa_with_union": kappa})
        display.append({
            "Configuration": run.label, "audited": str(a.checked),
            "certain FP (judge 1, union provenance 0)": str(len(fp)) if measured else "– (no provenance)",
            "FP tasks": _ids(fp),
            "certain FN (judge 0, verbatim 1)": str(len(fn)) if verb_n else "– (no verbatim)",
            "FN tasks": _ids(fn),
            "application: certain FP (1, union provenance 0)": (f"{len(app_fp)} of {bound_n}" if bound_n
                                                                 else "– (no provenance)"),
            "application FP tasks": _ids(app_fp),
            "judge = union provenance": (f"{100.0 * agree / len(pairs):.1f} ({agree}/{len(pairs)}), κ "
                                         f"{'–' if math.isnan(kappa) else f'{kappa:.2f}'}") if pairs else "–",
        })
    return Table(
        "judge_self_audit", "Judge audit without human labels: target-recall and application verdicts against the "
        "judge-free bounds",
        pd.DataFrame(data), pd.DataFrame(display),
        note=("Provenance (union: upper bound) is 0 when no item derived in any way from the fact turn (its origin "
              "or a source it only inherited) reached the answerer, so the fact cannot be in the context: a "
              "target-recall or application verdict of 1 there is certainly wrong (false positive). The verbatim "
              "match is a lower bound, so a target-recall verdict of 0 with the fact's text verbatim in the context "
              "is certainly wrong (false negative). Provenance (origin) is no bound (an LLM rewrite that only "
              "inherited the fact may still state it) and is not used here; records older than the union field "
              "carry the union under the provenance name and are audited with it. Errors between the bounds are not "
              "caught here: that needs human labels (--labels). audited: tasks with a valid verdict (a failed "
              "verdict leaves only its own metric). '–': that bound was not measured for this run (older records, "
              "or a system that reports no items)."),
    )


# -- Table 2 ------------------------------------------------------------------------------------------------------

def _leader_key(r: Run) -> tuple[float, float]:
    app, tr = r.metrics.rates["application"], r.metrics.rates["target_recall"]
    return (app.pct, tr.pct if tr.n else -1.0)


def retrieval_leaders(runs: Sequence[Run], like: Run | None = None) -> list[Run]:
    """The retrieval configurations sharing the highest application (then target recall), preferring the same
    injection and LLM as ``like`` when any such run exists. More than one is a tie, and is reported as one."""
    pool = [r for r in runs if r.config.is_retrieval and r.metrics.rates["application"].n and not _fact_flagged(r)]
    if like is not None:
        same = [r for r in pool if (r.config.injection, r.config.llm) == (like.config.injection, like.config.llm)]
        pool = same or pool
    if not pool:
        return []
    top = max(_leader_key(r) for r in pool)
    return sorted((r for r in pool if _leader_key(r) == top), key=lambda r: r.label)


def _fact_flagged(run: Run) -> bool:
    """A fact-write fault rate above ``inmind_exp.display.headline.FACT_WRITE_FAULT_LIMIT``: never a leader, nor in a tie."""
    fm = run.fault_metrics
    return fm is not None and fm.fact_write_fault_rate > FACT_WRITE_FAULT_LIMIT


def best_retrieval(runs: Sequence[Run], like: Run | None = None) -> Run | None:
    """The first of ``retrieval_leaders`` by label (deterministic under a tie; callers say when it is one)."""
    leaders = retrieval_leaders(runs, like)
    return leaders[0] if leaders else None


def table2(runs: Sequence[Run]) -> Table | None:
    """Table 2 (Section 5.2): always-in-state against the best retrieval configuration, with the paired difference,
    its Bonett–Price interval and exact McNemar p per metric; the backbone as a reference row when present."""
    states = [r for r in runs if r.config.control == "always_in_state"]
    if not states or best_retrieval(runs) is None:
        return None
    data, display, items = [], [], []

    def rate_row(role: str, run: Run) -> dict[str, str]:
        return {"Row": f"{role}: {run.label}", "n": str(run.metrics.n_tasks),
                **_rate_cells(run.metrics, _hides_naive(run))}

    for backbone in (r for r in runs if r.config.control == "in_context"):
        display.append(rate_row("Backbone (in context)", backbone))
    for state in states:
        leaders = retrieval_leaders(runs, like=state)
        best = leaders[0]
        display.append(rate_row("Always-in-state", state))
        role = "Best retrieval" if len(leaders) == 1 else f"Best retrieval (tie of {len(leaders)}, first by name)"
        display.append(rate_row(role, best))
        if len(leaders) > 1:
            items.append(f"Tie for best retrieval against {state.label}: {', '.join(r.label for r in leaders)} "
                         f"share application {best.metrics.rates['application'].pct:.1f}% and the same target recall; "
                         f"the Δ row uses {best.label} (first by name); the others are in the paired comparisons.")
        delta = {"Row": f"Δ paired ({state.config.system} − {best.config.system})", "n": ""}
        for k in METRICS:
            c = compare(state, best, k)
            data.append(_comparison_row(c, role="always_in_state vs best retrieval"))
            dom = fmt_domain_cells(c)
            delta[METRIC_TITLES[k]] = (f"{fmt_diff_ci(c)} p={fmt_p(c.p_exact)}; within-domain "
                                       f"{dom['within-domain 95% CI']}; domain mix {dom['domain mix 95% CI (approx.)']}"
                                       if c.n else "–")
        display.append(delta)
    shown = pd.DataFrame(display)
    return Table(
        "table2",
        "Table 2: always-in-state against the best retrieval configuration (%), with the paired difference",
        pd.DataFrame(data), shown,
        note=("Best retrieval = highest Application (then target recall) among query-time configurations (same "
              "injection and LLM when available); a tie is named as one. Δ row: paired difference in points with its "
              f"95% Bonett–Price interval and exact McNemar p. {CLUSTER_NOTE} {EXCLUSION_NOTE}{flag_note(shown)}"
              + (f" {IN_CONTEXT_NOTE}" if any(_hides_naive(r) and r.metrics.rates["naive"].n for r in runs) else "")),
        items=tuple(items),
    )


# -- paired comparisons -------------------------------------------------------------------------------------------


# -- the verdict ---------------------------------------------------------------------------------------------------


# -- breakdowns ---------------------------------------------------------------------------------------------------
