"""Every table, breakdown and plot renders from the fixture records, with the numbers the records imply."""

from __future__ import annotations

import dataclasses
import math

import pandas as pd
import pytest

from inmind_exp.protocol.metrics import METRICS, compute
from inmind_exp.records import write_jsonl

from analysis import plots
from analysis.caveats import FLAG, FLAG_NOTE
from analysis.compare import compare, not_applicable, outcome
from analysis.stats import BONETT_PRICE
from analysis.load import find_run, load_sweep_dir
from analysis.tables import best_retrieval, judge_self_audit, table1, table2
from analysis.breakdowns import by_domain, by_embedding, by_injection, embedding_groups
from analysis.table import fmt_delta, fmt_p
from analysis.pairwise import pairwise
from tests.analysis.conftest import build_runs
from tests.analysis.fixtures import OLD_SPEC, SPECS, fixture_records, make_records, write_sweep

LABELS = ["backbone/minilm/middle/openai", "mem0/minilm/middle/openai", "mem0/emb3/middle/openai",
          "always_in_state/minilm/middle/openai"]


def test_load_sweep_dir_reads_jobs_and_ledger_only_configs(tmp_path):
    root = write_sweep(tmp_path / "sweep")
    extra = dataclasses.replace(SPECS[1], config_hash="1111" + "9" * 12)
    write_jsonl(root / "ledger" / f"{extra.config_hash}.jsonl", make_records(extra, n=5))
    rs = load_sweep_dir(root)
    assert [r.label for r in rs.runs] == [LABELS[0], LABELS[1], LABELS[2], "mem0/11119999", LABELS[3]]
    mem0 = rs.get("mem0/minilm/middle/openai")
    assert (mem0.config.embedding, mem0.config.injection, mem0.config.judge_model) == ("minilm", "middle", "gpt-5-mini")
    assert len(mem0.records) == 40 and rs.get("11111111").label == mem0.label  # by config-hash prefix
    assert rs.get("11119").status == "LEDGER_ONLY" and len(rs.get("11119").records) == 5
    with pytest.raises(ValueError, match="ambiguous"):
        rs.get("1111")  # a prefix of two config hashes
    with pytest.raises(ValueError, match="no run matches"):
        find_run(rs.runs, "nope")


def test_table1_matches_metrics_and_renders(runs, tmp_path):
    t = table1(runs)
    assert list(t.data["configuration"]) == LABELS
    mem0 = t.data.set_index("configuration").loc["mem0/minilm/middle/openai"]
    m = compute(list(runs[1].records))
    assert mem0["application"] == pytest.approx(m.rates["application"].pct)
    # a failed verdict is an error of its own metric: t003 (application) and t007 (target recall) leave only those
    failed = {"application", "target_recall"}
    assert all((mem0[f"{k}_n"], mem0[f"{k}_errors"]) == ((39, 1) if k in failed else (40, 0)) for k in METRICS)
    assert mem0["left_out_tasks"] == "" and mem0["n_tasks"] == 40
    # each Δ is paired over the tasks with both values: Application−Naive leaves t003 out, not t007
    both = [r for r in runs[1].records if r.task_id != "t003"]
    assert mem0["delta_application_naive"] == pytest.approx(
        100 * sum(outcome(r, "application") - outcome(r, "naive") for r in both) / 39)
    assert mem0["delta_application_naive"] == pytest.approx(m.deltas["delta_application_naive"])
    backbone = t.display.iloc[0]
    assert backbone["Naive"] == "–" and backbone["Δ Recall−Naive"] == "–"
    assert backbone["Naive recall, provenance (origin)"] == "–"
    row = t.display.set_index("Configuration").loc["mem0/minilm/middle/openai"]
    assert row["left out"] == "0" and row["judge FP / FN"] == "0 / 2"
    assert any("left out of the Application rate only (its verdict failed): t003" in x for x in t.items)
    # the fixture's records predate the context budget and the what-ran keys: the columns are there, unmeasured
    assert (row["context tokens"], row["what ran"]) == ("–", "–")
    assert row["Visible-state recall (provenance)"].startswith("0.0 ")  # a retrieval system: nothing visible
    assert (row["memory faults"], row["fact-write faults"]) == ("20.0 (8/40)", "10.0 (4/40)")  # every 5th / 10th task
    assert t.display.set_index("Configuration").loc["mem0/emb3/middle/openai", "judge FP / FN"] == "2 / 0"
    assert t.items == ("mem0/minilm/middle/openai: left out of the Application rate only (its verdict failed): t003",
                       "mem0/minilm/middle/openai: left out of the Target recall (judge) rate only (its verdict "
                       "failed): t007")
    md = t.markdown()
    assert md.count("\n") == 5
    assert "| Target recall (verbatim, lower bound) | Target recall, provenance (origin) |" in md
    assert "provenance is" not in md and "upper bound" in t.note and "lower bound" in t.note
    assert FLAG not in md and FLAG_NOTE not in t.note  # n=38-40 here: no interval is degenerate, so no † and no note
    assert r"\toprule" in t.latex() and r"always\_in\_state" in t.latex() and "$\\Delta$" in t.latex()
    md_path, tex_path, csv_path = t.write(tmp_path)
    text = md_path.read_text()
    assert text.startswith("**Table 1") and "- mem0/minilm/middle/openai: left out of the Application rate only (its verdict failed): t003" in text
    assert tex_path.read_text().startswith(r"\begin{table}")
    csv = pd.read_csv(csv_path)
    assert len(csv) == 4 and csv.set_index("configuration").loc[LABELS[1], "faults_malformed_reply"] == 8


