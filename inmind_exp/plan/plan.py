"""Turn one configuration into a frozen, fully resolved ``Plan``: the system class and its parameters, the
endpoints, the embedding, the tasks and trace, the injection session, the result identity and every run setting.
The composed Hydra config is typed once, at the top of ``plan_config`` (``config.resolve.as_config``); nothing after
reads a ``DictConfig``, and every problem is raised here, naming its key, before any work starts. ``plan_config``
reads top to bottom: values from ``config.settings``, checks from ``config.checks``, the hash from
``config.identity``; none of them calls back (the schemas are ``inmind_exp.config.schema``'s).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

from omegaconf import Container, OmegaConf

from inmind_exp import tags as T
from inmind_exp.data import DataError
from inmind_exp.data.release import ReleaseError
from inmind_exp.config.sources import OFFICIAL, load_background, load_dataset
from inmind_exp.llm.embed import EmbeddingSpec
from inmind_exp.memory.answering import PaperPrompt, load_paper_prompt
from inmind_exp.protocol.controls import ControlSpec, control_spec
from inmind_exp.errors import PlanError
from inmind_exp.protocol.judges import JUDGES, Judge, judge_set
from inmind_exp.llm import Endpoint
from inmind_exp.memory.answering import ANSWER_MODES
from inmind_exp.memory import SYSTEMS, MemorySystem
from inmind_exp.protocol.task import injection_session_index
from inmind_exp.records import Task, TaskRecord, Trace
from inmind_exp.config.identity import identity_hash, result_identity
from inmind_exp.labels import injection_label, label_suffix, run_label, swept_values
from inmind_exp.plan.ledger import Ledger
from inmind_exp.config.checks import (check_base_urls, check_params, check_prices, check_ranges, check_run,
                                      check_tracking_uri, check_writable)
from inmind_exp.config.resolve import as_config, as_dict
from inmind_exp.config.schema import Config, ControlsConf
from inmind_exp.config.settings import (ClusterSettings, LocalServerSpec, RunSettings, TrackingSettings,
                                        cluster_settings, embedding_spec, flatten_params, injection_spec,
                                        local_server, role_endpoints, run_settings, settings_of)
from inmind_exp.safety.redact import redact
from inmind_exp.memory.traits import Traits


@dataclass(frozen=True)
class WorkerSpec:
    """What a task actor needs to serve one configuration; equal specs let a worker keep its clients and encoder."""

    cache_dir: str
    endpoints: Mapping[str, Endpoint]
    embedding: EmbeddingSpec
    system: str
    params: Mapping[str, Any]
    answer_mode: str
    config_hash: str
    judge_attempts: int
    keep_workdirs: bool
    cache: str = "local"
    #: the judge prompt set (None: the strict registry, ``JUDGES``) and the release's answer prompt (``answer=paper``)
    judges: Mapping[str, Judge] | None = None
    answer_prompt: PaperPrompt | None = None
    #: ``module:Class`` of the system, for a worker where a plug-in's entry point is not installed (shipped code)
    system_ref: str = ""
    #: the negative controls (``controls=``; None: none), with the mismatched pairing
    controls: ControlSpec | None = None
    #: ``run.cache_scope``: "task" keys each task's memory calls by its task id (its own samples)
    cache_scope: str = "shared"


@dataclass(frozen=True)
class Plan:
    """Everything needed to run one configuration, resolved and validated.

    ``endpoints`` of the roles a local server will serve (``local.roles``) have no base URL until ``bind`` is given
    the started server's URL; their cache identity (``cache_id``) is known from the start, so the config hash is too.
    """

    name: str
    config_hash: str
    identity: Mapping[str, Any]
    system_name: str
    system_cls: type[MemorySystem]
    system_params: Mapping[str, Any]
    answer_mode: str
    endpoints: Mapping[str, Endpoint]
    embedding: EmbeddingSpec
    tasks: tuple[Task, ...]
    trace: Trace
    session_index: int
    root: Path
    job_dir: Path
    run: RunSettings
    cluster: ClusterSettings
    tracking: TrackingSettings
    local: LocalServerSpec | None
    #: model -> (USD per 1M prompt tokens, per 1M completion tokens, per 1M prompt tokens from the provider's cache)
    prices: Mapping[str, tuple[float, float, float]]
    #: the resolved config, flattened for MLflow params (secrets dropped) and as YAML for the job directory
    params: Mapping[str, str]
    config_yaml: str
    #: the typed config the plan was made from (official params applied), for what reads a setting from it (fidelity)
    config: Config
    done: Mapping[str, TaskRecord] = field(default_factory=dict)
    #: the judge prompt set (``judges.prompts``) and the release's answer prompt when ``answer=paper``
    judges: Mapping[str, Judge] = field(default_factory=lambda: dict(JUDGES))
    answer_prompt: PaperPrompt | None = None
    #: the negative controls (``controls=``, ``inmind_exp.protocol.controls``); None when the run has none
    controls: ControlSpec | None = None

    @property
    def asks_naive(self) -> bool:
        """Whether this configuration is asked the naive query (``MemorySystem.asks_naive``)."""
        return self.system_cls.asks_naive(dict(self.system_params))
    #: the task file the tasks were read from (the bundled set, a user's file or the release's), for MLflow
    dataset_path: Path | None = None
    #: ``dataset.release_dir`` as configured (None: ``$INMIND_RELEASE``, else the newest fetched copy)
    release_dir: Path | None = None

    @property
    def ledger_path(self) -> Path:
        return self.root / "ledger" / f"{self.config_hash}.jsonl"

    @property
    def prefix_hash(self) -> str:
        ident = {k: self.identity[k] for k in ("system", "embedding", "trace")}
        ident["memory"] = self.identity["roles"]["memory"]
        ident["code"] = self.identity["code"]["system"]  # the system's version and prompts build the snapshot
        ident["session_index"] = self.session_index
        if self.controls is not None and self.controls.no_fact:
            ident["no_fact"] = True  # the snapshot also holds the no-fact state (``controls.build_no_fact``)
        return identity_hash(ident)

    @property
    def prefix_path(self) -> Path:
        """The shared prefix snapshot, built once per prefix identity and reused by every later run."""
        return self.root / "prefix" / f"{self.prefix_hash}.tar.gz"

    def remaining(self, retry_errors: bool | None = None) -> list[Task]:
        """Tasks without a finished record; when retrying errors, also errored ones and those with a failed verdict
        (``TaskRecord.rejudgeable``: the worker asks only those verdicts again, given the record as ``previous``)."""
        retry = self.run.retry_errors if retry_errors is None else retry_errors
        out = []
        for t in self.tasks:
            rec = self.done.get(t.id)
            if rec is None or ((rec.error or rec.rejudgeable) and retry):
                out.append(t)
        return out

    def bind(self, base_url: str) -> "Plan":
        """The plan with the local server's URL given to the roles it serves."""
        if self.local is None:
            return self
        eps = {r: (e.with_base_url(base_url, self.local.cache_id) if r in self.local.roles else e)
               for r, e in self.endpoints.items()}
        return replace(self, endpoints=eps)

    def worker_spec(self) -> WorkerSpec:
        unbound = [r for r, e in self.endpoints.items() if not e.base_url]
        if unbound:
            raise PlanError(f"role(s) {', '.join(unbound)} have no base URL: start the local server and bind it first")
        return WorkerSpec(
            cache_dir=self.run.cache_dir, endpoints=dict(self.endpoints), embedding=self.embedding,
            system=self.system_name, params=dict(self.system_params), answer_mode=self.answer_mode,
            config_hash=self.config_hash, judge_attempts=self.run.judge_attempts, keep_workdirs=self.run.keep_workdirs,
            cache=self.run.cache or "local", cache_scope=self.run.cache_scope, judges=None if self.judges == JUDGES else dict(self.judges),
            answer_prompt=self.answer_prompt, controls=self.controls,
            system_ref=f"{self.system_cls.__module__}:{self.system_cls.__qualname__}",
        )

    def error_record(self, task: Task, error: str, attempts: int) -> TaskRecord:
        """The record of a task that never produced one (its worker died on every attempt)."""
        from inmind_exp.protocol.task import failed_record

        return replace(failed_record(task, config_hash=self.config_hash, system_name=self.system_name,
                                     session_index=self.session_index, error=error, attempts=attempts),
                       traits=Traits.of(self.system_cls, self.system_params).to_dict())


