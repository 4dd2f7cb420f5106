"""Figures of a run set with matplotlib's Agg backend, each saved as PNG and SVG (``FORMATS``; the end-of-sweep
report draws PNG only): application against target recall, naive against indirect application, a per-domain heat map,
and the embedding comparison of Section 4.5.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from inmind_exp.records import DOMAINS  # noqa: E402

from analysis.caveats import FLAG  # noqa: E402
from analysis.compare import compare, outcome  # noqa: E402
from analysis.load import EMBEDDING_ORDER, Run  # noqa: E402
from analysis.breakdowns import embedding_groups  # noqa: E402
from analysis.table import METRIC_TITLES, fmt_p  # noqa: E402

plt.rcParams.update({"svg.hashsalt": "inmind", "font.size": 9})
_METADATA = {"png": {"Software": None}, "svg": {"Date": None}}


#: the formats ``save`` writes by default: PNG (embedded in report.html, shown by MLflow) and SVG (vector, for papers)
FORMATS: tuple[str, ...] = ("png", "svg")


def save(fig: Figure, directory: Path, name: str, formats: Sequence[str] = FORMATS) -> list[Path]:
    """Write ``name.<format>`` for each of ``formats`` (of ``FORMATS``) and close the figure; a file of another
    format of ``name`` left by an earlier save is removed, so that no stale figure sits beside a fresh one. The tight
    bounding box (what ``bbox_inches="tight"`` computes, padded by ``savefig.pad_inches``) is laid out once for all
    the files instead of once per file."""
    unknown = [f for f in formats if f not in FORMATS]
    if unknown or not formats:
        raise ValueError(f"figure formats {list(formats)}: choose from {list(FORMATS)}")
    directory.mkdir(parents=True, exist_ok=True)
    fig.draw_without_rendering()
    bbox = fig.get_tightbbox(fig.canvas.get_renderer()).padded(plt.rcParams["savefig.pad_inches"])
    paths = []
    for ext in FORMATS:
        path = directory / f"{name}.{ext}"
        if ext in formats:
            fig.savefig(path, dpi=150, bbox_inches=bbox, metadata=_METADATA[ext])
            paths.append(path)
        else:
            path.unlink(missing_ok=True)
    plt.close(fig)
    return paths


def _err(rate) -> tuple[float, float, float]:  # (value, minus, plus) in percent
    if not rate.n:
        return (math.nan, 0.0, 0.0)
    lo, hi = rate.ci  # at 0 successes the Wilson lower bound is ~1e-18, not 0: clamp so no bar is negative
    return (rate.pct, max(0.0, rate.pct - lo), max(0.0, hi - rate.pct))


def _colours(runs: Sequence[Run]) -> dict[str, tuple[float, ...]]:
    systems = list(dict.fromkeys(r.config.system for r in runs))
    cmap = plt.get_cmap("tab10" if len(systems) <= 10 else "tab20")
    return {s: cmap(i % cmap.N) for i, s in enumerate(systems)}


_MARKERS = ["o", "s", "^", "D", "v", "P", "X"]


#: Points closer than this (percentage points on both axes) share one label instead of overprinting.
LABEL_TOLERANCE = 3.0


def label_clusters(points: Sequence[tuple[float, float]], tol: float = LABEL_TOLERANCE) -> list[list[int]]:
    """Indices of ``points`` grouped so that points within ``tol`` of a group's first point share one label
    (greedy, in order); coinciding points always end up in the same group."""
    groups: list[list[int]] = []
    for i, (x, y) in enumerate(points):
        for g in groups:
            gx, gy = points[g[0]]
            if abs(x - gx) <= tol and abs(y - gy) <= tol:
                g.append(i)
                break
        else:
            groups.append([i])
    return groups


def app_vs_recall(runs: Sequence[Run]) -> Figure:
    """Application against answer-blind target recall per configuration, with Wilson 95% bars on both axes.

    Points are numbered and the numbers explained in a key beside the axes; points that coincide (or nearly) get
    one combined number label ("1,3"), so labels never overprint however many configurations tie.
    """
    colours = _colours(runs)
    embeddings = list(dict.fromkeys(r.config.embedding for r in runs))
    fig, ax = plt.subplots(figsize=(6.5, 5.0))
    shown: list[tuple[Run, float, float]] = []
    for run in runs:
        x, xm, xp = _err(run.metrics.rates["target_recall"])
        y, ym, yp = _err(run.metrics.rates["application"])
        if math.isnan(x) or math.isnan(y):
            continue
        ax.errorbar(x, y, xerr=[[xm], [xp]], yerr=[[ym], [yp]], fmt=_MARKERS[embeddings.index(run.config.embedding)
                    % len(_MARKERS)], color=colours[run.config.system], capsize=2, ms=6, alpha=0.9, lw=1)
        shown.append((run, x, y))
    for group in label_clusters([(x, y) for _, x, y in shown]):
        _, x, y = shown[group[0]]
        left = x > 90  # near the right edge: label to the left of the point so it stays inside the axes
        ax.annotate(",".join(str(i + 1) for i in group), (x, y), fontsize=7, xytext=(-4 if left else 4, 4),
                    textcoords="offset points", ha="right" if left else "left", annotation_clip=False)
    key = "\n".join(f"{i + 1}  {run.label}" for i, (run, _, _) in enumerate(shown))
    ax.text(1.03, 1.0, key, transform=ax.transAxes, fontsize=6, va="top", ha="left", family="monospace")
    ax.plot([0, 100], [0, 100], ls=":", c="grey", lw=1)
    ax.set(xlim=(-2, 102), ylim=(-2, 102), xlabel=f"{METRIC_TITLES['target_recall']}, %", ylabel="Application, %",
           title="Application vs. target recall (Wilson 95% intervals)")
    handles = [plt.Line2D([], [], color=c, marker="o", ls="", label=s) for s, c in colours.items()]
    handles += [plt.Line2D([], [], color="k", marker=_MARKERS[i % len(_MARKERS)], ls="", label=e)
                for i, e in enumerate(embeddings)]
    ax.legend(handles=handles, fontsize=7, loc="upper left", frameon=False)
    return fig


def naive_vs_indirect(runs: Sequence[Run]) -> Figure:
    """Direct (naive) recall against indirect application per configuration: the paper's headline gap."""
    fig, ax = plt.subplots(figsize=(7.0, 0.35 * len(runs) + 1.4))
    ys = np.arange(len(runs))[::-1]
    for y, run in zip(ys, runs):
        n, nm, np_ = _err(run.metrics.rates["naive"])
        a, am, ap = _err(run.metrics.rates["application"])
        if not math.isnan(n) and run.config.control != "in_context":  # its naive: in context, no recall (as in tables)
            ax.plot([n, a], [y, y], c="lightgrey", lw=2, zorder=1)
            ax.errorbar(n, y, xerr=[[nm], [np_]], fmt="o", c="tab:blue", capsize=2, ms=5, zorder=2)
        ax.errorbar(a, y, xerr=[[am], [ap]], fmt="s", c="tab:red", capsize=2, ms=5, zorder=2)
    ax.set_yticks(ys, [r.label for r in runs], fontsize=7)
    ax.set(xlim=(-2, 102), xlabel="%", title="Naive (direct) recall vs. indirect application, Wilson 95% intervals")
    ax.legend(handles=[plt.Line2D([], [], c="tab:blue", marker="o", ls="", label="Naive"),
                       plt.Line2D([], [], c="tab:red", marker="s", ls="", label="Application (indirect)")],
              fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)  # beside: never on the
    # x label (below the axes it overprinted "%")
    ax.grid(axis="x", alpha=0.3)
    return fig


