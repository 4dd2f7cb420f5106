"""What every executor shares: the ``Executor`` protocol, the callbacks it reports through (``Report`` for each
task's final record, ``Progress`` for the live display), a ``Job`` (one plan's share of a schedule), ``ClusterError``,
and the two rules both executors apply (an errored task is retried up to ``run.max_task_attempts`` before it is
reported; the display never ends a run)."""

from __future__ import annotations

import logging
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from inmind_exp.console import permanent
from inmind_exp.errors import InmindError
from inmind_exp.records import Task, TaskRecord, Usage
from inmind_exp.plan.plan import Plan
from inmind_exp.config.settings import ClusterSettings

log = logging.getLogger(__name__)

#: called with each task's final record (success, or error after the last attempt)
Report = Callable[[TaskRecord], None]


class Progress(Protocol):
    """The driver's live display of one plan (``progress.PlanProgress``)."""

    def __call__(self, running: list[str], idle: str = "queued") -> None:
        """Called every ``run.progress_every_s`` while the plan's work runs, with the phases of its running units
        (``idle`` says why there are none)."""

    def prefix_spent(self, usage: dict[str, Usage]) -> None:
        """The calls of the plan's prefix build (no task record holds them)."""


class ClusterError(InmindError, RuntimeError):
    """The cluster cannot make progress: no worker alive and none could be started in time."""


@dataclass(eq=False)
class Job:
    """One plan's share of the schedule: its remaining tasks, where results go, and when it is over."""

    plan: Plan
    tasks: list[Task]
    report: Report
    progress: Progress
    done: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None
    outstanding: int = 0
    spec_ref: Any = None
    trace_ref: Any = None
    prefix_ref: Any = None
    last_progress: float = 0.0

    def finish(self, error: BaseException | None = None) -> None:
        if not self.done.is_set():
            self.error = error
            self.done.set()


class Executor(Protocol):
    def run(self, plan: Plan, tasks: list[Task], report: Report, progress: Progress) -> None:
        """Run ``tasks`` of a bound ``plan``; ``progress`` is called whenever the live display is due."""


def first_line(error: str) -> str:
    return error.splitlines()[0][:200]


def retry_or_report(plan: Plan, task: Task, rec: TaskRecord, attempt: int, report: Report) -> bool:
    """True when an errored result should be retried (not one a retry cannot fix, ``console.permanent``: an HTTP
    400 or 401 gets the same answer again); otherwise report it (logging a final error)."""
    if rec.error and attempt < plan.run.max_task_attempts and not permanent(rec.error):
        log.info(f"[inmind] {plan.name}: task {task.id} failed (attempt {attempt}/{plan.run.max_task_attempts}), "
                 f"retrying: {first_line(rec.error)}")
        return True
    report(rec)
    if rec.error:
        log.info(f"[inmind] {plan.name}: task {task.id} recorded as error: {first_line(rec.error)}")
    return False


def display_safely(what: str, show: Callable[[], None]) -> None:
    """Run a live-display step; a failure is logged at debug level, never raised: the display never ends a run."""
    try:
        show()
    except Exception as e:  # noqa: BLE001
        log.debug(f"{what}: {type(e).__name__}: {e}")


@dataclass(eq=False)
class PoolWorker:
    """One task actor of the pool, as the schedule sees it: started when, ready or not, where, how busy."""

    actor: Any
    started: float
    ready_ref: Any = None
    where: dict[str, Any] = field(default_factory=dict)
    running: int = 0  # units in flight on this actor (up to cluster.tasks_per_worker; a prefix build takes one)


class Pool(Protocol):
    """What the schedule needs of the pool it runs on (``executor.RayExecutor``)."""

    cluster: ClusterSettings | None
    workers: list[PoolWorker]
    ray: Any
    board: Any
    lock: threading.Lock
    inbox: deque[Job]
    failed: BaseException | None
    said_capacity: int | None  # the capacity last logged as below cluster.workers
    spend_cap: Any  # the plans stopped at their spend cap (``spend_cap.CapRecord``)
    #: set once a schedule's tasks are under way (a call has completed, or a task has finished) or it ends
    #: (``Schedule._watch_work``): the end-of-sweep report's imports wait for it, so they
    #: use the CPU the tasks leave idle while they wait on their endpoints, not the pool's start-up
    working: threading.Event

    def start(self, cluster: ClusterSettings) -> Any: ...
    def add_api_keys(self, api_keys: Any) -> None: ...
    def capacity(self) -> int: ...
    def spawn(self) -> PoolWorker: ...
    def drop(self, w: PoolWorker) -> None: ...


def feed_usage(progress: Any, usage: Any) -> None:
    """Hand the board's count of a configuration's completed calls to its progress (``PlanProgress.live``)."""
    feed = getattr(progress, "live", None)
    if feed is not None:
        feed(usage)
