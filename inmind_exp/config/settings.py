"""Everything ``plan.plan`` resolves from the typed ``Config`` besides the experiment itself: the frozen run, cluster,
tracking and local-server settings, each role's ``Endpoint``, the embedding and injection specs, and the config
flattened for MLflow. ``plan_config`` calls these; they never call back. The three a launch calls before planning
(``cluster_settings``, ``local_server``, ``local_cpu_problems``) also take the composed config and type it first.

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
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from omegaconf import Container

from inmind_exp.config.resolve import as_config, as_dict
from inmind_exp.config.schema import (ROLE_KEYS, ClusterConf, Config, EmbeddingConf, InjectionConf, LLMConf,
                                      LocalServerConf, RunConf, TrackingConf)
from inmind_exp.errors import PlanError
from inmind_exp.llm.embed import EmbeddingSpec
from inmind_exp.llm.endpoint import ROLES, Endpoint
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


if TYPE_CHECKING:  # a type checker reads the generated classes as their schemas: the same fields and types
    RunSettings = RunConf
    ClusterSettings = ClusterConf
    TrackingSettings = TrackingConf
    LocalServerSettings = LocalServerConf
else:
    #: ``run.*``: where the call cache lives, how often a task is retried, what is kept, the spend cap, the display
    RunSettings = frozen_settings(RunConf, "RunSettings")
    #: ``cluster.*``: join ``address`` or start a local Ray; ``workers`` task actors
    ClusterSettings = frozen_settings(ClusterConf, "ClusterSettings")
    #: ``tracking.*``: the MLflow store and experiment
    TrackingSettings = frozen_settings(TrackingConf, "TrackingSettings")
    #: ``llm.server.*``: the embedded llama.cpp server's own settings
    LocalServerSettings = frozen_settings(LocalServerConf, "LocalServerSettings")


def local_cpu_cap() -> int:
    """The most CPUs (so task actors) a local Ray declares on this machine: twice its CPUs, at least 2 (a worker
    waits on endpoints with its threads; ``cluster.workers=1000`` declared 1000 CPUs on 2 cores and started 82
    worker processes for 8 tasks)."""
    return max(2, 2 * (os.cpu_count() or 1))


@dataclass(frozen=True, kw_only=True)
class LocalServerSpec(LocalServerSettings):  # type: ignore[misc]
    """``llm=local``: the embedded llama.cpp server to start (``llm.server.*``, the model) and the roles it serves
    (those without a base URL)."""

    model: str
    model_path: str | None
    roles: tuple[str, ...]

    @property
    def cache_id(self) -> str:
        """The server's identity in cache keys: the model file and what shapes its replies, not its port."""
        return model_cache_id(self.model_path, self.n_ctx, self.chat_format)


def settings_of(cls: type, conf: Any, **resolved: Any) -> Any:
    """``cls`` (a frozen settings class) from the typed ``conf`` it freezes, each field by name, then ``resolved``."""
    return cls(**{f.name: getattr(conf, f.name) for f in dataclasses.fields(cls) if f.name not in resolved}, **resolved)


# -- run, cluster, tracking, local server ----------------------------------------------------------------------------

def run_settings(config: Config) -> RunSettings:
    """``run.*`` resolved: the cache directory absolute, the cache mode chosen, at least one attempt per task."""
    return settings_of(RunSettings, config.run, cache_dir=str(Path(config.run.cache_dir).expanduser().resolve()),
                       cache=cache_mode(config), max_task_attempts=max(1, config.run.max_task_attempts))


def cache_mode(config: Config) -> str:
    mode = config.run.cache or ("cluster" if config.cluster.address else "local")
    if mode not in ("local", "cluster"):
        raise PlanError(f"run.cache={mode}: expected local or cluster")
    return mode


def cluster_settings(cfg: Config | Container) -> ClusterSettings:
    """``cluster.*`` frozen, at least one task per worker (a composed config is typed first: ``as_config``)."""
    cluster = as_config(cfg).cluster
    if cluster.tasks_per_worker < 1:
        raise PlanError(f"cluster.tasks_per_worker={cluster.tasks_per_worker!r}: expected a whole number of at least 1")
    return settings_of(ClusterSettings, cluster, runtime_env=dict(cluster.runtime_env))


