"""Everything ``run.plan`` resolves from a composed config besides the experiment itself: the frozen run, cluster,
tracking and local-server settings, each role's ``Endpoint``, the embedding and injection specs, and the config
flattened for MLflow. ``plan_config`` calls these; they never call back.

Each setting is stated once, in its Hydra schema (``inmind_exp.config.schema``): the frozen settings here are generated
from it (``frozen_settings``). The schema itself cannot be frozen: OmegaConf makes a frozen dataclass read-only, so
Hydra could not merge a group option or an override into it. Values derived from settings (the cache mode, the local
server's cache id) are functions or properties, not second fields.
"""

from __future__ import annotations

import dataclasses
import json
import os
import typing
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from inmind_exp.config.schema import ClusterConf, LLMConf, LocalServerConf, RoleConf, RunConf, TrackingConf
from inmind_exp.llm.embed import EmbeddingSpec
from inmind_exp.errors import PlanError
from inmind_exp.llm import ROLES, Endpoint
from inmind_exp.llm.local_server import model_cache_id
from inmind_exp.records import InjectionSpec


def frozen_settings(schema: type, name: str) -> type:
    """A frozen, keyword-only dataclass with ``schema``'s fields, types and defaults, named ``name`` (a module-level
    name here, so it pickles): what a ``Plan`` holds, with nothing restated."""
    hints = typing.get_type_hints(schema)
    specs = []
    for f in dataclasses.fields(schema):
        if f.default is not dataclasses.MISSING:
            spec = dataclasses.field(default=f.default)
        elif f.default_factory is not dataclasses.MISSING:
            spec = dataclasses.field(default_factory=f.default_factory)
        else:
            spec = dataclasses.field()
        specs.append((f.name, hints[f.name], spec))
    cls = dataclasses.make_dataclass(name, specs, frozen=True, kw_only=True)
    cls.__module__ = __name__
    cls.__doc__ = f"The frozen ``{schema.__name__}`` (``inmind_exp.config.schema``): {schema.__doc__ or name}"
    return cls


#: ``run.*``: where the call cache lives, how often a task is retried, what is kept, the spend cap, the display
RunSettings = frozen_settings(RunConf, "RunSettings")
#: ``cluster.*``: join ``address`` or start a local Ray; ``workers`` task actors
ClusterSettings = frozen_settings(ClusterConf, "ClusterSettings")


def local_cpu_cap() -> int:
    """The most CPUs (so task actors) a local Ray declares on this machine: twice its CPUs, at least 2 (a worker
    waits on endpoints with its threads; ``cluster.workers=1000`` declared 1000 CPUs on 2 cores and started 82
    worker processes for 8 tasks)."""
    return max(2, 2 * (os.cpu_count() or 1))
#: ``tracking.*``: the MLflow store and experiment
TrackingSettings = frozen_settings(TrackingConf, "TrackingSettings")
#: ``llm.server.*``: the embedded llama.cpp server's own settings
LocalServerSettings = frozen_settings(LocalServerConf, "LocalServerSettings")


@dataclass(frozen=True, kw_only=True)
class LocalServerSpec(LocalServerSettings):  # type: ignore[misc, valid-type]
    """``llm=local``: the embedded llama.cpp server to start (``llm.server.*``, the model) and the roles it serves
    (those without a base URL)."""

    model: str
    model_path: str | None
    roles: tuple[str, ...]

    @property
    def cache_id(self) -> str:
        """The server's identity in cache keys: the model file and what shapes its replies, not its port."""
        return model_cache_id(self.model_path, self.n_ctx, self.chat_format)


def container(node: Any, key: str) -> dict[str, Any]:
    value = OmegaConf.to_container(node, resolve=True) if node is not None else {}
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise PlanError(f"{key}: expected a mapping, got {type(value).__name__}")
    return value


def settings_of(cls: type, node: Any, key: str, **resolved: Any) -> Any:
    """``cls`` (a frozen settings class) from the config node at ``key``: each field's value there (its default
    where an older saved config lacks the key; a whole number given a float field as a float), then ``resolved``."""
    values = container(node, key)
    hints = typing.get_type_hints(cls)
    out: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name in resolved or f.name not in values:
            continue
        v = values[f.name]
        if hints[f.name] in (float, float | None) and isinstance(v, int) and not isinstance(v, bool):
            v = float(v)
        out[f.name] = v
    return cls(**out, **resolved)


# -- run, cluster, tracking, local server ----------------------------------------------------------------------------

def run_settings(cfg: DictConfig) -> Any:
    """``run.*`` resolved: the cache directory absolute, the cache mode chosen, at least one attempt per task."""
    run = settings_of(RunSettings, cfg.run, "run")
    return replace(run, cache_dir=str(Path(run.cache_dir).expanduser().resolve()), cache=cache_mode(cfg),
                   max_task_attempts=max(1, int(run.max_task_attempts)))


def cache_mode(cfg: DictConfig) -> str:
    mode = cfg.run.get("cache") or ("cluster" if cfg.cluster.address else "local")
    if mode not in ("local", "cluster"):
        raise PlanError(f"run.cache={mode}: expected local or cluster")
    return mode


