"""The task worker: one process's LLM clients, encoder and unpacked prefix snapshots, running the protocol for one
task at a time. Plain Python: ``executor`` wraps it as a Ray actor, or runs it in this process for tests."""

from __future__ import annotations

import dataclasses
import os
import shutil
from pathlib import Path
from typing import Any

from inmind_exp import env
from inmind_exp.memory import SYSTEMS, MemorySystem
from inmind_exp.paths import child_dir
from inmind_exp.records import Task, TaskRecord, Trace
from inmind_exp.run import snapshots
from inmind_exp.run.plan import WorkerSpec


class TaskWorker:
    """Holds one process's clients and encoder; ``configure`` points it at a configuration, and the same workers
    (and their loaded models) serve every configuration of a sweep. ``limiter`` is any ``llm.limits.Limiter``."""

    def __init__(self, limiter: Any = None) -> None:
        env.apply(env.WORKER)
        self.limiter = limiter
        self.spec: WorkerSpec | None = None
        from inmind_exp.workdirs import open_worker_dir

        self._workdir = open_worker_dir()  # removes the dirs of killed workers first; removed again at exit
        self.tmp = self._workdir.path
        self._prefixes: dict[str, Path] = {}

    def close(self) -> None:
        """Remove this worker's temp dir (Ray kills actor processes without running atexit)."""
        self._workdir.close()

    def configure(self, spec: WorkerSpec) -> int:
        from inmind_exp.embed import build_encoder
        from inmind_exp.llm import CallCache, Models

        if spec != self.spec:
            self.spec = spec
            self.cache = CallCache(spec.cache_dir)
            self.models = Models.build(dict(spec.endpoints), self.cache, self.limiter)
            self.encoder = build_encoder(spec.embedding, self.cache, self.models.meter, self.limiter)
            self.system_cls = SYSTEMS.get(spec.system)
        return os.getpid()

    def _spec(self) -> WorkerSpec:
        if self.spec is None:
            raise RuntimeError("TaskWorker: configure() must be called before any task")
        return self.spec

    def _make(self, workdir: Path) -> MemorySystem:
        spec = self._spec()
        return self.system_cls(self.models, self.encoder, workdir, answer_mode=spec.answer_mode, **spec.params)

    def build_prefix(self, trace: Trace, session_index: int) -> bytes:
        """Ingest the sessions before the injection point and return the packed snapshot."""
        from inmind_exp.protocol import build_prefix

        work = self.tmp / "prefix-build"
        snap = self.tmp / "prefix-snapshot"
        build_prefix(self._make, trace, session_index, work, snap)
        blob = snapshots.pack(snap)
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(snap, ignore_errors=True)
        return blob

    def run_task(self, task: Task, trace: Trace, session_index: int, prefix_hash: str, prefix_blob: bytes,
                 attempt: int) -> TaskRecord:
        from inmind_exp.protocol import run_task

        spec = self._spec()
        prefix_dir = self._prefixes.get(prefix_hash)
        if prefix_dir is None:
            prefix_dir = self.tmp / f"prefix-{prefix_hash}"
            snapshots.unpack(prefix_blob, prefix_dir)
            self._prefixes[prefix_hash] = prefix_dir
        rec = run_task(
            task, trace, session_index, self._make, self.models, child_dir(self.tmp, "task", task.id),
            config_hash=spec.config_hash, system_name=spec.system, evaluates_naive=self.system_cls.evaluates_naive,
            prefix_snapshot=prefix_dir, judge_attempts=spec.judge_attempts, keep_workdir=spec.keep_workdirs,
        )
        return dataclasses.replace(rec, attempts=attempt)
