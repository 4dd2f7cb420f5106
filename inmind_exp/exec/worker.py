"""The task worker: one process's LLM clients, encoders and unpacked prefix snapshots, running the protocol for
several tasks at once (``cluster.tasks_per_worker`` threads of a Ray actor). Plain Python: ``executor`` wraps it as a
Ray actor, or runs it in this process for tests.

Tasks running at once share the process's cache, limiter, ``openai`` clients and local encoders (a local model
encodes one call at a time); each has its own memory-system instance, work directory and usage meter (its own role
clients), so no state and no usage crosses between them.

Every call names the configuration it serves (a ``WorkerSpec``), so one worker can serve all configurations of a
sweep in any order; the local encoder of an embedding and the cache are built once and kept.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import socket
import threading
from pathlib import Path
from typing import Any, Mapping

from inmind_exp import env
from inmind_exp.memory.answering import Answerer
from inmind_exp.memory import SYSTEMS, MemorySystem
from inmind_exp.safety.paths import child_dir
from inmind_exp.records import Task, TaskRecord, Trace, Usage
from inmind_exp.exec import snapshots
from inmind_exp.plan.plan import WorkerSpec
from inmind_exp.memory.traits import Traits

log = logging.getLogger(__name__)


class ApiKeys:
    """API keys by environment-variable name, handed to workers through Ray at run time (never through the config,
    a runtime env or a file). Its repr names the variables only, so a logged argument never shows a key."""

    def __init__(self, values: Mapping[str, str]):
        self._values = dict(values)

    def names(self) -> list[str]:
        return sorted(self._values)

    def get(self, name: str) -> str | None:
        return self._values.get(name)

    def as_dict(self) -> dict[str, str]:
        return dict(self._values)

    def apply(self, environ: Any = None) -> None:
        """Set each key in this process's environment (``os.environ`` only: nothing is written)."""
        from inmind_exp.safety.redact import remember

        target = os.environ if environ is None else environ
        remember(self._values.values())
        for k, v in self._values.items():
            target[k] = v

    def __repr__(self) -> str:
        return f"ApiKeys({', '.join(self.names())})"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ApiKeys) and other._values == self._values

    def __hash__(self) -> int:
        return hash(tuple(self.names()))


def collect_api_keys(endpoints: Any) -> ApiKeys:
    """The driver's values of every key variable the given endpoints use (LLM roles and the embeddings API)."""
    names = {e.api_key_env for e in endpoints if e is not None and e.api_key_env}
    return ApiKeys({n: os.environ[n] for n in sorted(names) if os.environ.get(n)})


def plan_endpoints(plan: Any) -> list[Any]:
    """Every endpoint a plan calls: its roles' and, for an embeddings API, the embedding's."""
    return list(plan.endpoints.values()) + ([plan.embedding.endpoint] if plan.embedding.endpoint else [])


@dataclasses.dataclass(frozen=True)
class PrefixBuilt:
    """A built prefix: the packed snapshot and the calls its ingestion made (for the run's spend)."""

    blob: bytes
    usage: dict[str, Usage]


@dataclasses.dataclass
class _Configured:
    """One spec's clients and system class, kept while the worker lives."""

    models: Any
    encoder: Any
    system_cls: type[MemorySystem]


