"""Typed schemas for every config group, registered with Hydra's ConfigStore (values live in ``conf/``). Each
setting is stated here once: the frozen settings a ``Plan`` holds are generated from these (``config.settings``),
the LLM settings an ``Endpoint`` shares take its defaults, and a role's overrides are ``Endpoint`` fields made
nullable, one ``RoleConf`` per role of ``ROLES``. The composed config becomes a ``Config`` once, at the edge
(``config.resolve.as_config``); planning it is ``plan.plan``'s.

A misspelt key or a wrong type fails at composition, naming the key, before anything runs.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

from inmind_exp.llm.endpoint import ROLES, Endpoint
from inmind_exp.llm.local_server import DEFAULT_CHAT_FORMAT, DEFAULT_N_CTX


@dataclass
class SystemConf:
    name: str = MISSING
    params: Dict[str, Any] = field(default_factory=dict)


@dataclass
class EmbeddingConf:
    name: str = MISSING
    kind: str = MISSING  # local | api | bm25
    model: Optional[str] = None
    dim: Optional[int] = None
    batch_size: int = 64
    base_url: Optional[str] = None
    api_key_env: Optional[str] = None
    max_concurrency: int = 4
    timeout_s: float = 120.0


@dataclass
class InjectionConf:
    name: str = MISSING
    user_turn: Optional[int] = None
    fraction: Optional[float] = None


#: the settings a role may override (``llm.roles.<role>.*``; null: as ``llm``), each an ``Endpoint`` field
ROLE_KEYS: tuple[str, ...] = ("base_url", "model", "api_key_env", "temperature", "max_tokens", "top_p", "timeout_s",
                              "max_concurrency", "reasoning", "service_tier")


def _nullable(hint: Any) -> Any:
    """``Optional[X]`` of an ``Endpoint`` field's type (``X | None`` or ``X``): OmegaConf reads ``typing.Optional``."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    return Optional[args[0] if args else hint]


def _schema(name: str, fields: list[tuple[str, Any, Any]], doc: str) -> type:
    """A schema dataclass made from another statement (a module-level name here, so Hydra's store and pickle find
    it)."""
    cls = dataclasses.make_dataclass(name, fields)
    cls.__module__, cls.__doc__ = __name__, doc
    return cls


#: ``llm.roles.<role>``: per-role overrides, each field the ``Endpoint`` field of that name made nullable (null: as
#: ``llm``; ``config.settings.role_endpoints``)
RoleConf = _schema("RoleConf", [(k, _nullable(typing.get_type_hints(Endpoint)[k]), field(default=None))
                                for k in ROLE_KEYS],
                   'Per-role overrides of ``Endpoint`` fields (``ROLE_KEYS``); null means "as ``llm``".')
#: ``llm.roles``: one ``RoleConf`` per role of ``ROLES``
RolesConf = _schema("RolesConf", [(r, RoleConf, field(default_factory=RoleConf)) for r in ROLES],
                    "``llm.roles``: one ``RoleConf`` per role (``inmind_exp.llm.endpoint.ROLES``).")


@dataclass
class LocalServerConf:
    """``llm.server.*``: how the embedded llama.cpp server is started (``llm=local``)."""

    n_ctx: int = DEFAULT_N_CTX
    n_threads: int = 2
    startup_timeout_s: float = 300.0
    #: llama-cpp-python's --chat_format; gguf-tool-calls returns tool calls structured, null is the GGUF template
    chat_format: Optional[str] = DEFAULT_CHAT_FORMAT