def plan_config(cfg: Config | Container, root: Path, job_dir: Path, label_keys: Sequence[str] = (),
                overrides: Sequence[str] = ()) -> Plan:
    """Validate and resolve a config (the composed one is typed first, here: ``as_config``); every problem names its
    key and is raised before work starts. ``label_keys`` are the other keys the sweep varies (shown in the plan's
    name, ``inmind_exp.labels``), with this job's ``overrides`` for the values that are no config leaf."""
    config = as_config(cfg)
    try:
        system_cls = SYSTEMS.get(config.system.name)
    except KeyError as e:
        raise PlanError(f"system={config.system.name}: {e.args[0]}") from None
    if config.embedding.name not in system_cls.embeddings:
        raise PlanError(
            f"embedding={config.embedding.name} is not supported by system={config.system.name} "
            f"(supported: {', '.join(system_cls.embeddings)})"
        )
    try:
        dataset = load_dataset(config.dataset)
        background = load_background(config.trace)
    except DataError as e:
        raise PlanError(str(e)) from e
    except ReleaseError as e:  # no release, or a file that fails its hash: exit 2 naming the fetch command
        raise PlanError(str(e)) from None
    tasks, trace = dataset.tasks, background.trace
    try:
        session_index = injection_session_index(trace, injection_spec(config.injection))
    except ValueError as e:
        raise PlanError(str(e)) from None
    check_base_urls(config)
    local = local_server(config)
    endpoints = role_endpoints(config.llm)
    if local is not None:  # the served roles' identity is the model, not the port the server gets
        endpoints = {r: (replace(e, base_url="", cache_id=local.cache_id) if r in local.roles else e)
                     for r, e in endpoints.items()}
    for r, ep in endpoints.items():
        if not ep.base_url and not (local and r in local.roles):
            raise PlanError(f"llm.base_url (or llm.roles.{r}.base_url) is not set for role '{r}'")
        if not ep.model:
            raise PlanError(f"llm.model is not set for role '{r}'")
    embedding = embedding_spec(config.embedding, config.llm)
    if embedding.kind == "api" and not (embedding.endpoint and embedding.endpoint.base_url):
        raise PlanError(f"embedding={config.embedding.name}: set embedding.base_url (or llm.base_url) for the "
                        f"embeddings API")
    if config.dataset.name == OFFICIAL:
        config = _with_official_params(config, system_cls.official_params)
    params = dict(config.system.params)
    if config.answer.mode not in ANSWER_MODES:
        raise PlanError(f"answer={config.answer.mode}: expected one of {', '.join(ANSWER_MODES)}")
    check_params(system_cls, config.system.name, params)
    check_run(config.run)
    check_ranges(config, system_cls, params)
    prices = check_prices(config.llm.prices)
    check_tracking_uri(config.tracking.uri)
    for key, where in ((f"run.cache_dir={config.run.cache_dir}", Path(config.run.cache_dir)),
                       (f"hydra.sweep.dir / hydra.run.dir ({root})", root), (f"the job directory {job_dir}", job_dir)):
        check_writable(key, where)  # every output path, before anything is paid
    judges, answer_prompt = _release_prompts(config)
    identity = result_identity(config, endpoints, dataset.digest, background.digest, system_cls.uses_embedding,
                               judges=judges, answer_prompt=answer_prompt, system_cls=system_cls)
    controls = _controls(config.controls, tasks, dataset.universe)
    if controls is not None:  # only then: a run without controls keeps its identity
        identity["controls"] = controls.identity(judges)
    config_hash = identity_hash(identity)
    inj = config.injection
    plan = Plan(
        name=run_label(config.system.name, config.embedding.name,
                       injection_label(inj.name, inj.user_turn, inj.fraction), config.llm.name, config.answer.mode,
                       label_suffix(label_keys, swept_values(config, label_keys, overrides))),
        config_hash=config_hash, identity=identity, system_name=config.system.name, system_cls=system_cls,
        system_params=params, answer_mode=config.answer.mode, endpoints=endpoints, embedding=embedding,
        tasks=tuple(tasks), trace=trace, session_index=session_index, root=root, job_dir=job_dir,
        dataset_path=dataset.path,
        release_dir=Path(config.dataset.release_dir) if config.dataset.release_dir else None,
        run=run_settings(config), cluster=cluster_settings(config),
        tracking=settings_of(TrackingSettings, config.tracking), local=local, prices=prices,
        # controls.* only when the run has controls: a run without them keeps its MLflow params
        params={**{k: v for k, v in flatten_params(config).items()
                   if controls is not None or not k.startswith("controls.")},
                **_traits(system_cls, params).params(), T.CONFIG_HASH: config_hash},
        config_yaml=OmegaConf.to_yaml(OmegaConf.create(redact(as_dict(config)))), config=config,
        judges=judges, answer_prompt=answer_prompt, controls=controls,
    )
    return replace(plan, done=Ledger(plan.ledger_path).load())


