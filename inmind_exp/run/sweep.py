"""Every launch as one schedule. The session (``run.session``) first plans every job (each once), so every
configuration is validated before anything runs, and checks every endpoint the plans call (``preflight``) before
Ray starts; then ``run_plans`` runs all plans together: each plan's driver (MLflow run, ledger, outputs) runs in its
own thread and gives its tasks to one shared ``RayExecutor`` schedule, so prefixes are built as soon as a worker is
free and no worker idles while any task of the sweep waits. Ray starts when the schedule first needs it.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from inmind_exp.console import FILE_ONLY, permanent_errors, retry_summary
from inmind_exp.records import Task
from inmind_exp.display import live
from inmind_exp.run.driver import RunResult, run_plan
from inmind_exp.plan.plan import Plan
from inmind_exp.display.progress import SweepProgress
from inmind_exp.run.resources import Resources
from inmind_exp.plan.reuse import leaders

log = logging.getLogger(__name__)


class SharedExecutor:
    """The ``Executor`` a plan's driver thread sees: its tasks join the shared schedule; it waits for them."""

    def __init__(self, ray_executor: Any):
        self.ray_executor = ray_executor
        self.working = getattr(ray_executor, "working", None)  # start-up is over (interface.Pool.working)
        self.spend_cap = getattr(ray_executor, "spend_cap", None)  # the plans the shared schedule stopped at the cap

    def run(self, plan: Plan, tasks: list[Task], report: Callable, progress: Any) -> None:
        from inmind_exp.exec.interface import Job

        job = Job(plan, list(tasks), report, progress)
        self.ray_executor.submit(job)
        while not job.done.wait(0.5):
            pass
        if job.error is not None:
            raise job.error


class _ConfigurationFilter(logging.Filter):
    """Passes the messages about one configuration: those naming it (``[inmind] <name>: ...``, ``[progress] <name>:
    ...``, ``[inmind] <name> finished ...``)."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.pattern = re.compile(rf"^\[\w+\] {re.escape(name)}[: ]")

    def filter(self, record: logging.LogRecord) -> bool:
        return bool(self.pattern.match(record.getMessage()))


@contextmanager
def job_logs(plans: list[Plan]) -> Iterator[None]:
    """While a sweep runs, each configuration's messages also go to its job directory's ``launch.log`` (the sweep's
    ``launch.log`` holds them all), so every job directory tells its own run's story."""
    ours = logging.getLogger("inmind_exp")
    template = next((h.formatter for h in ours.handlers if isinstance(h, logging.FileHandler)), None)
    handlers = []
    written = {h.baseFilename for h in ours.handlers if isinstance(h, logging.FileHandler)}
    for p in plans:
        p.job_dir.mkdir(parents=True, exist_ok=True)
        if os.path.abspath(p.job_dir / "launch.log") in written:  # a single run's: it has every line already
            continue
        h = logging.FileHandler(p.job_dir / "launch.log")
        h.setFormatter(template or logging.Formatter("[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"))
        h.addFilter(_ConfigurationFilter(p.name))
        ours.addHandler(h)
        handlers.append(h)
    try:
        yield
    finally:
        for h in handlers:
            ours.removeHandler(h)
            h.close()


