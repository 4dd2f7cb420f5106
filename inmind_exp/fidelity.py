"""Protocol fidelity: whether a run is in the official InMind release's setting, and if not, each way it is not.

The release's protocol (``evaluation/README.md``, ``skills/evaluate-inmind/references/protocol.md``) fixes a
comparable run: its 125 tasks and fixed background trace, the target appended to session index 8 (the
``inject-turn 40`` locator), its answer prompt and four judge prompts, ``gpt-5-mini`` answering (at most 16,384
output tokens) and judging (at most 4,096), no temperature or top-p override; and it asks to "record deviations and
do not present them as an exact reproduction". ``fidelity`` says ``official`` only when all of that holds and
otherwise lists every deviation (``answer=shared``, ``judge model=…``, ``trace=bundled`` ...). Runs of the bundled
tasks are marked demo tasks, never the official set.

Pure: a ``Setting`` is read from a plan, a composed config or a flattened config (MLflow params, ``config.yaml``);
the function compares it with the constants below (the protocol's numbers, not the release's data).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

#: The release's setting (evaluation/README.md "Answer generation", "Judging"; background/manifest.json).
RELEASE_MODEL = "gpt-5-mini"
ANSWER_MAX_TOKENS = 16_384
JUDGE_MAX_TOKENS = 4_096
INJECTION_USER_TURN = 40  # manifest.json injection_user_turn_locator
INJECTION_SESSION_INDEX = 8  # manifest.json injection_session_index (zero-based)
N_TASKS = 125
OFFICIAL = "official"
#: The release's example configuration retrieves 10 items (evaluation/README.md "Result format",
#: examples/submission.example.jsonl: ``retrieval_top_k``); its protocol does not fix the number, so a run's
#: ``top_k`` is stated beside its fidelity (``top_k_note``), not listed as a deviation.
RELEASE_RETRIEVAL_TOP_K = 10
#: The dataset, trace, answer and judge prompt set of the release's setting (config group options).
OFFICIAL_DATASET = "official"
OFFICIAL_TRACE = "official"
PAPER_ANSWER = "paper"
PAPER_JUDGES = "paper"
DEFAULT_JUDGES = "strict"
BUNDLED = "bundled"
#: How runs of the bundled tasks are labelled in tables, tags and the report.
DEMO_TASKS = "demo tasks (bundled, not the official set)"

_NULL = (None, "None", "null", "")


@dataclass(frozen=True)
class RoleSetting:
    """One role's model and generation limits as sent (``reasoning``: no temperature or top-p is sent)."""

    model: str
    max_tokens: int | None
    temperature: float | None = None
    top_p: float | None = None
    reasoning: bool = False


@dataclass(frozen=True)
class Setting:
    """What fidelity compares: the protocol-relevant coordinates of one configuration.

    ``dataset`` / ``trace`` are ``official``, ``bundled`` or ``file`` (a task or trace file of the user's own);
    ``n_tasks`` is how many tasks the run takes (None: all); ``session_index`` the zero-based injection session
    when known (a plan); ``judges`` the judge prompt set (``paper`` or ``strict``).
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


@dataclass(frozen=True)
class Fidelity:
    """``official`` exactly when ``deviations`` is empty; ``demo`` when the run used the bundled tasks."""

    official: bool
    deviations: tuple[str, ...]
    demo: bool = False
    official_data: bool = False

    @property
    def tag(self) -> str:
        """The MLflow tag value: ``official``, or the deviations joined by ``; ``."""
        return OFFICIAL if self.official else "; ".join(self.deviations)

    @property
    def task_set(self) -> str:
        """What tasks ran: the official set, the bundled demo tasks, or a task file of the user's own."""
        return OFFICIAL if self.official_data else (DEMO_TASKS if self.demo else "custom task file")

    def line(self) -> str:
        """One line for a results table or a report."""
        if self.official:
            return "Protocol fidelity: official (the release's data, trace, injection, prompts, models and caps)"
        return f"Protocol fidelity: not official; deviations from the release's setting: {', '.join(self.deviations)}"


def _role_deviations(role: str, got: RoleSetting, cap: int) -> list[str]:
    out = []
    if got.model != RELEASE_MODEL:
        out.append(f"{role} model={got.model}")
    if got.max_tokens != cap:
        out.append(f"{role} max_tokens={got.max_tokens} (release: {cap})")
    if not got.reasoning and got.temperature is not None:
        out.append(f"{role} temperature={got.temperature} (release: provider default)")
    if not got.reasoning and got.top_p is not None:
        out.append(f"{role} top_p={got.top_p} (release: provider default)")
    return out


