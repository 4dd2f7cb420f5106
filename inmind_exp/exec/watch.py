"""What the schedule shows while it runs: each job's progress line with the phases its running units reported to
the board and the spend the board saw, and when the tasks are under way (``Pool.working``). A base of
``schedule.Schedule``, apart so the schedule itself reads as scheduling."""

from __future__ import annotations

import logging
import time
from typing import Any, Callable

from inmind_exp.display.phases import STARTING, unit_key
from inmind_exp.exec.interface import Job, Pool, display_safely, feed_usage

log = logging.getLogger(__name__)


class Watch:
    """The schedule's display and its watch for work under way; the attributes are the schedule's."""

    ex: Pool
    jobs: list[Job]
    inflight: dict[Any, Any]
    tick: Callable[[], None]
    dispatched: bool
    _probe: Any
    _probe_at: float

    def _display(self) -> None:
        """Each running job whose ``run.progress_every_s`` has passed (0: never) gets its progress line, with the
        phases its running units last reported to the board; then the sweep's ``tick``."""
        now = time.perf_counter()
        due = [j for j in self.jobs if not j.done.is_set() and j.plan.run.progress_every_s > 0
               and now - j.last_progress >= j.plan.run.progress_every_s]
        if due:
            phases = self._phases()
            self._feed_usage(due)
            running: dict[int, list[str]] = {id(j): [] for j in due}
            for _kind, job, task, attempt, _, _ in self.inflight.values():
                if id(job) in running:
                    key = unit_key(job.plan.config_hash, task.id if task is not None else None, attempt)
                    running[id(job)].append(phases.get(key, STARTING))
            starting = sum(1 for w in self.ex.workers if w.ready_ref is not None)
            idle = f"queued, {starting} worker(s) starting" if starting else "queued"
            for j in due:
                j.last_progress = now
                display_safely("progress display", lambda: j.progress(running[id(j)], idle))
        display_safely("sweep progress", self.tick)

    def _feed_usage(self, jobs: list[Job]) -> None:
        """Give ``jobs``' progress the calls the board saw complete (the spend counted as calls complete)."""
        board = self.ex.board
        if board is None or not jobs:
            return
        try:
            usage = self.ex.ray.get(board.usage.remote(), timeout=5)
        except Exception as e:  # noqa: BLE001 - the display is best effort
            log.debug(f"phase board usage: {type(e).__name__}: {e}")
            return
        for j in jobs:
            display_safely("live spend", lambda: feed_usage(j.progress, usage.get(j.plan.config_hash)))

    def _phases(self) -> dict[str, str]:
        """The board's phases by unit; empty if it does not answer in time (the lines then say ``starting``)."""
        board = self.ex.board
        if board is None:
            return {}
        try:
            return self.ex.ray.get(board.snapshot.remote(), timeout=5)
        except Exception as e:  # noqa: BLE001 - the display is best effort
            log.debug(f"phase board: {type(e).__name__}: {e}")
            return {}

    def _watch_work(self) -> None:
        """Set ``ex.working`` once the tasks are under way: the board has seen a call complete (or a task has
        finished, or the schedule ended). The end-of-sweep report's background imports wait for it, so it runs
        while the tasks wait on their endpoints, not while the workers start their first tasks (imports, clients,
        connections), which it slowed by seconds on a 2-core machine."""
        ex = self.ex
        if ex.working.is_set() or not self.dispatched:
            return
        if ex.board is None:
            ex.working.set()
            return
        if self._probe is not None:
            if not ex.ray.wait([self._probe], timeout=0)[0]:
                return
            probe, self._probe = self._probe, None
            try:
                seen = bool(ex.ray.get(probe))
            except Exception as e:  # noqa: BLE001 - a lost board holds nothing back
                log.debug(f"phase board usage: {type(e).__name__}: {e}")
                seen = True
            if seen:
                ex.working.set()
                return
        now = time.monotonic()
        if self._probe is None and now - self._probe_at >= 0.25:
            self._probe_at = now
            self._probe = ex.board.usage.remote()
