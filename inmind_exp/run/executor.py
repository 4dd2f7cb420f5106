"""Executors run plans' remaining tasks and hand each final record back to the driver.

``RayExecutor`` schedules the tasks of one or many plans (a whole sweep) over one pool of ``TaskWorker`` actors: a
prefix is built as soon as a worker is free, no worker idles while a task waits, a task whose worker died is
retried on another, and the pool is sized by what the cluster has. Nothing waits forever: a worker that cannot be
started within ``cluster.start_timeout_s`` is given up, and when no worker is alive or placeable the run ends with a
``ClusterError``. One limiter actor on the driver's (head) node enforces endpoint limits cluster-wide; the driver's
API keys reach the workers as a call argument (``worker.Secrets``), never through the config or a runtime env.
``InProcessExecutor`` runs the same worker in this process, for tests and debugging. Both log each plan's progress
line every ``run.progress_every_s`` while its work runs, with the phases running units report to a ``PhaseBoard``.

The only module importing ray (always inside functions, so the rest of the package imports without it).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol

from inmind_exp import env
from inmind_exp.errors import InmindError, PlanError
from inmind_exp.records import Task, TaskRecord, Usage
from inmind_exp.run import snapshots
from inmind_exp.run.plan import ClusterSettings, Plan
from inmind_exp.run.progress import STARTING, PhaseBoard, unit_key
from inmind_exp.run.spend_cap import SpendCap, spends
from inmind_exp.run.worker import Secrets, TaskWorker, collect_secrets, plan_endpoints

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


class Executor(Protocol):
    def run(self, plan: Plan, tasks: list[Task], report: Report, progress: Progress) -> None:
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


def _saved_prefix(plan: Plan) -> bytes | None:
    return plan.prefix_path.read_bytes() if plan.prefix_path.is_file() else None


def _save_prefix(plan: Plan, blob: bytes, seconds: float) -> None:
    snapshots.save(plan.prefix_path, blob)
    log.info(f"[inmind] {plan.name}: prefix snapshot ready ({len(blob) / 1024:.0f} KiB, {seconds:.1f}s)")


def _prefix_blob(plan: Plan, build: Callable[[], bytes]) -> bytes:
    """The prefix snapshot: from ``plan.prefix_path`` if built before, else built now and saved."""
    blob = _saved_prefix(plan)
    if blob is not None:
        return blob
    t = time.perf_counter()
    log.info(f"[inmind] {plan.name}: ingesting the {plan.session_index} prefix session(s) once ...")
    blob = build()
    _save_prefix(plan, blob, time.perf_counter() - t)
    return blob


#: the project's packages shipped to nodes that do not have them installed (``cluster.ship_code``)
SHIPPED_PACKAGES = ("inmind_exp", "systems", "analysis")
#: never shipped: byte code, caches and run outputs (the .gitignore's large paths), should any sit inside a package
SHIP_EXCLUDES = ["__pycache__", "*.pyc", "*.egg-info", ".inmind_cache", "mlruns", "mlflow.db", "runs", "multirun",
                 "outputs", "reports", ".pytest_cache"]


def code_runtime_env(base: dict[str, Any] | None = None) -> dict[str, Any]:
    """``base`` plus Ray ``py_modules`` for the project's packages (from wherever this driver imports them), so
    workers import the driver's code even on nodes where it is not installed."""
    import importlib

    env_ = dict(base or {})
    mods = [str(Path(importlib.import_module(m).__file__).parent) for m in SHIPPED_PACKAGES]  # type: ignore[arg-type]
    env_["py_modules"] = [*mods, *list(env_.get("py_modules") or [])]
    env_["excludes"] = [*SHIP_EXCLUDES, *list(env_.get("excludes") or [])]
    return env_


