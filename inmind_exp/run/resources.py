"""What a process keeps for the length of a sweep, shared by every configuration it runs: the embedded local LLM
server, one MLflow tracker per store and experiment, the endpoints already checked, and the executor. Safe to use
from the driver threads of a sweep's plans (``run.sweep``): each resource is guarded by a lock."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any, Iterable

from inmind_exp.llm.embed import EmbeddingSpec
from inmind_exp.errors import PlanError
from inmind_exp.llm import Endpoint
from inmind_exp.config.settings import LocalServerSpec, TrackingSettings

log = logging.getLogger(__name__)


class Resources:
    """A launch's resources, started on first use (the local server stops at exit); the entry point makes one
    (``run.session.Session``) and hands it to every configuration it runs."""

    def __init__(self) -> None:
        self.local_server: Any = None
        self.trackers: dict[tuple[str, str], Any] = {}
        self.checked: set[tuple[str, str]] = set()
        self.systems_checked: set[tuple[str, ...]] = set()
        #: failed checks, raised again when asked again: the plans of a sweep share endpoints, and a dead endpoint
        #: or a failing probe is not waited for, or paid, once per plan
        self.failed: dict[frozenset[tuple[str, str]], BaseException] = {}
        self.systems_failed: dict[tuple[str, ...], BaseException] = {}
        self._executor: Any = None
        self._lock = threading.RLock()
        self._tracker_lock = threading.Lock()  # apart: opening a tracker imports MLflow (seconds) while others check

    @property
    def executor(self) -> Any:
        """The Ray executor, created on first use."""
        if self._executor is None:
            from inmind_exp.exec.executor import RayExecutor

            self._executor = RayExecutor()
        return self._executor

    @property
    def started_executor(self) -> Any:
        """The executor if this launch made one (None for a dry run or before the first run)."""
        return self._executor

    def end(self) -> None:
        """End the executor's actors before this process lets go of them (``RayExecutor.end``): an actor whose last
        handle is dropped exits by itself, and the cache service then aborts with a C++ stack on the terminal."""
        if self._executor is not None:
            self._executor.end()

    def local_base_url(self, spec: LocalServerSpec, cluster_address: str | None, log_dir: Path) -> str:
        """The embedded server's URL, starting it (again, if it died) when needed."""
        with self._lock:
            return self._local_base_url(spec, cluster_address, log_dir)

    def _local_base_url(self, spec: LocalServerSpec, cluster_address: str | None, log_dir: Path) -> str:
        from inmind_exp.llm.local_server import start_local_server

        if cluster_address:
            raise PlanError(
                "llm=local serves the model on this machine's loopback, which a remote Ray cluster cannot reach; "
                "point llm.base_url at a server the cluster can reach (llm=vllm / llm=openai)"
            )
        if self.local_server is None or self.local_server.process.poll() is not None:
            log.info(f"[inmind] starting the embedded local LLM (llama.cpp, {spec.model}) ...")
            t0 = time.perf_counter()
            self.local_server = start_local_server(
                spec.model_path, n_ctx=spec.n_ctx, n_threads=spec.n_threads, chat_format=spec.chat_format,
                log_dir=log_dir, startup_timeout_s=spec.startup_timeout_s,
            )
            log.info(f"[inmind] local LLM ready at {self.local_server.base_url} in {time.perf_counter() - t0:.1f}s")
        return self.local_server.base_url

    def local_server_died(self) -> str | None:
        """What ended the embedded server if it died after starting (None while it runs or if none was started)."""
        with self._lock:
            return self.local_server.died() if self.local_server is not None else None

    def tracker(self, tracking: TrackingSettings) -> Any:
        from inmind_exp.tracking.writer import Tracker

        key = (tracking.uri, tracking.experiment)
        with self._tracker_lock:
            if key not in self.trackers:
                self.trackers[key] = _Serialized(Tracker(tracking.uri, tracking.experiment))
            return self.trackers[key]

    def preflight(self, endpoints: Iterable[Endpoint], embedding: EmbeddingSpec) -> None:
        """Check each endpoint once per process: the key is set and the server answers (a failed check is not
        repeated: its error is raised again)."""
        from inmind_exp.llm.preflight import check_endpoints

        eps = list(endpoints) + ([embedding.endpoint] if embedding.endpoint else [])
        with self._lock:
            todo = [e for e in eps if (e.base_url, e.model) not in self.checked]
            if todo:
                key = frozenset((e.base_url, e.model) for e in todo)
                if key in self.failed:
                    raise self.failed[key]
                try:
                    check_endpoints(todo)
                except Exception as e:
                    self.failed[key] = e
                    raise
                self.checked.update(key)

    def system_preflight(self, plan: Any) -> None:
        """The system's own check of its endpoints (``MemorySystem.preflight``), once per system and endpoints (a
        failed check is not repeated: its error is raised again)."""
        from inmind_exp.llm import CallCache, Models

        key = (plan.system_name, *sorted(e.identity for e in plan.endpoints.values()))
        with self._lock:
            if key in self.systems_checked:
                return
            if key in self.systems_failed:
                raise self.systems_failed[key]
        try:
            plan.system_cls.preflight(Models.build(dict(plan.endpoints), CallCache(plan.run.cache_dir)))
        except Exception as e:
            with self._lock:
                self.systems_failed[key] = e
            raise
        with self._lock:
            self.systems_checked.add(key)


class Coalescing:
    """Runs a refresh for its callers, once for all who asked while an earlier run was under way: a caller returns
    without running it when a run that started after it asked has finished. For a refresh that reads the current
    state (the sweep parent's table, from every configuration run), so each caller's state is in the run that
    serves it. A run that fails serves nobody: the next caller waiting runs it again."""

    def __init__(self) -> None:
        self._state = threading.Lock()
        self._running = threading.Lock()
        self._asked = 0  # callers so far, numbered
        self._served = 0  # every caller up to this number is served by a run that started after they asked

    def __call__(self, refresh: Any) -> None:
        with self._state:
            self._asked += 1
            mine = self._asked
        with self._running:
            with self._state:
                if self._served >= mine:
                    return
                before, self._served = self._served, self._asked
            try:
                refresh()
            except BaseException:
                with self._state:
                    self._served = before
                raise


class _Serialized:
    """A tracker whose calls run one at a time: a sweep's plans log from several threads, and finding-or-creating
    the sweep's parent run must not race (one parent run, not one per thread). ``add_to_sweep`` is coalesced per
    parent (``Coalescing``): configurations that finish together refresh the parent's table once, not once each
    (each refresh reads every configuration run of the parent)."""

    def __init__(self, inner: Any):
        self._inner = inner
        self._lock = threading.RLock()
        self._sweeps: dict[str, Coalescing] = {}

    def add_to_sweep(self, parent_id: str, run_id: str, flat: Any) -> None:
        with self._lock:
            coalescing = self._sweeps.setdefault(parent_id, Coalescing())
        def refresh() -> None:
            with self._lock:
                self._inner.add_to_sweep(parent_id, run_id, flat)

        coalescing(refresh)

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                return attr(*args, **kwargs)

        return call
