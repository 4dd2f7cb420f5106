"""Protocol fidelity: how comparable a run is with the InMind leaderboard and with the paper's rows, judged from
what ran, and each way it is not.

The release's protocol (``evaluation/README.md``, ``skills/evaluate-inmind/references/protocol.md``) fixes a
comparable run: its 125 tasks and fixed background trace, the target appended to session index 8 (the
``inject-turn 40`` locator), its answer prompt and four judge prompts sent as messages only, ``gpt-5-mini`` on the
OpenAI API answering (at most 16,384 output tokens) and judging (at most 4,096), no temperature, top-p or seed; and
it asks to "record deviations and do not present them as an exact reproduction". Two levels:

* ``leaderboard``: all of that holds, with the answerer and judge checked as served (the ``model`` the endpoint
  reported on every answer and verdict, the endpoint's host). The memory model and encoder are the submitter's
  choice (the leaderboard's first outside entry built memory with other models), recorded.
* ``paper``: also the memory model (gpt-5-mini on the OpenAI API) and the system's paper settings (one of the
  paper's nine rows, its conf values and ``official_params``, e.g. naive_rag single-shot, a paper embedding).

Anything else lists each deviation. The injection is compared as the timeline it gives (the session the pair is
appended to), not as the knob: ``injection.user_turn=36`` falls in the same session and is no deviation. A run
whose answerer and judge are one other model of the OpenAI API is a successor run (gpt-5-mini is retired on 2026-12-11):
``successor model NEW: not comparable with the paper's rows or earlier entries``. Runs of the bundled tasks are
marked demo tasks, never the official set.

A run computes its fidelity once, at its end, from its plan and records (``fidelity(plan, records)``), and stores
it (``fidelity.json`` in its job directory and as an MLflow artifact); analysis and exports read that record
(``Fidelity.from_dict``), never recompute it from flattened params. Before a run, a plan or composed config gives
the fidelity as configured (what was served is not known yet).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable, Mapping

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
#: The two levels of fidelity (``Fidelity.level``).
LEADERBOARD = "leaderboard"
PAPER = "paper"
#: The label of a run whose answerer and judge are one model other than the release's.
SUCCESSOR = "successor model {model}: not comparable with the paper's rows or earlier entries"
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
#: How runs of the bundled tasks are labelled in tables, tags and the report.
DEMO_TASKS = "demo tasks (bundled, not the official set)"
#: The file (job directory and MLflow artifact) holding a run's fidelity record.
FILE_NAME = "fidelity.json"

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


@dataclass(frozen=True)
class Fidelity:
    """``deviations`` from the leaderboard setting (none: ``leaderboard``-comparable) and ``paper_gaps``, what else
    keeps the run from reproducing a paper row (none either: ``paper``); ``demo`` when the run used the bundled
    tasks; ``served`` the models and hosts the run's records name, per role."""

    deviations: tuple[str, ...]
    paper_gaps: tuple[str, ...] = ()
    demo: bool = False
    official_data: bool = False
    served: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def official(self) -> bool:
        """Leaderboard-comparable (either level)."""
        return not self.deviations

    @property
    def level(self) -> str:
        """``paper``, ``leaderboard`` or "" (neither: see ``deviations``)."""
        return "" if self.deviations else (LEADERBOARD if self.paper_gaps else PAPER)

    @property
    def tag(self) -> str:
        """The MLflow tag value: the level, or the deviations joined by ``; ``."""
        return self.level or "; ".join(self.deviations)

    @property
    def task_set(self) -> str:
        """What tasks ran: the official set, the bundled demo tasks, or a task file of the user's own."""
        return OFFICIAL_DATASET if self.official_data else (DEMO_TASKS if self.demo else "custom task file")

    def line(self) -> str:
        """One line for a results table or a report."""
        if self.level == PAPER:
            return ("Protocol fidelity: paper (the release's data, trace, injection, prompts, caps and gpt-5-mini as "
                    "served for every role, and the system's paper settings)")
        if self.level == LEADERBOARD:
            return ("Protocol fidelity: leaderboard (the release's data, trace, injection, prompts, caps, and "
                    f"gpt-5-mini as served answering and judging); not a paper row: {', '.join(self.paper_gaps)}")
        return f"Protocol fidelity: not leaderboard-comparable; deviations: {', '.join(self.deviations)}"

    def to_dict(self) -> dict[str, Any]:
        """The stored record (``fidelity.json``)."""
        return {"level": self.level, "tag": self.tag, "deviations": list(self.deviations),
                "paper_gaps": list(self.paper_gaps), "task_set": self.task_set, "demo": self.demo,
                "official_data": self.official_data, "served": {k: list(v) for k, v in sorted(self.served.items())},
                "line": self.line()}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Fidelity":
        return cls(deviations=tuple(d.get("deviations", ())), paper_gaps=tuple(d.get("paper_gaps", ())),
                   demo=bool(d.get("demo")), official_data=bool(d.get("official_data")),
                   served={k: tuple(v) for k, v in (d.get("served") or {}).items()})