def cluster_settings(cfg: DictConfig) -> Any:
    return settings_of(ClusterSettings, cfg.cluster, "cluster",
                       runtime_env=container(cfg.cluster.runtime_env, "cluster.runtime_env"),
                       tasks_per_worker=_tasks_per_worker(cfg))


def _tasks_per_worker(cfg: DictConfig) -> int:
    n = cfg.cluster.get("tasks_per_worker", ClusterConf.tasks_per_worker)
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise PlanError(f"cluster.tasks_per_worker={n!r}: expected a whole number of at least 1")
    return n


def tracking_settings(tracking: Any) -> Any:
    return settings_of(TrackingSettings, tracking, "tracking")


def local_server(cfg: DictConfig) -> LocalServerSpec | None:
    llm = cfg.llm
    if llm.provider == "openai":
        return None
    if llm.provider != "local":
        raise PlanError(f"llm.provider={llm.provider!r}: expected 'openai' or 'local'")
    return settings_of(LocalServerSpec, llm.server, "llm.server", model=str(llm.model), model_path=llm.model_path,
                       roles=tuple(r for r in llm.roles if not llm.roles[r].base_url))


# -- endpoints, embedding, injection ---------------------------------------------------------------------------------

#: the settings a role may override (``llm.roles.<role>.*``; null: as ``llm``), each an ``Endpoint`` field
ROLE_KEYS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(RoleConf))
#: the ``Endpoint`` fields that only ``llm.*`` sets, for every role: the rest it shares with ``LLMConf``
LLM_KEYS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(Endpoint) if f.name not in ROLE_KEYS
                                  and f.name in {g.name for g in dataclasses.fields(LLMConf)})


def role_endpoints(llm: DictConfig | Any) -> dict[str, Endpoint]:
    """One ``Endpoint`` per role: the role's overrides on top of ``llm``'s values."""
    out = {}
    for role in ROLES:
        r = llm.roles[role]
        v = {k: (llm[k] if r.get(k) is None else r.get(k)) for k in ROLE_KEYS} | {k: llm[k] for k in LLM_KEYS}
        out[role] = Endpoint(
            role=role, **{**v, "base_url": v["base_url"] or "", "timeout_s": float(v["timeout_s"]),
                          "max_concurrency": int(v["max_concurrency"]), "max_attempts": int(v["max_attempts"]),
                          "backoff_initial_s": float(v["backoff_initial_s"]),
                          "backoff_max_s": float(v["backoff_max_s"]), "reasoning": bool(v["reasoning"]),
                          "deadline_s": None if v["deadline_s"] is None else float(v["deadline_s"]),
                          "max_response_bytes": int(v["max_response_bytes"])})
    return out


def embedding_spec(emb: DictConfig | Any, llm: DictConfig | Any) -> EmbeddingSpec:
    endpoint = None
    if emb.kind == "api":
        endpoint = Endpoint(
            role="embedding",
            base_url=emb.base_url or llm.base_url or "",
            model=emb.model,
            api_key_env=emb.api_key_env,
            timeout_s=float(emb.timeout_s),
            max_concurrency=int(emb.max_concurrency),
            max_attempts=int(llm.max_attempts),
            backoff_initial_s=float(llm.backoff_initial_s),
            backoff_max_s=float(llm.backoff_max_s),
            deadline_s=None if llm.deadline_s is None else max(float(llm.deadline_s), float(emb.timeout_s)),
            max_response_bytes=max(int(llm.max_response_bytes), 64 * 1024 * 1024),  # a batch of vectors is large
        )
    return EmbeddingSpec(name=emb.name, kind=emb.kind, model=emb.model, dim=emb.dim, batch_size=int(emb.batch_size),
                         endpoint=endpoint)


def injection_spec(inj: DictConfig | Any) -> InjectionSpec:
    return InjectionSpec(name=str(inj.name), user_turn=inj.user_turn, fraction=inj.fraction)


def flatten_params(cfg: DictConfig) -> dict[str, str]:
    """The resolved config flattened to ``a.b.c -> str`` for MLflow params; values of secret-looking keys are dropped
    (``*_env`` keys hold only the *name* of an environment variable and are kept)."""
    from inmind_exp.safety.redact import is_secret_key, redact

    tree = redact(OmegaConf.to_container(cfg, resolve=True))
    out: dict[str, str] = {}

    def walk(prefix: str, node: Any) -> None:
        if isinstance(node, dict):
            for k, v in sorted(node.items()):
                walk(f"{prefix}.{k}" if prefix else str(k), v)
        else:
            leaf = prefix.rsplit(".", 1)[-1]
            if is_secret_key(leaf):
                return
            out[prefix] = json.dumps(node) if isinstance(node, (list, dict)) else str(node)

    walk("", tree)
    return out


def local_cpu_problems(cfg: DictConfig) -> list[str]:
    """A local cluster (no ``cluster.address``) asking for more workers or CPUs than ``local_cpu_cap``."""
    if OmegaConf.select(cfg, "cluster.address"):
        return []
    cap, out = local_cpu_cap(), []
    for key in ("cluster.workers", "cluster.num_cpus"):
        n = OmegaConf.select(cfg, key)
        if isinstance(n, int) and not isinstance(n, bool) and n > cap:
            out.append(f"{key}={n}: a local cluster runs at most {cap} on this machine (twice its "
                       f"{os.cpu_count()} CPUs); join a larger cluster with cluster.address")
    return out
