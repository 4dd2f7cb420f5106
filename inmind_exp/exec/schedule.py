"""The shared schedule: the tasks of one or many plans (a whole sweep) over one pool of task actors.

A prefix is built as soon as a worker is free and once per prefix identity, no worker idles while a task waits, a
task whose worker died is retried on another (up to ``run.max_task_attempts``), and each worker runs up to
``cluster.tasks_per_worker`` units at once but no more than an even share. The pool itself (Ray, the actors, the
services) is ``executor.RayExecutor``, seen here through ``Pool``; ray's exceptions are imported inside functions.
"""

from __future__ import annotations

import json
import logging
import time
from collections import deque
from pathlib import Path
from typing import Any, Callable

from inmind_exp.records import Task, TaskRecord
from inmind_exp.exec import snapshots
from inmind_exp.exec.interface import ClusterError, Job, Pool, PoolWorker, display_safely, first_line, retry_or_report
from inmind_exp.exec.watch import Watch
from inmind_exp.plan.plan import Plan
from inmind_exp.display.spend_cap import SpendCap
from inmind_exp.exec.worker import collect_api_keys, plan_endpoints

log = logging.getLogger(__name__)


class Schedule(Watch):
    """One pass of the scheduler over the executor's inbox: prefix builds first, then tasks, on every free worker.
    With ``run.lead_task`` a configuration's first task starts alone and its later tasks follow once it is done, so
    they find the background replies it cached instead of racing it for them (``following``)."""

    def __init__(self, ex: Pool, more: Callable[[], bool], tick: Callable[[], None] = lambda: None):
        self.ex = ex
        self.more = more
        self.tick = tick
        self.jobs: list[Job] = []
        self.ready_tasks: deque[tuple[Job, Task, int]] = deque()
        self.waiting: dict[str, list[tuple[Job, Task, int]]] = {}  # prefix hash -> tasks waiting for it
        self.builds: deque[Job] = deque()  # one job per prefix hash still to build
        self.building: set[str] = set()
        self.following: dict[int, list[tuple[Job, Task, int]]] = {}  # id(job) -> tasks waiting for its lead task
        self.inflight: dict[Any, tuple[str, Job, Task | None, int, PoolWorker, float]] = {}
        self.stalled_since: float | None = None
        self.cap = SpendCap(ex.spend_cap)
        self.dispatched = False  # a task has been handed out
        self._probe: Any = None  # a pending ask of the board whether any call has completed (``_watch_work``)
        self._probe_at = 0.0

    # -- intake ----------------------------------------------------------------------------------------------

    def _take(self, job: Job) -> None:
        ex = self.ex
        ray = ex.start(job.plan.cluster)
        spec = job.plan.worker_spec()
        ex.add_api_keys(collect_api_keys(plan_endpoints(job.plan)))
        job.spec_ref = ray.put(spec)
        if ex.board is not None:
            ex.board.forget.remote(job.plan.config_hash)  # the live spend counts this run's calls
        job.trace_ref = ray.put(job.plan.trace)
        job.outstanding = len(job.tasks)
        job.last_progress = time.perf_counter()
        self.jobs.append(job)
        if not job.tasks:
            job.finish()
            return
        blob = snapshots.saved_prefix(job.plan)
        if blob is not None:
            job.prefix_ref = ray.put(blob)
            self._ready([(job, t, 1) for t in job.tasks])
            return
        h = job.plan.prefix_hash
        if h not in self.waiting:
            self.waiting[h] = []
            self.builds.append(job)
        self.waiting[h].extend((job, t, 1) for t in job.tasks)

    def _intake(self) -> None:
        while True:
            with self.ex.lock:
                if not self.ex.inbox:
                    return
                job = self.ex.inbox.popleft()
            try:
                self._take(job)
            except BaseException as e:  # noqa: BLE001 - the job's own thread re-raises it
                job.finish(e)
                if isinstance(e, (KeyboardInterrupt, ClusterError)):
                    raise

    # -- the pool --------------------------------------------------------------------------------------------

    def _work_left(self) -> int:
        return (len(self.ready_tasks) + len(self.builds) + sum(len(v) for v in self.waiting.values())
                + sum(len(v) for v in self.following.values()))

    def _ready(self, entries: list[tuple[Job, Task, int]]) -> None:
        """Tasks whose prefix is ready: each job's first one now, with ``run.lead_task`` the others once it is done."""
        for job in {id(j): j for j, _, _ in entries}.values():
            mine = [e for e in entries if e[0] is job]
            if job.plan.run.lead_task and len(mine) > 1:
                self.ready_tasks.append(mine[0])
                self.following.setdefault(id(job), []).extend(mine[1:])
            else:
                self.ready_tasks.extend(mine)

    def _follow(self, job: Job) -> None:
        """``job``'s lead task is done (or will not run): its later tasks may start."""
        self.ready_tasks.extend(self.following.pop(id(job), []))

    def _grow(self) -> None:
        """Start actors up to what the waiting work can use and the cluster can hold; say so when it holds fewer."""
        ex = self.ex
        assert ex.cluster is not None
        want = min(ex.cluster.workers, len(self.inflight) + len(self.ready_tasks) + len(self.builds))
        if len(ex.workers) >= want:
            return
        cap = ex.capacity()
        if cap < ex.cluster.workers and ex.said_capacity != cap:
            ex.said_capacity = cap
            log.info(f"[inmind] the cluster has {cap} CPU(s) for task workers, fewer than cluster.workers="
                     f"{ex.cluster.workers}: running {cap} worker(s)")
        while len(ex.workers) < min(want, cap):
            ex.spawn()

    def _idle(self) -> list[PoolWorker]:
        assert self.ex.cluster is not None
        # up to tasks_per_worker units each, but no more than an even share of the work over every worker, those
        # still starting included: the first worker to start does not take what the others are about to run
        units = len(self.inflight) + len(self.ready_tasks) + len(self.builds)
        share = -(-units // max(1, len(self.ex.workers)))
        slots = max(1, min(self.ex.cluster.tasks_per_worker, share))
        # the least loaded first, so tasks spread over the workers before any takes a second one
        return sorted((w for w in self.ex.workers if w.ready_ref is None and w.running < slots), key=lambda w: w.running)

    def _assign(self) -> None:
        while self._assign_one():
            pass

    def _assign_one(self) -> bool:
        """Hand the next unit of work to the least loaded worker with a free slot; False when none or nothing left."""
        for w in self._idle()[:1]:
            if self.builds:
                job = self.builds.popleft()
                self.building.add(job.plan.prefix_hash)
                log.info(f"[inmind] {job.plan.name}: ingesting the {job.plan.session_index} prefix session(s) once ...")
                ref = w.actor.build_prefix.remote(job.spec_ref, job.trace_ref, job.plan.session_index)
                self.inflight[ref] = ("prefix", job, None, 1, w, time.perf_counter())
            elif self.ready_tasks:
                job, task, attempt = self.ready_tasks.popleft()
                if not self._within_cap(job):
                    self._follow(job)  # its later tasks meet the cap in turn
                    return True  # not started; the next unit is looked at
                p = job.plan
                ref = w.actor.run_task.remote(job.spec_ref, task, job.trace_ref, p.session_index, p.prefix_hash,
                                              job.prefix_ref, attempt, p.done.get(task.id))
                self.inflight[ref] = ("task", job, task, attempt, w, time.perf_counter())
                self.dispatched = True
            else:
                return False
            w.running += 1
            return True
        return False

    def _within_cap(self, job: Job) -> bool:
        """True while the spend cap lets one more task of ``job`` start; a task it stops counts as done (not run:
        rerunning resumes it)."""
        running = [j.plan for kind, j, *_ in self.inflight.values() if kind == "task"]
        if self.cap.allows(job.plan, [j.progress for j in self.jobs], running):
            return True
        self._count_done(job)
        return False

    # -- results ---------------------------------------------------------------------------------------------

    def _lost(self, w: PoolWorker, why: str) -> None:
        log.info(f"[inmind] worker {w.where.get('host', '?')}:{w.where.get('pid', '?')} lost ({why})")
        self.ex.drop(w)

    def _on_ready_worker(self, w: PoolWorker, ref: Any) -> None:
        from ray.exceptions import RayActorError, RayError

        w.ready_ref = None
        try:
            w.where = self.ex.ray.get(ref)
        except (RayActorError, RayError) as e:
            self._lost(w, f"could not start: {type(e).__name__}: {first_line(str(e))}")

    def _on_result(self, ref: Any) -> None:
        from ray.exceptions import RayActorError, RayTaskError

        kind, job, task, attempt, w, t0 = self.inflight.pop(ref)
        w.running = max(0, w.running - 1)
        plan = job.plan
        if kind == "task":
            self._follow(job)
        try:
            value = self.ex.ray.get(ref)
        except RayActorError as e:
            self._lost(w, f"{type(e).__name__} during {kind} of {plan.name}")
            if kind == "prefix":
                self.building.discard(plan.prefix_hash)
                self.builds.appendleft(job)
            elif attempt < plan.run.max_task_attempts:
                log.info(f"[inmind] {plan.name}: task {task.id} will run again on another worker (attempt {attempt + 1})")
                self.ready_tasks.appendleft((job, task, attempt + 1))
            else:
                self._final(job, plan.error_record(task, f"worker died {attempt} time(s): {e}", attempt))
            return
        except RayTaskError as e:
            if kind == "prefix":
                self._prefix_failed(plan.prefix_hash, e.as_instanceof_cause())
                return
            value = plan.error_record(task, f"{type(e.cause).__name__}: {e.cause}", attempt)
        if kind == "prefix":
            snapshots.save_prefix(plan, value.blob, time.perf_counter() - t0)
            display_safely("prefix spend", lambda: job.progress.prefix_spent(value.usage))
            blob_ref = self.ex.ray.put(value.blob)
            self.building.discard(plan.prefix_hash)
            entries = self.waiting.pop(plan.prefix_hash, [])
            for j, _, _ in entries:
                j.prefix_ref = blob_ref
            self._ready(entries)
            return
        rec: TaskRecord = value
        self.ex.working.set()
        _placement(plan, task, attempt, w.where)
        if retry_or_report(plan, task, rec, attempt, job.report):
            self.ready_tasks.append((job, task, attempt + 1))
        else:
            self._count_done(job)

    def _final(self, job: Job, rec: TaskRecord) -> None:
        job.report(rec)
        self._count_done(job)

    def _count_done(self, job: Job) -> None:
        job.outstanding -= 1
        if job.outstanding == 0:
            self._feed_usage([job])  # the closing line counts every call the board saw
            job.finish()

    def _prefix_failed(self, prefix_hash: str, error: BaseException) -> None:
        """A prefix that cannot be built ends every job waiting for it, with the builder's error."""
        self.building.discard(prefix_hash)
        for j, _, _ in self.waiting.pop(prefix_hash, []):
            j.finish(error)

    # -- the loop --------------------------------------------------------------------------------------------

    def _check_progress(self) -> None:
        """Give up on actors that never started; end the run when no worker is alive or placeable in time."""
        ex = self.ex
        assert ex.cluster is not None
        timeout = ex.cluster.start_timeout_s
        now = time.monotonic()
        for w in list(ex.workers):
            if w.ready_ref is not None and now - w.started > timeout:
                self._lost(w, f"not started within cluster.start_timeout_s={timeout:g}s")
        alive = [w for w in ex.workers if w.ready_ref is None]
        if alive or not self._work_left():
            self.stalled_since = None
            return
        if self.stalled_since is None:
            self.stalled_since = now
        elif now - self.stalled_since > timeout:
            cpus = ex.ray.cluster_resources().get("CPU", 0)
            raise ClusterError(
                f"the Ray cluster cannot make progress: no task worker alive or started within "
                f"cluster.start_timeout_s={timeout:g}s (the cluster has {cpus:g} CPU(s); {self._work_left()} "
                f"unit(s) of work left). Finished results are in the ledger; rerun to resume."
            )

    def loop(self) -> None:
        ray_mod = None
        try:
            while True:
                self._intake()
                ray_mod = self.ex.ray
                if ray_mod is None:  # nothing submitted yet
                    if not self.more():
                        return
                    time.sleep(0.05)
                    continue
                if not self._work_left() and not self.inflight and not self.more() and not self.ex.inbox:
                    return
                self._grow()
                self._assign()
                self._check_progress()
                self._display()
                self._watch_work()
                waits = list(self.inflight) + [w.ready_ref for w in self.ex.workers if w.ready_ref is not None]
                if not waits:
                    time.sleep(0.05)
                    continue
                ready, _ = ray_mod.wait(waits, num_returns=1, timeout=0.5)
                for ref in ready:
                    if ref in self.inflight:
                        self._on_result(ref)
                    else:
                        w = next((w for w in self.ex.workers if w.ready_ref == ref), None)
                        if w is not None:
                            self._on_ready_worker(w, ref)
        except BaseException as e:
            for j in self.jobs:
                j.finish(e)
            with self.ex.lock:
                self.ex.failed = e
                while self.ex.inbox:
                    self.ex.inbox.popleft().finish(e)
            raise
        finally:
            self.ex.working.set()


def _placement(plan: Plan, task: Task, attempt: int, where: dict[str, Any]) -> None:
    """Which node and process ran each task: ``<root>/placement/<config hash>.jsonl`` (for debugging a cluster)."""
    path: Path = plan.root / "placement" / f"{plan.config_hash}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps({"task_id": task.id, "config": plan.config_hash, "attempt": attempt, **where},
                           sort_keys=True) + "\n")