def local_server(cfg: Config | Container) -> LocalServerSpec | None:
    """``llm=local``: the embedded server to start and the roles it serves (a composed config is typed first)."""
    llm = as_config(cfg).llm
    if llm.provider == "openai":
        return None
    if llm.provider != "local":
        raise PlanError(f"llm.provider={llm.provider!r}: expected 'openai' or 'local'")
    return settings_of(LocalServerSpec, llm.server, model=llm.model, model_path=llm.model_path,
                       roles=tuple(r for r in ROLES if not getattr(llm.roles, r).base_url))


# -- endpoints, embedding, injection ---------------------------------------------------------------------------------

#: the ``Endpoint`` fields that only ``llm.*`` sets, for every role: the rest it shares with ``LLMConf``
LLM_KEYS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(Endpoint) if f.name not in ROLE_KEYS
                                  and f.name in {g.name for g in dataclasses.fields(LLMConf)})


def role_endpoints(llm: LLMConf) -> dict[str, Endpoint]:
    """One ``Endpoint`` per role: the role's overrides on top of ``llm``'s values."""
    out = {}
    for role in ROLES:
        r = getattr(llm.roles, role)
        own = {k: (getattr(llm, k) if getattr(r, k) is None else getattr(r, k)) for k in ROLE_KEYS}
        shared = {k: getattr(llm, k) for k in LLM_KEYS}
        out[role] = Endpoint(role=role, **shared, **own | {"base_url": own["base_url"] or ""})
    return out


def embedding_spec(emb: EmbeddingConf, llm: LLMConf) -> EmbeddingSpec:
    """``embedding.*``; an embeddings API takes ``llm``'s retry policy and base URL unless it names its own."""
    endpoint = None
    if emb.kind == "api":
        endpoint = Endpoint(
            role="embedding",
            base_url=emb.base_url or llm.base_url or "",
            model=emb.model,  # type: ignore[arg-type]
            api_key_env=emb.api_key_env,
            timeout_s=emb.timeout_s,
            max_concurrency=emb.max_concurrency,
            max_attempts=llm.max_attempts,
            backoff_initial_s=llm.backoff_initial_s,
            backoff_max_s=llm.backoff_max_s,
            deadline_s=None if llm.deadline_s is None else max(llm.deadline_s, emb.timeout_s),
            max_response_bytes=max(llm.max_response_bytes, 64 * 1024 * 1024),  # a batch of vectors is large
        )
    return EmbeddingSpec(name=emb.name, kind=emb.kind, model=emb.model, dim=emb.dim, batch_size=emb.batch_size,
                         endpoint=endpoint)


def injection_spec(inj: InjectionConf) -> InjectionSpec:
    return InjectionSpec(name=inj.name, user_turn=inj.user_turn, fraction=inj.fraction)


def flatten_params(config: Config | Mapping[str, Any]) -> dict[str, str]:
    """The config (or a plain nested mapping, such as a stored run's) flattened to ``a.b.c -> str`` for MLflow
    params; values of secret-looking keys are dropped (``*_env`` keys hold only the *name* of an environment
    variable and are kept)."""
    from inmind_exp.safety.redact import is_secret_key, redact

    tree = redact(as_dict(config) if isinstance(config, Config) else dict(config))
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


def local_cpu_problems(cfg: Config | Container) -> list[str]:
    """A local cluster (no ``cluster.address``) asking for more workers or CPUs than ``local_cpu_cap`` (a composed
    config is typed first: ``as_config``)."""
    cluster = as_config(cfg).cluster
    if cluster.address:
        return []
    cap = local_cpu_cap()
    return [f"cluster.{key}={n}: a local cluster runs at most {cap} on this machine (twice its {os.cpu_count()} "
            f"CPUs); join a larger cluster with cluster.address"
            for key, n in (("workers", cluster.workers), ("num_cpus", cluster.num_cpus)) if n is not None and n > cap]
