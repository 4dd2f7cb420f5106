"""The paper's tables and the paired-comparison tables, as pandas frames rendered to Markdown, LaTeX and CSV.

Each ``Table`` keeps two frames: ``data`` (numbers, written as CSV) and ``display`` (formatted cells, written as
Markdown and LaTeX and shown in the HTML report). Rates are percentages with Wilson 95% intervals.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

import pandas as pd

from inmind_exp.protocol.controls import CONTROLS
from inmind_exp.display.headline import FACT_WRITE_FAULT_LIMIT, FAULT_FLAG, IN_CONTEXT, IN_CONTEXT_NOTE
from inmind_exp.protocol.metrics import LABELS, METRIC_INFO, METRICS, Rate, RunMetrics, fmt_ran, upper_bound, valid
from inmind_exp.records import DOMAINS, OFFICIAL_DOMAINS

from analysis.caveats import FLAG, FLAG_NOTE, flag
from analysis.compare import EXCLUSION_NOTE, HEALTH, Comparison, compare, outcome
from analysis.load import EMBEDDING_ORDER, Run
from analysis.official import protocol_cell, protocol_cols
from analysis.stats import MIN_CLUSTERS, benjamini_hochberg, cohen_kappa, holm

#: Column titles: the results table's labels (``inmind_exp.protocol.metrics.LABELS``, from the judge registry and the
#: judge-free metrics: the verbatim metric keeps its key ``target_recall_exact`` but is labelled a lower bound).
METRIC_TITLES: dict[str, str] = {**LABELS, **{c.metric: c.label for c in CONTROLS.values()}}
DELTA_TITLES: dict[str, str] = {
    "delta_recall_naive": "Δ Recall−Naive",
    "delta_application_recall": "Δ Application−Recall",
    "delta_application_naive": "Δ Application−Naive",
}
SHORT: dict[str, str] = {k: m.short for k, m in METRIC_INFO.items()}
ALPHA = 0.05
CLUSTER_NOTE = ("[95% CI] (the Bonett–Price interval for paired proportions) and McNemar treat tasks as "
                "independent. Tasks of one domain share a fact type and a bridge, so two more answers are given. "
                "Within-domain: a stratified Bonett–Price interval, the difference on this design (these domains at "
                "these sizes). Domain mix: whether it would hold on another mix of domains, an approximate CR2 "
                "cluster-robust interval with Bell–McCaffrey degrees of freedom, given only from "
                f"{MIN_CLUSTERS} domains up. Leave one out: the range of the difference with each domain left out "
                "in turn, and the difference without the health domain.")

CONTROLS_NOTE = (" Negative controls (controls=): " + "; ".join(f"{c.label} = {c.means}" for c in CONTROLS.values())
                 + ". A control's rate is over the row's valid tasks whose control query and verdict succeeded.")


@dataclass(frozen=True)
class Table:
    """A named table: numbers for CSV, formatted cells for Markdown/LaTeX/HTML, and a caption."""

    name: str
    caption: str
    data: pd.DataFrame
    display: pd.DataFrame
    note: str = ""
    #: facts listed under the note, one per line (e.g. the tasks left out of a row and why)
    items: tuple[str, ...] = ()

    def markdown(self) -> str:
        return to_markdown(self.display)

    def notes_markdown(self) -> str:
        """The note and the listed items as Markdown (empty when there are none)."""
        parts = [self.note] if self.note else []
        if self.items:
            parts.append("\n".join(f"- {x}" for x in self.items))
        return "\n\n".join(parts)

    def latex(self) -> str:
        return to_latex(self.display, self.caption, f"tab:{self.name}")

    def write(self, directory: Path) -> list[Path]:
        directory.mkdir(parents=True, exist_ok=True)
        paths = [directory / f"{self.name}.{ext}" for ext in ("md", "tex", "csv")]
        notes = self.notes_markdown()
        note = f"\n\n{notes}" if notes else ""
        paths[0].write_text(f"**{self.caption}**\n\n{self.markdown()}{note}\n", encoding="utf-8")
        paths[1].write_text(self.latex() + "\n", encoding="utf-8")
        self.data.to_csv(paths[2], index=False)
        return paths


# -- formatting ---------------------------------------------------------------------------------------------------

def display_frame(rows: list[dict[str, object]]) -> pd.DataFrame:
    """A table's display rows as a frame; with no row, an empty frame that still has its Configuration column."""
    return pd.DataFrame(rows) if rows else pd.DataFrame(columns=["Configuration"])


