"""Run one configuration on Ray: plan the units, build (or reuse) the shared prefix snapshot, run the tasks on a pool
of actors, append every result to the durable ledger, and log the run to MLflow. The only module importing ray.

Resume: the ledger ``<root>/ledger/<config hash>.jsonl`` is appended (and fsynced) by the driver as each result
arrives; a rerun skips finished tasks and retries errored ones, and the call cache makes repeated calls free.
"""

from __future__ import annotations

import io
import os
import shutil
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from inmind_exp import config as C
from inmind_exp.data import load_tasks, load_trace
from inmind_exp.data.tasks import BUNDLED_TASKS
from inmind_exp.data.trace import BUNDLED_TRACE
from inmind_exp.embed import EmbeddingSpec
from inmind_exp.llm import Endpoint
from inmind_exp.paths import child_dir
from inmind_exp.metrics import RunMetrics, compute, cost_usd, results_table
from inmind_exp.protocol import injection_session_index
from inmind_exp.records import Task, TaskRecord, Trace, write_jsonl
from inmind_exp.memory import ANSWER_MODES, SYSTEMS, MemorySystem

WORKER_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
}


class PlanError(ValueError):
    """The configuration cannot run; raised before any expensive work starts."""


# -- planning -----------------------------------------------------------------------------------------------------

@dataclass
class Plan:
    """Everything needed to run one configuration, resolved and validated."""

    name: str
    cfg: DictConfig
    config_hash: str
    identity: dict[str, Any]
    system_name: str
    system_cls: type[MemorySystem]
    system_params: dict[str, Any]
    answer_mode: str
    endpoints: dict[str, Endpoint]
    embedding: EmbeddingSpec
    tasks: list[Task]
    trace: Trace
    session_index: int
    root: Path
    job_dir: Path
    done: dict[str, TaskRecord] = field(default_factory=dict)

    @property
    def ledger_path(self) -> Path:
        return self.root / "ledger" / f"{self.config_hash}.jsonl"

    @property
    def prefix_hash(self) -> str:
        ident = {k: self.identity[k] for k in ("system", "embedding", "trace")}
        ident["memory"] = self.identity["roles"]["memory"]
        ident["session_index"] = self.session_index
        return C.identity_hash(ident)

    def remaining(self, retry_errors: bool) -> list[Task]:
        out = []
        for t in self.tasks:
            rec = self.done.get(t.id)
            if rec is None or (rec.error and retry_errors):
                out.append(t)
        return out


def config_name(cfg: DictConfig) -> str:
    inj = cfg.injection.name if cfg.injection.user_turn is None or cfg.injection.name != "position" else f"turn{cfg.injection.user_turn}"
    answer = "" if cfg.answer.mode == "shared" else f"/{cfg.answer.mode}"
    return f"{cfg.system.name}/{cfg.embedding.name}/{inj}/{cfg.llm.name}{answer}"


def local_cache_id(cfg: DictConfig) -> str:
    """A stable name for the embedded model in cache keys (the server's port changes every run)."""
    from inmind_exp.llm.local_server import MODEL_SHA256
    from inmind_exp.llm.local_server import local_cache_id as server_cache_id

    if cfg.llm.model_path:
        p = Path(cfg.llm.model_path).expanduser()
        if not p.is_file():
            raise PlanError(f"llm.model_path: no such file {p}")
        digest = f"file:{p.name}:{p.stat().st_size}"
    else:
        digest = MODEL_SHA256
    return server_cache_id(digest, cfg.llm.server.n_ctx, cfg.llm.server.chat_format)