def test_a_row_with_one_errored_verdict_leaves_that_rate_only():
    spec = SPECS[3]
    rows = make_records(spec, errors={"t005": "answer_only"})
    (run,) = build_runs({spec: rows})
    (full,) = build_runs({spec: make_records(spec)})
    data = table1([run]).data.iloc[0]
    assert all(data[f"{k}_n"] == (39 if k == "answer_only" else 40) for k in METRICS)
    kept = [r for r in full.records if r.task_id != "t005"]
    assert data["answer_only_k"] == sum(outcome(r, "answer_only") for r in kept)  # the rate over the other 39
    for k in METRICS:
        if k != "answer_only":
            assert data[f"{k}_k"] == full.metrics.rates[k].successes, k
    c = compare(run, full, "answer_only")
    assert c.n == 39 and c.excluded["error in A"] == 1
    assert compare(run, full, "application").n == 40


def test_old_records_without_provenance_or_faults_still_load(tmp_path):
    root = write_sweep(tmp_path / "sweep", SPECS + (OLD_SPEC,))
    rs = load_sweep_dir(root)
    old = rs.get("a_mem/minilm/middle/openai")
    assert {r.schema_version for r in old.records} == {1} and old.fault_metrics is None
    assert all(r.target_recall_provenance is None and r.faults == () for r in old.records)
    row = table1(rs.runs).display.set_index("Configuration").loc[old.label]
    assert row["Target recall, provenance (origin)"] == "–" and row["Naive recall, provenance (origin)"] == "–"
    assert (row["memory faults"], row["fact-write faults"]) == ("–", "–")  # not measured, not 0
    assert row["judge FP / FN"].startswith("– / ") and row["Target recall (verbatim, lower bound)"] != "–"
    audit = judge_self_audit(rs.runs).display.set_index("Configuration").loc[old.label]
    assert audit["certain FP (judge 1, union provenance 0)"] == "– (no provenance)"
    c = compare(old, rs.get("mem0/minilm/middle/openai"), "target_recall_provenance")
    assert c.n == 0 and c.excluded["not applicable"] == 40  # no provenance in the old records; no error either