def fmt_rate(pct: float, lo: float, hi: float, n: int = 0) -> str:
    """"pct [lo, hi]" with ``caveats.FLAG`` when the interval is uninformative for ``n`` tasks; "–" for NaN."""
    return "–" if math.isnan(pct) else f"{pct:.1f} [{lo:.1f}, {hi:.1f}]{flag(lo, hi, n)}"


def fmt_diff_ci(c: Comparison) -> str:
    """A paired difference with its Bonett–Price interval, flagged when the interval is degenerate; "–" if n = 0."""
    if not c.n:
        return "–"
    return f"{fmt_delta(c.diff)} [{fmt_delta(c.ci_low)}, {fmt_delta(c.ci_high)}]{FLAG if c.degenerate else ''}"


def fmt_domain_cells(c: Comparison) -> dict[str, str]:
    """The domain structure of a paired difference as display cells: the within-domain interval, the domain-mix
    interval (CR2, approximate; "–" below ``stats.MIN_CLUSTERS`` domains) and the leave-one-domain-out range."""
    if not c.n:
        return {"within-domain 95% CI": "–", "domain mix 95% CI (approx.)": "–", "leave one domain out": "–"}
    within = f"[{fmt_delta(c.st_low)}, {fmt_delta(c.st_high)}]"
    mix = (f"[{fmt_delta(c.cr_low)}, {fmt_delta(c.cr_high)}] (df {c.cr_df:.1f})" if not math.isnan(c.cr_low)
           else f"– ({c.n_domains} domains)")
    lo, hi = c.loo_range
    loo = "–" if math.isnan(lo) else f"{fmt_delta(lo)} to {fmt_delta(hi)}"
    if not math.isnan(c.health_out):
        loo += f"; without health {fmt_delta(c.health_out)}"
    return {"within-domain 95% CI": within, "domain mix 95% CI (approx.)": mix, "leave one domain out": loo}


def flag_note(*frames: pd.DataFrame) -> str:
    """``caveats.FLAG_NOTE`` (with a leading space) when some cell of ``frames`` carries the flag, else ""."""
    flagged = any(FLAG in str(v) for df in frames for v in df.to_numpy().ravel())
    return f" {FLAG_NOTE}" if flagged else ""


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


def fmt_delta(v: float) -> str:
    if math.isnan(v):
        return "–"
    text = f"{v:+.1f}"
    return "+0.0" if text == "-0.0" else text.replace("-", "−")


def fmt_p(p: float) -> str:
    if math.isnan(p):
        return "–"
    return f"{p:.3f}" if p >= 0.001 else f"{p:.1e}"


def fmt_count(k: int, n: int) -> str:
    return "–" if not n else f"{100.0 * k / n:.1f} ({k}/{n})"


