"""Everything about a run set in one directory: tables (Markdown, LaTeX, CSV), plots (PNG, SVG), a Markdown digest
and a single self-contained HTML report with the plots embedded as base64; optionally logged to the MLflow parent
run(s) of the sweep as artifacts under ``analysis/``.
"""

from __future__ import annotations

import base64
import datetime as dt
import html
from dataclasses import dataclass, field
from pathlib import Path

from analysis import plots
from analysis.audit import audit_human, judge_agreement, judge_pairs, read_labels
from analysis.compare import EXCLUSION_NOTE
from analysis.load import RunSet
from analysis.tables import Table, best_retrieval, by_domain, by_embedding, by_injection, pairwise, table1, table2

PAIRED_METRICS: tuple[str, ...] = ("application", "target_recall")
ARTIFACT_DIR = "analysis"


@dataclass
class Report:
    out: Path
    html: Path
    markdown: Path
    tables: dict[str, Table] = field(default_factory=dict)
    figures: dict[str, list[Path]] = field(default_factory=dict)
    files: list[Path] = field(default_factory=list)


@dataclass(frozen=True)
class Section:
    title: str
    tables: tuple[Table, ...] = ()
    figures: tuple[str, ...] = ()
    text: str = ""


def build(runset: RunSet, out: Path | str, labels: Path | str | None = None, n_boot: int = 10_000,
          seed: int = 0) -> Report:
    """Compute every table and plot of ``runset`` and write them, the digest and the HTML report under ``out``."""
    out = Path(out)
    runs = list(runset.runs)
    rep = Report(out=out, html=out / "report.html", markdown=out / "report.md")
    sections: list[Section] = []

    t1 = table1(runs)
    sections.append(Section("Table 1: all configurations", (t1,)))
    t2 = table2(runs, n_boot=n_boot, seed=seed)
    if t2 is not None:
        sections.append(Section("Table 2: always-in-state against the best retrieval configuration", (t2,)))
    else:
        sections.append(Section("Table 2", text="Not produced: it needs an always_in_state run and a retrieval run."))
    for metric in PAIRED_METRICS:
        long, matrix = pairwise(runs, metric, n_boot=n_boot, seed=seed)
        sections.append(Section(f"Paired comparisons: {matrix.caption.split(':')[0]}", (matrix, long)))
    sections.append(Section("Breakdown by domain", (by_domain(runs, "application"), by_domain(runs, "target_recall"))))
    sections.append(Section("Breakdown by injection position",
                            (by_injection(runs, "application"), by_injection(runs, "target_recall"))))

    figs = {"app_vs_recall": plots.app_vs_recall(runs), "naive_vs_indirect": plots.naive_vs_indirect(runs),
            "domain_heatmap": plots.domain_heatmap(runs, "application")}
    emb = plots.embedding_comparison(runs, n_boot=n_boot, seed=seed)
    if emb is not None:
        figs["embedding_comparison"] = emb
    for name, fig in figs.items():
        rep.figures[name] = plots.save(fig, out / "plots", name)
    sections.append(Section("Plots", figures=tuple(f for f in rep.figures if f != "embedding_comparison")))
    emb_table = by_embedding(runs, n_boot=n_boot, seed=seed)
    if emb_table is not None:
        sections.append(Section("Embedding comparison (Section 4.5)", (emb_table,), ("embedding_comparison",)))

    audit_tables: list[Table] = []
    if labels is not None:
        audit_tables.append(audit_human(read_labels(labels), runs))
    pairs = judge_pairs(runs)
    if pairs:
        audit_tables.append(judge_agreement(pairs))
    sections.append(Section("Judge audit", tuple(audit_tables), text="" if audit_tables else (
        "No human labels given (--labels FILE) and no pair of runs differing only in the judge model.")))

    for sec in sections:
        for t in sec.tables:
            rep.tables[t.name] = t
            rep.files += t.write(out / "tables")
    rep.files += [p for ps in rep.figures.values() for p in ps]
    rep.markdown.write_text(_markdown(runset, sections, n_boot, seed), encoding="utf-8")
    rep.html.write_text(_html(runset, sections, rep, n_boot, seed), encoding="utf-8")
    rep.files += [rep.markdown, rep.html]
    return rep


def _methods(n_boot: int, seed: int) -> list[str]:
    return [
        "Rates are percentages of valid verdicts with Wilson 95% score intervals; errored verdicts are excluded "
        "from n and counted, never scored as 0.",
        "Two separate Wilson intervals at n=125 cannot resolve gaps under about ten points; whether a difference is "
        "real is answered by the paired test on the same tasks: the exact McNemar test (binomial test on the "
        f"discordant tasks) and a percentile paired bootstrap interval of the difference ({n_boot} resamples of "
        f"tasks, seed {seed}).",
        "Across all pairs of configurations, p-values are adjusted with Holm (family-wise error) and "
        "Benjamini–Hochberg (false discovery rate); '*' marks Holm-adjusted p < 0.05.",
        EXCLUSION_NOTE,
    ]