def same_model(served: str, model: str) -> bool:
    """``served`` is ``model`` or one of its dated snapshots (OpenAI reports ``gpt-5-mini-2025-08-07``)."""
    return re.fullmatch(re.escape(model) + r"(-\d{4}-\d{2}-\d{2})?", served) is not None


def _role_deviations(role: str, got: RoleSetting, cap: int | None, model: bool = True) -> list[str]:
    """``got``'s deviations: its model (unless ``model`` is False: a successor's is stated once), every model the
    endpoint reported that is not the one asked for, its host, its cap (None: not checked), sampling and seed."""
    out = []
    if model and not same_model(got.model, RELEASE_MODEL):
        out.append(f"{role} model={got.model}")
    for served in got.served:
        if not same_model(served, got.model):
            out.append(f"{role} served model={served} (asked for {got.model})")
    if got.host is not None and got.host != RELEASE_HOST:
        out.append(f"{role} host={got.host or '?'} (release: {RELEASE_HOST})")
    if cap is not None and got.max_tokens != cap:
        out.append(f"{role} max_tokens={got.max_tokens} (release: {cap})")
    if not got.reasoning and got.temperature is not None:
        out.append(f"{role} temperature={got.temperature} (release: provider default)")
    if not got.reasoning and got.top_p is not None:
        out.append(f"{role} top_p={got.top_p} (release: provider default)")
    if got.seed is not None:
        out.append(f"{role} seed={got.seed} (release: none sent)")
    return out


def deviations(s: Setting) -> tuple[str, ...]:
    """Every way ``s`` differs from the leaderboard setting, in a fixed order (empty: leaderboard-comparable)."""
    out: list[str] = []
    if s.dataset != OFFICIAL_DATASET:
        out.append(f"dataset={s.dataset}" + (" (demo tasks)" if s.dataset == BUNDLED else ""))
    elif s.n_tasks is not None and s.n_tasks < N_TASKS:
        out.append(f"tasks={s.n_tasks} of {N_TASKS}")
    if s.trace != OFFICIAL_TRACE:
        out.append(f"trace={s.trace}")
    if s.trace == OFFICIAL_TRACE and s.session_index is not None:  # the timeline, not the knob
        if s.session_index != INJECTION_SESSION_INDEX:
            out.append(f"injection session={s.session_index + 1} (release: {INJECTION_SESSION_INDEX + 1})")
    elif s.user_turn != INJECTION_USER_TURN or s.fraction is not None:
        from inmind_exp.labels import injection_label  # lazy: inmind_exp.run's driver imports this module

        out.append(f"injection={injection_label(s.injection, s.user_turn, s.fraction)}")
    if s.answer != PAPER_ANSWER:
        out.append(f"answer={s.answer}")
    if s.judges != PAPER_JUDGES:
        out.append(f"judges={s.judges}")
    elif s.judge_json_mode:
        out.append("judge JSON mode (response_format and a repair turn; release: the messages only)")
    a, j = s.answerer, s.judge
    successor = (a.model == j.model and not same_model(a.model, RELEASE_MODEL)
                 and a.host == j.host == RELEASE_HOST)  # another model of the OpenAI API, answering and judging
    if successor:
        out.append(SUCCESSOR.format(model=a.model))
    out += _role_deviations("answerer", a, ANSWER_MAX_TOKENS, model=not successor)
    out += _role_deviations("judge", j, JUDGE_MAX_TOKENS, model=not successor)
    return tuple(out)