def domain_heatmap(runs: Sequence[Run], metric: str = "application") -> Figure:
    """Configurations × domains, coloured by the rate, annotated with successes/valid verdicts."""
    present = {r.domain for run in runs for r in run.records}
    domains = [d for d in DOMAINS if d in present] + sorted(present - set(DOMAINS))
    grid = np.full((len(runs), len(domains)), np.nan)
    text = [["" for _ in domains] for _ in runs]
    for i, run in enumerate(runs):
        for j, d in enumerate(domains):
            vals = [v for v in (outcome(r, metric) for r in run.records if r.domain == d) if v is not None]
            if vals:
                grid[i, j] = 100.0 * sum(vals) / len(vals)
                text[i][j] = f"{sum(vals)}/{len(vals)}"
    fig, ax = plt.subplots(figsize=(0.8 * len(domains) + 3.5, 0.35 * len(runs) + 1.8))
    im = ax.imshow(np.ma.masked_invalid(grid), cmap="viridis", vmin=0, vmax=100, aspect="auto")
    for i in range(len(runs)):
        for j in range(len(domains)):
            if text[i][j]:
                ax.text(j, i, text[i][j], ha="center", va="center", fontsize=6,
                        color="white" if grid[i, j] < 60 else "black")
    ax.set_xticks(range(len(domains)), [d.replace("_", " ") for d in domains], rotation=40, ha="right", fontsize=7)
    ax.set_yticks(range(len(runs)), [r.label for r in runs], fontsize=7)
    fig.colorbar(im, ax=ax, label=f"{METRIC_TITLES[metric]}, %")
    ax.set_title(f"{METRIC_TITLES[metric]} by domain (successes/valid)")
    return fig


