"""Executors run plans' remaining tasks and hand each final record back to the driver.

``RayExecutor`` owns the pool's lifecycle: it starts (or joins) Ray once per process, puts the cluster services
(the limiter, the cache and the ``PhaseBoard``, in one actor: ``cluster_services``) on the head node, and starts,
configures and ends the ``TaskWorker`` actors that ``schedule.Schedule`` hands the tasks of one or many plans.
Nothing waits forever: a worker that cannot be started within ``cluster.start_timeout_s`` is given up, and when no
worker is alive or placeable the run ends with a ``ClusterError``. The driver's API keys reach the workers as a call
argument (``worker.ApiKeys``), never through the config or a runtime env. ``InProcessExecutor`` runs the same
worker in this process, for tests and debugging. Both log each plan's progress line every ``run.progress_every_s``
while its work runs, with the phases running units report to a ``PhaseBoard``.

ray is imported only inside functions (here, in ``schedule``, ``llm.services`` and ``worker``), so the rest of the
package imports without it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from typing import Any, Callable

from inmind_exp import env
from inmind_exp.errors import ClusterStartError, PlanError
from inmind_exp.exec.services import RayLimiterClient
from inmind_exp.records import Task
from inmind_exp.exec import reaper, snapshots
from inmind_exp.exec.interface import (ClusterError, Executor, Job, PoolWorker, Progress, Report, display_safely,
                                      feed_usage, retry_or_report)
from inmind_exp.plan.plan import Plan
from inmind_exp.config.settings import ClusterSettings, local_cpu_cap
from inmind_exp.display.phases import STARTING, PhaseBoard
from inmind_exp.exec.schedule import Schedule
from inmind_exp.exec.shipping import code_runtime_env
from inmind_exp.display.spend_cap import CapRecord, SpendCap
from inmind_exp.exec.worker import ApiKeys, TaskWorker, collect_api_keys, plan_endpoints

log = logging.getLogger(__name__)

__all__ = ["ClusterError", "Executor", "InProcessExecutor", "Job", "Progress", "RayExecutor", "Report"]


class InProcessExecutor:
    """One ``TaskWorker`` in this process, tasks in order: no Ray, no worker deaths to survive."""

    def __init__(self, limiter: Any = None) -> None:
        self.board = PhaseBoard()
        self.worker = TaskWorker(limiter, board=self.board)
        #: the plans this executor stopped at their spend cap (``Session.exit_code`` reads it)
        self.spend_cap = CapRecord()

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

            blob = snapshots.prefix_blob(plan, build)
            queue = [(t, 1) for t in tasks]
            cap = SpendCap(self.spend_cap)
            while queue:
                task, attempt = queue.pop(0)
                if not cap.allows(plan, [progress], []):
                    break  # the spend cap: the rest are not started (run.spend_cap)
                rec = self.worker.run_task(spec, task, plan.trace, plan.session_index, plan.prefix_hash, blob, attempt,
                                           plan.done.get(task.id))
                if retry_or_report(plan, task, rec, attempt, report):
                    queue.append((task, attempt + 1))
        finally:
            stop.set()
            ticker.join()
            display_safely("live spend", lambda: feed_usage(progress, self.board.usage().get(plan.config_hash)))

    def _tick(self, every_s: float, progress: Progress, stop: threading.Event, plan_hash: str = "") -> None:
        """Every ``every_s`` (0: never) until ``stop``: the progress line, with the one running unit's phase."""
        while every_s > 0 and not stop.wait(every_s):
            display_safely("live spend", lambda: feed_usage(progress, self.board.usage().get(plan_hash)))
            display_safely("progress display", lambda: progress(list(self.board.snapshot().values()) or [STARTING]))