class InProcessExecutor:
    """One ``TaskWorker`` in this process, tasks in order: no Ray, no worker deaths to survive."""

    def __init__(self, limiter: Any = None) -> None:
        self.board = PhaseBoard()
        self.worker = TaskWorker(limiter, board=self.board)

    def run(self, plan: Plan, tasks: list[Task], report: Report, progress: Progress) -> None:
        spec = plan.worker_spec()
        self.board.forget(plan.config_hash)
        stop = threading.Event()
        ticker = threading.Thread(target=self._tick, args=(plan.run.progress_every_s, progress, stop, plan.config_hash),
                                  name="inmind-progress", daemon=True)
        ticker.start()
        try:
            def build() -> bytes:
                built = self.worker.build_prefix(spec, plan.trace, plan.session_index)
                progress.prefix_spent(built.usage)
                return built.blob

            blob = _prefix_blob(plan, build)
            queue = [(t, 1) for t in tasks]
            cap = SpendCap()
            while queue:
                task, attempt = queue.pop(0)
                if not cap.allows(plan, spends([progress]), []):
                    break  # the spend cap: the rest are not started (run.spend_cap)
                rec = self.worker.run_task(spec, task, plan.trace, plan.session_index, plan.prefix_hash, blob, attempt)
                if _retry_or_report(plan, task, rec, attempt, report):
                    queue.append((task, attempt + 1))
        finally:
            stop.set()
            ticker.join()
            _display_safely("live spend", lambda: _feed_usage(progress, self.board.usage().get(plan.config_hash)))

    def _tick(self, every_s: float, progress: Progress, stop: threading.Event, plan_hash: str = "") -> None:
        """Every ``every_s`` (0: never) until ``stop``: the progress line, with the one running unit's phase."""
        while every_s > 0 and not stop.wait(every_s):
            _display_safely("live spend", lambda: _feed_usage(progress, self.board.usage().get(plan_hash)))
            _display_safely("progress display", lambda: progress(list(self.board.snapshot().values()) or [STARTING]))


def _feed_usage(progress: Any, usage: dict[str, Usage] | None) -> None:
    """Hand the board's count of a configuration's completed calls to its progress (``PlanProgress.live``)."""
    feed = getattr(progress, "live", None)
    if feed is not None:
        feed(usage)


def _display_safely(what: str, show: Callable[[], None]) -> None:
    """Run a live-display step; a failure is logged at debug level, never raised: the display never ends a run."""
    try:
        show()
    except Exception as e:  # noqa: BLE001
        log.debug(f"{what}: {type(e).__name__}: {e}")


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
    """The ``Limiter`` interface of inmind_exp.llm.limits, forwarded to the shared ``LimiterActor``. Should the actor
    be lost, the worker falls back to limiting its own requests (logged once) instead of failing its task."""

    def __init__(self, actor: Any, lease_ttl_s: float = 1800.0):
        self.actor = actor
        self.lease_ttl_s = lease_ttl_s
        self._local: Any = None
        self._local_leases: set[str] = set()

    def __getstate__(self) -> dict[str, Any]:
        return {"actor": self.actor, "lease_ttl_s": self.lease_ttl_s}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["actor"], state["lease_ttl_s"])  # type: ignore[misc]

    def _fallback(self, error: BaseException) -> Any:
        if self._local is None:
            from inmind_exp.llm.limits import LocalLimiter

            log.warning(f"[inmind] the cluster limiter is unavailable ({type(error).__name__}); "
                        f"this worker now limits its own requests")
            self._local = LocalLimiter()
        return self._local

    def acquire(self, key: str, tokens: int, max_concurrency: int, rpm: float | None, tpm: float | None) -> str:
        import ray
        from ray.exceptions import RayActorError

        if self._local is None:
            try:
                return ray.get(self.actor.acquire.remote(key, tokens, max_concurrency, rpm, tpm, self.lease_ttl_s))
            except RayActorError as e:
                self._fallback(e)
        lease = self._local.acquire(key, tokens, max_concurrency, rpm, tpm)
        self._local_leases.add(lease)
        return lease

    def release(self, lease: str) -> None:
        if lease in self._local_leases:
            self._local_leases.discard(lease)
            self._local.release(lease)
        elif self._local is None:
            self.actor.release.remote(lease)


