"""The analysis report of a sweep, written when the sweep ends and logged to its MLflow parent run, so the parent
shows the tables, plots and ``report.html`` of ``python -m analysis report`` without running it by hand.

On by default; ``tracking.report_at_end=false`` turns it off. The inmind launcher calls ``report_at_end`` before it
exits (an exit code other than 0 skips Hydra's end callbacks). A report that fails is a warning: it never changes
the sweep's exit code. It reads only this sweep's configuration runs (children
of its parent run). It lives in ``analysis/`` (the core never imports analysis); the launcher calls it.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any, Sequence

from omegaconf import DictConfig, OmegaConf

#: an inmind_exp logger, so its lines reach the console and launch.log (``inmind_exp.console.route_project_logs``)
log = logging.getLogger("inmind_exp.sweep_report")

#: The report's directory inside the sweep directory (also the artifact directory on the parent run).
REPORT_DIR = "analysis"
#: The figures of the end-of-sweep report: PNG only (report.html embeds it, MLflow shows it). Drawing SVG too took a
#: fifth of the report's time at the end of every sweep; ``python -m analysis report`` writes both.
SWEEP_FORMATS: tuple[str, ...] = ("png",)


def report_sweep(tracking_uri: str, experiment: str, root: Path, parent_key: str | None = None,
                 formats: tuple[str, ...] = SWEEP_FORMATS) -> Path | None:
    """Build the report of the sweep rooted at ``root`` (its parent run's ``inmind.key`` is ``parent_key``,
    ``sweep:<root>`` when not given) into ``<root>/analysis`` and log it to the sweep's parent run; the report's
    HTML path, or None when the sweep logged no configuration run or none with a finished task; the same tables
    and intervals as ``python -m analysis report``, its figures drawn in ``formats``."""
    from analysis.load import NoRecordsError
    from analysis.mlflow_runs import load_experiment
    from analysis.publish import publish
    from analysis.report import build
    from inmind_exp.tracking.writer import Tracker

    tracker = Tracker(tracking_uri, experiment)
    parent = tracker.find_run(parent_key or f"sweep:{root}")
    if parent is None:
        return None
    try:
        runset = load_experiment(experiment, tracking_uri, parent_run_id=parent)
    except NoRecordsError:  # stopped (the spend cap, Ctrl-C) before a task ended: nothing to report, nothing failed
        log.info("[inmind] no analysis report: no task of this sweep has finished yet (a rerun that finishes some "
                 "writes it)")
        return None
    out = root / REPORT_DIR
    try:  # first, so that the report links to it
        from analysis.viewer import write_viewer

        for problem in write_viewer(runset, out)[1]:
            log.warning(f"[inmind] per-task viewer: {problem}")
    except Exception as e:  # noqa: BLE001  (the report stands without its viewer)
        log.warning(f"[inmind] WARNING: the per-task viewer failed ({type(e).__name__}: {e}); run `python -m "
                    f"analysis view --experiment {experiment} --out {out}`")
    rep = build(runset, out, formats=formats)
    if text := verdict_text(runset.runs):
        log.info(text)
    publish(runset, rep.out)
    return rep.html


def verdict_text(runs: Sequence[Any]) -> str:
    """The verdict lines under the sweep's end table (``pairwise.verdicts``: each configuration against the best
    retrieval one and the backbone, Holm-adjusted as in the report's matrix), or "" with nothing to compare."""
    from analysis.caveats import FLAG_NOTE
    from analysis.pairwise import verdicts

    lines = verdicts(list(runs))
    if not lines:
        return ""
    flagged = any(v.comparison.degenerate for v in lines)
    return ("[inmind] verdict (application, paired; the links open the per-task viewer on the tasks only A, then "
            "only B, applied):\n" + "\n".join(f"  {v.line()}" for v in lines) + (f"\n  {FLAG_NOTE}" if flagged else ""))


def wanted(config: DictConfig) -> bool:
    """Whether the sweep of ``config`` ends with its report: ``tracking.report_at_end`` and not a dry run."""
    return bool(OmegaConf.select(config, "tracking.report_at_end", default=True)) and not OmegaConf.select(
        config, "dry_run")


def prefetch(config: DictConfig, after: threading.Event | None = None) -> threading.Thread | None:
    """Import the report's modules (matplotlib, pandas, scipy: ~1-1.5 s) in a background thread once ``after`` is
    set (the sweep's tasks are under way: the driver mostly waits on its workers then), when the sweep will end
    with its report, so the report at the end no longer starts with the imports. A failed import is left for
    ``report_at_end`` to report."""
    if not wanted(config):
        return None

    def work() -> None:
        if after is not None:
            after.wait()
        try:
            import analysis.load  # noqa: F401
            import analysis.report  # noqa: F401
            import analysis.viewer  # noqa: F401
        except Exception as e:  # noqa: BLE001
            log.debug(f"prefetching the report's modules: {type(e).__name__}: {e}")

    t = threading.Thread(target=work, name="inmind-report-imports", daemon=True)
    t.start()
    return t


def report_at_end(config: DictConfig) -> None:
    """``report_sweep`` for the sweep of ``config`` (its base config), unless ``tracking.report_at_end`` is false
    or it is a dry run; any failure is logged as a warning and swallowed."""
    from inmind_exp.tracking import sweep_run_key

    if not wanted(config):
        return
    root = Path(str(OmegaConf.select(config, "hydra.sweep.dir"))).resolve()
    overrides = [str(o) for o in OmegaConf.select(config, "hydra.overrides.task", default=[]) or []]
    try:
        html = report_sweep(str(config.tracking.uri), str(config.tracking.experiment), root,
                            parent_key=sweep_run_key(root, overrides))
    except Exception as e:  # noqa: BLE001  (the sweep's results are saved; a report is never worth failing it)
        log.warning(f"[inmind] WARNING: the end-of-sweep analysis report failed ({type(e).__name__}: {e}); "
                    f"the results are saved: run `python -m analysis report --experiment "
                    f"{config.tracking.experiment} --tracking-uri {config.tracking.uri} --out {root / REPORT_DIR}`")
        return
    if html is not None:
        log.info(f"[inmind] analysis report: {html} (also on the sweep's MLflow parent run under {REPORT_DIR}/; "
                 f"tracking.report_at_end=false turns it off)")
        if (viewer := html.with_name("viewer.html")).is_file():
            log.info(f"[inmind] per-task viewer: {viewer}")