def plan_config(cfg: DictConfig, root: Path, job_dir: Path) -> Plan:
    """Validate and resolve a composed config; every problem names its key and is raised before work starts."""
    try:
        system_cls = SYSTEMS.get(cfg.system.name)
    except KeyError as e:
        raise PlanError(f"system={cfg.system.name}: {e.args[0]}") from None
    if cfg.embedding.name not in system_cls.embeddings:
        raise PlanError(
            f"embedding={cfg.embedding.name} is not supported by system={cfg.system.name} "
            f"(supported: {', '.join(system_cls.embeddings)})"
        )
    tasks = load_tasks(cfg.dataset.path, limit=cfg.dataset.limit)
    trace = load_trace(cfg.trace.path, index=cfg.trace.index)
    try:
        session_index = injection_session_index(trace, C.injection_spec(cfg.injection))
    except ValueError as e:
        raise PlanError(str(e)) from None
    endpoints = C.role_endpoints(cfg.llm)
    if cfg.llm.provider == "local":
        cid = local_cache_id(cfg)
        endpoints = {r: (e if cfg.llm.roles[r].base_url else e.with_base_url("local", cache_id=cid)) for r, e in endpoints.items()}
    elif cfg.llm.provider != "openai":
        raise PlanError(f"llm.provider={cfg.llm.provider!r}: expected 'openai' or 'local'")
    for r, e in endpoints.items():
        if not e.base_url:
            raise PlanError(f"llm.base_url (or llm.roles.{r}.base_url) is not set for role '{r}'")
        if not e.model:
            raise PlanError(f"llm.model is not set for role '{r}'")
    embedding = C.embedding_spec(cfg.embedding, cfg.llm)
    if embedding.kind == "api" and not (embedding.endpoint and embedding.endpoint.base_url):
        raise PlanError(f"embedding={cfg.embedding.name}: set embedding.base_url (or llm.base_url) for the embeddings API")
    params = OmegaConf.to_container(cfg.system.params, resolve=True) or {}
    assert isinstance(params, dict)
    if cfg.answer.mode not in ANSWER_MODES:
        raise PlanError(f"answer={cfg.answer.mode}: expected one of {', '.join(ANSWER_MODES)}")
    _check_params(system_cls, cfg.system.name, params)
    dataset_digest = C.file_digest(Path(cfg.dataset.path) if cfg.dataset.path else BUNDLED_TASKS)
    trace_digest = C.file_digest(Path(cfg.trace.path) if cfg.trace.path else BUNDLED_TRACE)
    identity = C.result_identity(cfg, endpoints, dataset_digest, trace_digest)
    plan = Plan(
        name=config_name(cfg), cfg=cfg, config_hash=C.identity_hash(identity), identity=identity,
        system_name=cfg.system.name, system_cls=system_cls, system_params=params, answer_mode=cfg.answer.mode,
        endpoints=endpoints,
        embedding=embedding, tasks=tasks, trace=trace, session_index=session_index, root=root, job_dir=job_dir,
    )
    plan.done = Ledger(plan.ledger_path).load()
    return plan


def _check_params(system_cls: type[MemorySystem], name: str, params: dict[str, Any]) -> None:
    """Fail on unknown or ill-typed system parameters now, not inside a worker: build one throwaway instance."""
    with tempfile.TemporaryDirectory(prefix="inmind-check-") as d:
        try:
            system_cls(None, None, Path(d), **params)  # type: ignore[arg-type]
        except TypeError as e:
            raise PlanError(f"system.params for {name}: {e}") from None
        except Exception:
            pass  # constructors that need a live client or encoder are checked by their first task


# -- ledger -------------------------------------------------------------------------------------------------------

class Ledger:
    """Append-only JSONL of task records for one configuration; the last record of a task wins."""

    def __init__(self, path: Path):
        self.path = path

    def load(self) -> dict[str, TaskRecord]:
        """Records by task id; a line cut short by a killed writer is skipped (its task simply runs again)."""
        import json

        if not self.path.is_file():
            return {}
        out: dict[str, TaskRecord] = {}
        with open(self.path, encoding="utf-8") as f:
            for line in f:
                try:
                    rec = TaskRecord.from_dict(json.loads(line))
                except (json.JSONDecodeError, KeyError, TypeError):
                    continue
                out[rec.task_id] = rec
        return out

    def append(self, record: TaskRecord) -> None:
        import json

        self.path.parent.mkdir(parents=True, exist_ok=True)
        line = json.dumps(record.to_dict(), ensure_ascii=False, sort_keys=True) + "\n"
        with open(self.path, "a", encoding="utf-8") as f:
            if f.tell() > 0:
                self._repair_tail()
            f.write(line)
            f.flush()
            os.fsync(f.fileno())

    def _repair_tail(self) -> None:
        """A writer killed mid-line leaves a partial last line: end it so the next record starts on its own line."""
        with open(self.path, "rb+") as f:
            f.seek(-1, os.SEEK_END)
            if f.read(1) != b"\n":
                f.write(b"\n")


