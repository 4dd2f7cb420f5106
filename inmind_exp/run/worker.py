"""The task worker: one process's LLM clients, encoders and unpacked prefix snapshots, running the protocol for one
task at a time. Plain Python: ``executor`` wraps it as a Ray actor, or runs it in this process for tests.

Every call names the configuration it serves (a ``WorkerSpec``), so one worker can serve all configurations of a
sweep in any order; the clients of a spec and the encoder of an embedding are built once and kept.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import socket
from pathlib import Path
from typing import Any, Mapping

from inmind_exp import env
from inmind_exp.memory import SYSTEMS, MemorySystem
from inmind_exp.paths import child_dir
from inmind_exp.records import Task, TaskRecord, Trace, Usage
from inmind_exp.run import snapshots
from inmind_exp.run.plan import WorkerSpec


class Secrets:
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
        from inmind_exp.secrets import remember

        target = os.environ if environ is None else environ
        remember(self._values.values())
        for k, v in self._values.items():
            target[k] = v

    def __repr__(self) -> str:
        return f"Secrets({', '.join(self.names())})"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secrets) and other._values == self._values

    def __hash__(self) -> int:
        return hash(tuple(self.names()))


def collect_secrets(endpoints: Any) -> Secrets:
    """The driver's values of every key variable the given endpoints use (LLM roles and the embeddings API)."""
    names = {e.api_key_env for e in endpoints if e is not None and e.api_key_env}
    return Secrets({n: os.environ[n] for n in sorted(names) if os.environ.get(n)})


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
    ``CallCache`` of ``spec.cache_dir``. ``board`` is the ``progress.PhaseBoard`` (or its actor) each running unit
    reports its phase to; None reports nothing."""

    def __init__(self, limiter: Any = None, cache: Any = None, board: Any = None) -> None:
        env.apply(env.WORKER)
        self.limiter = limiter
        self.shared_cache = cache
        self.board = board
        self.spec: WorkerSpec | None = None
        from inmind_exp.workdirs import open_worker_dir

        self._workdir = open_worker_dir()  # removes the dirs of killed workers first; removed again at exit
        self.tmp = self._workdir.path
        self._prefixes: dict[str, Path] = {}
        # specs and embedding specs hold dicts (unhashable): kept as (key, value) pairs, compared by equality
        self._configured: list[tuple[WorkerSpec, _Configured]] = []
        self._encoders: list[tuple[Any, Any]] = []
        self._caches: dict[str, Any] = {}

    def close(self) -> None:
        """Remove this worker's temp dir (Ray kills actor processes without running atexit)."""
        self._workdir.close()

    def configure(self, secrets: Secrets | None = None) -> dict[str, Any]:
        """Take the driver's API keys into this process's environment; returns where this worker runs."""
        if secrets is not None:
            secrets.apply()
        return self.identity()

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
                from inmind_exp.run.executor import RayCacheClient

                self._caches[key] = RayCacheClient(self.shared_cache, spec.cache_dir)
            else:
                self._caches[key] = CallCache(spec.cache_dir)
        return self._caches[key]

    def _use(self, spec: WorkerSpec) -> _Configured:
        """Make ``spec`` current: its clients are built on first use and kept."""
        from inmind_exp.embed import build_encoder
        from inmind_exp.llm import Models

        state = next((s for k, s in self._configured if k == spec), None)
        if state is None:
            cache = self._cache(spec)
            models = Models.build(dict(spec.endpoints), cache, self.limiter)
            enc_key = (spec.embedding, spec.cache, spec.cache_dir)
            encoder = next((e for k, e in self._encoders if k == enc_key), None)
            if spec.embedding.kind == "api" or encoder is None:
                # an API encoder meters into its spec's usage; a local model is loaded once per process
                encoder = build_encoder(spec.embedding, cache, models.meter, self.limiter)
                if spec.embedding.kind != "api":
                    self._encoders.append((enc_key, encoder))
            state = _Configured(models, encoder, SYSTEMS.get(spec.system))
            self._configured.append((spec, state))
        self.spec = spec
        self.models, self.encoder, self.system_cls = state.models, state.encoder, state.system_cls
        return state

    def _make(self, workdir: Path) -> MemorySystem:
        spec = self.spec
        assert spec is not None
        extra = {"answer_prompt": spec.answer_prompt} if spec.answer_prompt is not None else {}
        return self.system_cls(self.models, self.encoder, workdir, answer_mode=spec.answer_mode, **extra, **spec.params)

    def build_prefix(self, spec: WorkerSpec, trace: Trace, session_index: int) -> PrefixBuilt:
        """Ingest the sessions before the injection point; the packed snapshot and the calls it made."""
        from inmind_exp.protocol import build_prefix
        from inmind_exp.run.progress import PhaseReporter, unit_key

        phase = PhaseReporter(self.board, unit_key(spec.config_hash))
        phase("prefix starting")
        self._use(spec)
        work = self.tmp / "prefix-build"
        snap = self.tmp / "prefix-snapshot"
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(snap, ignore_errors=True)
        before = self.models.meter.snapshot()
        try:
            build_prefix(self._make, trace, session_index, work, snap, phase)
            phase("prefix packing")
            blob = snapshots.pack(snap)
        finally:
            phase.done()
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(snap, ignore_errors=True)
        return PrefixBuilt(blob, self.models.meter.diff(self.models.meter.snapshot(), before))

    def run_task(self, spec: WorkerSpec, task: Task, trace: Trace, session_index: int, prefix_hash: str,
                 prefix_blob: bytes, attempt: int) -> TaskRecord:
        from inmind_exp.protocol import run_task
        from inmind_exp.run.progress import PhaseReporter, unit_key

        phase = PhaseReporter(self.board, unit_key(spec.config_hash, task.id, attempt))
        phase("starting")
        self._use(spec)
        prefix_dir = self._prefixes.get(prefix_hash)
        if prefix_dir is None:
            prefix_dir = self.tmp / f"prefix-{prefix_hash}"
            snapshots.unpack(prefix_blob, prefix_dir)
            self._prefixes[prefix_hash] = prefix_dir
        try:
            rec = run_task(
                task, trace, session_index, self._make, self.models, child_dir(self.tmp, "task", task.id),
                config_hash=spec.config_hash, system_name=spec.system,
                evaluates_naive=self.system_cls.asks_naive(dict(spec.params)),
                prefix_snapshot=prefix_dir, judge_attempts=spec.judge_attempts, keep_workdir=spec.keep_workdirs,
                phase=phase, judges=None if spec.judges is None else dict(spec.judges),
            )
        finally:
            phase.done()
        return dataclasses.replace(rec, attempts=attempt)