def deviations(s: Setting) -> tuple[str, ...]:
    """Every way ``s`` differs from the release's setting, in a fixed order (empty: official)."""
    out: list[str] = []
    if s.dataset != OFFICIAL_DATASET:
        out.append(f"dataset={s.dataset}" + (" (demo tasks)" if s.dataset == BUNDLED else ""))
    elif s.n_tasks is not None and s.n_tasks < N_TASKS:
        out.append(f"tasks={s.n_tasks} of {N_TASKS}")
    if s.trace != OFFICIAL_TRACE:
        out.append(f"trace={s.trace}")
    if s.user_turn != INJECTION_USER_TURN or s.fraction is not None:
        from inmind_exp.run.labels import injection_label  # lazy: inmind_exp.run's driver imports this module

        out.append(f"injection={injection_label(s.injection, s.user_turn, s.fraction)}")
    elif s.trace == OFFICIAL_TRACE and s.session_index is not None and s.session_index != INJECTION_SESSION_INDEX:
        out.append(f"injection session={s.session_index + 1} (release: {INJECTION_SESSION_INDEX + 1})")
    if s.answer != PAPER_ANSWER:
        out.append(f"answer={s.answer}")
    if s.judges != PAPER_JUDGES:
        out.append(f"judges={s.judges}")
    elif s.judge_json_mode:
        out.append("judge JSON mode (response_format and a repair turn; release: the messages only)")
    out += _role_deviations("answerer", s.answerer, ANSWER_MAX_TOKENS)
    out += _role_deviations("judge", s.judge, JUDGE_MAX_TOKENS)
    return tuple(out)


def fidelity(source: Any) -> Fidelity:
    """The protocol fidelity of a ``Setting``, a ``Plan``, a composed config (``DictConfig``) or a flattened
    config (``Mapping[str, str]``: a plan's params, MLflow params, a flattened ``config.yaml``)."""
    s = setting_of(source)
    devs = deviations(s)
    return Fidelity(official=not devs, deviations=devs, demo=s.dataset == BUNDLED,
                    official_data=s.dataset == OFFICIAL_DATASET)


def top_k_note(params: Mapping[str, Any]) -> str | None:
    """The note line stating a configuration's ``system.params.top_k`` against the release's example
    ``retrieval_top_k`` (``params`` flattened); None for a system without ``top_k``."""
    k = _get(params, "system.params.top_k")
    if k is None:
        return None
    return (f"top_k={k} (the release's example configuration: retrieval_top_k {RELEASE_RETRIEVAL_TOP_K}; "
            "its protocol does not fix it)")


# -- reading a setting ----------------------------------------------------------------------------------------------

def setting_of(source: Any) -> Setting:
    if isinstance(source, Setting):
        return source
    if hasattr(source, "params") and hasattr(source, "endpoints") and hasattr(source, "tasks"):
        return _setting_of_plan(source)
    from omegaconf import DictConfig

    if isinstance(source, DictConfig):  # before Mapping: a DictConfig is one, but nested
        from inmind_exp.run.settings import flatten_params

        return setting_of_params(flatten_params(source))
    if isinstance(source, Mapping):
        return setting_of_params(source)
    raise TypeError(f"fidelity: expected a Setting, Plan, DictConfig or flattened config, got {type(source).__name__}")


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


def _role_of_params(params: Mapping[str, Any], role: str) -> RoleSetting:
    def pick(k: str) -> str | None:
        v = _get(params, f"llm.roles.{role}.{k}")
        return _get(params, f"llm.{k}") if v is None else v

    return RoleSetting(model=pick("model") or "?", max_tokens=_int(pick("max_tokens")),
                       temperature=_float(pick("temperature")), top_p=_float(pick("top_p")),
                       reasoning=_bool(pick("reasoning")))


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
    )


def _setting_of_plan(plan: Any) -> Setting:
    """A plan's setting: its params, the endpoints it resolved, the tasks it holds and its injection session. Data
    hashed like the release's files (``data.release.PINNED_SHA256``) count as the official ones whatever they are
    called."""
    from inmind_exp.data.release import BACKGROUND, PINNED_SHA256, TASKS

    s = setting_of_params(plan.params, n_tasks=len(plan.tasks))
    identity = getattr(plan, "identity", {}) or {}
    trace_id = identity.get("trace")
    if identity.get("dataset") == PINNED_SHA256[TASKS]:
        s = _replace(s, dataset=OFFICIAL_DATASET)
    if isinstance(trace_id, Mapping) and trace_id.get("digest") == PINNED_SHA256[BACKGROUND]:
        s = _replace(s, trace=OFFICIAL_TRACE)

    def role(r: str) -> RoleSetting:
        e = plan.endpoints[r]
        return RoleSetting(model=str(e.model), max_tokens=e.max_tokens, temperature=e.temperature, top_p=e.top_p,
                           reasoning=bool(e.reasoning))

    return _replace(s, answerer=role("answerer"), judge=role("judge"), answer=str(plan.answer_mode),
                    session_index=plan.session_index)


def _replace(s: Setting, **kw: Any) -> Setting:
    from dataclasses import replace

    return replace(s, **kw)
