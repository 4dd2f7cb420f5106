"""Publishing analysis outputs: the report directory and the viewer logged to every MLflow parent (sweep) run of a
run set, under ``analysis/``, each tagged so the MLflow UI links to it."""

from __future__ import annotations

from pathlib import Path

from analysis.load import RunSet

ARTIFACT_DIR = "analysis"


def publish(runset: RunSet, out: Path | str) -> list[str]:
    """Log the report directory to every MLflow parent (sweep) run of the run set, under ``analysis/``, and make
    each parent's description the verdict lines above the headline (``description``). Returns the run ids written
    to (none for a sweep directory or runs without a parent)."""
    ids = log_to_parents(runset, Path(out), "inmind.report", "report.html")
    if ids:
        from inmind_exp.tracking import writer as tracking

        client, text = tracking.MlflowClient(tracking_uri=runset.tracking_uri), description(runset)[:5000]
        for rid in ids:
            client.set_tag(rid, tracking.DESCRIPTION_TAG, text)
    return ids


def description(runset: RunSet) -> str:
    """A sweep parent's description in the MLflow UI (Markdown): the verdict lines (``pairwise.verdicts``, as under
    the end table, without the viewer links, which point into the sweep directory) and the headline table."""
    from analysis.headline import headline_table
    from analysis.pairwise import verdict_line, verdicts

    lines = [f"- {verdict_line(v.comparison, v.p, v.pairs)}" for v in verdicts(list(runset.runs))]
    head = ["**Verdict** (application, paired over the tasks both ran):", "", *lines, ""] if lines else []
    return "\n".join([*head, headline_table(list(runset.runs)).markdown()])


def log_to_parents(runset: RunSet, path: Path, tag: str, tagged: str) -> list[str]:
    """Log ``path`` (a directory's files, or one file) under ``analysis/`` to every MLflow parent run of the run set
    and tag each with ``tag`` = ``analysis/<tagged>``; the run ids written to."""
    if not runset.tracking_uri or not runset.parent_run_ids:
        return []
    from inmind_exp.tracking import writer as tracking

    client = tracking.MlflowClient(tracking_uri=runset.tracking_uri)
    log = client.log_artifacts if path.is_dir() else client.log_artifact
    for rid in runset.parent_run_ids:
        log(rid, str(path), artifact_path=ARTIFACT_DIR)
        client.set_tag(rid, tag, f"{ARTIFACT_DIR}/{tagged}")
    return list(runset.parent_run_ids)


def publish_viewer(runset: RunSet, path: Path) -> list[str]:
    """Log ``viewer.html`` to every MLflow parent (sweep) run of the run set under ``analysis/``."""
    return log_to_parents(runset, Path(path), "inmind.viewer", Path(path).name)