class CacheActor:
    """One call cache for the whole cluster (``run.cache=cluster``): lives on the driver's node and keeps the
    ``CallCache`` of each cache directory there, so no completion or embedding is paid twice across nodes that do
    not share a path. A threaded actor: gets and puts of many workers run at once (``CallCache`` is safe for that)."""

    def __init__(self) -> None:
        self._caches: dict[str, Any] = {}

    def _cache(self, directory: str) -> Any:
        from inmind_exp.llm import CallCache

        if directory not in self._caches:
            self._caches[directory] = CallCache(directory)
        return self._caches[directory]

    def get(self, directory: str, kind: str, key: str) -> Any:
        return self._cache(directory).get(kind, key)

    def put(self, directory: str, kind: str, key: str, value: Any) -> None:
        self._cache(directory).put(kind, key, value)

    def count(self, directory: str, kind: str) -> int:
        return self._cache(directory).count(kind)


class RayCacheClient:
    """The ``CallCache`` interface (get/put/count), forwarded to the shared ``CacheActor`` for one directory."""

    def __init__(self, actor: Any, directory: str):
        self.actor = actor
        self.dir = Path(directory)
        self.lost = False

    def _call(self, method: str, *args: Any) -> Any:
        """The service's answer; should it be lost, the worker goes on uncached (logged once), never fails a task."""
        import ray
        from ray.exceptions import RayActorError

        if self.lost:
            return None
        try:
            return ray.get(getattr(self.actor, method).remote(str(self.dir), *args))
        except RayActorError as e:
            self.lost = True
            log.warning(f"[inmind] the cluster cache is unavailable ({type(e).__name__}); this worker goes on uncached")
            return None

    def get(self, kind: str, key: str) -> Any | None:
        return self._call("get", kind, key)

    def put(self, kind: str, key: str, value: Any) -> None:
        self._call("put", kind, key, value)  # waited for: stored before the next call can ask for it

    def count(self, kind: str) -> int:
        return int(self._call("count", kind) or 0)


# -- the shared schedule ------------------------------------------------------------------------------------------

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


@dataclass(eq=False)
class _Worker:
    actor: Any
    started: float
    ready_ref: Any = None
    where: dict[str, Any] = field(default_factory=dict)
    running: int = 0  # units in flight on this actor (up to cluster.tasks_per_worker; a prefix build takes one)


