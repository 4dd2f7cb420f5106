"""The end-of-sweep analysis report: built from this sweep's configuration runs only, logged to its parent run,
off with ``tracking.report_at_end=false``, and a failure is a warning that never raises."""

from __future__ import annotations

import logging
import re

from mlflow.tracking import MlflowClient
from omegaconf import OmegaConf

from analysis import sweep_report
from tests.analysis.fixtures import log_to_mlflow


def _config(tmp_path, uri: str, on: bool = True, experiment: str = "fixture"):
    return OmegaConf.create({"tracking": {"uri": uri, "experiment": experiment, "report_at_end": on},
                             "dry_run": False, "hydra": {"sweep": {"dir": str(tmp_path / "sweep")}}})


def test_report_of_one_sweep_is_logged_to_its_parent(tmp_path, caplog):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    parent = log_to_mlflow(uri, "fixture", tmp_path / "mlruns", tmp_path / "work")
    client = MlflowClient(tracking_uri=uri)
    root = (tmp_path / "sweep").resolve()
    client.set_tag(parent, "inmind.key", f"sweep:{root}")
    # another sweep's parent and child in the same experiment: not part of this report
    exp = client.get_experiment_by_name("fixture").experiment_id
    other = client.create_run(exp, run_name="sweep other", tags={"inmind.key": "sweep:/elsewhere",
                                                                  "inmind.kind": "sweep"}).info.run_id
    client.create_run(exp, run_name="other/minilm/middle/openai", tags={
        "inmind.kind": "config", "inmind.key": "k-other", "mlflow.parentRunId": other})

    with caplog.at_level(logging.INFO, logger="inmind_exp.sweep_report"):
        sweep_report.report_at_end(_config(tmp_path, uri))
    html = root / "analysis" / "report.html"
    assert html.is_file() and "Table 1" in html.read_text()
    assert f"analysis report: {html}" in caplog.text
    logged = {f.path for f in client.list_artifacts(parent, "analysis")}
    assert "analysis/report.html" in logged and "analysis/viewer.html" in logged  # the per-task viewer beside it
    assert "<section class='task'" in (root / "analysis" / "viewer.html").read_text()
    assert f"per-task viewer: {root / 'analysis' / 'viewer.html'}" in caplog.text
    assert client.get_run(parent).data.tags["inmind.report"] == "analysis/report.html"
    assert client.list_artifacts(other) == [] and "inmind.report" not in client.get_run(other).data.tags
    assert "other/minilm" not in (root / "analysis" / "report.md").read_text()
    # its figures in PNG only (SWEEP_FORMATS): embedded in the page and linked from the digest, no SVG beside them
    plots = root / "analysis" / "plots"
    assert (plots / "forest.png").is_file() and not list(plots.glob("*.svg"))
    assert "data:image/png;base64," in html.read_text() and "plots/forest.svg" not in html.read_text()
    assert "](plots/forest.png)" in (root / "analysis" / "report.md").read_text()
    # the end-of-sweep report states the paired intervals `python -m analysis report` uses (analytic: no resampling)
    md = (root / "analysis" / "report.md").read_text()
    assert "Bonett–Price adjusted Wald interval" in md and "Bell–McCaffrey" in md
    # the verdict under the end table: each configuration against the best retrieval one and the backbone, in the
    # report's words and with the matrix's Holm-adjusted p
    verdict = caplog.text.split("[inmind] verdict (application, paired")[1].split("\n")[1:]
    lines = [x.strip() for x in verdict if x.startswith("  ")]
    assert len(lines) == 5 and all(f"- {x}" in md for x in lines)
    line = re.compile(r"\S+ − \S+: [+−]\d+\.\d points \[[+−]\d+\.\d, [+−]\d+\.\d\], McNemar p = \S+ "
                      r"\(Holm-adjusted, 6 pairs\), (\d+)/(\d+) discordant tasks "
                      r"\(viewer\.html\?a=(\d)&b=(\d), viewer\.html\?a=(\d)&b=(\d)\)")
    for x in lines:
        m = line.fullmatch(x)
        assert m is not None, x
        g = m.groups()
        assert g[2:4] == (g[5], g[4])  # the tasks only A applied, then those only B did
    assert caplog.text.index("verdict (application") < caplog.text.index("analysis report:")
    # the parent's description in the MLflow UI: the same verdict lines (no links into the sweep directory) above
    # the headline table
    desc = client.get_run(parent).data.tags["mlflow.note.content"]
    shown = [x[2:] for x in desc.splitlines() if x.startswith("- ")]
    assert shown == [x.split(" (viewer.html")[0] for x in lines]
    assert desc.index("**Verdict**") < desc.index("| configuration") and "viewer.html" not in desc



def test_report_off_and_failures_never_raise(tmp_path, caplog, monkeypatch):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    parent = log_to_mlflow(uri, "fixture", tmp_path / "mlruns", tmp_path / "work")
    MlflowClient(tracking_uri=uri).set_tag(parent, "inmind.key", f"sweep:{(tmp_path / 'sweep').resolve()}")
    sweep_report.report_at_end(_config(tmp_path, uri, on=False))
    assert not (tmp_path / "sweep" / "analysis").exists()

    import analysis.report

    def broken(*args, **kwargs):
        raise RuntimeError("plotting failed")

    monkeypatch.setattr(analysis.report, "build", broken)
    with caplog.at_level(logging.WARNING, logger="inmind_exp.sweep_report"):
        sweep_report.report_at_end(_config(tmp_path, uri))  # returns: the sweep's exit code is not its business
    assert "end-of-sweep analysis report failed (RuntimeError: plotting failed)" in caplog.text
    assert "python -m analysis report --experiment fixture" in caplog.text


def test_a_sweep_stopped_before_any_task_ended_reports_nothing_and_warns_nothing(tmp_path, caplog):
    """``run.max_usd=0.004`` stops a sweep before its first task ends: its configuration runs hold an empty
    records.jsonl. That is no failed report (whose suggested command would fail the same way): one line says why
    there is none."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    from inmind_exp.tracking.writer import Tracker

    root = (tmp_path / "sweep").resolve()
    root.mkdir()
    tracker = Tracker(uri, "capped")
    parent = tracker.open_sweep_run(f"sweep:{root}", root)
    empty = tmp_path / "records.jsonl"
    empty.write_text("")
    for name in ("backbone/bm25/turn5/vllm", "naive_rag/bm25/turn5/vllm"):
        rid, _ = tracker.get_or_create_run(f"k-{name}", name, {"inmind.kind": "config"}, parent_id=parent)
        tracker.log_artifacts(rid, [empty])
    with caplog.at_level(logging.INFO, logger="inmind_exp.sweep_report"):
        sweep_report.report_at_end(_config(tmp_path, uri, experiment="capped"))
    assert "no analysis report: no task of this sweep has finished" in caplog.text
    assert "WARNING" not in caplog.text and "failed" not in caplog.text
    assert not (root / "analysis" / "report.html").exists()

    # a store whose runs lost their records (no artifact at all) is still a failure worth the warning
    from analysis.load import LoadError, NoRecordsError
    from analysis.mlflow_runs import load_experiment

    lost = Tracker(uri, "lost")
    lost.get_or_create_run("k", "x/y/z/w", {"inmind.kind": "config"})
    try:
        load_experiment("lost", uri)
    except LoadError as e:
        assert not isinstance(e, NoRecordsError) and "no records.jsonl artifact" in str(e)
    else:
        raise AssertionError("a run without records loaded")