def paper_gaps(s: Setting) -> tuple[str, ...]:
    """What keeps a leaderboard-comparable setting from reproducing a paper row: the memory role as served, and
    the system's paper settings (``system_gaps``)."""
    memory = _role_deviations("memory", s.memory, None) if s.memory is not None else ["memory model unknown"]
    return (*memory, *s.system_gaps)


def fidelity(source: Any, records: Iterable[Any] | None = None) -> Fidelity:
    """The protocol fidelity of a ``Setting``, a ``Plan``, a typed ``Config`` or a flattened
    config (``Mapping[str, str]``); with a run's ``records`` (a plan's), also of what the endpoints served."""
    s = setting_of(source)
    served: dict[str, tuple[str, ...]] = {}
    unknown: list[str] = []
    if records is not None:
        records = list(records)
        served = served_by_role(records)
        s = with_served(s, served, n_tasks=len(records) if s.n_tasks is None else s.n_tasks)
        unknown = unrecorded(records)
    return Fidelity(deviations=(*deviations(s), *unknown), paper_gaps=paper_gaps(s), demo=s.dataset == BUNDLED,
                    official_data=s.dataset == OFFICIAL_DATASET, served=served)


def unrecorded(records: list[Any]) -> list[str]:
    """The answerer and judge replies whose served model no record names (records written before it was recorded):
    what served them is not known, so the run cannot be said to be the release's setting as served."""
    out = []
    for role, has in (("answerer", lambda r: r.naive is not None or r.indirect is not None),
                      ("judge", lambda r: any(v.raw or v.ok for v in r.verdicts.values()))):
        n = sum(1 for r in records if has(r) and not (getattr(r, "served", None) or {}).get(role))
        if n:
            out.append(f"{role} served model not recorded ({n} task{'s' if n != 1 else ''})")
    return out


def served_by_role(records: Iterable[Any]) -> dict[str, tuple[str, ...]]:
    """Each distinct ``model @ host`` the records name per role (``TaskRecord.served``), sorted."""
    out: dict[str, set[str]] = {}
    for r in records:
        for role, seen in (getattr(r, "served", None) or {}).items():
            out.setdefault(role, set()).update(seen)
    return {role: tuple(sorted(v)) for role, v in sorted(out.items())}


def with_served(s: Setting, served: Mapping[str, Iterable[str]], n_tasks: int | None = None) -> Setting:
    """``s`` with each role's served models and hosts as its records name them (a role the records do not name
    keeps its configured host)."""
    def role(r: str, got: RoleSetting | None) -> RoleSetting | None:
        pairs = [x.rsplit(" @ ", 1) for x in served.get(r, ())]
        if got is None or not pairs:
            return got
        hosts = sorted({h for _, h in pairs if h not in ("", "?")})
        return _replace(got, served=tuple(sorted({m for m, _ in pairs if m not in ("", "?")})),
                        host=", ".join(hosts) if hosts else got.host)

    return _replace(s, answerer=role("answerer", s.answerer), judge=role("judge", s.judge),
                    memory=role("memory", s.memory), n_tasks=n_tasks)


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


# -- reading a setting ----------------------------------------------------------------------------------------------

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
        s = _replace(s, dataset=OFFICIAL_DATASET)
    if isinstance(trace_id, Mapping) and trace_id.get("digest") == PINNED_SHA256[BACKGROUND]:
        s = _replace(s, trace=OFFICIAL_TRACE)
    emb = getattr(plan, "embedding", None)
    gaps = system_gaps(plan.system_name, dict(plan.system_params), getattr(emb, "name", None),
                       getattr(getattr(emb, "endpoint", None), "host", None), system_cls=plan.system_cls) \
        if plan.system_name in PAPER_SYSTEMS else (f"system={plan.system_name} (not one of the paper's rows)",)
    return _replace(s, answer=str(plan.answer_mode), session_index=plan.session_index, system_gaps=gaps)


def _replace(s: Any, **kw: Any) -> Any:
    from dataclasses import replace

    return replace(s, **kw)