@dataclass
class LLMConf:
    name: str = MISSING
    provider: str = "openai"  # openai (any compatible endpoint) | local (start the embedded llama.cpp server)
    base_url: Optional[str] = None
    model: str = MISSING
    api_key_env: Optional[str] = None
    model_path: Optional[str] = None
    server: LocalServerConf = field(default_factory=LocalServerConf)
    # the settings every role's Endpoint takes: their defaults (and meaning) are Endpoint's (inmind_exp.llm.endpoint)
    temperature: Optional[float] = Endpoint.temperature
    top_p: Optional[float] = Endpoint.top_p
    max_tokens: Optional[int] = Endpoint.max_tokens
    max_tokens_param: str = Endpoint.max_tokens_param
    #: a reasoning-model endpoint (GPT-5-mini, o-series): send no temperature, top_p or logprobs, and the token
    #: limit as max_completion_tokens, from every role including the memory systems' internal calls
    reasoning: bool = Endpoint.reasoning
    seed: Optional[int] = Endpoint.seed
    #: the provider's processing lane for every role (e.g. flex; llm.roles.memory.service_tier=flex for one role)
    service_tier: Optional[str] = Endpoint.service_tier
    timeout_s: float = Endpoint.timeout_s
    #: the whole call (connect + response) ends within this, else it is a retryable timeout; sized for reasoning
    #: models (timeout_s bounds each read only)
    deadline_s: Optional[float] = Endpoint.deadline_s
    #: a reply larger than this is an error for its task (4 MiB)
    max_response_bytes: int = Endpoint.max_response_bytes
    max_concurrency: int = Endpoint.max_concurrency
    rpm: Optional[float] = Endpoint.rpm
    tpm: Optional[float] = Endpoint.tpm
    max_attempts: int = Endpoint.max_attempts
    backoff_initial_s: float = Endpoint.backoff_initial_s
    backoff_max_s: float = Endpoint.backoff_max_s
    roles: RolesConf = field(default_factory=RolesConf)  # type: ignore[valid-type]
    #: model -> {prompt_per_1m, completion_per_1m} in USD per million tokens, for any model (an entry's optional
    #: ``model`` names a model whose name cannot be a key, e.g. one with a dot); checked at planning
    #: (``run.plan_checks.check_prices``). Untyped and null by default so that both ``llm.prices={M: {...}}`` and
    #: ``+llm.prices.M={...}`` compose (a typed dict is closed to new keys under Hydra's struct mode)
    prices: Any = None
    #: how many tasks a run takes when dataset.limit is not given: small for the embedded model only (null: all)
    default_task_limit: Optional[int] = None


@dataclass
class AnswerConf:
    """``shared``: one neutral answer prompt for every system (compare systems); ``native``: each system's upstream
    answer prompt (reproduce a system)."""

    mode: str = "shared"


@dataclass
class JudgesConf:
    """``strict``: this project's judge prompts (``inmind_exp.protocol.judges``); ``paper``: the official release's four
    judge prompts and user-message layout, read from the release at run time. ``json_mode``: null keeps the set's
    own request envelope (strict: JSON mode and a repair turn; paper: the messages only, as the release sends);
    true/false chooses it (under ``paper``, true is a labelled deviation)."""

    prompts: str = "strict"
    json_mode: Optional[bool] = None


@dataclass
class ControlsConf:
    """``controls=none|no_fact|mismatched|all``: the negative controls a run adds (``inmind_exp.protocol.controls``);
    ``seed`` chooses the mismatched pairing."""

    names: List[str] = field(default_factory=list)
    seed: int = 0


@dataclass
class DatasetConf:
    """``bundled`` (or any task file in ``path``) or ``official``: the release's tasks (``inmind_exp.config.sources``),
    read from ``release_dir``, else ``$INMIND_RELEASE``, else the newest ``python -m inmind_exp.data fetch`` copy."""

    name: str = "bundled"
    path: Optional[str] = None  # null: the bundled 125 tasks
    limit: Optional[int] = None
    #: a seeded random sample of this many tasks, stratified by domain (replaces ``limit`` when set): for pilots,
    #: since the task files are sorted by domain and a small ``limit`` takes health tasks only
    sample: Optional[int] = None
    sample_seed: int = 0
    release_dir: Optional[str] = None


@dataclass
class TraceConf:
    """``bundled``/``smoke`` (or a LongMemEval-style file in ``path``) or ``official``: the release's background,
    found like the dataset's (``trace=official`` takes ``dataset.release_dir`` unless ``trace.release_dir`` is set)."""

    name: str = "bundled"
    path: Optional[str] = None  # null: the bundled 47-session trace
    index: int = 0
    release_dir: Optional[str] = None


