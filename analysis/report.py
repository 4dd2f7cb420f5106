"""Everything about a run set in one directory: tables (Markdown, LaTeX, CSV), plots (PNG, SVG), a Markdown digest
and a single self-contained HTML report with the plots embedded as base64; optionally logged to the MLflow parent
run(s) of the sweep as artifacts under ``analysis/``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


from analysis import plots
from analysis.audit import audit_human, corrected_rates, judge_agreement, judge_pairs, read_labels
from analysis.caveats import FLAG_NOTE, MIN_N, detectable, n_range, wilson_halfwidth_pp
from analysis.compare import EXCLUSION_NOTE
from analysis.headline import headline_table
from analysis.load import Run, RunSet
from analysis.notices import valid_sizes, warnings
from analysis.official import paper_table, protocol_table
from analysis.stats import MIN_CLUSTERS
from analysis.viewer import VIEWER_FILE
from analysis.table import CLUSTER_NOTE, Table
from analysis.breakdowns import by_domain, by_embedding, by_injection
from analysis.tables import judge_self_audit, retrieval_leaders, table1, table2
from analysis.pairwise import pairwise, verdicts
from analysis.report_html import (METHODS, VERDICT_TITLE, Notes, Section, contents, markdown_note,
                                  render, shown)

PAIRED_METRICS: tuple[str, ...] = ("application", "target_recall")


@dataclass
class Report:
    out: Path
    html: Path
    markdown: Path
    tables: dict[str, Table] = field(default_factory=dict)
    figures: dict[str, list[Path]] = field(default_factory=dict)
    files: list[Path] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


PAPER_TITLE = "The paper's reported figures beside ours"


def build(runset: RunSet, out: Path | str, labels: Path | str | None = None,
          formats: tuple[str, ...] = plots.FORMATS) -> Report:
    """Compute every table and plot of ``runset`` and write them (the plots in ``formats``), the digest and the HTML
    report under ``out``."""
    out = Path(out)
    runs = list(runset.runs)
    rep = Report(out=out, html=out / "report.html", markdown=out / "report.md", warnings=warnings(runset))
    sections: list[Section] = []

    sections.append(Section("Headline", (headline_table(runs),), text=(
        f"Every metric, the Δ columns and the judge audit: Table 1 below. Per task ({VIEWER_FILE}): the fact, each "
        "configuration's context, answers and verdict reasons side by side.")))
    paper = paper_table(runs)  # for runs of the official tasks: right under the headline, row by row the paper's
    if paper is not None:
        sections.append(Section(PAPER_TITLE, (paper,)))
    t1 = table1(runs)
    sections.append(Section("Table 1: all configurations", (t1,)))
    from analysis.controls import control_pairwise, controls_table

    if (ctl := controls_table(runs)) is not None:
        sections.append(Section("Negative controls: application beside over-application", (
            ctl, *control_pairwise(runs))))
    sections.append(Section("Protocol fidelity and the official aggregate", (protocol_table(runs),)))
    if paper is None:
        sections.append(Section(PAPER_TITLE, text="Not shown: no run of the official tasks (dataset=official)."))
    sections.append(Section("Judge audit without labels: the judge against the judge-free bounds",
                            (judge_self_audit(runs),)))
    t2 = table2(runs)
    if t2 is not None:
        sections.append(Section("Table 2: always-in-state against the best retrieval configuration", (t2,)))
    else:
        sections.append(Section("Table 2", text="Not produced: it needs an always_in_state run and a retrieval run."))
    for metric in PAIRED_METRICS:
        long, matrix = pairwise(runs, metric)
        sections.append(Section(f"Paired comparisons: {matrix.caption.split(':')[0]}", (matrix, long)))
    sections.append(Section("Breakdown by domain", (by_domain(runs, "application"), by_domain(runs, "target_recall"))))
    sections.append(Section("Breakdown by injection position",
                            (by_injection(runs, "application"), by_injection(runs, "target_recall"))))

    figs = {"forest": plots.forest(runs), "app_vs_recall": plots.app_vs_recall(runs), "naive_vs_indirect": plots.naive_vs_indirect(runs),
            "domain_heatmap": plots.domain_heatmap(runs, "application")}
    delta = plots.delta_forest(runs)
    if delta is not None:
        figs["delta_forest"] = delta
    emb = plots.embedding_comparison(runs)
    if emb is not None:
        figs["embedding_comparison"] = emb
    for name, fig in figs.items():
        rep.figures[name] = plots.save(fig, out / "plots", name, formats)
    headline_figs = tuple(f for f in ("forest", "delta_forest") if f in rep.figures)
    sections[0] = Section(sections[0].title, sections[0].tables, headline_figs, sections[0].text)
    sections.append(Section("Plots", figures=tuple(f for f in rep.figures if f not in ("embedding_comparison",
                                                                                        *headline_figs))))
    emb_table = by_embedding(runs)
    if emb_table is not None:
        sections.append(Section("Embedding comparison (Section 4.5)", (emb_table,), ("embedding_comparison",)))

    audit_tables: list[Table] = []
    if labels is not None:
        human = read_labels(labels)
        audit_tables += [audit_human(human, runs), corrected_rates(human, runs)]
    pairs = judge_pairs(runs)
    if pairs:
        audit_tables.append(judge_agreement(pairs))
    sections.append(Section("Judge audit against human labels and other judge models", tuple(audit_tables),
                            text="" if audit_tables else ("No human labels given (--labels FILE) and no pair of runs "
                                                          "differing only in the judge model.")))

    if runset.rejudged:
        from analysis import judge_panel
        from analysis.judge_panel import panel

        sections.append(Section("Judge robustness: stored answers re-judged (python -m analysis rejudge)",
                                (panel(runs, runset.rejudged), *judge_panel.tables(runs, runset.rejudged))))

    for sec in sections:
        for t in sec.tables:
            rep.tables[t.name] = t
            rep.files += t.write(out / "tables")
    rep.files += [p for ps in rep.figures.values() for p in ps]
    rep.markdown.write_text(_markdown(runset, sections, rep), encoding="utf-8")
    rep.html.write_text(render(runset, sections, rep.figures, out, _headline(runset), _methods(runs)),
                        encoding="utf-8")
    rep.files += [rep.markdown, rep.html]
    return rep


def _methods(runs: list[Run]) -> list[str]:
    sizes = [n for _, n in valid_sizes(runs)]
    n_text = n_range(sizes)
    smallest = min((n for n in sizes if n), default=0)
    resolution = (f"With n={n_text} valid tasks per configuration, a Wilson interval at 50% is about "
                  f"±{wilson_halfwidth_pp(smallest):.1f} points, and {detectable(smallest)}"
                  if smallest else "No configuration has a valid task, so nothing can be told apart")
    return [
        "Rates are percentages with Wilson 95% score intervals. A task that failed is left out of every rate of its "
        "row; a failed verdict leaves the task out of that verdict's rate only, as the release scores each metric "
        "on its own. Both are listed under Table 1, never scored as 0.",
        "Target recall is measured three ways. The judge reads the indirect context answer-blind. Two judge-free "
        "bounds need no model: provenance (union: upper bound) (an item derived in any way from the injected fact "
        "turn reached the answerer) is an upper bound, because when it is 0 the fact cannot be in the context, "
        "while an item an LLM rewrote from the fact (a profile, a summary, the always-in-state file) may have "
        "lost it; verbatim (the fact turn's text appears in the context) is a lower bound, because a system that "
        "stores a paraphrase scores 0 by construction. A target-recall verdict above the upper bound or below the "
        "lower bound is certainly wrong, and so is an application verdict of 1 where the upper bound is 0 (the "
        "paper's main judge error is application false positives); those tasks are listed in the label-free "
        "judge audit. Provenance (origin) is no bound and is not used there.",
        "Provenance is decided on origin, the same rule for every system: an item's origin is the turns whose "
        "content it states; what it only inherited (an evolution that echoed it unchanged, a merge, a profile or "
        "summary rewrite, a chain overview) counts only in the union (the upper bound), reported beside it. "
        "Visible-state "
        "recall says whether the fact's origin reached the query-independent part of the context (a profile, a "
        "short-term history, the always-in-state file), retrieved recall whether it reached the part retrieved "
        "for the query. Context tokens (characters / 4 of the indirect answer's context) say how much each system "
        "showed, which moves target recall directly.",
        f"{resolution} (each comparison's minimum detectable difference at its own discordance is in the pairwise tables' MDD "
        "column and in `compare`). Whether a difference is real is answered by the paired test on the same tasks: the "
        "exact McNemar test (binomial test on the discordant tasks; the mid-p version beside it in the pairwise "
        "tables) and the Bonett–Price adjusted Wald interval for a paired difference of proportions (one task added "
        "to each discordant cell; Fagerland, Lydersen & Laake 2014), which covers close to 95% where a percentile "
        "bootstrap of the task differences does not (about 91% at 2%/0% discordance, n = 125) and is never of zero "
        "width. Newcombe's hybrid score interval covers only 92% there when about half the tasks score 1 in both "
        "runs, so it is not used.",
        "The per-task interval (Bonett–Price above, and the exact McNemar test) treats the tasks as independent. "
        "Tasks of one domain share a fact type and a bridge (in the official release 46 of 125 tasks are health "
        "tasks), so which question is asked matters, and each gets its own answer. For this design (these domains "
        "at these sizes, the estimand of the tables) the within-domain interval is a stratified Bonett–Price "
        "interval: only the variation within domains counts. Whether a difference would hold on another mix of "
        "domains is answered by the difference with each domain left out in turn (its range, and the difference "
        "without the health domain), and by an approximate CR2 cluster-robust interval with Bell–McCaffrey degrees "
        f"of freedom, given only from {MIN_CLUSTERS} domains up (a percentile cluster bootstrap was "
        "anti-conservative with 10 unequal domains, 87–90%, and returned the range of the domain means with 3). "
        "Per-domain rates carry Wilson 95% intervals (Breakdown by domain), with the domain-macro average and "
        "health against the other domains beside the pooled rate; domains are the `domain` strings the records "
        "carry.",
        f"Below n={MIN_N} valid tasks per configuration the report warns at the top; a ranking at such n is an "
        f"anecdote. {FLAG_NOTE} A tie at the top is reported as a tie.",
        "Across all pairs of configurations, p-values are adjusted with Holm (family-wise error) and "
        "Benjamini–Hochberg (false discovery rate); '*' marks Holm-adjusted p < 0.05.",
        "Memory faults: tasks on which the memory system fell back (malformed or empty reply, unparsed tool call, "
        "empty extraction ...), and separately those with a fallback while writing the injected exchange; a "
        "system keeps its upstream behaviour but the fault is counted, never hidden.",
        EXCLUSION_NOTE,
        f"Paired tables: {CLUSTER_NOTE}",
    ]


def _headline(runset: RunSet) -> list[str]:
    runs = list(runset.runs)
    lines = [f"{len(runs)} configuration(s) from {runset.origin}; "
             f"{sum(r.metrics.n_tasks for r in runs)} task records, {sum(r.metrics.n_errors for r in runs)} failed, "
             f"{sum(len(r.metrics.excluded) for r in runs)} left out of every rate (failed), "
             f"{sum(len(v) for r in runs for v in r.metrics.verdict_errors.values())} failed verdict(s) left out of "
             "their own rate only."]
    leaders = retrieval_leaders(runs)
    if leaders:
        a = leaders[0].metrics.rates["application"]
        names = ", ".join(r.label for r in leaders)
        if a.successes == 0:
            lines.append(f"No retrieval configuration applied the fact on any task (application 0% for {names}); "
                         "there is no best retrieval configuration.")
        elif len(leaders) > 1:
            lines.append(f"Highest application among retrieval configurations: a tie between {names} "
                         f"({a.pct:.1f}%).")
        else:
            lines.append(f"Highest application among retrieval configurations: {names} ({a.pct:.1f}%, "
                         f"Wilson [{a.ci[0]:.1f}, {a.ci[1]:.1f}], n={a.n}).")
    for r in runs:
        if r.config.control in ("in_context", "always_in_state"):
            a = r.metrics.rates["application"]
            if a.n:
                lines.append(f"{r.label}: application {a.pct:.1f}% ({a.successes}/{a.n}).")
    lines += [f"Skipped: {s}" for s in runset.skipped]
    return lines


def _markdown(runset: RunSet, sections: list[Section], rep: Report) -> str:
    parts = ["# InMind analysis report", ""]
    parts += [f"> **Warning.** {w}\n" for w in warnings(runset)]
    if lines := verdicts(list(runset.runs)):
        parts += [f"**{VERDICT_TITLE}**", "", *[f"- {v.line()}" for v in lines], ""]
        if any(v.comparison.degenerate for v in lines):
            parts += [FLAG_NOTE, ""]
    parts += [*[f"- {x}" for x in _headline(runset)], ""]
    parts += ["**Contents**", "", *[f"{i}. [{t}](#{a})" for i, (t, a) in enumerate(contents(sections), 1)], ""]
    notes = Notes()
    for sec in sections:
        parts += [f"## {sec.title}", ""]
        if sec.text:
            parts += [sec.text, ""]
        for t in sec.tables:
            note = markdown_note(t, notes)
            parts += [f"**{t.caption}**", "", t.markdown(), ""] + ([note, ""] if note else [])
        parts += [f"![{f}](plots/{shown(rep.figures[f]).name})" for f in sec.figures] + ([""] if sec.figures else [])
    parts += [f"## {METHODS}", "", *[f"- {x}" for x in _methods(list(runset.runs))], ""]
    return "\n".join(parts)