class RayExecutor:
    """Starts (or joins) Ray once per process, with one limiter actor and a pool of task actors shared by every plan
    it runs; ``worker_cls`` is the actor's class (tests substitute one that crashes)."""

    def __init__(self, worker_cls: type[TaskWorker] = TaskWorker) -> None:
        self.worker_cls = worker_cls
        self._actor_cls: Any = None
        self.workers: list[PoolWorker] = []
        #: the limiter, the cluster cache and the phase board: one actor (``cluster_services``); ``board`` is it too
        self.services: Any = None
        self.board: Any = None
        self.ray: Any = None
        self.cluster: ClusterSettings | None = None
        self.api_keys: ApiKeys = ApiKeys({})
        #: the plans this executor's schedules stopped at their spend cap (``Session.exit_code`` reads it)
        self.spend_cap = CapRecord()
        self.lock = threading.Lock()
        self.inbox: deque[Job] = deque()
        self.failed: BaseException | None = None  # set when a schedule ended by an error: later jobs get it
        self._start_lock = threading.Lock()
        self.said_capacity: int | None = None
        self.working = threading.Event()  # the tasks are under way, or a schedule ended (interface.Pool)

    # -- start-up ---------------------------------------------------------------------------------------------

    def start(self, cluster: ClusterSettings) -> Any:
        """The ray module, initialised: join ``cluster.address`` or start a local Ray sized for the workers; the
        pool's workers start right away (while the driver still plans and opens its MLflow runs), up to
        ``cluster.workers`` and what the cluster holds."""
        with self._start_lock:
            if self.ray is None:
                self._start(cluster)
                while len(self.workers) < self.capacity():
                    self.spawn()
            return self.ray

    def _start(self, cluster: ClusterSettings) -> None:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        from inmind_exp.display import stop

        env.apply(env.RAY)
        if not ray.is_initialized():
            runtime_env = code_runtime_env(dict(cluster.runtime_env)) if cluster.ship_code else dict(cluster.runtime_env)
            # a local Ray's processes inherit this process's environment, so there the workers' defaults go into
            # it for ray.init only, not into a runtime env: the idle workers Ray starts with itself (one per CPU)
            # then match the job and host the task actors, instead of new processes started after them
            inherit = not cluster.address and not runtime_env
            if not inherit:
                runtime_env["env_vars"] = {**dict(runtime_env.get("env_vars") or {}), **env.WORKER}
            kwargs: dict[str, Any] = {"include_dashboard": False, "runtime_env": runtime_env or None,
                                      "log_to_driver": True}
            if cluster.address:
                try:
                    ray.init(address=cluster.address, **kwargs)
                except ConnectionError as e:
                    raise PlanError(
                        f"cluster.address={cluster.address}: no Ray cluster answered ({e}); start one with "
                        f"`ray start --head` or use cluster=local"
                    ) from None
            else:
                cpus = min(cluster.num_cpus or max(2, cluster.workers), local_cpu_cap())
                node_mark = reaper.watch()  # a killed driver's node is ended at once, not 61 s later
                for attempt in (1, 2):  # a loaded host: "the current node timed out during startup" (7 in 64)
                    try:
                        with env.overriding({**(env.WORKER if inherit else {}), **node_mark}):
                            ray.init(address="local", num_cpus=cpus,
                                     object_store_memory=cluster.object_store_memory, **kwargs)
                        break
                    except Exception as e:  # noqa: BLE001 - any failure to start is tried once more, then said
                        _quiet_shutdown(ray)
                        why = f"{type(e).__name__}: {str(e).strip().splitlines()[0][:200] if str(e).strip() else ''}"
                        if attempt == 2:
                            raise ClusterStartError(f"a local Ray did not start, twice ({why})") from None
                        log.warning(f"[inmind] a local Ray did not start ({why}); trying once more")
        stop.install()  # ray.init replaced the SIGTERM handler with one that kills Ray under the driver
        # the limiter and the cache service live on the head node (Ray's "node:__internal_head__" resource; the
        # driver's node if a cluster has none): losing a worker node never takes them down. They hold no CPU, so
        # they never compete with task actors for a slot.
        head = {"resources": {"node:__internal_head__": 0.001}} if ray.cluster_resources().get(
            "node:__internal_head__") else {"scheduling_strategy": NodeAffinitySchedulingStrategy(
                node_id=ray.get_runtime_context().get_node_id(), soft=True)}
        from inmind_exp.exec.cluster_services import CONCURRENCY_GROUPS, ClusterServices

        # the limiter, the cache and the board in one process (each service's calls in its own concurrency group)
        services = ray.remote(concurrency_groups=CONCURRENCY_GROUPS)(ClusterServices).options(num_cpus=0,
                                                                                           **head).remote()
        self.services = self.board = services
        # a threaded actor: it runs up to tasks_per_worker calls at once (tasks waiting on endpoints use no CPU)
        self._actor_cls = ray.remote(num_cpus=1, max_concurrency=max(1, cluster.tasks_per_worker) + 1)(self.worker_cls)
        self.cluster = cluster
        self.ray = ray
        import atexit
        import weakref

        # before Ray's own shutdown (atexit runs last-registered first); a weak reference, so that registering does
        # not keep a discarded executor, and the CPUs its actors hold, alive for the life of the process
        me = weakref.ref(self)
        atexit.register(lambda: (lambda ex: ex and ex.end())(me()))
        return ray

    def close(self, timeout_s: float = 30.0) -> None:
        """Let every live worker remove its temp dir (Ray kills actor processes without running atexit); one still
        starting (nothing ran on it: e.g. a rerun with every task done) is ended without waiting for it."""
        if self.ray is None or not self.workers or not self.ray.is_initialized():
            return
        pending = [w.ready_ref for w in self.workers if w.ready_ref is not None]
        started = set(self.ray.wait(pending, num_returns=len(pending), timeout=0)[0]) if pending else set()
        for w in [w for w in self.workers if w.ready_ref is not None and w.ready_ref not in started]:
            self.drop(w)
        try:
            self.ray.get([getattr(w, 'actor', w).close.remote() for w in self.workers], timeout=timeout_s)
        except Exception as e:  # noqa: BLE001 - a dead worker's dir is removed by the next worker's start
            log.debug(f"closing workers: {type(e).__name__}: {e}")

    def shutdown(self) -> None:
        """Close every worker, then end the pool's actors and the cluster services: their CPUs are free again for
        another executor in the same Ray (Ray itself keeps running; ``ray.kill`` is asynchronous)."""
        self.close()
        for w in list(self.workers):
            self.drop(w)
        if self.services is not None:
            try:
                self.ray.kill(self.services, no_restart=True)
            except Exception:  # noqa: BLE001 - already gone
                pass
        self.services = self.board = None
        self.ray = None

    def end(self, timeout_s: float = 30.0) -> None:
        """``shutdown``, then wait (up to ``timeout_s``) until Ray has ended every actor: ``ray.shutdown`` pulling
        a threaded actor (the cache service) down under its threads aborts it with ~40 lines of C++ stack on the
        driver's terminal; an actor already ended leaves nothing to say."""
        ray = self.ray
        if ray is None or not ray.is_initialized():
            return
        actors = [getattr(w, "actor", w) for w in self.workers] + ([self.services] if self.services is not None
                                                                    else [])
        self.shutdown()
        deadline = time.monotonic() + timeout_s
        for actor in actors:
            try:
                ray.get(actor.__ray_ready__.remote(), timeout=max(0.1, deadline - time.monotonic()))
            except Exception:  # noqa: BLE001 - RayActorError: it has ended, as asked
                pass

    def __enter__(self) -> "RayExecutor":
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def capacity(self) -> int:
        """How many task actors the cluster can hold now: its CPUs (each actor takes one), capped by cluster.workers."""
        assert self.cluster is not None
        cpus = int(self.ray.cluster_resources().get("CPU", 0))
        return max(0, min(self.cluster.workers, cpus))

    def spawn(self) -> PoolWorker:
        actor = self._actor_cls.remote(RayLimiterClient(self.services), self.services, self.services)
        w = PoolWorker(actor, time.monotonic())
        w.ready_ref = actor.configure.remote(self.api_keys)
        self.workers.append(w)
        return w

    def drop(self, w: PoolWorker) -> None:
        if w in self.workers:
            self.workers.remove(w)
        try:
            self.ray.kill(w.actor, no_restart=True)
        except Exception:  # noqa: BLE001 - already gone
            pass

    def add_api_keys(self, api_keys: ApiKeys) -> None:
        """Keys of endpoints a later plan uses: every live worker gets them before its next call (Ray runs an
        actor's calls in order), and every worker started later gets them all."""
        fresh = {k: v for k, v in api_keys.as_dict().items() if self.api_keys.get(k) != v}
        if fresh:
            self.api_keys = ApiKeys({**self.api_keys.as_dict(), **fresh})
            for w in self.workers:
                w.actor.configure.remote(self.api_keys)

    def prewarm(self, plans: list[Plan]) -> None:
        """Start Ray and the workers the plans can use now, while their drivers still open MLflow runs and check
        endpoints: on a busy machine starting actors takes as long as the sweep's first tasks."""
        if not plans:
            return
        self.start(plans[0].cluster)
        for p in plans:
            self.add_api_keys(collect_api_keys(plan_endpoints(p)))
        assert self.cluster is not None
        units = sum(len(p.remaining()) for p in plans)
        while len(self.workers) < min(units, self.capacity()):
            self.spawn()

    # -- entry points -----------------------------------------------------------------------------------------

    def run(self, plan: Plan, tasks: list[Task], report: Report, progress: Progress) -> None:
        """Run one plan's tasks (the pool is shared with any plan run before or at the same time)."""
        job = Job(plan, list(tasks), report, progress)
        self.run_jobs([job])
        if job.error is not None:
            raise job.error

    def submit(self, job: Job) -> None:
        """Add a job to a schedule that ``serve`` is running in another thread (the sweep's plans)."""
        with self.lock:
            if self.failed is not None:
                job.finish(self.failed)
                return
            self.inbox.append(job)

    def run_jobs(self, jobs: list[Job], more: Callable[[], bool] = lambda: False,
                 tick: Callable[[], None] = lambda: None) -> None:
        """Schedule ``jobs`` (and those ``submit``ted while ``more()`` is true) over one pool until all are done.
        A job that cannot finish (its prefix failed) ends with ``job.error``; a stuck cluster raises ``ClusterError``.
        ``tick`` is called on every turn of the loop, after the jobs' progress lines (the sweep's line)."""
        self.failed = None
        for j in jobs:
            self.submit(j)
        Schedule(self, more, tick).loop()


def _quiet_shutdown(ray: Any) -> None:
    """Shut down what a failed ``ray.init`` left, if anything; its own failure is no news."""
    try:
        ray.shutdown()
    except Exception as e:  # noqa: BLE001
        log.debug(f"ray.shutdown after a failed start: {type(e).__name__}: {e}")
