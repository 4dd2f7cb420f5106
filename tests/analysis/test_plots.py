"""The headline forest plot, and that no plot's axis labels, titles, tick labels and legend overprint each other."""

from __future__ import annotations

import dataclasses

from analysis import plots
from inmind_exp.display.headline import FAULT_FLAG
from tests.analysis.conftest import build_runs
from tests.analysis.fixtures import SPECS, fixture_records, make_records


def overlaps(fig) -> list[tuple[str, str]]:
    """Pairs of overlapping text boxes (axis labels, titles, legends, tick labels; tick labels among themselves
    excepted, matplotlib spaces those) after drawing ``fig``."""
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    boxes = []
    for ax in fig.axes:
        for t in (ax.xaxis.label, ax.yaxis.label, ax.title):
            if t.get_text():
                boxes.append((f"label {t.get_text()[:20]}", t.get_window_extent(r)))
        if ax.get_legend():
            boxes.append(("legend", ax.get_legend().get_window_extent(r)))
        boxes += [(f"tick {t.get_text()[:20]}", t.get_window_extent(r))
                  for t in ax.get_xticklabels() + ax.get_yticklabels() if t.get_text()]
    if fig._suptitle is not None:
        boxes.append(("suptitle", fig._suptitle.get_window_extent(r)))
    return [(a, b) for i, (a, ba) in enumerate(boxes) for b, bb in boxes[i + 1:]
            if ba.overlaps(bb) and not (a.startswith("tick") and b.startswith("tick"))]


def test_forest_plot_of_the_headline():
    faulty = dataclasses.replace(SPECS[1], fact_fault_every=1)
    runs = build_runs({**fixture_records(SPECS[:1] + SPECS[2:]), faulty: make_records(faulty)})
    fig = plots.forest(runs)
    app, recall = fig.axes
    labels = [t.get_text() for t in app.get_yticklabels()]
    assert labels == [f"{r.label} {FAULT_FLAG}" if r.config.config_hash == faulty.config_hash else r.label
                      for r in runs]
    # one point per configuration per panel, at the rate, with the Wilson interval as its bar
    for ax, metric in ((app, "application"), (recall, "target_recall")):
        lines = [c for c in ax.containers]
        assert len(lines) == len(runs)
        for run, cont in zip(runs, lines):
            x = cont.lines[0].get_xdata()[0]
            assert abs(x - run.metrics.rates[metric].pct) < 1e-9
    assert "fact-write fault rate above" in fig._suptitle.get_text()
    assert overlaps(fig) == []
    plots.plt.close(fig)


def test_no_plot_overprints_its_labels():
    runs = build_runs(fixture_records(SPECS))
    for make in (plots.naive_vs_indirect, plots.app_vs_recall, plots.forest):
        fig = make(runs)
        assert overlaps(fig) == [], make.__name__
        plots.plt.close(fig)


def test_paired_delta_forest_against_the_best_retrieval_configuration():
    from analysis.compare import compare
    from analysis.tables import best_retrieval

    runs = build_runs(fixture_records(SPECS))
    ref = best_retrieval(runs)
    fig = plots.delta_forest(runs)
    app, _ = fig.axes
    others = [r for r in runs if r is not ref]
    assert [t.get_text().rstrip(" !") for t in app.get_yticklabels()] == [r.label for r in others]
    for run, cont in zip(others, app.containers):
        c = compare(run, ref, "application")
        assert abs(cont.lines[0].get_xdata()[0] - c.diff) < 1e-9
    assert ref.label in fig._suptitle.get_text() and overlaps(fig) == []
    plots.plt.close(fig)
    assert plots.delta_forest(runs[:1]) is None  # nothing to compare with
