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

from inmind_exp.metrics import METRIC_INFO, METRICS, Rate, RunMetrics
from inmind_exp.records import DOMAINS

from analysis.compare import EXCLUSION_NOTE, Comparison, compare, outcome
from analysis.load import EMBEDDING_ORDER, Run
from analysis.stats import benjamini_hochberg, holm

#: Column titles and short names come from the judge registry and the judge-free metrics (inmind_exp.metrics).
METRIC_TITLES: dict[str, str] = {k: m.title for k, m in METRIC_INFO.items()}
DELTA_TITLES: dict[str, str] = {
    "delta_recall_naive": "Δ Recall−Naive",
    "delta_application_recall": "Δ Application−Recall",
    "delta_application_naive": "Δ Application−Naive",
}
SHORT: dict[str, str] = {k: m.short for k, m in METRIC_INFO.items()}
ALPHA = 0.05


@dataclass(frozen=True)
class Table:
    """A named table: numbers for CSV, formatted cells for Markdown/LaTeX/HTML, and a caption."""

    name: str
    caption: str
    data: pd.DataFrame
    display: pd.DataFrame
    note: str = ""

    def markdown(self) -> str:
        return to_markdown(self.display)

    def latex(self) -> str:
        return to_latex(self.display, self.caption, f"tab:{self.name}")

    def write(self, directory: Path) -> list[Path]:
        directory.mkdir(parents=True, exist_ok=True)
        paths = [directory / f"{self.name}.{ext}" for ext in ("md", "tex", "csv")]
        note = f"\n\n{self.note}" if self.note else ""
        paths[0].write_text(f"**{self.caption}**\n\n{self.markdown()}{note}\n", encoding="utf-8")
        paths[1].write_text(self.latex() + "\n", encoding="utf-8")
        self.data.to_csv(paths[2], index=False)
        return paths


# -- formatting ---------------------------------------------------------------------------------------------------

def fmt_rate(pct: float, lo: float, hi: float) -> str:
    return "–" if math.isnan(pct) else f"{pct:.1f} [{lo:.1f}, {hi:.1f}]"


def _rate_cells(m: RunMetrics) -> dict[str, str]:
    """Display cells for the five rates of a run: "pct [lo, hi]", or "–" where nothing was evaluated."""
    return {METRIC_TITLES[k]: fmt_rate(m.rates[k].pct, *m.rates[k].ci) if m.rates[k].n else "–" for k in METRICS}


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
        "–": "--", "—": "---", "κ": r"$\kappa$", "×": r"$\times$", "→": r"$\to$", "≤": r"$\le$", "*": r"$^{*}$"}


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


def table1(runs: Sequence[Run]) -> Table:
    """Table 1 for every run: the five rates with Wilson 95% intervals and the three Δ columns (Section 4.2)."""
    data, display = [], []
    for run in runs:
        m, c = run.metrics, run.config
        row: dict[str, object] = {
            "configuration": run.label, "system": c.system, "embedding": c.embedding, "injection": c.injection,
            "llm": c.llm, "answerer_model": c.answerer_model, "judge_model": c.judge_model,
            "config_hash": c.config_hash, "run_id": run.run_id or "", "status": run.status,
            "n_tasks": m.n_tasks, "n_errors": m.n_errors,
        }
        for k in METRICS:
            row.update(_rate_cols(k, m.rates[k]))
        row.update(m.deltas)
        data.append(row)
        disp = {"Configuration": run.label, "n": str(m.n_tasks), "err": str(m.n_errors), **_rate_cells(m)}
        disp.update({DELTA_TITLES[k]: fmt_delta(v) for k, v in m.deltas.items()})
        disp["verdict errors"] = ", ".join(f"{SHORT[k]} {m.rates[k].errors}" for k in METRICS if m.rates[k].errors)
        display.append(disp)
    return Table(
        "table1",
        "Table 1: results (%) per configuration with Wilson 95% intervals; Δ columns in percentage points",
        pd.DataFrame(data), pd.DataFrame(display),
        note=("Naive = direct recall; Target Recall = answer-blind judge (exact: the fact turn's text in the context); "
              "Application = context-aware indirect judge; Answer-only = indirect answer judged without context. "
              "err: tasks that failed; verdict errors: errored verdicts per metric (N, TR, TRx, App, AO), excluded "
              "from that rate's n, never scored 0 (counts in the CSV's `*_errors`). '–': not evaluated (the backbone "
              "has no naive query)."),
    )


# -- Table 2 ------------------------------------------------------------------------------------------------------