def to_markdown(df: pd.DataFrame) -> str:
    """A GitHub-flavoured Markdown table of a frame of strings (``|`` in cells escaped)."""
    cols = [str(c) for c in df.columns]

    def cell(v: object) -> str:
        return str(v).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(cell(c) for c in cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join(lines)


_TEX = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{",
        "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "Δ": r"$\Delta$", "−": "$-$",
        "–": "--", "—": "---", "κ": r"$\kappa$", "×": r"$\times$", "→": r"$\to$", "≤": r"$\le$",
        "*": r"$^{*}$", "†": r"$^{\dagger}$", "…": r"\ldots{}"}


def tex_escape(text: object) -> str:
    return "".join(_TEX.get(ch, ch) for ch in str(text))


def to_latex(df: pd.DataFrame, caption: str, label: str) -> str:
    """A booktabs ``table`` environment (first column left-aligned, the rest centred)."""
    spec = "l" + "c" * (len(df.columns) - 1)
    lines = [r"\begin{table}[t]", r"\centering", r"\small", rf"\caption{{{tex_escape(caption)}}}",
             rf"\label{{{label}}}", rf"\begin{{tabular}}{{{spec}}}", r"\toprule",
             " & ".join(tex_escape(c) for c in df.columns) + r" \\", r"\midrule"]
    lines += [" & ".join(tex_escape(v) for v in row) + r" \\" for row in df.itertuples(index=False)]
    lines += [r"\bottomrule", r"\end{tabular}", r"\end{table}"]
    return "\n".join(lines)


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
        row.update({"context_tokens": m.context_tokens, "context_items": m.context_items, **m.ran})
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

def _comparison_row(c: Comparison, **extra: str) -> dict[str, object]:
    return {
        **extra, "a": c.a, "b": c.b, "metric": c.metric, "n_paired": c.n, "rate_a": c.rate_a, "rate_b": c.rate_b,
        "diff_pp": c.diff, "ci_low": c.ci_low, "ci_high": c.ci_high, "both": c.both, "a_only": c.a_only,
        "b_only": c.b_only, "neither": c.neither, "ci_method": c.ci_method, "p_exact": c.p_exact,
        "p_midp": c.p_midp, "mdd_80": c.mdd, "excluded": c.n_excluded,
        "within_domain_ci_low": c.st_low, "within_domain_ci_high": c.st_high, "domain_mix_ci_low": c.cr_low,
        "domain_mix_ci_high": c.cr_high, "domain_mix_df": c.cr_df, "loo_min": c.loo_range[0],
        "loo_max": c.loo_range[1], "health_out": c.health_out, "n_domains": c.n_domains,
        **{f"excluded_{k.replace(' ', '_')}": v for k, v in c.excluded.items()},
    }


def _pairs(runs: Sequence[Run], metric: str) -> list[tuple[int, int, Comparison]]:
    """Every pair of runs (by index in ``runs``, the matrix's and the viewer's order) compared on ``metric``."""
    return [(i, j, compare(runs[i], runs[j], metric)) for i, j in itertools.combinations(range(len(runs)), 2)]


def holm_by_pair(runs: Sequence[Run], metric: str = "application") -> dict[tuple[int, int], float]:
    """The Holm-adjusted exact McNemar p of every pair of runs (by index, both orders), over all pairs: the one p
    that the matrix, the Δ forest plot and the verdict lines show."""
    pairs = _pairs(runs, metric)
    out: dict[tuple[int, int], float] = {}
    for (i, j, _), h in zip(pairs, holm([c.p_exact for _, _, c in pairs])):
        out[i, j] = out[j, i] = h
    return out


def pairwise(runs: Sequence[Run], metric: str = "application") -> list[Table]:
    """Every pair of runs on ``metric``: paired difference, Bonett–Price CI, exact McNemar, Holm and BH adjustment.
    Returns the long table and the matrix (row − column, Holm-adjusted p)."""
    comps = [c for _, _, c in _pairs(runs, metric)]
    raw = [c.p_exact for c in comps]
    p_holm, p_bh = holm(raw), benjamini_hochberg(raw)
    data = pd.DataFrame([{**_comparison_row(c), "p_holm": h, "p_bh": q} for c, h, q in zip(comps, p_holm, p_bh)])
    display = pd.DataFrame([{
        "A": c.a, "B": c.b, "n": str(c.n), "A %": f"{c.rate_a:.1f}" if c.n else "–",
        "B %": f"{c.rate_b:.1f}" if c.n else "–",
        "A−B [95% CI]": fmt_diff_ci(c), **fmt_domain_cells(c),
        "A only / B only": f"{c.a_only} / {c.b_only}", "exact p": fmt_p(c.p_exact),
        "mid-p": fmt_p(c.p_midp), "Holm p": fmt_p(h), "BH q": fmt_p(q),
        "MDD (80%)": "–" if math.isnan(c.mdd) else f"{c.mdd:.1f}", "excluded": str(c.n_excluded),
    } for c, h, q in zip(comps, p_holm, p_bh)])
    title = METRIC_TITLES[metric]
    note = (f"{len(comps)} pairs; Holm controls the family-wise error over all of them, BH the false discovery rate. "
            "MDD (80%): the paired difference (points) the exact McNemar test detects with 80% power at the pair's n "
            "and share of discordant tasks ('–': too few discordant tasks for any). "
            f"{CLUSTER_NOTE} {EXCLUSION_NOTE}{flag_note(display)}")
    long = Table(f"pairwise_{metric}", f"Paired comparisons of {title}: all pairs of configurations", data,
                 display if len(display) else pd.DataFrame(columns=["A", "B"]), note=note)
    labels = [r.label for r in runs]
    cells = {lab: {other: "—" for other in labels} for lab in labels}
    for c, h in zip(comps, p_holm):
        if not c.n:
            cells[c.a][c.b] = cells[c.b][c.a] = "–"
            continue
        mark = "*" if h < ALPHA else ""
        dflag = FLAG if c.degenerate else ""
        cells[c.a][c.b] = f"{fmt_delta(c.diff)}{mark}{dflag} ({fmt_p(h)})"
        cells[c.b][c.a] = f"{fmt_delta(-c.diff)}{mark}{dflag} ({fmt_p(h)})"
    matrix = pd.DataFrame([{"row − column": lab, **cells[lab]} for lab in labels])
    diffs = {lab: {other: (0.0 if other == lab else math.nan) for other in labels} for lab in labels}
    for c in comps:
        diffs[c.a][c.b], diffs[c.b][c.a] = c.diff, -c.diff
    numeric = pd.DataFrame([{"row_minus_column": lab, **diffs[lab]} for lab in labels])
    mat = Table(f"pairwise_{metric}_matrix",
                f"{title}: row − column difference in points (Holm-adjusted exact McNemar p; * p<{ALPHA})",
                numeric, matrix, note=note + f" The CSV holds the differences; p-values are in pairwise_{metric}.csv.")
    return [long, mat]


# -- the verdict ---------------------------------------------------------------------------------------------------

def viewer_link(a: int, b: int, viewer: str = "viewer.html") -> str:
    """The per-task viewer filtered to the tasks run ``a`` applied and run ``b`` did not (indices in the run set)."""
    return f"{viewer}?a={a}&b={b}"


def verdict_line(c: Comparison, p: float | None = None, pairs: int = 1, link: tuple[int, int] | None = None,
                 viewer: str = "viewer.html") -> str:
    """The verdict on one comparison in one line: "A − B: +Δ points [low, high], McNemar p, k/j discordant tasks";
    ``p`` is the Holm-adjusted p when ``pairs`` (the family's size) is above one, else the exact p; ``link`` (the
    indices of A and B in the run set) adds the viewer's links to the k tasks only A applied and the j only B did."""
    if not c.n:
        return f"{c.a} − {c.b}: no shared task with a valid {METRIC_TITLES.get(c.metric, c.metric)}"
    test = f"McNemar p = {fmt_p(c.p_exact if p is None else p)}" + (f" (Holm-adjusted, {pairs} pairs)" if pairs > 1 else "")
    line = (f"{c.a} − {c.b}: {fmt_delta(c.diff)} points [{fmt_delta(c.ci_low)}, {fmt_delta(c.ci_high)}]"
            f"{' ' + FLAG if c.degenerate else ''}, {test}, {c.a_only}/{c.b_only} discordant tasks")
    if link is not None and c.a_only + c.b_only:
        line += f" ({viewer_link(*link, viewer)}, {viewer_link(link[1], link[0], viewer)})"
    return line


@dataclass(frozen=True)
class Verdict:
    """One comparison that matters, with the p the matrix shows for it and the runs' indices (the viewer's order)."""

    comparison: Comparison
    a: int
    b: int
    p: float
    pairs: int

    def line(self, viewer: str = "viewer.html") -> str:
        return verdict_line(self.comparison, self.p, self.pairs, (self.a, self.b), viewer)


def verdicts(runs: Sequence[Run], metric: str = "application") -> list[Verdict]:
    """The comparisons that matter on ``metric``: each configuration against the best retrieval configuration
    (``best_retrieval``) and against the backbone (the in-context control), each pair once, the reference as B; in a
    run set of two with neither, the pair. Their p is Holm-adjusted over all pairs, as in the matrix."""
    runs = list(runs)
    best = best_retrieval(runs)
    refs = ([best] if best is not None else []) + [r for r in runs if r.config.control == IN_CONTEXT and r is not best]
    if not refs and len(runs) == 2:
        refs = [runs[1]]
    if not refs:
        return []
    index = {id(r): k for k, r in enumerate(runs)}
    holm_p = holm_by_pair(runs, metric)
    seen: set[frozenset[int]] = set()
    out = []
    for ref in refs:
        j = index[id(ref)]
        for i, run in enumerate(runs):
            if i == j or frozenset((i, j)) in seen:
                continue
            seen.add(frozenset((i, j)))
            out.append(Verdict(compare(run, ref, metric), i, j, holm_p[i, j], len(runs) * (len(runs) - 1) // 2))
    return out


# -- breakdowns ---------------------------------------------------------------------------------------------------

def _counts(records: Iterable, metric: str) -> tuple[int, int, int]:
    vals = [outcome(r, metric) for r in records]
    valid = [v for v in vals if v is not None]
    return sum(valid), len(valid), len(vals) - len(valid)


def _long_row(k: int, n: int, errors: int) -> dict[str, float]:
    from analysis.stats import wilson_interval

    lo, hi = wilson_interval(k, n)
    return {"k": k, "n": n, "errors": errors, "pct": 100.0 * k / n if n else math.nan,
            "ci_low": 100.0 * lo, "ci_high": 100.0 * hi}


def by_domain(runs: Sequence[Run], metric: str = "application") -> Table:
    """Per-run, per-domain rate with counts (k/n); the first row counts the tasks in each domain."""
    present = {r.domain for run in runs for r in run.records}
    rank = {d: i for names in (DOMAINS, OFFICIAL_DOMAINS) for i, d in enumerate(names)}  # the release's names too
    domains = sorted(present, key=lambda d: (rank.get(d, len(DOMAINS)), d))
    data = []
    tasks = {d: len({r.task_id for run in runs for r in run.records if r.domain == d}) for d in domains}
    display = [{"Configuration": "tasks", **{d: str(tasks[d]) for d in domains}, "pooled": str(sum(tasks.values())),
                "domain-macro": f"{len(domains)} domains",
                "non-health": str(sum(n for d, n in tasks.items() if d not in HEALTH))}]
    for run in runs:
        disp = {"Configuration": run.label}
        rates = []
        for d in domains:
            k, n, e = _counts([r for r in run.records if r.domain == d], metric)
            row = _long_row(k, n, e)
            data.append({"configuration": run.label, "domain": d, "metric": metric, **row})
            disp[d] = fmt_count(k, n) + (f" [{row['ci_low']:.1f}, {row['ci_high']:.1f}]" if n else "")
            if n:
                rates.append(row["pct"])
        pooled = _counts(run.records, metric)
        other = _counts([r for r in run.records if r.domain not in HEALTH], metric)
        macro = sum(rates) / len(rates) if rates else math.nan
        for name, (k, n, e) in (("pooled", pooled), ("non-health", other)):
            data.append({"configuration": run.label, "domain": name, "metric": metric, **_long_row(k, n, e)})
        data.append({"configuration": run.label, "domain": "domain-macro", "metric": metric, "k": math.nan,
                     "n": len(rates), "errors": math.nan, "pct": macro, "ci_low": math.nan, "ci_high": math.nan})
        disp["pooled"] = fmt_count(pooled[0], pooled[1])
        disp["domain-macro"] = "–" if math.isnan(macro) else f"{macro:.1f}"
        disp["non-health"] = fmt_count(other[0], other[1])
        display.append(disp)
    return Table(f"by_domain_{metric}",
                 f"{METRIC_TITLES[metric]} by domain: % (successes/valid verdicts) [Wilson 95% interval]",
                 pd.DataFrame(data), pd.DataFrame(display),
                 note=("pooled: every task; domain-macro: the mean of the domain rates (each domain weighs the "
                       "same, whatever its size); non-health: the tasks outside the health domain, beside the "
                       "health column (46 of the release's 125 tasks are health tasks). "
                       "Tasks left out (failed, or this metric's verdict failed) are not in n; they are counted in "
                       "the CSV's `errors` column. Domains are the `domain` strings the records carry. A domain's "
                       "interval is wide at the few tasks it holds: read it as where the rate plausibly lies, not "
                       "as a ranking of domains."))


def by_injection(runs: Sequence[Run], metric: str = "application") -> Table:
    """Rate by injection position for each system/embedding/LLM, with counts and the injected session."""
    data, positions = [], {}
    groups: dict[str, dict[str, str]] = {}
    several_judges = len({r.config.judge_model for r in runs}) > 1
    for run in runs:
        c = run.config
        sessions = run.injection_sessions
        pos = c.injection + (f" (session {sessions[0] + 1})" if len(sessions) == 1 else "")
        positions[pos] = min(sessions) if sessions else -1
        k, n, e = _counts(run.records, metric)
        group = f"{c.system}/{c.embedding}/{c.llm}" + (f" [judge {c.judge_model}]" if several_judges else "")
        data.append({"configuration": run.label, "group": group, "injection": c.injection,
                     "session": sessions[0] + 1 if len(sessions) == 1 else math.nan, "metric": metric,
                     **_long_row(k, n, e)})
        cell = fmt_count(k, n)
        prev = groups.setdefault(group, {}).get(pos)
        groups[group][pos] = cell if prev is None else f"{prev}; {cell}"
    cols = sorted(positions, key=lambda p: (positions[p], p))
    display = pd.DataFrame([{"System/embedding/LLM": g, **{p: cells.get(p, "") for p in cols}}
                            for g, cells in groups.items()])
    return Table(f"by_injection_{metric}", f"{METRIC_TITLES[metric]} by injection position: % (successes/valid)",
                 pd.DataFrame(data), display,
                 note="Columns are ordered by the session the fact was injected into (1-based).")


def embedding_groups(runs: Sequence[Run]) -> dict[str, list[Run]]:
    """Runs that differ only in the embedding, keyed by system/injection/LLM(/judge); groups of two or more, for
    systems that use an embedding only (``RunConfig.uses_embedding``)."""
    groups: dict[str, list[Run]] = {}
    for r in runs:
        c = r.config
        if not c.uses_embedding:
            continue
        groups.setdefault(f"{c.system}/{c.injection}/{c.llm}/{c.judge_model}", []).append(r)
    return {k: sorted(v, key=lambda r: (EMBEDDING_ORDER.get(r.config.embedding, 9), r.config.embedding))
            for k, v in groups.items() if len({r.config.embedding for r in v}) > 1}


def embedding_free_repeats(runs: Sequence[Run]) -> list[str]:
    """Systems that use no embedding but were run under several embeddings (the same configuration repeated)."""
    seen: dict[str, set[str]] = {}
    for r in runs:
        if not r.config.uses_embedding:
            seen.setdefault(r.config.system, set()).add(r.config.embedding)
    return sorted(s for s, embs in seen.items() if len(embs) > 1)


def by_embedding(runs: Sequence[Run]) -> Table | None:
    """Section 4.5: per system, target recall and application under each embedding and the paired change from the
    first embedding (MiniLM) to each other one, with its Bonett–Price interval and exact McNemar p."""
    groups = embedding_groups(runs)
    if not groups:
        return None
    repeats = embedding_free_repeats(runs)
    data, display = [], []
    for key, members in groups.items():
        base = members[0]
        for other in members[1:]:
            row = {"System": key.split("/")[0], "Change": f"{base.config.embedding} → {other.config.embedding}",
                   "Setting": "/".join(key.split("/")[1:])}
            for metric in ("target_recall", "application"):
                c = compare(other, base, metric)
                data.append(_comparison_row(c, group=key, change=row["Change"]))
                title = METRIC_TITLES[metric]
                row[title] = f"{c.rate_b:.1f} → {c.rate_a:.1f}" if c.n else "–"
                row[f"Δ {title} [95% CI]"] = fmt_diff_ci(c)
                row[f"Δ {title} within-domain"] = fmt_domain_cells(c)["within-domain 95% CI"]
                row[f"Δ {title} without health"] = fmt_delta(c.health_out)
                row[f"p ({title})"] = fmt_p(c.p_exact)
            display.append(row)
    shown = pd.DataFrame(display)
    return Table("by_embedding", "Embedding comparison per system (Section 4.5): paired change in points",
                 pd.DataFrame(data), shown,
                 note=("Rates over the tasks valid in both runs; exact McNemar p, not adjusted. Only systems that use "
                       "an embedding are compared" + (f" ({', '.join(repeats)} use none: their runs under different "
                                                      "embeddings repeat one configuration)" if repeats else "")
                       + f". {CLUSTER_NOTE} {EXCLUSION_NOTE}{flag_note(shown)}"))