@dataclass
class TrackingConf:
    """``tracking.*``: the MLflow store and experiment."""

    uri: str = "sqlite:///mlflow.db"
    experiment: str = "inmind"
    report_at_end: bool = True  # a -m sweep logs the analysis report to its parent run (inmind_exp/sweep_report.py)


@dataclass
class ClusterConf:
    """``cluster.*``: join ``address`` or start a local Ray; ``workers`` task actors."""

    name: str = "local"
    address: Optional[str] = None  # null: start a local Ray; "auto" or "ray://host:10001": join a cluster
    num_cpus: Optional[int] = None
    workers: int = 2
    object_store_memory: Optional[int] = 200_000_000
    runtime_env: Dict[str, Any] = field(default_factory=dict)
    #: how long a task actor may take to start, and the cluster may go without any live worker, before giving up
    start_timeout_s: float = 120.0
    #: ship inmind_exp, systems and analysis to the workers (Ray runtime_env py_modules): nodes need not have them
    ship_code: bool = False
    #: tasks one worker runs at once (threads; endpoint limits still apply through the limiter): waiting on an
    #: endpoint costs no CPU, so a worker runs several tasks, each with its own memory system and work directory.
    #: 16 x the default 2 workers = 32 in flight, a hosted endpoint's usual concurrency (benchmarks/bench_throughput.py)
    tasks_per_worker: int = 16


@dataclass
class RunConf:
    """``run.*``: where the call cache lives, how often a task is retried, what is kept, the spend cap, the display."""

    cache_dir: str = ".inmind_cache"
    #: a second launch of the same sweep waits for the first (up to lock_timeout_s) instead of exiting with 75
    wait_for_lock: bool = False
    lock_timeout_s: Optional[float] = None
    #: local: each node reads and writes cache_dir itself (a shared path makes it one cache); cluster: one cache
    #: service on the driver's node that every worker goes through; null: cluster when cluster.address is set
    cache: Optional[str] = None
    max_task_attempts: int = 2
    retry_errors: bool = True
    judge_attempts: int = 3
    keep_workdirs: bool = False
    progress_every_s: float = 10.0
    #: seconds one LLM call is assumed to take in the dry run's wall-time estimate (state your endpoint's figure:
    #: a reasoning model is 5-20 s, the embedded 1.5B model 10-30 s per reply)
    latency_s: float = 10.0
    #: stop dispatching new tasks once this launch's paid spend plus the estimate of what is in flight would pass
    #: the cap (dollars at llm.prices; paid tokens): the sweep stays resumable (inmind_exp.display.spend_cap)
    max_usd: Optional[float] = None
    max_tokens: Optional[int] = None
    #: the live display: auto (in place on a terminal, plain lines otherwise), live, plain, or off (--quiet)
    progress: str = "auto"
    #: a configuration's first task starts alone and its later tasks follow it, riding on the background replies it
    #: cached instead of racing it for them (measured: Mem0 709 paid calls on 2 workers against 548 one after another)
    lead_task: bool = True
    #: shared: later tasks reuse earlier tasks' cached memory replies (one sample of the background's memory, the
    #: ``inmind.cache_coupling`` tag says so); task: every task's memory calls are its own samples (each pays them)
    cache_scope: str = "shared"


@dataclass
class Config:
    system: SystemConf = MISSING
    embedding: EmbeddingConf = MISSING
    injection: InjectionConf = MISSING
    llm: LLMConf = MISSING
    answer: AnswerConf = field(default_factory=AnswerConf)
    judges: JudgesConf = field(default_factory=JudgesConf)
    controls: ControlsConf = field(default_factory=ControlsConf)
    dataset: DatasetConf = field(default_factory=DatasetConf)
    trace: TraceConf = field(default_factory=TraceConf)
    tracking: TrackingConf = field(default_factory=TrackingConf)
    cluster: ClusterConf = field(default_factory=ClusterConf)
    run: RunConf = field(default_factory=RunConf)
    dry_run: bool = False


def register_configs() -> None:
    cs = ConfigStore.instance()
    cs.store(name="base_config", node=Config)
