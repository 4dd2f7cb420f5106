"""Run one configuration: log the plan, open (or find again) its MLflow run, have the executor run what the ledger
does not hold yet, append each result to the ledger as it arrives, then write the records, the config and the
results table to the job directory and MLflow. Interrupted or failed, it still saves and logs what finished. While
tasks run, the executor calls for the progress line (``progress.PlanProgress``); the run ends with a summary line."""

from __future__ import annotations

import json
import logging
import time
from contextlib import nullcontext
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Mapping

from inmind_exp import tags as T
from inmind_exp.console import FILE_ONLY, permanent_errors, retry_summary
from inmind_exp.errors import ClusterStartError, TrackingError
from inmind_exp.official.fidelity import FILE_NAME as FIDELITY_FILE
from inmind_exp.official.fidelity import Fidelity, fidelity, top_k_note
from inmind_exp.protocol.metrics import RunMetrics, compute, cost_usd, results_table
from inmind_exp.official.aggregate import official_line, official_metrics
from inmind_exp.records import Task, TaskRecord, write_jsonl
from inmind_exp.config.identity import identity_hash
from inmind_exp.display import live, stop
from inmind_exp.plan.ledger import Ledger
from inmind_exp.plan.plan import Plan
from inmind_exp.display.progress import PlanProgress, SweepProgress
from inmind_exp.run.resources import Resources

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunResult:
    plan: Plan
    records: list[TaskRecord]
    metrics: RunMetrics
    run_id: str | None
    wall_s: float
    #: why not every planned task finished cleanly (``tags.CAPPED``, ``ERRORS``), None when all did
    incomplete: str | None = None


def run_plan(plan: Plan, parent_key: str | None = None, parent_name: str = "sweep", executor: Any = None,
             resources: Resources | None = None, sweep: SweepProgress | None = None) -> RunResult:
    """(Re)run what is missing of ``plan``, log to MLflow, write artifacts; returns the metrics of this configuration.
    ``executor`` defaults to ``resources``' Ray executor (fresh resources when none are given); ``sweep`` is the sweep's progress this configuration is
    part of (its own summary then leaves the retry hint to the sweep's)."""
    t0 = time.perf_counter()
    res = resources if resources is not None else Resources()
    remaining = plan.remaining()
    log.info(f"[inmind] {plan.name}: config {plan.config_hash}, {len(plan.tasks)} tasks "
             f"({len(plan.tasks) - len(remaining)} already done), fact injected into session "
             f"{plan.session_index + 1}/{len(plan.trace.sessions)}")

    if remaining:  # the local server, keys and endpoints are checked before any MLflow run is created
        plan = prepare(plan, res)
    # the MLflow runs open once the tasks have run: nothing is logged before
    executor = executor or (res.executor if remaining else None)
    log_runs = True
    status = "FINISHED"
    records: dict[str, TaskRecord] = {t.id: plan.done[t.id] for t in plan.tasks if t.id in plan.done}
    progress = PlanProgress(plan, records)
    if sweep is not None:
        sweep.register(progress)
    try:
        if remaining:
            with live.display(plan.run.progress) if sweep is None else nullcontext():  # a sweep has its own
                _execute(plan, remaining, records, progress, executor)
    except ClusterStartError:
        log_runs = False  # Ray never started, no task ran: no MLflow run is opened just to be marked FAILED
        raise
    except KeyboardInterrupt:
        status = "KILLED"
        log.info(f"\n[inmind] interrupted: {len(records)} results are in the ledger {plan.ledger_path}; "
                 f"run the same command again to finish the rest.")
        raise
    except BaseException:
        status = "FAILED"
        raise
    finally:
        with stop.shielded() if status == "KILLED" else nullcontext():  # a second Ctrl-C waits for this
            died = res.local_server_died() if plan.local is not None else None
            if died:
                log.error(f"[inmind] {plan.name}: {died}; {progress.errors} of its {progress.total} tasks ended in "
                          f"an error")
            ordered = [records[t.id] for t in plan.tasks if t.id in records]
            metrics = replace(compute(ordered), n_planned=len(plan.tasks))
            incomplete = _incomplete(plan, status, metrics, executor)
            progress.incomplete = incomplete
            run_id, open_error = None, None
            try:
                if log_runs:
                    tracker, parent_id, run_id = _open_runs(plan, res, parent_key)
                    try:
                        shown = _write_outputs(plan, ordered, metrics, tracker, run_id)
                    except OSError as e:  # a full disk must not hide why the run stopped, nor leave it RUNNING
                        log.error(f"[inmind] {plan.name}: outputs not written ({type(e).__name__}: {e}); the ledger "
                                  f"{plan.ledger_path} holds the finished results")
                        status, shown = ("FAILED" if status == "FINISHED" else status), {}
                    tracker.mark_incomplete(run_id, incomplete)
                    tracker.finish(run_id, status)
                    if parent_id:
                        tracker.add_to_sweep(parent_id, run_id, shown)
                        tracker.finish(parent_id, status)
            except Exception as e:  # noqa: BLE001 - the store failed (full, damaged): raised below as one line
                open_error = e
    if open_error is not None:
        why = (str(open_error).strip().splitlines() or [""])[0][:200]
        raise TrackingError(f"{plan.name}: the MLflow store {plan.tracking.uri} failed ({type(open_error).__name__}: "
                            f"{why}); the ledger {plan.ledger_path} holds the finished results: a rerun logs "
                            f"them, paying for no call") from None
    log.info(progress.summary())
    errored = (plan.name, progress.errors, progress.total, permanent_errors(progress.records.values()))
    hint = retry_summary([errored], [], retry_errors=plan.run.retry_errors) if sweep is None else None
    if hint:
        log.info(hint, extra=FILE_ONLY)  # the terminal gets it as launch.py's closing line
    return RunResult(plan, ordered, metrics, run_id, time.perf_counter() - t0, incomplete)


