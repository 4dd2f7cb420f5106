"""Run one configuration: have the executor run what the ledger does not hold yet and hand each record, then the
finished configuration, to its recorders (``run.recorders``: the job directory and ledger, the release's outputs,
MLflow). Interrupted or failed, it still hands them what finished. While tasks run, the executor calls for the
progress line (``progress.PlanProgress``); the run ends with a summary line."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass, replace
from typing import Any

from inmind_exp import tags as T
from inmind_exp.console import FILE_ONLY, permanent_errors, retry_summary
from inmind_exp.display import live, stop
from inmind_exp.display.progress import PlanProgress, SweepProgress
from inmind_exp.errors import ClusterStartError
from inmind_exp.plan.plan import Plan
from inmind_exp.protocol.metrics import RunMetrics, compute
from inmind_exp.records import TaskRecord
from inmind_exp.run.recorders import Finished, Recorder, recorders
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
             resources: Resources | None = None, sweep: SweepProgress | None = None,
             extra: Sequence[Recorder] = ()) -> RunResult:
    """(Re)run what is missing of ``plan`` and hand the records to its recorders (``extra`` ones before MLflow);
    returns the metrics of this configuration. ``executor`` defaults to ``resources``' Ray executor (fresh resources
    when none are given); ``sweep`` is the sweep's progress this configuration is part of (its own summary then
    leaves the retry hint to the sweep's)."""
    t0 = time.perf_counter()
    res = resources if resources is not None else Resources()
    remaining = plan.remaining()
    log.info(f"[inmind] {plan.name}: config {plan.config_hash}, {len(plan.tasks)} tasks "
             f"({len(plan.tasks) - len(remaining)} already done), fact injected into session "
             f"{plan.session_index + 1}/{len(plan.trace.sessions)}")

    if remaining:  # the local server, keys and endpoints are checked before any MLflow run is created
        plan = prepare(plan, res)
    executor = executor or (res.executor if remaining else None)
    sinks = recorders(res, parent_key, extra)
    status = "FINISHED"
    records: dict[str, TaskRecord] = {t.id: plan.done[t.id] for t in plan.tasks if t.id in plan.done}
    progress = PlanProgress(plan, records)
    if sweep is not None:
        sweep.register(progress)

    def report(rec: TaskRecord) -> None:
        rec = scrub_record(rec)  # an error text or reply may hold a key an endpoint echoed: never on disk
        for r in sinks:
            r.record(rec)
        records[rec.task_id] = rec
        progress.add(rec)

    try:
        for r in sinks:
            r.start(plan)
        if remaining:
            with live.display(plan.run.progress) if sweep is None else nullcontext():  # a sweep has its own
                executor.run(plan, remaining, report, progress)
    except ClusterStartError:
        status = "CANCELLED"  # Ray never started, no task ran: nothing is recorded (no recorder finishes)
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
            progress.incomplete = incomplete = _incomplete(plan, status, metrics, executor)
            run = Finished(plan, [scrub_record(r) for r in ordered], metrics, status, incomplete,
                           metrics=metrics.flat())
            error = None if status == "CANCELLED" else _finish(sinks, run)
    if error is not None:
        raise error
    log.info(progress.summary())
    errored = (plan.name, progress.errors, progress.total, permanent_errors(progress.records.values()))
    hint = retry_summary([errored], [], retry_errors=plan.run.retry_errors) if sweep is None else None
    if hint:
        log.info(hint, extra=FILE_ONLY)  # the terminal gets it as launch.py's closing line
    return RunResult(plan, ordered, metrics, run.run_id, time.perf_counter() - t0, incomplete)


def _finish(sinks: list[Recorder], run: Finished) -> Exception | None:
    """Every recorder's ``finish``: an ``OSError`` marks the outputs not written (the others go on), any other error
    is returned, the first one, to be raised once the run's own error (if any) has left."""
    first = None
    for r in sinks:
        try:
            r.finish(run)
        except OSError as e:
            run.outputs_failed(e)
        except Exception as e:  # noqa: BLE001 - raised by the caller
            first = first or e
    return first


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


def prepare(plan: Plan, res: Resources) -> Plan:
    """Start the local server if the plan needs one (and bind its URL), then check every endpoint (key set, server
    answers) and the system's own needs (``MemorySystem.preflight``)."""
    if plan.local is not None:
        plan = plan.bind(res.local_base_url(plan.local, plan.cluster.address, plan.root / "logs"))
    res.preflight(plan.endpoints.values(), plan.embedding)
    res.system_preflight(plan)
    return plan


def scrub_record(rec: TaskRecord) -> TaskRecord:
    """``rec`` with every string redacted (``inmind_exp.safety.redact.scrub_obj``); the same object when nothing changes."""
    from inmind_exp.safety.redact import scrub_obj

    d = rec.to_dict()
    clean = scrub_obj(d)
    return rec if clean == d else TaskRecord.from_dict(clean)