def test_judge_self_audit_lists_certain_false_positives_and_negatives(runs):
    t = judge_self_audit(runs)
    data = t.data.set_index("configuration")
    for run in runs:
        audit = run.metrics.audit
        assert data.loc[run.label, "false_positive_tasks"] == ";".join(audit.false_positives)
        assert data.loc[run.label, "false_negative_tasks"] == ";".join(audit.false_negatives)
    emb3 = runs[2]
    fps = [r.task_id for r in emb3.records if outcome(r, "target_recall") == 1
           and r.target_recall_provenance == 0]
    assert len(fps) == 2 and data.loc[emb3.label, "false_positives"] == 2
    disp = t.display.set_index("Configuration")
    assert disp.loc[emb3.label, "FP tasks"] == ", ".join(fps)
    assert disp.loc[LABELS[1], "certain FN (judge 0, verbatim 1)"] == "2" and disp.loc[LABELS[1], "FN tasks"]
    assert data.loc[LABELS[1], "audited"] == 39  # t007's target-recall verdict failed: not audited
    assert data.loc[LABELS[1], "application_audited"] == 39  # t003's application verdict failed
    for run in runs:  # application audited too: verdict 1 with union provenance 0 is a certain false positive
        app_fp = tuple(r.task_id for r in run.records if outcome(r, "application") == 1
                       and r.target_recall_provenance_union == 0)
        assert run.metrics.audit.application_false_positives == app_fp
        assert data.loc[run.label, "application_false_positive_tasks"] == ";".join(app_fp)
    assert "union: upper bound" in t.note and "Provenance (origin) is no bound" in t.note


def test_table2_against_the_best_retrieval_configuration(runs):
    best = best_retrieval(runs)
    assert best is not None and best.config.system == "mem0" and best.config.is_retrieval
    apps = {r.label: r.metrics.rates["application"].pct for r in runs if r.config.is_retrieval}
    assert best.metrics.rates["application"].pct == max(apps.values())
    t = table2(runs)
    assert t is not None
    rows = list(t.display["Row"])
    assert rows[0].startswith("Backbone") and rows[1].startswith("Always-in-state") and rows[2].startswith("Best")
    assert rows[3].startswith("Δ paired") and "p=" in t.display.iloc[3]["Application"]
    app = t.data.set_index("metric").loc["application"]
    c = compare(runs[3], best, "application")
    assert app["diff_pp"] == pytest.approx(c.diff) and app["p_exact"] == pytest.approx(c.p_exact)
    assert table2([r for r in runs if r.config.system != "always_in_state"]) is None


def test_compare_pairs_tasks_and_excludes_errored_verdicts(runs):
    a, b = runs[1], runs[2]  # mem0/minilm has an errored application verdict on t003
    c = compare(a, b, "application")  # t007's target-recall verdict errored: not this metric's error
    assert c.n == 39 and c.excluded["error in A"] == 1 and c.n_excluded == 1
    kept = [t for t in sorted(a.by_task) if t != "t003"]
    xs = [outcome(a.by_task[t], "application") for t in kept]
    ys = [outcome(b.by_task[t], "application") for t in kept]
    assert c.rate_a == pytest.approx(100 * sum(xs) / 39) and c.rate_b == pytest.approx(100 * sum(ys) / 39)
    assert c.diff == pytest.approx(c.rate_a - c.rate_b) and c.ci_low <= c.diff <= c.ci_high
    assert c.both + c.a_only + c.b_only + c.neither == 39
    assert (c.a_only, c.b_only) == (len(c.a_only_tasks), len(c.b_only_tasks))
    assert all(outcome(a.by_task[t], "application") == 1 > outcome(b.by_task[t], "application") for t in c.a_only_tasks)
    same = compare(a, a, "application")  # no discordant task: an interval around 0, never [0, 0]
    assert (same.diff, same.p_exact, same.p_midp) == (0.0, 1.0, 1.0) and same.ci_low < 0.0 < same.ci_high
    assert not same.degenerate and math.isnan(same.mdd)
    naive = compare(runs[0], a, "naive")  # the backbone has no naive query
    assert naive.n == 0 and math.isnan(naive.p_exact) and naive.as_dict()["p_exact"] is None
    assert (naive.excluded["not applicable"], naive.excluded["error in B"]) == (40, 0)  # B's naive verdicts are fine
    assert not_applicable(runs[0].records[0], "naive") and not not_applicable(a.by_task["t003"], "naive")
    assert "excluded: 1 error in A" in c.summary()