def _traits(system_cls: type[MemorySystem], params: Mapping[str, Any]) -> Traits:
    try:
        return Traits.of(system_cls, params)
    except ValueError as e:
        raise PlanError(str(e)) from None


def _controls(controls: ControlsConf, tasks: Sequence[Task], universe: Sequence[Task]) -> ControlSpec | None:
    """``controls.*``: the run's negative controls and, for ``mismatched``, the pairing over the whole task file
    (``universe``) restricted to the run's tasks."""
    try:
        return control_spec(list(controls.names), tasks, seed=controls.seed, universe=universe)
    except ValueError as e:
        raise PlanError(f"controls={','.join(controls.names)}: {e}") from None


def _with_official_params(config: Config, defaults: Mapping[str, Any]) -> Config:
    """On the official tasks, a system's ``official_params`` (the release's protocol for it: the backbone also
    answers the naive query, naive_rag is the single-shot control) unless the user set them; a new config, so
    they are in the result identity, the MLflow params and ``config.yaml``."""
    params = {**config.system.params, **{k: v for k, v in defaults.items() if k not in config.system.params}}
    return replace(config, system=replace(config.system, params=params))


def _release_prompts(config: Config) -> tuple[dict[str, Judge], PaperPrompt | None]:
    """The judge set and (``answer=paper``) the answer prompt, the paper ones read from the release now, so a
    missing or changed release is a ``PlanError`` before any work."""
    from inmind_exp.data.release import ReleaseError, find_release

    prompts, paper_answer = config.judges.prompts, config.answer.mode == "paper"
    wants = [k for k, on in (("answer=paper", paper_answer), ("judges=paper", prompts == "paper")) if on]
    try:
        release = find_release(config.dataset.release_dir, where=" and ".join(wants)) if wants else None
        judges = judge_set(prompts, release, config.judges.json_mode)
        return judges, (load_paper_prompt(release) if release is not None and paper_answer else None)
    except (ReleaseError, ValueError) as e:
        raise PlanError(str(e)) from None