class RayExecutor:
    """Starts (or joins) Ray once per process, with one limiter actor and a pool of task actors shared by every plan
    it runs; ``worker_cls`` is the actor's class (tests substitute one that crashes)."""

    def __init__(self, worker_cls: type[TaskWorker] = TaskWorker) -> None:
        self.worker_cls = worker_cls
        self._actor_cls: Any = None
        self.workers: list[_Worker] = []
        self.limiter: Any = None
        self.cache_actor: Any = None
        self.board: Any = None
        self.ray: Any = None
        self.cluster: ClusterSettings | None = None
        self.secrets: Secrets = Secrets({})
        self._lock = threading.Lock()
        self._inbox: deque[Job] = deque()
        self._failed: BaseException | None = None  # set when a schedule ended by an error: later jobs get it
        self._start_lock = threading.Lock()

    # -- start-up ---------------------------------------------------------------------------------------------

    def start(self, cluster: ClusterSettings) -> Any:
        """The ray module, initialised: join ``cluster.address`` or start a local Ray sized for the workers."""
        with self._start_lock:
            if self.ray is None:
                self._start(cluster)
            return self.ray

    def _start(self, cluster: ClusterSettings) -> None:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        from inmind_exp.run import stop

        env.apply(env.RAY)
        if not ray.is_initialized():
            runtime_env = code_runtime_env(dict(cluster.runtime_env)) if cluster.ship_code else dict(cluster.runtime_env)
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
        stop.install()  # ray.init replaced the SIGTERM handler with one that kills Ray under the driver
        # the limiter and the cache service live on the head node (Ray's "node:__internal_head__" resource; the
        # driver's node if a cluster has none): losing a worker node never takes them down. They hold no CPU, so
        # they never compete with task actors for a slot.
        head = {"resources": {"node:__internal_head__": 0.001}} if ray.cluster_resources().get(
            "node:__internal_head__") else {"scheduling_strategy": NodeAffinitySchedulingStrategy(
                node_id=ray.get_runtime_context().get_node_id(), soft=True)}
        self.limiter = ray.remote(LimiterActor).options(max_concurrency=1000, num_cpus=0, **head).remote()
        self.cache_actor = ray.remote(CacheActor).options(max_concurrency=32, num_cpus=0, **head).remote()
        # one caller's reports are applied in the order sent only by an actor that runs one call at a time
        self.board = ray.remote(PhaseBoard).options(max_concurrency=1, num_cpus=0, **head).remote()
        # a threaded actor: it runs up to tasks_per_worker calls at once (tasks waiting on endpoints use no CPU)
        self._actor_cls = ray.remote(num_cpus=1, max_concurrency=max(1, cluster.tasks_per_worker) + 1)(self.worker_cls)
        self.cluster = cluster
        self.ray = ray
        import atexit
        import weakref

        # before Ray's own shutdown (atexit runs last-registered first); a weak reference, so that registering does
        # not keep a discarded executor, and the CPUs its actors hold, alive for the life of the process
        me = weakref.ref(self)
        atexit.register(lambda: (lambda ex: ex and ex.close())(me()))
        return ray

    def close(self, timeout_s: float = 30.0) -> None:
        """Let every live worker remove its temp dir (Ray kills actor processes without running atexit)."""
        if self.ray is None or not self.workers or not self.ray.is_initialized():
            return
        try:
            self.ray.get([getattr(w, 'actor', w).close.remote() for w in self.workers], timeout=timeout_s)
        except Exception as e:  # a dead worker's dir is removed by the next worker's start
            log.debug(f"closing workers: {type(e).__name__}: {e}")

    def shutdown(self) -> None:
        """Close every worker, then end the pool's actors, the limiter and the cache service: their CPUs are free
        again for another executor in the same Ray (Ray itself keeps running; ``ray.kill`` is asynchronous)."""
        self.close()
        for w in list(self.workers):
            self._drop(w)
        for actor in (self.limiter, self.cache_actor, self.board):
            if actor is not None:
                try:
                    self.ray.kill(actor, no_restart=True)
                except Exception:  # noqa: BLE001 - already gone
                    pass
        self.limiter = self.cache_actor = self.board = None
        self.ray = None

    def __enter__(self) -> "RayExecutor":
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def capacity(self) -> int:
        """How many task actors the cluster can hold now: its CPUs (each actor takes one), capped by cluster.workers."""
        assert self.cluster is not None
        cpus = int(self.ray.cluster_resources().get("CPU", 0))
        return max(0, min(self.cluster.workers, cpus))

    def _spawn(self) -> _Worker:
        actor = self._actor_cls.remote(RayLimiterClient(self.limiter), self.cache_actor, self.board)
        w = _Worker(actor, time.monotonic())
        w.ready_ref = actor.configure.remote(self.secrets)
        self.workers.append(w)
        return w

    def _drop(self, w: _Worker) -> None:
        if w in self.workers:
            self.workers.remove(w)
        try:
            self.ray.kill(w.actor, no_restart=True)
        except Exception:  # noqa: BLE001 - already gone
            pass

    def add_secrets(self, secrets: Secrets) -> None:
        """Keys of endpoints a later plan uses: every live worker gets them before its next call (Ray runs an
        actor's calls in order), and every worker started later gets them all."""
        fresh = {k: v for k, v in secrets.as_dict().items() if self.secrets.get(k) != v}
        if fresh:
            self.secrets = Secrets({**self.secrets.as_dict(), **fresh})
            for w in self.workers:
                w.actor.configure.remote(self.secrets)

    def prewarm(self, plans: list[Plan]) -> None:
        """Start Ray and the workers the plans can use now, while their drivers still open MLflow runs and check
        endpoints: on a busy machine starting actors takes as long as the sweep's first tasks."""
        if not plans:
            return
        self.start(plans[0].cluster)
        for p in plans:
            self.add_secrets(collect_secrets(plan_endpoints(p)))
        assert self.cluster is not None
        units = sum(len(p.remaining()) for p in plans)
        while len(self.workers) < min(units, self.capacity()):
            self._spawn()

    # -- entry points -----------------------------------------------------------------------------------------

    def run(self, plan: Plan, tasks: list[Task], report: Report, progress: Progress) -> None:
        """Run one plan's tasks (the pool is shared with any plan run before or at the same time)."""
        job = Job(plan, list(tasks), report, progress)
        self.run_jobs([job])
        if job.error is not None:
            raise job.error

    def submit(self, job: Job) -> None:
        """Add a job to a schedule that ``serve`` is running in another thread (the sweep's plans)."""
        with self._lock:
            if self._failed is not None:
                job.finish(self._failed)
                return
            self._inbox.append(job)

    def run_jobs(self, jobs: list[Job], more: Callable[[], bool] = lambda: False,
                 tick: Callable[[], None] = lambda: None) -> None:
        """Schedule ``jobs`` (and those ``submit``ted while ``more()`` is true) over one pool until all are done.
        A job that cannot finish (its prefix failed) ends with ``job.error``; a stuck cluster raises ``ClusterError``.
        ``tick`` is called on every turn of the loop, after the jobs' progress lines (the sweep's line)."""
        self._failed = None
        for j in jobs:
            self.submit(j)
        _Schedule(self, more, tick).loop()