def test_pairwise_matrix_with_multiple_comparison_correction(runs):
    long, matrix = pairwise(runs, "application")
    assert len(long.data) == 6
    assert (long.data["p_holm"] >= long.data["p_exact"] - 1e-12).all()
    assert (long.data["p_midp"] <= long.data["p_exact"] + 1e-12).all() and set(long.data["ci_method"]) == {BONETT_PRICE}
    assert (long.data["p_bh"] <= long.data["p_holm"] + 1e-12).all()
    num = matrix.data.set_index("row_minus_column")
    assert num.loc[LABELS[0], LABELS[1]] == pytest.approx(-num.loc[LABELS[1], LABELS[0]])
    assert matrix.display.iloc[0][LABELS[0]] == "—" and "*" in matrix.display.iloc[0][LABELS[1]]
    assert "| row − column |" in matrix.markdown() and r"\begin{tabular}" in matrix.latex()


def test_breakdowns_by_domain_and_injection(runs):
    dom = by_domain(runs, "application")
    assert dom.display.iloc[0]["Configuration"] == "tasks"
    extra = ("Configuration", "pooled", "domain-macro", "non-health")
    assert sum(int(v) for k, v in dom.display.iloc[0].items() if k not in extra) == 40
    assert dom.display.iloc[0]["pooled"] == "40"
    mem0 = dom.data[(dom.data["configuration"] == LABELS[1]) & ~dom.data["domain"].isin(extra)]
    assert mem0["n"].sum() == 39 and mem0["errors"].sum() == 1  # t003's application verdict: counted, not scored
    pooled = dom.data[(dom.data["configuration"] == LABELS[1]) & (dom.data["domain"] == "pooled")].iloc[0]
    assert pooled["n"] == 39 and pooled["pct"] == pytest.approx(runs[1].metrics.rates["application"].pct)
    late = dataclasses.replace(SPECS[1], config_hash="3" * 16, injection="late", session=40)
    more = build_runs({**fixture_records(SPECS), late: make_records(late)})
    inj = by_injection(more, "application")
    assert list(inj.display.columns) == ["System/embedding/LLM", "middle (session 21)", "late (session 41)"]
    row = inj.display.set_index("System/embedding/LLM").loc["mem0/minilm/openai"]
    assert row["middle (session 21)"].endswith("/39)") and row["late (session 41)"].endswith("/40)")
    assert set(inj.data["session"]) == {21, 41}


def test_every_plot_renders_png_and_svg(runs, tmp_path):
    figs = {"app_vs_recall": plots.app_vs_recall(runs), "naive_vs_indirect": plots.naive_vs_indirect(runs),
            "domain_heatmap": plots.domain_heatmap(runs), "embeddings": plots.embedding_comparison(runs)}
    for name, fig in figs.items():
        assert fig is not None, name
        png, svg = plots.save(fig, tmp_path, name)
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
        assert "<svg" in svg.read_text()[:500]
    assert set(embedding_groups(runs)) == {"mem0/middle/openai/gpt-5-mini"}
    assert plots.embedding_comparison([r for r in runs if r.config.embedding == "minilm"]) is None


def test_a_figure_saved_in_fewer_formats_leaves_no_stale_file_and_unknown_formats_are_refused(runs, tmp_path):
    """``save`` in PNG only (the end-of-sweep report) removes the SVG an earlier save of the same figure left, so the
    report directory never holds a figure of another run set; an unknown format is refused before anything is
    written. The command line's format list is the module's."""
    from analysis.__main__ import FIGURE_FORMATS

    assert FIGURE_FORMATS == plots.FORMATS
    png, svg = plots.save(plots.app_vs_recall(runs), tmp_path, "fig")
    assert png.is_file() and svg.is_file()
    assert plots.save(plots.app_vs_recall(runs), tmp_path, "fig", ("png",)) == [png]
    assert png.is_file() and not svg.exists()
    with pytest.raises(ValueError, match="pdf"):
        plots.save(plots.app_vs_recall(runs), tmp_path, "other", ("pdf",))
    assert not list(tmp_path.glob("other.*"))


