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
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Mapping

from inmind_exp.official.setting import (ANSWER_MAX_TOKENS, BUNDLED, INJECTION_SESSION_INDEX, INJECTION_USER_TURN,
                                         JUDGE_MAX_TOKENS, N_TASKS, OFFICIAL_DATASET, OFFICIAL_TRACE, PAPER_ANSWER,
                                         PAPER_JUDGES, RELEASE_HOST, RELEASE_MODEL, RoleSetting, Setting, setting_of)

#: The two levels of fidelity (``Fidelity.level``).
LEADERBOARD = "leaderboard"
PAPER = "paper"
#: The label of a run whose answerer and judge are one model other than the release's.
SUCCESSOR = "successor model {model}: not comparable with the paper's rows or earlier entries"
#: How runs of the bundled tasks are labelled in tables, tags and the report.
DEMO_TASKS = "demo tasks (bundled, not the official set)"
#: The file (job directory and MLflow artifact) holding a run's fidelity record.
FILE_NAME = "fidelity.json"


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
    def role(r: str, got: RoleSetting) -> RoleSetting:
        pairs = [x.rsplit(" @ ", 1) for x in served.get(r, ())]
        if not pairs:
            return got
        hosts = sorted({h for _, h in pairs if h not in ("", "?")})
        return replace(got, served=tuple(sorted({m for m, _ in pairs if m not in ("", "?")})),
                       host=", ".join(hosts) if hosts else got.host)

    return replace(s, answerer=role("answerer", s.answerer), judge=role("judge", s.judge),
                   memory=None if s.memory is None else role("memory", s.memory), n_tasks=n_tasks)
