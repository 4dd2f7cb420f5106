"""The release's setting and a run's: what fidelity (``official.fidelity``) compares, read from a plan (its typed
config, resolved endpoints, tasks and injection session), a typed config, or a stored run's flattened params; and
how a system differs from its paper row (``system_gaps``)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Mapping

if TYPE_CHECKING:
    from inmind_exp.config.schema import Config

#: The release's setting (evaluation/README.md "Answer generation", "Judging"; background/manifest.json).
RELEASE_MODEL = "gpt-5-mini"
RELEASE_HOST = "api.openai.com"
ANSWER_MAX_TOKENS = 16_384
JUDGE_MAX_TOKENS = 4_096
INJECTION_USER_TURN = 40  # manifest.json injection_user_turn_locator
INJECTION_SESSION_INDEX = 8  # manifest.json injection_session_index (zero-based)
N_TASKS = 125
#: The release's example configuration retrieves 10 items (evaluation/README.md "Result format",
#: examples/submission.example.jsonl: ``retrieval_top_k``); its protocol does not fix the number, so a run's
#: ``top_k`` is stated beside its fidelity (``top_k_note``), not listed as a deviation.
RELEASE_RETRIEVAL_TOP_K = 10
#: The paper's nine rows (systems) and the embeddings it ran them with (``+preset=paper_rows`` re-runs them).
PAPER_SYSTEMS = ("backbone", "naive_rag", "always_in_state", "mem0", "a_mem", "memoryos", "hipporag2", "a_rag",
                 "xmemory")
PAPER_EMBEDDINGS = ("minilm", "emb3")
#: The dataset, trace, answer and judge prompt set of the release's setting (config group options).
OFFICIAL_DATASET = "official"
OFFICIAL_TRACE = "official"
PAPER_ANSWER = "paper"
PAPER_JUDGES = "paper"
DEFAULT_JUDGES = "strict"
BUNDLED = "bundled"
_NULL = (None, "None", "null", "")


@dataclass(frozen=True)
class RoleSetting:
    """One role's model and request as sent (``reasoning``: no temperature or top-p is sent), the endpoint's host
    (None: not known) and the models the endpoint reported (empty: not known yet, before the run)."""

    model: str
    max_tokens: int | None
    temperature: float | None = None
    top_p: float | None = None
    reasoning: bool = False
    seed: int | None = None
    host: str | None = None
    served: tuple[str, ...] = ()


@dataclass(frozen=True)
class Setting:
    """What fidelity compares: the protocol-relevant coordinates of one configuration.

    ``dataset`` / ``trace`` are ``official``, ``bundled`` or ``file`` (a task or trace file of the user's own);
    ``n_tasks`` is how many tasks the run takes (None: all); ``session_index`` the zero-based injection session
    when known (a plan: then it, not the knob, is compared); ``judges`` the judge prompt set (``paper`` or
    ``strict``); ``memory`` the memory role and ``system_gaps`` how the system differs from its paper row (both
    only matter for the ``paper`` level).
    """

    dataset: str
    trace: str
    injection: str
    user_turn: int | None
    fraction: float | None
    answer: str
    judges: str
    answerer: RoleSetting
    judge: RoleSetting
    n_tasks: int | None = None
    session_index: int | None = None
    #: the judges asked for JSON mode with a repair turn (``judges.json_mode=true``); the release sends neither
    judge_json_mode: bool = False
    memory: RoleSetting | None = None
    system_gaps: tuple[str, ...] = ()


def system_gaps(system: str, params: Mapping[str, Any], embedding: str | None, embedding_host: str | None = None,
                system_cls: Any = None) -> tuple[str, ...]:
    """How a configuration's system differs from its paper row: not one of the paper's nine systems, a parameter
    other than its conf value or ``official_params`` (the release's protocol for it), an embedding the paper did
    not run, or an embeddings API other than OpenAI's."""
    if system not in PAPER_SYSTEMS:
        return (f"system={system} (not one of the paper's rows)",)
    import yaml

    from inmind_exp.labels import CONF_DIR

    if system_cls is None:
        from inmind_exp.memory import SYSTEMS

        system_cls = SYSTEMS.get(system)
    conf = yaml.safe_load((CONF_DIR / "system" / f"{system}.yaml").read_text()) or {}
    paper = {**(conf.get("params") or {}), **system_cls.official_params}
    params = {**system_cls.official_params, **params}  # a plan applies them unless set (a composed config: not yet)
    out = [f"system.params.{k}={params.get(k)} (paper: {paper.get(k)})"
           for k in sorted(set(paper) | set(params)) if str(params.get(k)) != str(paper.get(k))]
    if system_cls.uses_embedding and embedding not in PAPER_EMBEDDINGS:
        out.append(f"embedding={embedding} (paper: {', '.join(PAPER_EMBEDDINGS)})")
    elif system_cls.uses_embedding and embedding_host not in (None, RELEASE_HOST):
        out.append(f"embedding host={embedding_host} (paper: {RELEASE_HOST})")
    return tuple(out)


def retrieval_note(top_k: Any) -> str | None:
    """The note line stating a configuration's ``top_k`` against the release's example ``retrieval_top_k``; None
    for a system without one."""
    if top_k is None:
        return None
    return (f"top_k={top_k} (the release's example configuration: retrieval_top_k {RELEASE_RETRIEVAL_TOP_K}; "
            "its protocol does not fix it)")


def top_k_note(params: Mapping[str, Any]) -> str | None:
    """``retrieval_note`` of a stored run's flattened params (``system.params.top_k``)."""
    return retrieval_note(_get(params, "system.params.top_k"))


def setting_of(source: Any) -> Setting:
    if isinstance(source, Setting):
        return source
    if hasattr(source, "config") and hasattr(source, "endpoints") and hasattr(source, "tasks"):
        return _setting_of_plan(source)
    from inmind_exp.config.schema import Config

    if isinstance(source, Config):
        return setting_of_config(source)
    if isinstance(source, Mapping):
        return setting_of_params(source)
    raise TypeError(f"fidelity: expected a Setting, Plan, Config or flattened config, got {type(source).__name__}")


def _get(params: Mapping[str, Any], key: str) -> str | None:
    v = params.get(key)
    return None if v in _NULL else str(v)


def _int(v: str | None) -> int | None:
    return None if v is None else int(float(v))


def _float(v: str | None) -> float | None:
    return None if v is None else float(v)


def _bool(v: str | None) -> bool:
    return str(v).lower() == "true"


def group_choice(params: Mapping[str, Any], group: str, default: str) -> str:
    """The option of a config group as its values record it: ``<group>.name`` (the convention of ``llm``,
    ``embedding``, ``injection``), else ``.mode`` / ``.prompts`` / ``.source``; ``default`` when none is set."""
    for key in ("name", "mode", "prompts", "source"):
        v = _get(params, f"{group}.{key}")
        if v is not None:
            return v
    return default


def _data_choice(params: Mapping[str, Any], group: str) -> str:
    """``<group>.name`` (``official``, ``smoke`` ...), but a ``path`` of the user's own under the default name
    ``bundled`` is ``file``: those are not the bundled demo tasks."""
    named = _get(params, f"{group}.name") or _get(params, f"{group}.source")
    if named not in (None, BUNDLED):
        return named
    return BUNDLED if _get(params, f"{group}.path") is None else "file"


def _host(base_url: str | None) -> str | None:
    """The host of a base URL (None: none configured, e.g. the embedded server before it starts)."""
    if not base_url:
        return None
    from urllib.parse import urlsplit

    from inmind_exp.safety.redact import without_userinfo

    return urlsplit(without_userinfo(base_url)).netloc


def _role_of_params(params: Mapping[str, Any], role: str) -> RoleSetting:
    def pick(k: str) -> str | None:
        v = _get(params, f"llm.roles.{role}.{k}")
        return _get(params, f"llm.{k}") if v is None else v

    return RoleSetting(model=pick("model") or "?", max_tokens=_int(pick("max_tokens")),
                       temperature=_float(pick("temperature")), top_p=_float(pick("top_p")),
                       reasoning=_bool(pick("reasoning")), seed=_int(pick("seed")), host=_host(pick("base_url")))


def _system_gaps_of_params(params: Mapping[str, Any]) -> tuple[str, ...]:
    system = _get(params, "system.name")
    if system is None:
        return ("system unknown",)
    prefix = "system.params."
    sys_params = {k[len(prefix):]: v for k, v in params.items() if k.startswith(prefix) and v not in _NULL}
    try:
        return system_gaps(system, sys_params, _get(params, "embedding.name"))
    except (KeyError, LookupError, OSError):
        return (f"system={system} (not one of the paper's rows)",)


def setting_of_params(params: Mapping[str, Any], n_tasks: int | None = None) -> Setting:
    """A setting from a flattened config; ``n_tasks`` (e.g. the records a run holds) wins over ``dataset.limit``."""
    limit = _int(_get(params, "dataset.limit"))
    return Setting(
        dataset=_data_choice(params, "dataset"), trace=_data_choice(params, "trace"),
        injection=_get(params, "injection.name") or "?", user_turn=_int(_get(params, "injection.user_turn")),
        fraction=_float(_get(params, "injection.fraction")), answer=_get(params, "answer.mode") or "shared",
        judges=group_choice(params, "judges", DEFAULT_JUDGES),
        answerer=_role_of_params(params, "answerer"), judge=_role_of_params(params, "judge"),
        n_tasks=n_tasks if n_tasks is not None else limit,
        judge_json_mode=_bool(_get(params, "judges.json_mode")),
        memory=_role_of_params(params, "memory"), system_gaps=_system_gaps_of_params(params),
    )


def setting_of_config(config: Config, n_tasks: int | None = None, endpoints: Mapping[str, Any] | None = None
                      ) -> Setting:
    """A setting from a typed config (``setting_of_params`` reads the same from a stored run's flattened one);
    ``n_tasks`` (e.g. the tasks a plan holds) wins over ``dataset.limit``, ``endpoints`` (a plan's, perhaps bound
    to a started server) over the config's own."""
    from inmind_exp.config.settings import role_endpoints

    eps = endpoints if endpoints is not None else role_endpoints(config.llm)

    def role(r: str) -> RoleSetting:
        e = eps[r]
        return RoleSetting(model=e.model or "?", max_tokens=e.max_tokens, temperature=e.temperature, top_p=e.top_p,
                           reasoning=bool(e.reasoning), seed=e.seed, host=_host(e.base_url))

    def data(conf: Any) -> str:  # as ``_data_choice``: a path of the user's own under ``bundled`` is ``file``
        return conf.name if conf.name and conf.name != BUNDLED else BUNDLED if not conf.path else "file"

    system, inj = config.system, config.injection
    try:
        gaps = system_gaps(system.name, {k: v for k, v in system.params.items() if v is not None},
                           config.embedding.name)
    except (KeyError, LookupError, OSError):
        gaps = (f"system={system.name} (not one of the paper's rows)",)
    return Setting(
        dataset=data(config.dataset), trace=data(config.trace), injection=inj.name or "?", user_turn=inj.user_turn,
        fraction=inj.fraction, answer=config.answer.mode or "shared", judges=config.judges.prompts or DEFAULT_JUDGES,
        answerer=role("answerer"), judge=role("judge"),
        n_tasks=n_tasks if n_tasks is not None else config.dataset.limit,
        judge_json_mode=bool(config.judges.json_mode), memory=role("memory"), system_gaps=gaps,
    )


def _setting_of_plan(plan: Any) -> Setting:
    """A plan's setting: its typed config, the endpoints it resolved, the tasks it holds and its injection session.
    Data hashed like the release's files (``data.release.PINNED_SHA256``) count as the official ones whatever they
    are called."""
    from inmind_exp.data.release import BACKGROUND, PINNED_SHA256, TASKS

    s = setting_of_config(plan.config, len(plan.tasks), plan.endpoints)
    identity = getattr(plan, "identity", {}) or {}
    trace_id = identity.get("trace")
    if identity.get("dataset") == PINNED_SHA256[TASKS]:
        s = replace(s, dataset=OFFICIAL_DATASET)
    if isinstance(trace_id, Mapping) and trace_id.get("digest") == PINNED_SHA256[BACKGROUND]:
        s = replace(s, trace=OFFICIAL_TRACE)
    emb = getattr(plan, "embedding", None)
    gaps = system_gaps(plan.system_name, dict(plan.system_params), getattr(emb, "name", None),
                       getattr(getattr(emb, "endpoint", None), "host", None), system_cls=plan.system_cls) \
        if plan.system_name in PAPER_SYSTEMS else (f"system={plan.system_name} (not one of the paper's rows)",)
    return replace(s, answer=str(plan.answer_mode), session_index=plan.session_index, system_gaps=gaps)