def _incomplete(plan: Plan, status: str, metrics: RunMetrics, executor: Any) -> str | None:
    """Why ``plan`` did not finish every planned task cleanly: interrupted, stopped at the spend cap, or tasks in
    error (or missing after a failure); None when every task finished."""
    if status == "KILLED":
        return T.INTERRUPTED
    if plan.name in getattr(getattr(executor, "spend_cap", None), "reached", dict)():
        return T.CAPPED
    if metrics.n_errors or metrics.n_tasks < len(plan.tasks):
        return T.ERRORS
    return None


def _open_runs(plan: Plan, res: Resources, parent_key: str | None) -> tuple[Any, str | None, str]:
    """The tracker, the sweep's parent run (when in a sweep) and this configuration's run (MLflow layout: tracking)."""
    tracker = res.tracker(plan.tracking)
    parent_id = tracker.open_sweep_run(parent_key, plan.root) if parent_key else None
    # a configuration run per sweep identity: another sweep in the same directory holding it has its own child
    run_key = identity_hash({"root": str(plan.root.resolve()), "config": plan.config_hash,
                             **({"sweep": parent_key} if parent_key else {})})
    return tracker, parent_id, tracker.open_config_run(plan, dict(plan.params), run_key, parent_id, _dataset_path(plan))


def prepare(plan: Plan, res: Resources) -> Plan:
    """Start the local server if the plan needs one (and bind its URL), then check every endpoint (key set, server
    answers) and the system's own needs (``MemorySystem.preflight``)."""
    if plan.local is not None:
        plan = plan.bind(res.local_base_url(plan.local, plan.cluster.address, plan.root / "logs"))
    res.preflight(plan.endpoints.values(), plan.embedding)
    res.system_preflight(plan)
    return plan


def _execute(plan: Plan, remaining: list[Task], records: dict[str, TaskRecord], progress: PlanProgress,
             executor: Any) -> None:
    """Run the remaining tasks of a prepared plan on the executor, appending each final record to the ledger."""
    ledger = Ledger(plan.ledger_path)

    def report(rec: TaskRecord) -> None:
        rec = scrub_record(rec)  # an error text or reply may hold a key an endpoint echoed: never on disk
        ledger.append(rec)
        records[rec.task_id] = rec
        progress.add(rec)

    from inmind_exp.plan.reuse import mark

    mark(plan)  # a later dry run of the same configuration but the judge finds these answers (run.reuse)
    executor.run(plan, remaining, report, progress)


def scrub_record(rec: TaskRecord) -> TaskRecord:
    """``rec`` with every string redacted (``inmind_exp.safety.redact.scrub_obj``); the same object when nothing changes."""
    from inmind_exp.safety.redact import scrub_obj

    d = rec.to_dict()
    clean = scrub_obj(d)
    return rec if clean == d else TaskRecord.from_dict(clean)


def _dataset_path(plan: Plan) -> Path:
    """The task file the plan read (the bundled set when ``dataset.path`` is null), for MLflow's dataset input."""
    from inmind_exp.data.tasks import BUNDLED_TASKS

    if plan.tasks_path is not None:
        return plan.tasks_path
    path = plan.params.get("dataset.path")
    return Path(path) if path not in (None, "None", "null", "") else BUNDLED_TASKS