# -- workers ------------------------------------------------------------------------------------------------------

def _tar_dir(directory: Path) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for p in sorted(directory.rglob("*")):
            tar.add(p, arcname=str(p.relative_to(directory)), recursive=False)
    return buf.getvalue()


def _untar(blob: bytes, directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(blob), mode="r:gz") as tar:
        tar.extractall(directory, filter="data")


class TaskWorker:
    """A Ray actor holding one process's clients and encoder; ``configure`` points it at a configuration, and the
    same actors (and their loaded models) serve every configuration of a sweep."""

    def __init__(self, limiter: Any = None) -> None:
        for k, v in WORKER_ENV.items():
            os.environ.setdefault(k, v)
        self.limiter = limiter
        self.spec: dict[str, Any] = {}
        self.tmp = Path(tempfile.mkdtemp(prefix="inmind-worker-"))
        self._prefixes: dict[str, Path] = {}

    def configure(self, spec: dict[str, Any]) -> int:
        from inmind_exp.embed import build_encoder
        from inmind_exp.llm import CallCache, Models

        if spec != self.spec:
            self.spec = spec
            self.cache = CallCache(spec["cache_dir"])
            lim = RayLimiterClient(self.limiter) if self.limiter is not None else None
            self.models = Models.build(spec["endpoints"], self.cache, lim)
            self.encoder = build_encoder(spec["embedding"], self.cache, self.models.meter, lim)
            self.system_cls = SYSTEMS.get(spec["system"])
        return os.getpid()

    def _make(self, workdir: Path) -> MemorySystem:
        return self.system_cls(self.models, self.encoder, workdir, answer_mode=self.spec["answer_mode"],
                               **self.spec["params"])

    def build_prefix(self, trace: Trace, session_index: int) -> bytes:
        from inmind_exp.protocol import build_prefix

        work = self.tmp / "prefix-build"
        snap = self.tmp / "prefix-snapshot"
        build_prefix(self._make, trace, session_index, work, snap)
        blob = _tar_dir(snap)
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(snap, ignore_errors=True)
        return blob

    def run_task(self, task: Task, trace: Trace, session_index: int, prefix_hash: str, prefix_blob: bytes, attempt: int) -> TaskRecord:
        import dataclasses

        from inmind_exp.protocol import run_task

        prefix_dir = self._prefixes.get(prefix_hash)
        if prefix_dir is None:
            prefix_dir = self.tmp / f"prefix-{prefix_hash}"
            _untar(prefix_blob, prefix_dir)
            self._prefixes[prefix_hash] = prefix_dir
        rec = run_task(
            task, trace, session_index, self._make, self.models, child_dir(self.tmp, "task", task.id),
            config_hash=self.spec["config_hash"], system_name=self.spec["system"],
            evaluates_naive=self.system_cls.evaluates_naive, prefix_snapshot=prefix_dir,
            judge_attempts=self.spec["judge_attempts"], keep_workdir=self.spec["keep_workdirs"],
        )
        return dataclasses.replace(rec, attempts=attempt)


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


# -- the session: Ray, the local LLM, MLflow, shared by every job of a sweep in this process ----------------------

