"""The run's frozen settings read from ``run.*``, ``cluster.*``, ``tracking.*`` and ``llm=local``, and the functions
that build them from a composed config: what ``Plan`` holds besides the experiment itself."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from omegaconf import DictConfig, OmegaConf

from inmind_exp.errors import PlanError
from inmind_exp.llm.local_server import model_cache_id


@dataclass(frozen=True)
class RunSettings:
    """``run.*``: where the call cache lives, how often a task is retried, what is kept."""

    cache_dir: str
    #: "local" (each node its cache_dir) or "cluster" (one cache service on the driver's node)
    cache: str = "local"
    retry_errors: bool = True
    max_task_attempts: int = 2
    judge_attempts: int = 3
    keep_workdirs: bool = False
    progress_every_s: float = 10.0
    #: the per-call latency the dry run's wall-time estimate assumes (seconds)
    latency_s: float = 10.0
    #: the spend cap of the launch (``run.spend_cap``) and the live display mode (``run.live``)
    max_usd: float | None = None
    max_tokens: int | None = None
    progress: str = "auto"


@dataclass(frozen=True)
class ClusterSettings:
    """``cluster.*``: join ``address`` or start a local Ray; ``workers`` task actors."""

    address: str | None = None
    num_cpus: int | None = None
    workers: int = 2
    object_store_memory: int | None = 200_000_000
    runtime_env: Mapping[str, Any] = field(default_factory=dict)
    start_timeout_s: float = 120.0
    ship_code: bool = False
    tasks_per_worker: int = 16


@dataclass(frozen=True)
class TrackingSettings:
    uri: str = "sqlite:///mlflow.db"
    experiment: str = "inmind"


@dataclass(frozen=True)
class LocalServerSpec:
    """``llm=local``: the embedded llama.cpp server to start and the roles it serves (those without a base URL)."""

    model: str
    model_path: str | None
    n_ctx: int
    n_threads: int
    startup_timeout_s: float
    cache_id: str
    roles: tuple[str, ...]
    chat_format: str | None = None


def container(node: Any, key: str) -> dict[str, Any]:
    value = OmegaConf.to_container(node, resolve=True) if node is not None else {}
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise PlanError(f"{key}: expected a mapping, got {type(value).__name__}")
    return value


def local_server(cfg: DictConfig) -> LocalServerSpec | None:
    llm = cfg.llm
    if llm.provider == "openai":
        return None
    if llm.provider != "local":
        raise PlanError(f"llm.provider={llm.provider!r}: expected 'openai' or 'local'")
    return LocalServerSpec(
        model=str(llm.model), model_path=llm.model_path, n_ctx=int(llm.server.n_ctx),
        n_threads=int(llm.server.n_threads), startup_timeout_s=float(llm.server.startup_timeout_s),
        cache_id=model_cache_id(llm.model_path, int(llm.server.n_ctx), llm.server.chat_format),
        chat_format=llm.server.chat_format,
        roles=tuple(r for r in llm.roles if not llm.roles[r].base_url),
    )


def cache_mode(cfg: DictConfig) -> str:
    mode = cfg.run.get("cache") or ("cluster" if cfg.cluster.address else "local")
    if mode not in ("local", "cluster"):
        raise PlanError(f"run.cache={mode}: expected local or cluster")
    return mode


def cluster_settings(cfg: DictConfig) -> ClusterSettings:
    return ClusterSettings(
        address=cfg.cluster.address, num_cpus=cfg.cluster.num_cpus, workers=int(cfg.cluster.workers),
        object_store_memory=cfg.cluster.object_store_memory,
        runtime_env=container(cfg.cluster.runtime_env, "cluster.runtime_env"),
        start_timeout_s=float(cfg.cluster.start_timeout_s), ship_code=bool(cfg.cluster.ship_code),
        tasks_per_worker=_tasks_per_worker(cfg),
    )


def _tasks_per_worker(cfg: DictConfig) -> int:
    n = cfg.cluster.get("tasks_per_worker", 16)
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise PlanError(f"cluster.tasks_per_worker={n!r}: expected a whole number of at least 1")
    return n
