"""Executors run a plan's remaining tasks and hand each final record back to the driver. ``RayExecutor`` keeps a pool
of ``TaskWorker`` actors (reused by every configuration of a sweep) and one cluster-wide limiter actor, and retries a
task whose worker died; ``InProcessExecutor`` runs the same worker in this process, for tests and debugging.

The only module importing ray (always inside functions, so the rest of the package imports without it).
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable, Protocol

from inmind_exp import env
from inmind_exp.errors import PlanError
from inmind_exp.records import Task, TaskRecord
from inmind_exp.run import snapshots
from inmind_exp.run.plan import ClusterSettings, Plan, WorkerSpec
from inmind_exp.run.worker import TaskWorker

log = logging.getLogger(__name__)

#: called with each task's final record (success, or error after the last attempt)
Report = Callable[[TaskRecord], None]


class Executor(Protocol):
    def run(self, plan: Plan, tasks: list[Task], report: Report, progress: Callable[[], None]) -> None:
        """Run ``tasks`` of a bound ``plan``; ``progress`` is called whenever the live display is due."""


def _first_line(error: str) -> str:
    return error.splitlines()[0][:200]


def _retry_or_report(plan: Plan, task: Task, rec: TaskRecord, attempt: int, report: Report) -> bool:
    """True when an errored result should be retried; otherwise report it (logging a final error)."""
    if rec.error and attempt < plan.run.max_task_attempts:
        log.info(f"[inmind] {plan.name}: task {task.id} failed (attempt {attempt}/{plan.run.max_task_attempts}), "
                 f"retrying: {_first_line(rec.error)}")
        return True
    report(rec)
    if rec.error:
        log.info(f"[inmind] {plan.name}: task {task.id} recorded as error: {_first_line(rec.error)}")
    return False


def _prefix_blob(plan: Plan, build: Callable[[], bytes]) -> bytes:
    """The prefix snapshot: from ``plan.prefix_path`` if built before, else built now and saved."""
    if plan.prefix_path.is_file():
        return plan.prefix_path.read_bytes()
    t = time.perf_counter()
    log.info(f"[inmind] {plan.name}: ingesting the {plan.session_index} prefix session(s) once ...")
    blob = build()
    snapshots.save(plan.prefix_path, blob)
    log.info(f"[inmind] {plan.name}: prefix snapshot ready ({len(blob) / 1024:.0f} KiB, {time.perf_counter() - t:.1f}s)")
    return blob


class InProcessExecutor:
    """One ``TaskWorker`` in this process, tasks in order: no Ray, no worker deaths to survive."""

    def __init__(self, limiter: Any = None) -> None:
        self.worker = TaskWorker(limiter)

    def run(self, plan: Plan, tasks: list[Task], report: Report, progress: Callable[[], None]) -> None:
        self.worker.configure(plan.worker_spec())
        blob = _prefix_blob(plan, lambda: self.worker.build_prefix(plan.trace, plan.session_index))
        queue = [(t, 1) for t in tasks]
        while queue:
            task, attempt = queue.pop(0)
            rec = self.worker.run_task(task, plan.trace, plan.session_index, plan.prefix_hash, blob, attempt)
            if _retry_or_report(plan, task, rec, attempt, report):
                queue.append((task, attempt + 1))
            progress()


class LimiterActor:
    """Cluster-wide concurrency and RPM/TPM limits per endpoint, shared by every worker (an async Ray actor)."""

    def __init__(self) -> None:
        import asyncio

        from inmind_exp.llm.limits import LeaseBook

        self._cond = asyncio.Condition()
        self._book = LeaseBook()

    async def acquire(self, key: str, tokens: int, max_concurrency: int, rpm: float | None, tpm: float | None,
                      lease_ttl_s: float) -> str:
        import asyncio

        async with self._cond:
            while True:
                lease, wait = self._book.try_acquire(key, tokens, max_concurrency, rpm, tpm, time.monotonic(), lease_ttl_s)
                if lease is not None:
                    return lease
                try:
                    await asyncio.wait_for(self._cond.wait(), timeout=wait)
                except asyncio.TimeoutError:
                    pass

    async def release(self, lease: str) -> None:
        async with self._cond:
            if self._book.release(lease):
                self._cond.notify_all()


class RayLimiterClient:
    """The ``Limiter`` interface of inmind_exp.llm.limits, forwarded to the shared ``LimiterActor``."""

    def __init__(self, actor: Any, lease_ttl_s: float = 1800.0):
        self.actor = actor
        self.lease_ttl_s = lease_ttl_s

    def acquire(self, key: str, tokens: int, max_concurrency: int, rpm: float | None, tpm: float | None) -> str:
        import ray

        return ray.get(self.actor.acquire.remote(key, tokens, max_concurrency, rpm, tpm, self.lease_ttl_s))

    def release(self, lease: str) -> None:
        self.actor.release.remote(lease)


class RayExecutor:
    """Starts (or joins) Ray once per process, with one limiter actor and a pool of task actors that later
    configurations reuse; ``worker_cls`` is the actor's class (tests substitute one that crashes)."""

    def __init__(self, worker_cls: type[TaskWorker] = TaskWorker) -> None:
        self.worker_cls = worker_cls
        self._actor_cls: Any = None
        self.workers: list[Any] = []
        self.limiter: Any = None
        self.ray: Any = None

    def start(self, cluster: ClusterSettings) -> Any:
        """The ray module, initialised: join ``cluster.address`` or start a local Ray sized for the workers."""
        if self.ray is not None:
            return self.ray
        import ray

        env.apply(env.RAY)
        if not ray.is_initialized():
            runtime_env = dict(cluster.runtime_env)
            runtime_env["env_vars"] = {**dict(runtime_env.get("env_vars") or {}), **env.WORKER}
            kwargs: dict[str, Any] = {"include_dashboard": False, "runtime_env": runtime_env, "log_to_driver": True}
            if cluster.address:
                try:
                    ray.init(address=cluster.address, **kwargs)
                except ConnectionError as e:
                    raise PlanError(
                        f"cluster.address={cluster.address}: no Ray cluster answered ({e}); start one with "
                        f"`ray start --head` or use cluster=local"
                    ) from None
            else:
                ray.init(address="local", num_cpus=cluster.num_cpus or max(2, cluster.workers),
                         object_store_memory=cluster.object_store_memory, **kwargs)
        self.limiter = ray.remote(LimiterActor).options(max_concurrency=1000).remote()
        self._actor_cls = ray.remote(num_cpus=1)(self.worker_cls)
        self.ray = ray
        import atexit

        atexit.register(self.close)  # before Ray's own shutdown (atexit runs last-registered first)
        return ray

    def close(self, timeout_s: float = 30.0) -> None:
        """Let every live worker remove its temp dir (Ray kills actor processes without running atexit)."""
        if self.ray is None or not self.workers or not self.ray.is_initialized():
            return
        try:
            self.ray.get([w.close.remote() for w in self.workers], timeout=timeout_s)
        except Exception as e:  # a dead worker's dir is removed by the next worker's start
            log.debug(f"closing workers: {type(e).__name__}: {e}")

    def _new_worker(self) -> Any:
        return self._actor_cls.remote(RayLimiterClient(self.limiter))

    def pool(self, n: int, spec: WorkerSpec) -> list[Any]:
        """``n`` task actors configured with ``spec``, reusing the ones earlier configurations started."""
        while len(self.workers) < n:
            self.workers.append(self._new_worker())
        self.ray.get([w.configure.remote(spec) for w in self.workers[:n]])
        return self.workers[:n]

    def replace_worker(self, old: Any, spec: WorkerSpec) -> Any:
        """A fresh actor in place of one that died."""
        new = self._new_worker()
        new.configure.remote(spec)
        self.workers = [new if w is old else w for w in self.workers]
        return new

    def run(self, plan: Plan, tasks: list[Task], report: Report, progress: Callable[[], None]) -> None:
        """Keep every worker busy with one task; retry a task whose worker died or whose result is an error."""
        ray = self.start(plan.cluster)
        from ray.exceptions import RayActorError

        spec = plan.worker_spec()
        workers = self.pool(max(1, min(plan.cluster.workers, len(tasks))), spec)
        prefix_ref = ray.put(_prefix_blob(plan, lambda: ray.get(workers[0].build_prefix.remote(plan.trace, plan.session_index))))
        trace_ref = ray.put(plan.trace)
        queue: list[tuple[Task, int]] = [(t, 1) for t in tasks]
        inflight: dict[Any, tuple[Task, int, int]] = {}
        last_progress = 0.0

        def submit(wi: int) -> None:
            task, attempt = queue.pop(0)
            ref = workers[wi].run_task.remote(task, trace_ref, plan.session_index, plan.prefix_hash, prefix_ref, attempt)
            inflight[ref] = (task, attempt, wi)

        for wi in range(len(workers)):
            if queue:
                submit(wi)
        while inflight:
            ready, _ = ray.wait(list(inflight), num_returns=1)
            task, attempt, wi = inflight.pop(ready[0])
            try:
                rec: TaskRecord = ray.get(ready[0])
            except RayActorError as e:
                log.info(f"[inmind] {plan.name}: worker died on task {task.id} (attempt {attempt}): {type(e).__name__}")
                workers[wi] = self.replace_worker(workers[wi], spec)
                if attempt < plan.run.max_task_attempts:
                    queue.insert(0, (task, attempt + 1))
                else:
                    report(plan.error_record(task, f"worker died {attempt} time(s): {e}", attempt))
                if queue:
                    submit(wi)
                continue
            if _retry_or_report(plan, task, rec, attempt, report):
                queue.append((task, attempt + 1))
            if queue:
                submit(wi)
            now = time.perf_counter()
            if now - last_progress >= plan.run.progress_every_s or not inflight:
                progress()
                last_progress = now