def best_retrieval(runs: Sequence[Run], like: Run | None = None) -> Run | None:
    """The retrieval configuration with the highest application (then target recall), preferring the same
    injection and LLM as ``like`` when any such run exists."""
    pool = [r for r in runs if r.config.is_retrieval and r.metrics.rates["application"].n]
    if like is not None:
        same = [r for r in pool if (r.config.injection, r.config.llm) == (like.config.injection, like.config.llm)]
        pool = same or pool

    def key(r: Run) -> tuple[float, float, str]:
        app, tr = r.metrics.rates["application"], r.metrics.rates["target_recall"]
        return (app.pct, tr.pct if tr.n else -1.0, r.label)

    return max(pool, key=key, default=None)


def table2(runs: Sequence[Run], n_boot: int = 10_000, seed: int = 0) -> Table | None:
    """Table 2 (Section 5.2): always-in-state against the best retrieval configuration, with the paired difference,
    its bootstrap interval and exact McNemar p per metric; the backbone as a reference row when present."""
    states = [r for r in runs if r.config.system == "always_in_state"]
    if not states or best_retrieval(runs) is None:
        return None
    data, display = [], []

    def rate_row(role: str, run: Run) -> dict[str, str]:
        return {"Row": f"{role}: {run.label}", "n": str(run.metrics.n_tasks), **_rate_cells(run.metrics)}

    for backbone in (r for r in runs if r.config.system == "backbone"):
        display.append(rate_row("Backbone (in context)", backbone))
    for state in states:
        best = best_retrieval(runs, like=state)
        assert best is not None
        display.append(rate_row("Always-in-state", state))
        display.append(rate_row("Best retrieval", best))
        delta = {"Row": f"Δ paired ({state.config.system} − {best.config.system})", "n": ""}
        for k in METRICS:
            c = compare(state, best, k, n_boot=n_boot, seed=seed)
            data.append(_comparison_row(c, role="always_in_state vs best retrieval"))
            delta[METRIC_TITLES[k]] = (f"{fmt_delta(c.diff)} [{fmt_delta(c.ci_low)}, {fmt_delta(c.ci_high)}] "
                                       f"p={fmt_p(c.p_mcnemar)}" if c.n else "–")
        display.append(delta)
    return Table(
        "table2",
        "Table 2: always-in-state against the best retrieval configuration (%), with the paired difference",
        pd.DataFrame(data), pd.DataFrame(display),
        note=("Best retrieval = highest Application among query-time configurations (same injection and LLM when "
              "available). Δ row: paired difference in points with its 95% paired bootstrap interval and exact "
              "McNemar p. " + EXCLUSION_NOTE),
    )


# -- paired comparisons -------------------------------------------------------------------------------------------

def _comparison_row(c: Comparison, **extra: str) -> dict[str, object]:
    return {
        **extra, "a": c.a, "b": c.b, "metric": c.metric, "n_paired": c.n, "rate_a": c.rate_a, "rate_b": c.rate_b,
        "diff_pp": c.diff, "ci_low": c.ci_low, "ci_high": c.ci_high, "both": c.both, "a_only": c.a_only,
        "b_only": c.b_only, "neither": c.neither, "p_mcnemar": c.p_mcnemar, "excluded": c.n_excluded,
        **{f"excluded_{k.replace(' ', '_')}": v for k, v in c.excluded.items()},
    }


