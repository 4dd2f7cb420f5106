"""Where a configuration's records go (inspect_ai's ``Recorder``, lm-eval's ``EvaluationTracker``): the driver hands
each record and then the finished configuration to the recorders built once per plan (``recorders``): the release's
outputs, the job directory and ledger, any extra ones, then MLflow, which logs the files, metrics and tags the ones
before it left on the ``Finished`` record. A recorder's ``OSError`` (a full disk) marks the outputs not written and
the run FAILED while the others still finish; any other error is raised once all have finished."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from inmind_exp import tags as T
from inmind_exp.config.identity import identity_hash
from inmind_exp.errors import TrackingError
from inmind_exp.official.aggregate import official_metrics
from inmind_exp.official.fidelity import FILE_NAME as FIDELITY_FILE
from inmind_exp.official.fidelity import fidelity
from inmind_exp.official.outputs import export_submission, protocol_lines, write_controls, write_screen_verdicts
from inmind_exp.plan.ledger import Ledger
from inmind_exp.plan.plan import Plan
from inmind_exp.protocol.metrics import RunMetrics, cost_usd
from inmind_exp.display.headline import results_table
from inmind_exp.records import TaskRecord, write_jsonl
from inmind_exp.run.resources import Resources

log = logging.getLogger(__name__)


@dataclass
class Finished:
    """One configuration's end as each recorder in turn sees it: what ran (``records`` scrubbed, in task order), how
    it ended, and what the recorders before left for the ones after (``files``, ``metrics``, ``tags`` for MLflow,
    ``notes`` under the results table); ``written`` turns False when an output could not be written."""

    plan: Plan
    records: list[TaskRecord]
    summary: RunMetrics
    status: str
    incomplete: str | None
    files: list[Path] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    written: bool = True
    run_id: str | None = None

    def outputs_failed(self, e: OSError) -> None:
        """A full disk must not hide why the run stopped, nor leave it RUNNING: say so, and end the run FAILED."""
        log.error(f"[inmind] {self.plan.name}: outputs not written ({type(e).__name__}: {e}); the ledger "
                  f"{self.plan.ledger_path} holds the finished results")
        self.written, self.status = False, ("FAILED" if self.status == "FINISHED" else self.status)


class Recorder:
    """A sink of one configuration's records: a recorder overrides what it needs; the rest do nothing."""

    def start(self, plan: Plan) -> None:
        """The plan is prepared and about to run what the ledger does not hold yet."""

    def record(self, rec: TaskRecord) -> None:
        """One final (scrubbed) task record, as it arrives; an error here stops dispatch."""

    def finish(self, run: Finished) -> None:
        """The configuration ended (finished, interrupted or failed): write what it holds. Not called when nothing
        ran (the cluster did not start)."""


class JobDirectory(Recorder):
    """The ledger (each record appended and fsynced as it arrives) and the job directory: ``records.jsonl``,
    ``config.yaml`` and ``results.md``."""

    def start(self, plan: Plan) -> None:
        from inmind_exp.plan.reuse import mark

        self.ledger = Ledger(plan.ledger_path)
        if plan.remaining():
            mark(plan)  # a later dry run of the same configuration but the judge finds these answers (run.reuse)

    def record(self, rec: TaskRecord) -> None:
        self.ledger.append(rec)

    def finish(self, run: Finished) -> None:
        job = run.plan.job_dir
        job.mkdir(parents=True, exist_ok=True)
        write_jsonl(job / "records.jsonl", (r.to_dict() for r in run.records))
        (job / "config.yaml").write_text(run.plan.config_yaml)
        notes = "\n" + "\n".join(run.notes) + "\n" if run.notes else ""
        (job / "results.md").write_text(results_table([(run.plan.name, run.summary)]) + "\n" + notes)
        run.files += [job / "records.jsonl", job / "config.yaml", job / "results.md"]