def _write_outputs(plan: Plan, records: list[TaskRecord], metrics: RunMetrics, tracker: Any, run_id: str) -> dict[str, float]:
    plan.job_dir.mkdir(parents=True, exist_ok=True)
    rec_path = plan.job_dir / "records.jsonl"
    records = [scrub_record(r) for r in records]
    write_jsonl(rec_path, (r.to_dict() for r in records))
    cfg_path = plan.job_dir / "config.yaml"
    cfg_path.write_text(plan.config_yaml)
    table_path = plan.job_dir / "results.md"
    fid = fidelity(plan, records)  # what ran: the records' served models and hosts, the tasks they hold
    fid_path = plan.job_dir / FIDELITY_FILE
    fid_path.write_text(json.dumps(fid.to_dict(), indent=1, sort_keys=True) + "\n", encoding="utf-8")
    table_path.write_text(results_table([(plan.name, metrics)]) + "\n" + protocol_lines(fid, records, plan.params))
    flat = metrics.flat()
    if fid.official_data:
        flat.update(official_metrics(records))
    cost = cost_usd(metrics.usage, dict(plan.prices), {r: e.model for r, e in plan.endpoints.items()})
    if cost is not None:
        flat["cost_usd"] = cost
    submission = _export_submission(plan, records, fid) if fid.official_data else None
    controls = _write_controls(plan)
    return tracker.log_config_results(run_id, flat, list(records),
                                      [rec_path, cfg_path, table_path, fid_path,
                                       *([submission] if submission else []), *([controls] if controls else [])],
                                      tags={T.FIDELITY: fid.tag, T.TASK_SET: fid.task_set})


def _write_controls(plan: Plan) -> Path | None:
    """``controls.json``: the run's negative controls and the mismatched pairing (each task's partner), the same
    pairing every task record carries; None for a run without controls."""
    if plan.controls is None:
        return None
    import json

    from inmind_exp.protocol.controls import pairings_json

    path = plan.job_dir / "controls.json"
    path.write_text(json.dumps({"controls": list(plan.controls.names), "seed": plan.controls.seed,
                                "pool": plan.controls.pool, "pairings": pairings_json(plan.controls)},
                               indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return path


def protocol_note(result: RunResult) -> str:
    """The lines printed under the terminal's results table for one configuration: its fidelity, and for the
    official tasks the release's aggregate."""
    fid = fidelity(result.plan, result.records)
    lines = [f"- {result.plan.name}: {fid.line()}" + ("" if fid.official_data else f" [{fid.task_set}]")]
    if (note := top_k_note(result.plan.params)) is not None:
        lines.append(f"  {note}")
    if fid.official_data:
        lines.append(f"  {official_line(result.records)}")
    return "\n".join(lines)


def protocol_lines(fid: Fidelity, records: list[TaskRecord], params: Mapping[str, Any] | None = None) -> str:
    """The results table's protocol lines: the fidelity (with the configuration's ``top_k`` against the release's
    example), what tasks ran, and for official tasks the release's own aggregate beside our paired rates."""
    lines = [f"- {fid.line()}", f"- Tasks: {fid.task_set}"]
    if (note := top_k_note(params or {})) is not None:
        lines.insert(1, f"- Retrieval: {note}")
    if fid.official_data:
        lines.append(f"- {official_line(records)}")
    return "\n" + "\n".join(lines) + "\n"


def _export_submission(plan: Plan, records: list[TaskRecord], fid: Fidelity) -> Path | None:
    """A run of the official tasks writes the release's submission (validated against its schema) beside
    ``records.jsonl``; a failure is logged, never lost records (they are already written)."""
    from inmind_exp.data.release import find_release
    from inmind_exp.errors import InmindError
    from inmind_exp.official.submission import FILE_NAME, build_submission, submission_config, write_submission

    release_dir = plan.params.get("dataset.release_dir")
    try:
        release = find_release(None if release_dir in (None, "None", "null", "") else release_dir)
        sub = build_submission(records, submission_config(plan.name, plan.config_hash, plan.params, fid))
        path = write_submission(plan.job_dir / FILE_NAME, sub.rows, release.schema())
    except InmindError as e:
        log.error(f"[inmind] {plan.name}: submission not written: {e}")
        return None
    log.info(f"[inmind] {plan.name}: submission {path}: {sub.summary()}")
    return path
