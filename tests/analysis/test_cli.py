"""End to end: fixture runs logged to a temporary MLflow store as the runner logs them, then
``python -m analysis report`` writes every table, plot and the HTML report and logs it to the parent run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from analysis.__main__ import main
from inmind_exp.protocol.metrics import METRICS
from tests.analysis.fixtures import log_to_mlflow, write_sweep

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    d = tmp_path_factory.mktemp("mlflow")
    uri = f"sqlite:///{d / 'mlflow.db'}"
    parent = log_to_mlflow(uri, "fixture", d / "artifacts", d / "work")
    return uri, parent, d


@pytest.mark.slow
def test_report_from_an_mlflow_experiment(store, tmp_path):
    uri, parent, _ = store
    out = tmp_path / "report"
    labels = tmp_path / "labels.jsonl"
    labels.write_text("".join(json.dumps({"run": "mem0/emb3/middle/openai", "task_id": f"t{i:03d}",
                                          "judge": "application", "label": 0}) + "\n" for i in range(10)))
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-m", "analysis", "report", "--experiment", "fixture", "--out", str(out),
                           "--tracking-uri", uri, "--labels", str(labels)], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    row = next(line for line in proc.stdout.splitlines() if line.startswith("| mem0/minilm/middle/openai "))
    assert row.split("|")[2].strip() == "39/40" and parent in proc.stdout  # t003's application verdict failed
    assert "| mem0/minilm/middle/openai | 40 | 0 |" in (out / "tables" / "table1.md").read_text()  # no task failed
    assert "Per-task viewer:" in proc.stdout and (out / "viewer.html").is_file()

    tables = {"table1", "judge_self_audit", "table2", "pairwise_application", "pairwise_application_matrix",
              "pairwise_target_recall",
              "pairwise_target_recall_matrix", "by_domain_application", "by_domain_target_recall",
              "by_injection_application", "by_injection_target_recall", "by_embedding", "audit_human"}
    for name in tables:
        for ext in ("md", "tex", "csv"):
            assert (out / "tables" / f"{name}.{ext}").stat().st_size > 0, (name, ext)
    for name in ("forest", "delta_forest", "app_vs_recall", "naive_vs_indirect", "domain_heatmap", "embedding_comparison"):
        assert (out / "plots" / f"{name}.png").stat().st_size > 0 and (out / "plots" / f"{name}.svg").is_file()

    html = (out / "report.html").read_text()
    assert html.count("data:image/png;base64,") == 6 and "src='plots/" not in html  # self-contained
    # the verdict at the top, before any table: the backbone against the best retrieval configuration with the
    # matrix's Holm-adjusted p, its discordant tasks one click away in the viewer
    from analysis.mlflow_runs import load_experiment
    from analysis.table import fmt_p
    from analysis.pairwise import holm_by_pair, verdicts

    runs = list(load_experiment("fixture", uri).runs)
    top = html.split("<ul class='verdict'>")[1].split("</ul>")[0]
    assert html.index("<ul class='verdict'>") < html.index("<h2 ")
    assert top.count("<li>") == len(verdicts(runs)) == 5
    v = verdicts(runs)[0]
    assert (f"<li>{v.comparison.a} − {v.comparison.b}: " in top and
            f"McNemar p = {fmt_p(holm_by_pair(runs)[v.a, v.b])} (Holm-adjusted, 6 pairs)" in top)
    assert f"<a href='viewer.html?a={v.a}&amp;b={v.b}'>A only</a>" in top
    assert "whether it beats the others is in the paired comparisons" not in html
    assert ("<li>mem0/minilm/middle/openai: left out of the Application rate only (its verdict failed): t003"
            in html)
    for needle in ("Table 1", "Table 2", "McNemar", "Holm", "by domain", "by injection position", "never scored as 0",
                   "Section 4.5", "Judge audit against human labels", "Judge audit without human labels",
                   "Target recall, provenance (origin)", "Target recall (verbatim, lower bound)", "t016, t020",
                   "With n=40 valid tasks"):  # verdict errors leave their own rate only
        assert needle in html, needle
    assert "Table 1" in (out / "report.md").read_text()

    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    logged = {a.path for a in client.list_artifacts(parent, "analysis")}
    assert {"analysis/report.html", "analysis/report.md", "analysis/tables", "analysis/plots"} <= logged
    assert client.get_run(parent).data.tags["inmind.report"] == "analysis/report.html"


def test_compare_and_audit_commands(store, tmp_path, capsys):
    uri, _, _ = store
    assert main(["compare", "--experiment", "fixture", "--tracking-uri", uri, "--a", "mem0/minilm/middle/openai",
                 "--b", "22222222", "--metric", "application"]) == 0
    out = capsys.readouterr().out
    assert "on 39 paired tasks" in out and "exact McNemar p" in out and "excluded: 1 error in A" in out
    # the first lines: the verdict in one line, then the discordant tasks by id
    first, a_only, b_only = out.splitlines()[:3]
    assert main(["compare", "--experiment", "fixture", "--tracking-uri", uri, "--a", "mem0/minilm", "--b", "22222222",
                 "--metric", "application", "--json", "-"]) == 0
    doc = json.loads(capsys.readouterr().out)["metrics"]["application"]
    assert first.startswith(f"Application: mem0/minilm/middle/openai − mem0/emb3/middle/openai: "
                            f"{doc['diff']:+.1f}".replace("-", "−"))
    assert f"McNemar p = {doc['p_exact']:.3f}, {doc['a_only']}/{doc['b_only']} discordant tasks (viewer.html?a=" in first
    assert a_only == f"    A only: {', '.join(doc['a_only_tasks'])}" and b_only.startswith("    B only: t")
    assert "95% Bonett–Price [" in out and "mid-p = " in out and "minimum detectable difference" in out
    assert main(["compare", "--experiment", "fixture", "--tracking-uri", uri, "--a", "mem0/minilm/middle/openai",
                 "--b", "22222222", "--metric", "application", "--json", str(tmp_path / "cmp.json")]) == 0
    doc = json.loads((tmp_path / "cmp.json").read_text())
    app = doc["metrics"]["application"]
    assert app["ci_method"] == "bonett_price" and app["n"] == 39 and app["ci_low"] <= app["diff"] <= app["ci_high"]
    assert app["a_only"] == len(app["a_only_tasks"]) and app["b_only"] == len(app["b_only_tasks"])
    assert app["p_midp"] <= app["p_exact"] and "p_mcnemar" not in app and f"wrote {tmp_path / 'cmp.json'}" in capsys.readouterr().out
    assert main(["compare", "--experiment", "fixture", "--tracking-uri", uri, "--a", "mem0/minilm/middle/openai",
                 "--b", "22222222", "--metric", "application", "--json", "-"]) == 0
    assert json.loads(capsys.readouterr().out)["metrics"]["application"] == app  # the JSON alone on stdout
    labels = tmp_path / "labels.jsonl"
    labels.write_text(json.dumps({"run": "aaaaaaaa", "task_id": "t000", "judge": "target_recall", "label": 1}) + "\n")
    assert main(["audit", "--experiment", "fixture", "--tracking-uri", uri, "--labels", str(labels),
                 "--out", str(tmp_path / "audit")]) == 0
    assert "| Target recall (judge) | 1 |" in capsys.readouterr().out
    assert (tmp_path / "audit" / "audit_human.csv").is_file()
    assert (tmp_path / "audit" / "audit_corrected.csv").is_file()  # the Rogan–Gladen corrected rates beside it
    sweep = write_sweep(tmp_path / "sweep")
    assert main(["compare", "--sweep-dir", str(sweep), "--a", "always_in_state/minilm/middle/openai", "--b",
                 "mem0/emb3/middle/openai"]) == 0
    out = capsys.readouterr().out
    assert out.count("exact McNemar p") == len(METRICS)  # every metric, judge-free bounds included
    verdict = [line for line in out.split("\n\nA = ")[0].splitlines() if not line.startswith("    ")]
    assert len(verdict) == len(METRICS) and verdict[0].startswith("Application: always_in_state/minilm/middle/openai")
    assert sum("viewer.html" in line for line in verdict) == 1  # the viewer's A/B filter is on application only
    assert main(["report", "--experiment", "nope", "--tracking-uri", uri, "--out", str(tmp_path / "x")]) == 2
    assert "no experiment 'nope'" in capsys.readouterr().err


def test_view_and_export_from_an_mlflow_experiment(store, tmp_path, capsys):
    uri, parent, _ = store
    assert main(["view", "--experiment", "fixture", "--tracking-uri", uri, "--out", str(tmp_path / "v")]) == 0
    assert parent in capsys.readouterr().out and (tmp_path / "v" / "viewer.html").is_file()
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    assert "analysis/viewer.html" in {a.path for a in client.list_artifacts(parent, "analysis")}
    assert client.get_run(parent).data.tags["inmind.viewer"] == "analysis/viewer.html"
    assert main(["export", "--experiment", "fixture", "--tracking-uri", uri, "--out", str(tmp_path / "e")]) == 0
    import pandas as pd

    df = pd.read_csv(tmp_path / "e" / "tasks.csv")
    assert df.run_id.notna().all() and df.run_id.nunique() == 4  # MLflow run ids of the four configurations


def test_compare_takes_a_label_prefix_and_refuses_an_ambiguous_one_listing_candidates(tmp_path, capsys):
    sweep = write_sweep(tmp_path / "sweep")
    assert main(["compare", "--sweep-dir", str(sweep), "--a", "always_in", "--b", "backbone",
                 "--metric", "application"]) == 0
    out = capsys.readouterr().out
    assert "A = always_in_state/minilm/middle/openai" in out and "B = backbone/minilm/middle/openai" in out
    assert main(["compare", "--sweep-dir", str(sweep), "--a", "mem0", "--b", "backbone"]) == 2
    err = capsys.readouterr().err
    assert "'mem0' is ambiguous" in err and "mem0/minilm/middle/openai" in err and "mem0/emb3/middle/openai" in err


def test_report_figure_formats_on_the_command_line(capsys):
    """``--formats`` picks the figure formats (default both); an unknown one is refused by argparse, naming it."""
    from analysis.__main__ import parser

    args = ["report", "--sweep-dir", "x", "--out", "y"]
    assert parser().parse_args(args).formats == ("png", "svg")
    assert parser().parse_args([*args, "--formats", "SVG, png,svg"]).formats == ("svg", "png")
    with pytest.raises(SystemExit) as e:
        parser().parse_args([*args, "--formats", "png,pdf"])
    assert e.value.code == 2 and "'png,pdf': choose from png,svg" in capsys.readouterr().err


def test_runs_lists_experiments_and_configurations_with_n_planned_status_and_fidelity(tmp_path, capsys):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    parent = log_to_mlflow(uri, "fixture", tmp_path / "artifacts", tmp_path / "work")
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    client.set_tag(parent, "mlflow.runName", "sweep demo")
    exp = client.get_experiment_by_name("fixture").experiment_id
    runs = {r.info.run_name: r.info.run_id for r in client.search_runs([exp], "tags.`inmind.kind` = 'config'")}
    capped = runs["mem0/emb3/middle/openai"]
    client.log_metric(capped, "n_tasks", 2)
    client.log_metric(capped, "n_planned", 10)
    client.set_tag(capped, "inmind.incomplete", "capped")
    client.set_tag(capped, "inmind.fidelity", "leaderboard")
    assert main(["runs", "--tracking-uri", uri]) == 0
    out = capsys.readouterr().out
    assert "experiment 'fixture': 4 configuration run(s)" in out and "'Default'" not in out  # empty: not listed
    assert "| sweep demo | mem0/emb3/middle/openai | 2/10 | capped | leaderboard |" in out
    assert "| sweep demo | backbone/minilm/middle/openai | 0/0 | finished | not recorded |" in out
    assert main(["runs", "--tracking-uri", uri, "--experiment", "nope"]) == 2
    assert "no experiment 'nope'" in capsys.readouterr().err