def run_plans(plans: list[Plan], parent_key: str | None, parent_name: str, resources: Resources,
              executor: Any = None) -> list[RunResult | BaseException]:
    """Run every plan over one pool; each plan's result, or the exception that ended it, in the given order.
    An interrupt or a stuck cluster (raised by the schedule) is re-raised after every driver has saved its work.
    Every ``run.progress_every_s`` (the first plan's) the sweep logs ``configuration k of N done``, and at the end
    its totals and, when a task errored, the retry hint."""
    res = resources
    ray_executor = executor or res.executor
    shared = SharedExecutor(ray_executor)
    results: list[RunResult | BaseException | None] = [None] * len(plans)
    progress = SweepProgress(len(plans), plans[0].run.progress_every_s if plans else 0)

    lead = leaders(plans)  # a configuration that only changes the judge waits for its leader (run.reuse)
    ended = [threading.Event() for _ in plans]
    stopping = threading.Event()

    def drive(i: int, plan: Plan) -> None:
        try:
            if i in lead and not _wait(ended[lead[i]], stopping):
                raise RuntimeError(f"not run: the sweep stopped before {plans[lead[i]].name} (same configuration "
                                   "but the judge, whose answers this one re-judges from the call cache) ended")
            results[i] = run_plan(plan, parent_key=parent_key, parent_name=parent_name, executor=shared, resources=res,
                                  sweep=progress)
        except BaseException as e:  # noqa: BLE001 - reported by the caller
            results[i] = e
        finally:
            ended[i].set()
            progress.configuration_done()

    threads = [threading.Thread(target=drive, args=(i, p), name=f"inmind-plan-{i}", daemon=True)
               for i, p in enumerate(plans)]
    with job_logs(plans), live.display(plans[0].run.progress if plans else "auto"):
        _drive_all(plans, threads, ray_executor, progress, stopping)
    failed = [p.name for p, r in zip(plans, results) if isinstance(r, BaseException)]
    hint = retry_summary([(p.plan.name, p.errors, p.total, permanent_errors(p.records.values()))
                         for p in progress.plans], failed,
                         retry_errors=all(p.run.retry_errors for p in plans),
                         messages=[_message(r) for r in results if isinstance(r, BaseException)])
    if hint:
        log.info(hint, extra=FILE_ONLY)  # the terminal gets it as the launcher's closing line
    return [r if r is not None else RuntimeError("plan did not run") for r in results]


def _wait(leader_ended: threading.Event, stopping: threading.Event) -> bool:
    """Wait until the leader's driver has ended (True) or the schedule has stopped serving jobs (False)."""
    while not leader_ended.wait(0.2):
        if stopping.is_set():
            return False
    return True


def _drive_all(plans: list[Plan], threads: list[threading.Thread], ray_executor: Any, progress: SweepProgress,
               stopping: threading.Event | None = None) -> None:
    """Start every plan's driver thread and serve their jobs over one pool until all have ended."""
    from inmind_exp.display import stop

    def end() -> None:
        if stopping is not None:
            stopping.set()  # a configuration still waiting for its leader does not start on a stopped schedule
        for t in threads:
            t.join()

    for t in threads:
        t.start()
    try:
        if hasattr(ray_executor, "prewarm") and any(p.remaining() for p in plans) and not any(p.local for p in plans):
            ray_executor.prewarm(plans)
        ray_executor.run_jobs([], more=lambda: any(t.is_alive() for t in threads), tick=progress.tick)
    except BaseException:
        with stop.shielded():  # each driver saves its work and closes its MLflow run: a second Ctrl-C waits
            end()
        raise
    end()
    if len(progress.plans) > 1:  # (a single run's summary is its configuration's)
        log.info(progress.summary())


def _message(e: BaseException) -> str:
    from inmind_exp.console import error_line

    return error_line(e)


def preflight(plans: list[Plan], res: Resources) -> list[tuple[Plan, BaseException]]:
    """Every check a single run makes before work, for every plan with tasks left that calls a remote endpoint:
    the keys are set, the servers answer, the system's own needs (``MemorySystem.preflight``, e.g. tool calls).
    Run before Ray starts; each failing plan with its error (a plan on the embedded local server is checked
    when its driver starts the server)."""
    failures = []
    for plan in plans:
        if plan.local is not None or not plan.remaining():
            continue
        try:
            res.preflight(plan.endpoints.values(), plan.embedding)
            res.system_preflight(plan)
        except Exception as e:  # noqa: BLE001 - each configuration's problem is reported, then the launch exits 2
            failures.append((plan, e))
    return failures