def embedding_comparison(runs: Sequence[Run]) -> Figure | None:
    """Per system, target recall and application under each embedding (Section 4.5: MiniLM vs emb3), with Wilson
    bars; the application panel notes the paired exact McNemar p between the first two embeddings. Only systems
    that use an embedding appear (``breakdowns.embedding_groups``); None when there are none to compare."""
    groups = embedding_groups(runs)
    if not groups:
        return None
    embeddings = sorted({r.config.embedding for g in groups.values() for r in g},
                        key=lambda e: (EMBEDDING_ORDER.get(e, 9), e))
    cmap = plt.get_cmap("Set2")
    keys = list(groups)
    width = 0.8 / len(embeddings)
    systems = [k.split("/")[0] for k in keys]
    names = systems if len(set(systems)) == len(systems) else ["/".join(k.split("/")[:3]) for k in keys]
    fig, axes = plt.subplots(1, 2, figsize=(max(7.0, 1.3 * len(keys) * 2), 4.2), sharey=True)
    for ax, metric in zip(axes, ("target_recall", "application")):
        top = 0.0
        for j, emb in enumerate(embeddings):
            xs, ys, lo, hi = [], [], [], []
            for i, k in enumerate(keys):
                run = next((r for r in groups[k] if r.config.embedding == emb), None)
                if run is None:
                    continue
                v, m, p = _err(run.metrics.rates[metric])
                xs.append(i + (j - (len(embeddings) - 1) / 2) * width)
                ys.append(v)
                lo.append(m)
                hi.append(p)
                top = max(top, v + p if not math.isnan(v) else 0.0)
            ax.bar(xs, ys, width, yerr=[lo, hi], capsize=2, color=cmap(j), label=emb)
        if metric == "application":
            for i, k in enumerate(keys):
                a, b = groups[k][0], groups[k][1]
                c = compare(b, a, metric)
                if c.n:
                    mark = FLAG if c.degenerate else ""
                    ax.text(i, top + 3, f"Δ{c.diff:+.1f}{mark}\np={fmt_p(c.p_exact)}", ha="center", fontsize=6)
        ax.set_xticks(range(len(keys)), names, rotation=30, ha="right")
        ax.set_title(METRIC_TITLES[metric])
        ax.set_ylim(0, min(105.0, max(10.0, top + 15)))
    axes[0].set_ylabel("%")
    axes[0].legend(fontsize=7, title="embedding", title_fontsize=7)
    fig.suptitle("Embedding comparison per system (Wilson 95% bars; paired McNemar p for the application change)")
    fig.tight_layout()
    return fig