class TaskWorker:
    """Holds one process's clients and encoders; each call names its ``WorkerSpec``, and the same workers (and
    their loaded models) serve every configuration of a sweep. ``limiter`` is any ``llm.limits.Limiter``;
    ``cache`` is the cluster's ``CacheActor``, used by specs with ``cache == "cluster"`` instead of a local
    ``CallCache`` of ``spec.cache_dir``. ``board`` is the ``phases.PhaseBoard`` (or its actor) each running unit
    reports its phase to; None reports nothing."""

    def __init__(self, limiter: Any = None, cache: Any = None, board: Any = None) -> None:
        env.apply(env.WORKER)
        self.limiter = limiter
        self.shared_cache = cache
        self.board = board
        from inmind_exp.safety.workdirs import open_worker_dir

        self._workdir = open_worker_dir()  # removes the dirs of killed workers first; removed again at exit
        self.tmp = self._workdir.path
        self._prefixes: dict[str, Path] = {}
        # embedding specs hold dicts (unhashable): kept as (key, value) pairs, compared by equality
        self._encoders: list[tuple[Any, Any]] = []
        self._caches: dict[str, Any] = {}
        self._lock = threading.Lock()  # guards the dicts above when tasks run at once
        self._reached = False  # whether configure has reached the cluster services

    def close(self) -> None:
        """Remove this worker's temp dir (Ray kills actor processes without running atexit)."""
        self._workdir.close()

    def configure(self, api_keys: ApiKeys | None = None) -> dict[str, Any]:
        """Take the driver's API keys into this process's environment; returns where this worker runs. The first
        time, the cluster services are reached once (``_reach_services``) before any task runs."""
        if api_keys is not None:
            api_keys.apply()
        if not self._reached:
            self._reached = True
            self._reach_services()
        return self.identity()

    def _reach_services(self, timeout_s: float = 30.0) -> None:
        """Wait until the limiter, cache and board actors answer: a task's first call to each (resolving where it
        runs, connecting to it) then costs nothing, where 16 tasks starting at once on a busy machine each waited
        ~0.7 s for it. A service that does not answer is left to its client's fallback."""
        handles = list({id(h): h for h in (getattr(self.limiter, "actor", None), self.shared_cache, self.board)
                        if h is not None and hasattr(h, "__ray_ready__")}.values())  # on a pool, one actor
        if not handles:
            return
        import ray

        try:
            ray.get([h.__ray_ready__.remote() for h in handles], timeout=timeout_s)
        except Exception as e:  # noqa: BLE001 - a lost service: each client falls back on its own
            log.debug(f"reaching the cluster services: {type(e).__name__}: {e}")

    @staticmethod
    def identity() -> dict[str, Any]:
        node = ""
        try:
            import ray

            if ray.is_initialized():
                node = ray.get_runtime_context().get_node_id()
        except Exception:  # noqa: BLE001 - outside Ray, a process is identified by host and pid
            pass
        return {"node": node, "host": socket.gethostname(), "pid": os.getpid()}

    def _cache(self, spec: WorkerSpec) -> Any:
        from inmind_exp.llm import CallCache

        key = f"{spec.cache}:{spec.cache_dir}"
        if key not in self._caches:
            if spec.cache == "cluster" and self.shared_cache is not None:
                from inmind_exp.exec.services import RayCacheClient

                self._caches[key] = RayCacheClient(self.shared_cache, spec.cache_dir)
            else:
                self._caches[key] = CallCache(spec.cache_dir)
                if self.shared_cache is not None and hasattr(self.shared_cache, "join_flight"):
                    from inmind_exp.exec.services import ClusterFlights

                    # the cache is this node's, but no two workers pay for the same request at once
                    self._caches[key].flights = ClusterFlights(self.shared_cache, spec.cache_dir)
        return self._caches[key]

    def _use(self, spec: WorkerSpec) -> _Configured:
        """The clients of one unit of work (a task or a prefix build) of ``spec``: role clients with their own usage
        meter, so units running at once never mix their usage; the cache, the limiter and a local encoder (loaded
        once per process) are shared. Returned, never kept on ``self``: several units may run at once."""
        from inmind_exp.llm.embed import build_encoder
        from inmind_exp.llm import Models

        with self._lock:
            cache = self._cache(spec)
            enc_key = (spec.embedding, spec.cache, spec.cache_dir)
            shared = next((e for k, e in self._encoders if k == enc_key), None)
            if spec.embedding.kind != "api" and shared is None:
                shared = build_encoder(spec.embedding, cache, None, self.limiter)
                self._encoders.append((enc_key, shared))
        models = Models.build(dict(spec.endpoints), cache, self.limiter)
        # an API encoder meters into the unit's usage, so it is the unit's own
        encoder = build_encoder(spec.embedding, cache, models.meter, self.limiter) if spec.embedding.kind == "api" \
            else shared
        return _Configured(models, encoder, SYSTEMS.resolve(spec.system, spec.system_ref))

    @staticmethod
    def _maker(spec: WorkerSpec, state: _Configured) -> Any:
        """Builds ``spec``'s memory system on ``state``'s clients in a given work directory."""
        def make(workdir: Path) -> MemorySystem:
            return state.system_cls(state.models, state.encoder, workdir, **spec.params)
        return make

    def _prefix_dir(self, prefix_hash: str, prefix_blob: bytes) -> Path:
        """The unpacked prefix snapshot, unpacked once per process (under the lock: tasks of one prefix may start
        at once)."""
        with self._lock:
            prefix_dir = self._prefixes.get(prefix_hash)
            if prefix_dir is None:
                prefix_dir = self.tmp / f"prefix-{prefix_hash}"
                snapshots.unpack(prefix_blob, prefix_dir)
                self._prefixes[prefix_hash] = prefix_dir
            return prefix_dir

    def build_prefix(self, spec: WorkerSpec, trace: Trace, session_index: int) -> PrefixBuilt:
        """Ingest the sessions before the injection point; the packed snapshot and the calls it made."""
        from inmind_exp.protocol.task import build_prefix
        from inmind_exp.display.phases import PhaseReporter, unit_key

        phase = PhaseReporter(self.board, unit_key(spec.config_hash))
        phase("prefix starting")
        state = self._use(spec)
        state.models.meter.listener = phase.spent
        work = child_dir(self.tmp, "prefix-build", spec.config_hash)
        snap = child_dir(self.tmp, "prefix-snapshot", spec.config_hash)
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(snap, ignore_errors=True)
        meter = state.models.meter
        before = meter.snapshot()
        try:
            if spec.controls is not None and spec.controls.no_fact:
                # the no-fact control's state rides in the prefix's snapshot: <snap>/prefix and <snap>/no_fact
                from inmind_exp.protocol.controls import build_no_fact

                build_prefix(self._maker(spec, state), trace, session_index, work / "prefix", snap / "prefix", phase)
                build_no_fact(self._maker(spec, state), trace, session_index, snap / "prefix", work / "no_fact",
                              snap / "no_fact", phase)
            else:
                build_prefix(self._maker(spec, state), trace, session_index, work, snap, phase)
            phase("prefix packing")
            blob = snapshots.pack(snap)
        finally:
            phase.done()
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(snap, ignore_errors=True)
        return PrefixBuilt(blob, meter.diff(meter.snapshot(), before))

    def run_task(self, spec: WorkerSpec, task: Task, trace: Trace, session_index: int, prefix_hash: str,
                 prefix_blob: bytes, attempt: int, previous: TaskRecord | None = None) -> TaskRecord:
        """One task of ``spec``; ``previous``, this task's record from an earlier run, is completed instead when
        only verdicts of it failed (``protocol.run_task``)."""
        from inmind_exp.protocol.task import run_task
        from inmind_exp.display.phases import PhaseReporter, unit_key

        phase = PhaseReporter(self.board, unit_key(spec.config_hash, task.id, attempt))
        phase("starting")
        state = self._use(spec)
        state.models.meter.listener = phase.spent  # the spend line counts each call as it completes
        if spec.cache_scope == "task":
            state.models.memory.scope = f"task:{task.id}"  # this task's own samples of the background's memory
        prefix_dir = self._prefix_dir(prefix_hash, prefix_blob)
        # one directory per configuration, task and attempt: two configurations' runs of a task may run at once
        workdir = child_dir(self.tmp, "task", f"{spec.config_hash}/{task.id}/{attempt}")
        no_fact = spec.controls is not None and spec.controls.no_fact
        try:
            rec = run_task(
                task, trace, session_index, self._maker(spec, state), state.models, workdir,
                config_hash=spec.config_hash, system_name=spec.system,
                evaluates_naive=state.system_cls.asks_naive(dict(spec.params)),
                prefix_snapshot=prefix_dir / "prefix" if no_fact else prefix_dir,
                judge_attempts=spec.judge_attempts, keep_workdir=spec.keep_workdirs,
                phase=phase, judges=None if spec.judges is None else dict(spec.judges),
                controls=spec.controls, no_fact_state=prefix_dir / "no_fact" if no_fact else None,
                previous=previous, answerer=Answerer(spec.answer_mode, spec.answer_prompt),
            )
        finally:
            phase.done()
        return dataclasses.replace(rec, attempts=attempt, traits=Traits.of(state.system_cls, spec.params).to_dict())