def _headline(runset: RunSet) -> list[str]:
    runs = list(runset.runs)
    lines = [f"{len(runs)} configuration(s) from {runset.origin}; "
             f"{sum(r.metrics.n_tasks for r in runs)} task records, {sum(r.metrics.n_errors for r in runs)} errored."]
    best = best_retrieval(runs)
    if best is not None:
        a = best.metrics.rates["application"]
        lines.append(f"Best retrieval configuration by application: {best.label} ({a.pct:.1f}%, "
                     f"Wilson [{a.ci[0]:.1f}, {a.ci[1]:.1f}]).")
    for r in runs:
        if r.config.system in ("backbone", "always_in_state"):
            a = r.metrics.rates["application"]
            if a.n:
                lines.append(f"{r.label}: application {a.pct:.1f}% ({a.successes}/{a.n}).")
    lines += [f"Skipped: {s}" for s in runset.skipped]
    return lines


def _markdown(runset: RunSet, sections: list[Section], n_boot: int, seed: int) -> str:
    parts = ["# InMind analysis report", "", *[f"- {x}" for x in _headline(runset)], ""]
    for sec in sections:
        parts += [f"## {sec.title}", ""]
        if sec.text:
            parts += [sec.text, ""]
        for t in sec.tables:
            parts += [f"**{t.caption}**", "", t.markdown(), ""] + ([t.note, ""] if t.note else [])
        parts += [f"![{f}](plots/{f}.png)" for f in sec.figures] + ([""] if sec.figures else [])
    parts += ["## Methods", "", *[f"- {x}" for x in _methods(n_boot, seed)], ""]
    return "\n".join(parts)


_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:2em auto;max-width:1400px;
padding:0 1em;color:#222;line-height:1.4}
h1{font-size:1.6em}h2{font-size:1.25em;border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:2em}
table.t{border-collapse:collapse;font-size:.8em;margin:.6em 0}
table.t th,table.t td{border:1px solid #ddd;padding:.25em .5em;text-align:center;white-space:nowrap}
table.t td:first-child,table.t th:first-child{text-align:left}
table.t tr:nth-child(even){background:#f7f7f7}
.cap{font-weight:600;margin-top:1.2em}.note{color:#555;font-size:.85em;max-width:1100px}
.scroll{overflow-x:auto}figure{margin:1em 0}img{max-width:100%;border:1px solid #eee}
details summary{cursor:pointer;color:#225;margin:.5em 0}
"""


def _html_table(t: Table, collapsed: bool = False) -> str:
    body = t.display.to_html(index=False, escape=True, border=0, classes="t", na_rep="–")
    inner = (f'<div class="cap">{html.escape(t.caption)}</div><div class="scroll">{body}</div>'
             + (f'<p class="note">{html.escape(t.note)}</p>' if t.note else "")
             + f'<p class="note">Files: tables/{t.name}.csv, .md, .tex</p>')
    if collapsed:
        return f"<details><summary>{html.escape(t.caption)}</summary>{inner}</details>"
    return inner


def _html(runset: RunSet, sections: list[Section], rep: Report, n_boot: int, seed: int) -> str:
    now = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    parts = ["<!doctype html><html><head><meta charset='utf-8'><title>InMind analysis report</title>",
             f"<style>{_CSS}</style></head><body>", "<h1>InMind analysis report</h1>",
             f"<p class='note'>Generated {now} from {html.escape(runset.origin)}.</p><ul>"]
    parts += [f"<li>{html.escape(x)}</li>" for x in _headline(runset)] + ["</ul>"]
    for sec in sections:
        parts.append(f"<h2>{html.escape(sec.title)}</h2>")
        if sec.text:
            parts.append(f"<p>{html.escape(sec.text)}</p>")
        for i, t in enumerate(sec.tables):
            parts.append(_html_table(t, collapsed=t.name.startswith("pairwise_") and i > 0))
        for name in sec.figures:
            png = next(p for p in rep.figures[name] if p.suffix == ".png")
            b64 = base64.b64encode(png.read_bytes()).decode("ascii")
            parts.append(f"<figure><img alt='{html.escape(name)}' src='data:image/png;base64,{b64}'>"
                         f"<figcaption class='note'>plots/{name}.png, plots/{name}.svg</figcaption></figure>")
    parts.append("<h2>Methods</h2><ul>" + "".join(f"<li>{html.escape(x)}</li>" for x in _methods(n_boot, seed))
                 + "</ul></body></html>")
    return "\n".join(parts)


def publish(runset: RunSet, out: Path | str) -> list[str]:
    """Log the report directory to every MLflow parent (sweep) run of the run set, under ``analysis/``.
    Returns the run ids written to (none for a sweep directory or runs without a parent)."""
    if not runset.tracking_uri or not runset.parent_run_ids:
        return []
    from inmind_exp import tracking

    client = tracking.MlflowClient(tracking_uri=runset.tracking_uri)
    for rid in runset.parent_run_ids:
        client.log_artifacts(rid, str(out), artifact_path=ARTIFACT_DIR)
        client.set_tag(rid, "inmind.report", f"{ARTIFACT_DIR}/report.html")
    return list(runset.parent_run_ids)