class OfficialOutputs(Recorder):
    """What the release defines: ``fidelity.json`` (judged from what ran), its lines under the results table, and
    for its tasks the submission and the release's aggregate; ``controls.json`` for a run with negative controls."""

    def finish(self, run: Finished) -> None:
        fid = fidelity(run.plan, run.records)  # what ran: the records' served models and hosts, the tasks they hold
        path = run.plan.job_dir / FIDELITY_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(fid.to_dict(), indent=1, sort_keys=True) + "\n", encoding="utf-8")
        run.notes += protocol_lines(fid, run.records, run.plan.system_params.get("top_k"))
        run.tags.update({T.FIDELITY: fid.tag, T.TASK_SET: fid.task_set,
                         T.CACHE_COUPLING: T.COUPLING[run.plan.run.cache_scope]})
        if fid.official_data:
            run.metrics.update(official_metrics(run.records))
        outputs = [export_submission(run.plan, run.records, fid) if fid.official_data else None,
                   write_controls(run.plan, run.records)]
        write_screen_verdicts(run.plan, run.records)  # shared by the task set's runs: not one of this run's files
        run.files += [path, *(p for p in outputs if p is not None)]


class MLflowRun(Recorder):
    """The configuration's MLflow run (and its sweep's parent), opened once the tasks have run (nothing is logged
    before, and a sweep that never started opens none): the metrics, tags, per-task table and files the recorders
    before it left, and its status. A new run starts when the configuration started (``start``), so MLflow's
    duration is the configuration's; ``wall_s`` is this launch's wall time of it."""

    def __init__(self, res: Resources, parent_key: str | None) -> None:
        self.res, self.parent_key = res, parent_key
        self.t0: float | None = None

    def start(self, plan: Plan) -> None:
        self.t0 = time.time()

    def _open(self, plan: Plan, start_ms: int) -> tuple[Any, str | None, str]:
        tracker = self.res.tracker(plan.tracking)
        parent_id = tracker.open_sweep_run(self.parent_key, plan.root, start_ms) if self.parent_key else None
        # a configuration run per sweep identity: another sweep in the same directory holding it has its own child
        key = identity_hash({"root": str(plan.root.resolve()), "config": plan.config_hash,
                             **({"sweep": self.parent_key} if self.parent_key else {})})
        return tracker, parent_id, tracker.open_config_run(plan, dict(plan.params), key, parent_id, plan.dataset_path,
                                                           start_ms)

    def finish(self, run: Finished) -> None:
        t0 = self.t0 if self.t0 is not None else time.time()  # a recorder before this one failed to start
        run.metrics["wall_s"] = round(time.time() - t0, 3)
        try:
            tracker, parent_id, run.run_id = self._open(run.plan, int(t0 * 1000))
            shown: dict[str, float] = {}
            if run.written:
                cost = cost_usd(run.summary.usage, dict(run.plan.prices),
                                {r: e.model for r, e in run.plan.endpoints.items()})
                try:
                    shown = tracker.log_config_results(run.run_id, {**run.metrics, **(
                        {"cost_usd": cost} if cost is not None else {})}, run.records, run.files, run.tags)
                except OSError as e:
                    run.outputs_failed(e)
            tracker.mark_incomplete(run.run_id, run.incomplete)
            tracker.finish(run.run_id, run.status)
            if parent_id:
                tracker.add_to_sweep(parent_id, run.run_id, shown)
                tracker.finish(parent_id, run.status)
        except Exception as e:  # noqa: BLE001 - the store failed (full, damaged): one line naming it
            why = (str(e).strip().splitlines() or [""])[0][:200]
            raise TrackingError(f"{run.plan.name}: the MLflow store {run.plan.tracking.uri} failed "
                                f"({type(e).__name__}: {why}); the ledger {run.plan.ledger_path} holds the finished "
                                f"results: a rerun logs them, paying for no call") from None


def recorders(res: Resources, parent_key: str | None, extra: Sequence[Recorder] = ()) -> list[Recorder]:
    """The recorders of one configuration, built once per plan: ``OfficialOutputs`` first (``JobDirectory`` writes
    its lines under the results table); ``extra`` ones go before MLflow, so what they leave is logged too."""
    return [OfficialOutputs(), JobDirectory(), *extra, MLflowRun(res, parent_key)]