class Session:
    """Process-wide resources started on first use and stopped at exit."""

    _instance: "Session | None" = None

    def __init__(self) -> None:
        self.ray_started = False
        self.local_server: Any = None
        self.limiter: Any = None
        self.trackers: dict[tuple[str, str], Any] = {}
        self.checked: set[tuple[str, str]] = set()
        self.workers: list[Any] = []
        self.worker_cls: Any = None

    def pool(self, ray: Any, n: int, spec: dict[str, Any]) -> list[Any]:
        """``n`` task actors configured with ``spec``, reusing the ones earlier configurations started."""
        if self.worker_cls is None:
            self.worker_cls = ray.remote(num_cpus=1)(TaskWorker)
        while len(self.workers) < n:
            self.workers.append(self.worker_cls.remote(self.limiter))
        ray.get([w.configure.remote(spec) for w in self.workers[:n]])
        return self.workers[:n]

    def replace_worker(self, old: Any, spec: dict[str, Any]) -> Any:
        """A fresh actor in place of one that died."""
        new = self.worker_cls.remote(self.limiter)
        new.configure.remote(spec)
        self.workers = [new if w is old else w for w in self.workers]
        return new

    @classmethod
    def get(cls) -> "Session":
        if cls._instance is None:
            cls._instance = cls()
        return cls._instance

    def ray(self, cfg: DictConfig) -> Any:
        import ray

        if not self.ray_started:
            for k, v in {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0",
                         "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}.items():
                os.environ.setdefault(k, v)
            if not ray.is_initialized():
                runtime_env = OmegaConf.to_container(cfg.cluster.runtime_env, resolve=True) or {}
                assert isinstance(runtime_env, dict)
                runtime_env.setdefault("env_vars", {}).update(WORKER_ENV)
                kwargs: dict[str, Any] = {"include_dashboard": False, "runtime_env": runtime_env, "log_to_driver": True}
                if cfg.cluster.address:
                    try:
                        ray.init(address=cfg.cluster.address, **kwargs)
                    except ConnectionError as e:
                        raise PlanError(
                            f"cluster.address={cfg.cluster.address}: no Ray cluster answered ({e}); start one with "
                            f"`ray start --head` or use cluster=local"
                        ) from None
                else:
                    ray.init(address="local", num_cpus=cfg.cluster.num_cpus or max(2, int(cfg.cluster.workers)),
                             object_store_memory=cfg.cluster.object_store_memory, **kwargs)
            self.ray_started = True
            self.limiter = ray.remote(LimiterActor).options(max_concurrency=1000).remote()
        return ray

    def local_endpoint(self, cfg: DictConfig, log_dir: Path) -> tuple[str, str]:
        from inmind_exp.llm.local_server import start_local_server

        if cfg.cluster.address:
            raise PlanError(
                "llm=local serves the model on this machine's loopback, which a remote Ray cluster cannot reach; "
                "point llm.base_url at a server the cluster can reach (llm=vllm / llm=openai)"
            )
        if self.local_server is None or self.local_server.process.poll() is not None:
            print(f"[inmind] starting the embedded local LLM (llama.cpp, {cfg.llm.model}) ...", flush=True)
            t0 = time.perf_counter()
            self.local_server = start_local_server(
                cfg.llm.model_path, n_ctx=cfg.llm.server.n_ctx, n_threads=cfg.llm.server.n_threads, log_dir=log_dir,
                startup_timeout_s=cfg.llm.server.startup_timeout_s, chat_format=cfg.llm.server.chat_format,
            )
            print(f"[inmind] local LLM ready at {self.local_server.base_url} in {time.perf_counter() - t0:.1f}s", flush=True)
        return self.local_server.base_url, self.local_server.cache_id

    def tracker(self, cfg: DictConfig) -> Any:
        from inmind_exp.tracking import Tracker

        key = (cfg.tracking.uri, cfg.tracking.experiment)
        if key not in self.trackers:
            self.trackers[key] = Tracker(cfg.tracking.uri, cfg.tracking.experiment)
        return self.trackers[key]


# -- running one configuration ------------------------------------------------------------------------------------

@dataclass
class RunResult:
    plan: Plan
    records: list[TaskRecord]
    metrics: RunMetrics
    run_id: str | None
    wall_s: float


def _progress(plan: Plan, records: dict[str, TaskRecord], total: int, t0: float) -> str:
    recs = list(records.values())
    errors = sum(1 for r in recs if r.error)
    m = compute(recs)
    tok = sum(u.prompt_tokens + u.completion_tokens for u in m.usage.values())
    cached = sum(u.cached_calls for u in m.usage.values())
    calls = sum(u.calls for u in m.usage.values())
    return (f"[{plan.name}] {len(recs)}/{total} tasks, {errors} errors, {tok / 1000:.1f}k tokens, "
            f"{calls} calls ({cached} cached), {time.perf_counter() - t0:.0f}s")


def run_config(cfg: DictConfig, root: Path, job_dir: Path, parent_key: str | None = None, parent_name: str = "sweep") -> RunResult:
    """Plan, (re)run what is missing, log to MLflow, write artifacts; returns the metrics of this configuration."""
    t0 = time.perf_counter()
    plan = plan_config(cfg, root, job_dir)
    remaining = plan.remaining(cfg.run.retry_errors)
    session = Session.get()
    print(f"[inmind] {plan.name}: config {plan.config_hash}, {len(plan.tasks)} tasks "
          f"({len(plan.tasks) - len(remaining)} already done), fact injected into session "
          f"{plan.session_index + 1}/{len(plan.trace.sessions)}", flush=True)

    tracker = session.tracker(cfg)
    parent_id = None
    if parent_key:
        parent_id, _ = tracker.get_or_create_run(parent_key, parent_name, {"inmind.kind": "sweep"})
    run_key = C.identity_hash({"root": str(root.resolve()), "config": plan.config_hash})
    run_id, created = tracker.get_or_create_run(
        run_key, plan.name, {"inmind.kind": "config", "inmind.config_hash": plan.config_hash, "inmind.system": plan.system_name},
        parent_id=parent_id,
    )
    tracker.log_params(run_id, {**C.flatten_params(cfg), "inmind.config_hash": plan.config_hash})
    status = "FINISHED"
    records: dict[str, TaskRecord] = {t.id: plan.done[t.id] for t in plan.tasks if t.id in plan.done}
    try:
        if remaining:
            _execute(plan, remaining, records, session, t0)
    except KeyboardInterrupt:
        status = "KILLED"
        print(f"\n[inmind] interrupted: {len(records)} results are in the ledger {plan.ledger_path}; "
              f"run the same command again to finish the rest.", flush=True)
        raise
    except BaseException:
        status = "FAILED"
        raise
    finally:
        ordered = [records[t.id] for t in plan.tasks if t.id in records]
        metrics = compute(ordered)
        _write_outputs(plan, ordered, metrics, tracker, run_id)
        tracker.finish(run_id, status)
        if parent_id:
            tracker.finish(parent_id, status)
    print(_progress(plan, records, len(plan.tasks), t0), flush=True)
    return RunResult(plan, ordered, metrics, run_id, time.perf_counter() - t0)


def _write_outputs(plan: Plan, records: list[TaskRecord], metrics: RunMetrics, tracker: Any, run_id: str) -> None:
    plan.job_dir.mkdir(parents=True, exist_ok=True)
    rec_path = plan.job_dir / "records.jsonl"
    write_jsonl(rec_path, (r.to_dict() for r in records))
    cfg_path = plan.job_dir / "config.yaml"
    cfg_path.write_text(OmegaConf.to_yaml(plan.cfg, resolve=True))
    table_path = plan.job_dir / "results.md"
    table_path.write_text(results_table([(plan.name, metrics)]) + "\n")
    flat = metrics.flat()
    prices = {k: (v.prompt_per_1m, v.completion_per_1m) for k, v in plan.cfg.llm.prices.items()}
    cost = cost_usd(metrics.usage, prices, {r: e.model for r, e in plan.endpoints.items()})
    if cost is not None:
        flat["cost_usd"] = cost
    tracker.log_metrics(run_id, flat, step=len(records))
    tracker.log_artifacts(run_id, [rec_path, cfg_path, table_path])


def _execute(plan: Plan, remaining: list[Task], records: dict[str, TaskRecord], session: Session, t0: float) -> None:
    cfg = plan.cfg
    endpoints = dict(plan.endpoints)
    if cfg.llm.provider == "local":
        base_url, cache_id = session.local_endpoint(cfg, plan.root / "logs")
        endpoints = {r: (e.with_base_url(base_url, cache_id) if e.base_url == "local" else e) for r, e in endpoints.items()}
    _preflight(session, endpoints, plan.embedding)
    ray = session.ray(cfg)
    spec = {
        "cache_dir": str(Path(cfg.run.cache_dir).expanduser().resolve()),
        "endpoints": endpoints,
        "embedding": plan.embedding,
        "system": plan.system_name,
        "params": plan.system_params,
        "answer_mode": plan.answer_mode,
        "config_hash": plan.config_hash,
        "judge_attempts": int(cfg.run.judge_attempts),
        "keep_workdirs": bool(cfg.run.keep_workdirs),
    }
    n_workers = max(1, min(int(cfg.cluster.workers), len(remaining)))
    workers = session.pool(ray, n_workers, spec)
    prefix_ref = _prefix(plan, workers[0], ray)
    _dispatch(plan, remaining, records, workers, spec, session, prefix_ref, Ledger(plan.ledger_path), ray, t0)


def _preflight(session: Session, endpoints: dict[str, Endpoint], embedding: EmbeddingSpec) -> None:
    from inmind_exp.llm.preflight import check_endpoints

    eps = list(endpoints.values()) + ([embedding.endpoint] if embedding.endpoint else [])
    todo = [e for e in eps if (e.base_url, e.model) not in session.checked]
    if todo:
        check_endpoints(todo)
        session.checked.update((e.base_url, e.model) for e in todo)


def _prefix(plan: Plan, worker: Any, ray: Any) -> Any:
    """The prefix snapshot as an object ref: from ``<root>/prefix/<hash>.tar.gz`` if built before, else built now."""
    path = plan.root / "prefix" / f"{plan.prefix_hash}.tar.gz"
    if path.is_file():
        return ray.put(path.read_bytes())
    t = time.perf_counter()
    print(f"[inmind] {plan.name}: ingesting the {plan.session_index} prefix session(s) once ...", flush=True)
    blob = ray.get(worker.build_prefix.remote(plan.trace, plan.session_index))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(blob)
    tmp.replace(path)
    print(f"[inmind] {plan.name}: prefix snapshot ready ({len(blob) / 1024:.0f} KiB, {time.perf_counter() - t:.1f}s)", flush=True)
    return ray.put(blob)


def _dispatch(plan: Plan, remaining: list[Task], records: dict[str, TaskRecord], workers: list[Any],
              spec: dict[str, Any], session: Session, prefix_ref: Any, ledger: Ledger, ray: Any, t0: float) -> None:
    """Keep every worker busy with one task; retry a task whose worker died or whose result is an error."""
    from ray.exceptions import RayActorError

    max_attempts = max(1, int(plan.cfg.run.max_task_attempts))
    queue: list[tuple[Task, int]] = [(t, 1) for t in remaining]
    inflight: dict[Any, tuple[Task, int, int]] = {}
    trace_ref = ray.put(plan.trace)
    last_print = 0.0
    total = len(plan.tasks)

    def submit(wi: int) -> None:
        task, attempt = queue.pop(0)
        ref = workers[wi].run_task.remote(task, trace_ref, plan.session_index, plan.prefix_hash, prefix_ref, attempt)
        inflight[ref] = (task, attempt, wi)

    for wi in range(len(workers)):
        if queue:
            submit(wi)
    while inflight:
        ready, _ = ray.wait(list(inflight), num_returns=1)
        ref = ready[0]
        task, attempt, wi = inflight.pop(ref)
        try:
            rec: TaskRecord = ray.get(ref)
        except RayActorError as e:
            print(f"[inmind] {plan.name}: worker died on task {task.id} (attempt {attempt}): {type(e).__name__}", flush=True)
            workers[wi] = session.replace_worker(workers[wi], spec)
            if attempt < max_attempts:
                queue.insert(0, (task, attempt + 1))
            else:
                rec = _error_record(plan, task, f"worker died {attempt} time(s): {e}", attempt)
                ledger.append(rec)
                records[task.id] = rec
            if queue:
                submit(wi)
            continue
        if rec.error and attempt < max_attempts:
            print(f"[inmind] {plan.name}: task {task.id} failed (attempt {attempt}/{max_attempts}), retrying: "
                  f"{rec.error.splitlines()[0][:200]}", flush=True)
            queue.append((task, attempt + 1))
        else:
            ledger.append(rec)
            records[task.id] = rec
            if rec.error:
                print(f"[inmind] {plan.name}: task {task.id} recorded as error: {rec.error.splitlines()[0][:200]}", flush=True)
        if queue:
            submit(wi)
        now = time.perf_counter()
        if now - last_print >= float(plan.cfg.run.progress_every_s) or not inflight:
            print(_progress(plan, records, total, t0), flush=True)
            last_print = now


def _error_record(plan: Plan, task: Task, error: str, attempts: int) -> TaskRecord:
    return TaskRecord(config_hash=plan.config_hash, task_id=task.id, domain=task.domain, system=plan.system_name,
                      injection_session=plan.session_index, naive=None, indirect=None, verdicts={},
                      target_recall_exact=None, usage={}, latency_s=0.0, error=error, attempts=attempts)


# -- dry run ------------------------------------------------------------------------------------------------------

def estimate(plan: Plan, retry_errors: bool) -> dict[str, float]:
    """Upper-bound calls and prompt tokens of what remains to run (cache hits not subtracted)."""
    cost = plan.system_cls.cost
    remaining = plan.remaining(retry_errors)
    sessions = plan.trace.sessions
    j = plan.session_index

    def user_turns(ss: Any) -> int:
        return sum(1 for s in ss for t in s.turns if t.role == "user")

    prefix_calls = cost.memory_calls_per_user_turn * user_turns(sessions[:j]) + cost.memory_calls_per_session * j
    suffix_calls = (cost.memory_calls_per_user_turn * (user_turns(sessions[j:]) + 1)
                    + cost.memory_calls_per_session * (len(sessions) - j))
    queries = 2 if plan.system_cls.evaluates_naive else 1
    per_task_memory = suffix_calls + cost.memory_calls_per_query * queries
    per_task_answer = cost.answer_calls_per_query * queries
    per_task_judge = 4 if plan.system_cls.evaluates_naive else 3
    n = len(remaining)
    prefix_needed = n > 0 and not (plan.root / "prefix" / f"{plan.prefix_hash}.tar.gz").is_file()
    memory_calls = n * per_task_memory + (prefix_calls if prefix_needed else 0)
    return {
        "tasks_total": len(plan.tasks),
        "tasks_to_run": n,
        "memory_calls": memory_calls,
        "answer_calls": n * per_task_answer,
        "judge_calls": n * per_task_judge,
        "prompt_tokens": memory_calls * cost.prompt_tokens_per_memory_call
        + n * per_task_answer * cost.prompt_tokens_per_answer_call + n * per_task_judge * 1200,
    }


def print_estimate(plan: Plan, retry_errors: bool, out: Any = sys.stdout) -> dict[str, float]:
    est = estimate(plan, retry_errors)
    price = plan.cfg.llm.prices.get(plan.endpoints["answerer"].model)
    cost = f", ~${est['prompt_tokens'] * price.prompt_per_1m / 1e6:,.2f} of prompt tokens" if price is not None else ""
    print(f"[dry run] {plan.name} (config {plan.config_hash}): {est['tasks_to_run']:.0f}/{est['tasks_total']:.0f} tasks to run; "
          f"~{est['memory_calls']:.0f} memory + {est['answer_calls']:.0f} answer + {est['judge_calls']:.0f} judge calls, "
          f"~{est['prompt_tokens'] / 1e6:.2f}M prompt tokens{cost} (upper bound: cache hits not subtracted)",
          file=out, flush=True)
    return est


