"""Paired comparisons of configurations over the tasks both ran (Holm-adjusted per pair of systems), and the one-line
verdict of each comparison."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Sequence

import pandas as pd

from inmind_exp.display.headline import IN_CONTEXT

from analysis.caveats import FLAG
from analysis.compare import EXCLUSION_NOTE, Comparison, compare
from analysis.load import Run
from analysis.table import (ALPHA, CLUSTER_NOTE, METRIC_TITLES, Table, _comparison_row, flag_note,
                            fmt_delta, fmt_diff_ci, fmt_domain_cells, fmt_p)
from analysis.tables import _ids, best_retrieval
from analysis.stats import benjamini_hochberg, holm


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
                numeric, matrix, note=f"The CSV holds the differences; p-values, intervals and the notes on "
                f"them are in pairwise_{metric} (the table of all pairs).")
    return [long, mat]


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


def verdict_lines(comps: Sequence[Comparison], link: tuple[int, int]) -> str:
    """``compare``'s first lines: the verdict on each metric, application first, each with its discordant task ids
    (application's viewer links index the run set's order, as ``python -m analysis view`` over the same source
    does)."""
    out = []
    for c in sorted(comps, key=lambda c: c.metric != "application"):
        shown = link if c.metric == "application" else None  # the viewer's A/B filter is on application
        out.append(f"{METRIC_TITLES.get(c.metric, c.metric)}: {verdict_line(c, link=shown)}")
        for who, ids in (("A only", c.a_only_tasks), ("B only", c.b_only_tasks)):
            if ids:
                out.append(f"    {who}: {_ids(ids, where='compare --json')}")
    return "\n".join(out)