def forest(runs: Sequence[Run]) -> Figure:
    """The headline as a forest plot: application and target recall per configuration, each with its Wilson 95%
    interval, in the tables' row order on a shared axis of labels. A configuration whose fact-write fault rate is
    above ``inmind_exp.display.headline.FACT_WRITE_FAULT_LIMIT`` is drawn hollow and its label carries the flag."""
    from inmind_exp.display.headline import FACT_WRITE_FAULT_LIMIT, FAULT_FLAG

    from analysis.headline import flagged

    fig, axes = plt.subplots(1, 2, sharey=True, figsize=(9.0, 0.32 * len(runs) + 1.5))
    ys = np.arange(len(runs))[::-1]
    bad = [flagged(r) for r in runs]
    for ax, metric, colour in zip(axes, ("application", "target_recall"), ("tab:red", "tab:blue")):
        for y, run, hollow in zip(ys, runs, bad):
            v, vm, vp = _err(run.metrics.rates[metric])
            if math.isnan(v):
                ax.text(1, y, "not measured", va="center", fontsize=6, color="grey")
                continue
            ax.errorbar(v, y, xerr=[[vm], [vp]], fmt="o", color=colour, mfc="white" if hollow else colour,
                        capsize=2, ms=5, lw=1)
        ax.set(xlim=(-2, 102), xlabel=f"{METRIC_TITLES[metric]}, %")
        ax.grid(axis="x", alpha=0.3)
    axes[0].set_yticks(ys, [f"{r.label} {FAULT_FLAG}" if b else r.label for r, b in zip(runs, bad)], fontsize=7)
    axes[0].set_ylim(-0.7, len(runs) - 0.3)
    title = "Application and target recall per configuration, Wilson 95% intervals"
    if any(bad):
        title += f"\n(hollow, {FAULT_FLAG}: fact-write fault rate above {FACT_WRITE_FAULT_LIMIT:.0f}%)"
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    return fig


def delta_forest(runs: Sequence[Run]) -> Figure | None:
    """The paired Δ of every configuration against the best retrieval configuration (``tables.best_retrieval``), on
    application and target recall: the difference over shared valid tasks with its 95% Bonett–Price interval and
    the exact McNemar p, Holm-adjusted over all pairs as in the pairwise matrix (``pairwise.holm_by_pair``). None when
    there is no reference or nothing to compare it with."""
    from analysis.tables import best_retrieval
    from analysis.pairwise import holm_by_pair

    ref = best_retrieval(runs)
    others = [r for r in runs if ref is not None and r is not ref]
    if not others:
        return None
    runs = list(runs)
    j = next(k for k, r in enumerate(runs) if r is ref)
    index = [next(k for k, r in enumerate(runs) if r is run) for run in others]
    adjusted = len(runs) > 2
    fig, axes = plt.subplots(1, 2, sharey=True, figsize=(9.0, 0.32 * len(others) + 1.6))
    ys = np.arange(len(others))[::-1]
    for ax, metric, colour in zip(axes, ("application", "target_recall"), ("tab:red", "tab:blue")):
        holm_p = holm_by_pair(runs, metric)
        for y, run, i in zip(ys, others, index):
            c = compare(run, ref, metric)
            if not c.n:
                ax.text(-95, y, "no shared valid task", va="center", fontsize=6, color="grey")
                continue
            ax.errorbar(c.diff, y, xerr=[[c.diff - c.ci_low], [c.ci_high - c.diff]], fmt="o", color=colour,
                        capsize=2, ms=5, lw=1)
            ax.annotate(f"p={fmt_p(holm_p[i, j])}", (c.diff, y), xytext=(0, 5), textcoords="offset points",
                        ha="center", va="bottom", fontsize=6)  # above the point: inside the panel at any Δ
        ax.axvline(0, color="grey", lw=1, ls=":")
        ax.set(xlim=(-105, 105), xlabel=f"Δ {METRIC_TITLES[metric]}, points")
        ax.grid(axis="x", alpha=0.3)
    from inmind_exp.display.headline import FAULT_FLAG

    from analysis.headline import flagged

    axes[0].set_yticks(ys, [f"{r.label} {FAULT_FLAG}" if flagged(r) else r.label for r in others], fontsize=7)
    axes[0].set_ylim(-0.7, len(others) - 0.2)
    test = "exact McNemar p, Holm-adjusted over all pairs (as in the matrix)" if adjusted else "exact McNemar p"
    fig.suptitle(f"Paired Δ against {ref.label} (best retrieval), 95% Bonett–Price intervals, {test}", fontsize=9)
    fig.tight_layout()
    return fig