class _Schedule:
    """One pass of the scheduler over the executor's inbox: prefix builds first, then tasks, on every free worker."""

    def __init__(self, ex: RayExecutor, more: Callable[[], bool], tick: Callable[[], None] = lambda: None):
        self.ex = ex
        self.more = more
        self.tick = tick
        self.jobs: list[Job] = []
        self.ready_tasks: deque[tuple[Job, Task, int]] = deque()
        self.waiting: dict[str, list[tuple[Job, Task, int]]] = {}  # prefix hash -> tasks waiting for it
        self.builds: deque[Job] = deque()  # one job per prefix hash still to build
        self.building: set[str] = set()
        self.inflight: dict[Any, tuple[str, Job, Task | None, int, _Worker, float]] = {}
        self.stalled_since: float | None = None
        self.cap = SpendCap()

    # -- intake ----------------------------------------------------------------------------------------------

    def _take(self, job: Job) -> None:
        ex = self.ex
        ray = ex.start(job.plan.cluster)
        spec = job.plan.worker_spec()
        ex.add_secrets(collect_secrets(plan_endpoints(job.plan)))
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
        blob = _saved_prefix(job.plan)
        if blob is not None:
            job.prefix_ref = ray.put(blob)
            self.ready_tasks.extend((job, t, 1) for t in job.tasks)
            return
        h = job.plan.prefix_hash
        if h not in self.waiting:
            self.waiting[h] = []
            self.builds.append(job)
        self.waiting[h].extend((job, t, 1) for t in job.tasks)

    def _intake(self) -> None:
        while True:
            with self.ex._lock:
                if not self.ex._inbox:
                    return
                job = self.ex._inbox.popleft()
            try:
                self._take(job)
            except BaseException as e:  # noqa: BLE001 - the job's own thread re-raises it
                job.finish(e)
                if isinstance(e, (KeyboardInterrupt, ClusterError)):
                    raise

    # -- the pool --------------------------------------------------------------------------------------------

    def _work_left(self) -> int:
        return len(self.ready_tasks) + len(self.builds) + sum(len(v) for v in self.waiting.values())

    def _grow(self) -> None:
        """Start actors up to what the waiting work can use and the cluster can hold; say so when it holds fewer."""
        ex = self.ex
        assert ex.cluster is not None
        want = min(ex.cluster.workers, len(self.inflight) + len(self.ready_tasks) + len(self.builds))
        if len(ex.workers) >= want:
            return
        cap = ex.capacity()
        if cap < ex.cluster.workers and not getattr(ex, "_said_capacity", None) == cap:
            ex._said_capacity = cap  # type: ignore[attr-defined]
            log.info(f"[inmind] the cluster has {cap} CPU(s) for task workers, fewer than cluster.workers="
                     f"{ex.cluster.workers}: running {cap} worker(s)")
        while len(ex.workers) < min(want, cap):
            ex._spawn()

    def _idle(self) -> list[_Worker]:
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
                    return True  # not started; the next unit is looked at
                p = job.plan
                ref = w.actor.run_task.remote(job.spec_ref, task, job.trace_ref, p.session_index, p.prefix_hash,
                                              job.prefix_ref, attempt)
                self.inflight[ref] = ("task", job, task, attempt, w, time.perf_counter())
            else:
                return False
            w.running += 1
            return True
        return False

    def _within_cap(self, job: Job) -> bool:
        """True while the spend cap lets one more task of ``job`` start; a task it stops counts as done (not run:
        rerunning resumes it)."""
        running = [j.plan for kind, j, *_ in self.inflight.values() if kind == "task"]
        if self.cap.allows(job.plan, spends(j.progress for j in self.jobs), running):
            return True
        self._count_done(job)
        return False

    # -- results ---------------------------------------------------------------------------------------------

    def _lost(self, w: _Worker, why: str) -> None:
        log.info(f"[inmind] worker {w.where.get('host', '?')}:{w.where.get('pid', '?')} lost ({why})")
        self.ex._drop(w)

    def _on_ready_worker(self, w: _Worker, ref: Any) -> None:
        from ray.exceptions import RayActorError, RayError

        w.ready_ref = None
        try:
            w.where = self.ex.ray.get(ref)
        except (RayActorError, RayError) as e:
            self._lost(w, f"could not start: {type(e).__name__}: {_first_line(str(e))}")

    def _on_result(self, ref: Any) -> None:
        from ray.exceptions import RayActorError, RayTaskError

        kind, job, task, attempt, w, t0 = self.inflight.pop(ref)
        w.running = max(0, w.running - 1)
        plan = job.plan
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
            _save_prefix(plan, value.blob, time.perf_counter() - t0)
            _display_safely("prefix spend", lambda: job.progress.prefix_spent(value.usage))
            blob_ref = self.ex.ray.put(value.blob)
            self.building.discard(plan.prefix_hash)
            for j, t, a in self.waiting.pop(plan.prefix_hash, []):
                j.prefix_ref = blob_ref
                self.ready_tasks.append((j, t, a))
            return
        rec: TaskRecord = value
        _placement(plan, task, attempt, w.where)
        if _retry_or_report(plan, task, rec, attempt, job.report):
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
            for kind, job, task, attempt, _, _ in self.inflight.values():
                if id(job) in running:
                    key = unit_key(job.plan.config_hash, task.id if task is not None else None, attempt)
                    running[id(job)].append(phases.get(key, STARTING))
            starting = sum(1 for w in self.ex.workers if w.ready_ref is not None)
            idle = f"queued, {starting} worker(s) starting" if starting else "queued"
            for j in due:
                j.last_progress = now
                _display_safely("progress display", lambda: j.progress(running[id(j)], idle))
        _display_safely("sweep progress", self.tick)

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
            _display_safely("live spend", lambda: _feed_usage(j.progress, usage.get(j.plan.config_hash)))

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
                if not self._work_left() and not self.inflight and not self.more() and not self.ex._inbox:
                    return
                self._grow()
                self._assign()
                self._check_progress()
                self._display()
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
            with self.ex._lock:
                self.ex._failed = e
                while self.ex._inbox:
                    self.ex._inbox.popleft().finish(e)
            raise


def _placement(plan: Plan, task: Task, attempt: int, where: dict[str, Any]) -> None:
    """Which node and process ran each task: ``<root>/placement/<config hash>.jsonl`` (for debugging a cluster)."""
    path: Path = plan.root / "placement" / f"{plan.config_hash}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps({"task_id": task.id, "config": plan.config_hash, "attempt": attempt, **where},
                           sort_keys=True) + "\n")