def test_embedding_comparison_table(runs):
    t = by_embedding(runs)
    assert t is not None and len(t.display) == 1
    row = t.display.iloc[0]
    assert row["System"] == "mem0" and row["Change"] == "minilm → emb3"
    c = compare(runs[2], runs[1], "application")  # emb3 − minilm on the shared valid tasks
    assert row["Application"] == f"{c.rate_b:.1f} → {c.rate_a:.1f}" and row["p (Application)"].startswith("1.0")
    assert r"$\to$" in t.latex()
    assert by_embedding([r for r in runs if r.config.embedding == "minilm"]) is None


def test_analysis_never_imports_systems_ray_or_mlflow_directly():
    import ast
    from pathlib import Path

    for path in sorted((Path(__file__).resolve().parents[2] / "analysis").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            for name in names:
                assert name.split(".")[0] not in {"systems", "ray", "mlflow"}, f"{path.name} imports {name}"


def test_verdicts_each_configuration_against_the_best_retrieval_and_the_backbone(runs):
    from analysis.pairwise import holm_by_pair, verdict_line, verdicts

    best = best_retrieval(runs)
    backbone = next(r for r in runs if r.config.control == "in_context")
    out = verdicts(runs)
    pairs = [(v.comparison.a, v.comparison.b) for v in out]
    # every other configuration against the best retrieval one, then against the backbone; each pair once, the
    # reference as B
    assert pairs[:3] == [(r.label, best.label) for r in runs if r is not best]
    assert pairs[3:] == [(r.label, backbone.label) for r in runs if r not in (best, backbone)]
    long = pairwise(runs, "application")[0].data
    for v in out:
        c = v.comparison
        assert (runs[v.a].label, runs[v.b].label) == (c.a, c.b)  # indices in the run set: the viewer's order
        row = long[((long.a == c.a) & (long.b == c.b)) | ((long.a == c.b) & (long.b == c.a))]
        assert v.p == pytest.approx(float(row.p_holm.iloc[0])) == holm_by_pair(runs)[v.a, v.b]  # the matrix's p
        assert c.a_only == len(c.a_only_tasks) and c.b_only == len(c.b_only_tasks)
    v = out[-1]  # always_in_state − backbone
    c = v.comparison
    assert v.line() == (
        f"{c.a} − {c.b}: {fmt_delta(c.diff)} points [{fmt_delta(c.ci_low)}, {fmt_delta(c.ci_high)}], McNemar p = "
        f"{fmt_p(v.p)} (Holm-adjusted, 6 pairs), {c.a_only}/{c.b_only} discordant tasks "
        f"(viewer.html?a={v.a}&b={v.b}, viewer.html?a={v.b}&b={v.a})")
    # a run set of two: the one pair, its exact p (no family to adjust over)
    two = verdicts([runs[1], runs[3]])
    assert len(two) == 1 and two[0].comparison.a == runs[3].label and two[0].p == two[0].comparison.p_exact
    assert "Holm" not in two[0].line() and two[0].line().endswith("(viewer.html?a=1&b=0, viewer.html?a=0&b=1)")
    assert verdicts(runs[:1]) == []
    empty = dataclasses.replace(compare(runs[0], runs[1]), n=0)
    assert verdict_line(empty) == f"{runs[0].label} − {runs[1].label}: no shared task with a valid Application"


def test_the_delta_forest_prints_the_matrix_holm_p(runs):
    from analysis.pairwise import holm_by_pair

    fig = plots.delta_forest(runs)
    shown = [t.get_text() for t in fig.axes[0].texts]
    best = best_retrieval(runs)
    j = runs.index(best)
    assert shown == [f"p={fmt_p(holm_by_pair(runs)[i, j])}" for i, r in enumerate(runs) if r is not best]
    assert "Holm-adjusted over all pairs" in fig._suptitle.get_text()
    plots.plt.close(fig)
