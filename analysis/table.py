"""A named table (``Table``: numbers for CSV, formatted cells for Markdown, LaTeX and HTML) and the cell formats
every table shares."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from inmind_exp.protocol.metrics import LABELS, METRIC_INFO
from inmind_exp.protocol.rates import CONTROL_LABELS

from analysis.caveats import FLAG, FLAG_NOTE, flag
from analysis.compare import Comparison
from analysis.stats import MIN_CLUSTERS


#: Column titles: the results table's labels (``inmind_exp.protocol.metrics.LABELS``, from the judge registry and the
#: judge-free metrics: the verbatim metric keeps its key ``target_recall_exact`` but is labelled a lower bound).
METRIC_TITLES: dict[str, str] = {**LABELS, **CONTROL_LABELS}
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