def pairwise(runs: Sequence[Run], metric: str = "application", n_boot: int = 10_000, seed: int = 0) -> list[Table]:
    """Every pair of runs on ``metric``: paired difference, bootstrap CI, exact McNemar, Holm and BH adjustment.
    Returns the long table and the matrix (row − column, Holm-adjusted p)."""
    comps = [compare(a, b, metric, n_boot=n_boot, seed=seed) for a, b in itertools.combinations(runs, 2)]
    raw = [c.p_mcnemar for c in comps]
    p_holm, p_bh = holm(raw), benjamini_hochberg(raw)
    data = pd.DataFrame([{**_comparison_row(c), "p_holm": h, "p_bh": q} for c, h, q in zip(comps, p_holm, p_bh)])
    display = pd.DataFrame([{
        "A": c.a, "B": c.b, "n": str(c.n), "A %": f"{c.rate_a:.1f}" if c.n else "–",
        "B %": f"{c.rate_b:.1f}" if c.n else "–",
        "A−B [95% CI]": f"{fmt_delta(c.diff)} [{fmt_delta(c.ci_low)}, {fmt_delta(c.ci_high)}]" if c.n else "–",
        "A only / B only": f"{c.a_only} / {c.b_only}", "McNemar p": fmt_p(c.p_mcnemar), "Holm p": fmt_p(h),
        "BH q": fmt_p(q), "excluded": str(c.n_excluded),
    } for c, h, q in zip(comps, p_holm, p_bh)])
    title = METRIC_TITLES[metric]
    note = (f"{len(comps)} pairs; Holm controls the family-wise error over all of them, BH the false discovery rate. "
            + EXCLUSION_NOTE)
    long = Table(f"pairwise_{metric}", f"Paired comparisons of {title}: all pairs of configurations", data,
                 display if len(display) else pd.DataFrame(columns=["A", "B"]), note=note)
    labels = [r.label for r in runs]
    cells = {lab: {other: "—" for other in labels} for lab in labels}
    for c, h in zip(comps, p_holm):
        if not c.n:
            cells[c.a][c.b] = cells[c.b][c.a] = "–"
            continue
        mark = "*" if h < ALPHA else ""
        cells[c.a][c.b] = f"{fmt_delta(c.diff)}{mark} ({fmt_p(h)})"
        cells[c.b][c.a] = f"{fmt_delta(-c.diff)}{mark} ({fmt_p(h)})"
    matrix = pd.DataFrame([{"row − column": lab, **cells[lab]} for lab in labels])
    diffs = {lab: {other: (0.0 if other == lab else math.nan) for other in labels} for lab in labels}
    for c in comps:
        diffs[c.a][c.b], diffs[c.b][c.a] = c.diff, -c.diff
    numeric = pd.DataFrame([{"row_minus_column": lab, **diffs[lab]} for lab in labels])
    mat = Table(f"pairwise_{metric}_matrix",
                f"{title}: row − column difference in points (Holm-adjusted exact McNemar p; * p<{ALPHA})",
                numeric, matrix, note=note + f" The CSV holds the differences; p-values are in pairwise_{metric}.csv.")
    return [long, mat]


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
    domains = [d for d in DOMAINS if d in present] + sorted(present - set(DOMAINS))
    data = []
    tasks = {d: len({r.task_id for run in runs for r in run.records if r.domain == d}) for d in domains}
    display = [{"Configuration": "tasks", **{d: str(tasks[d]) for d in domains}}]
    for run in runs:
        disp = {"Configuration": run.label}
        for d in domains:
            k, n, e = _counts([r for r in run.records if r.domain == d], metric)
            data.append({"configuration": run.label, "domain": d, "metric": metric, **_long_row(k, n, e)})
            disp[d] = fmt_count(k, n)
        display.append(disp)
    return Table(f"by_domain_{metric}", f"{METRIC_TITLES[metric]} by domain: % (successes/valid verdicts)",
                 pd.DataFrame(data), pd.DataFrame(display),
                 note="Errored verdicts are left out of n and counted in the CSV's `errors` column.")


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
    """Runs that differ only in the embedding, keyed by system/injection/LLM(/judge); groups of two or more."""
    groups: dict[str, list[Run]] = {}
    for r in runs:
        c = r.config
        groups.setdefault(f"{c.system}/{c.injection}/{c.llm}/{c.judge_model}", []).append(r)
    return {k: sorted(v, key=lambda r: (EMBEDDING_ORDER.get(r.config.embedding, 9), r.config.embedding))
            for k, v in groups.items() if len({r.config.embedding for r in v}) > 1}


def by_embedding(runs: Sequence[Run], n_boot: int = 10_000, seed: int = 0) -> Table | None:
    """Section 4.5: per system, target recall and application under each embedding and the paired change from the
    first embedding (MiniLM) to each other one, with its bootstrap interval and exact McNemar p."""
    groups = embedding_groups(runs)
    if not groups:
        return None
    data, display = [], []
    for key, members in groups.items():
        base = members[0]
        for other in members[1:]:
            row = {"System": key.split("/")[0], "Change": f"{base.config.embedding} → {other.config.embedding}",
                   "Setting": "/".join(key.split("/")[1:])}
            for metric in ("target_recall", "application"):
                c = compare(other, base, metric, n_boot=n_boot, seed=seed)
                data.append(_comparison_row(c, group=key, change=row["Change"]))
                title = METRIC_TITLES[metric]
                row[title] = f"{c.rate_b:.1f} → {c.rate_a:.1f}" if c.n else "–"
                row[f"Δ {title} [95% CI]"] = (f"{fmt_delta(c.diff)} [{fmt_delta(c.ci_low)}, {fmt_delta(c.ci_high)}]"
                                               if c.n else "–")
                row[f"p ({title})"] = fmt_p(c.p_mcnemar)
            display.append(row)
    return Table("by_embedding", "Embedding comparison per system (Section 4.5): paired change in points",
                 pd.DataFrame(data), pd.DataFrame(display),
                 note="Rates over the tasks both runs judged validly; exact McNemar p, not adjusted. " + EXCLUSION_NOTE)
