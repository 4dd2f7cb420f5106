"""Negative controls built from the benchmark itself (issue #22, item 1): the control registry, the mismatched-fact
pairing, the no-fact state and each task's control queries.

``controls=none|no_fact|mismatched|all`` (``conf/controls``) chooses them; a run with none keeps its result identity.
The *no-fact control* replays the background once per configuration without any fact (built with the prefix and
shipped in the same snapshot, ``build_no_fact``); every task's indirect query is answered from it and judged by the
answer-only judge against that task's explanation: how often the warning appears with nothing remembered (metric
``no_fact_warning``), the floor under answer-only. The same answer also goes to the application judge
(``no_fact_application``, issue #41 item 4): with no fact anywhere, every 1 there is a label-free false positive of
the application judge, the floor under application.

The mismatched-fact control asks, from a task's own post-injection state, the indirect query of *another* task
whose fact does not bear on it; an answer that still brings the remembered fact to bear is over-application
(judged by ``judges.OVER_APPLICATION_JUDGE``). The pairing (issue #41, item 3) is one seeded derangement within the
cross-domain rule, fixed over the whole task file (``mismatched_pairs``): each task is a partner exactly once where
the domains allow, and a subset (``dataset.limit``, ``dataset.sample``) keeps each of its tasks' partner of the full
set, even a partner outside the subset (the partner only lends its query text), so over-application on a pilot is
the full run's measure on fewer tasks. Different domains are no proof that a fact does not bear on a request (a
blood thinner and a red wine), so each pair is first screened by the relevance judge (``judges.RELEVANCE_JUDGE``,
the fact and the partner's query only): a pair judged related is not asked, not scored, and counted
(``over_application_related``). The screen's request is the same for every configuration, so the call cache makes
it one paid call per pair and task set; its verdict is kept on the control's record (``ControlResult.screen``).
``run_controls`` asks the controls' queries of one task; faults a control's query raises are not the task's (its
memory-fault rates do not change with the controls).
"""

from __future__ import annotations

import hashlib
import json
import random
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from inmind_exp.records import Answer, ControlResult, Task, Trace, Verdict

if TYPE_CHECKING:
    from inmind_exp.protocol.judges import Judge

@dataclass(frozen=True)
class Pairing:
    """Task ``task_id`` is asked ``partner_id``'s indirect query (a task of another domain). Written to the run's
    records as a plain dict."""

    task_id: str
    domain: str
    partner_id: str
    partner_domain: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def mismatched_pairs(tasks: Sequence[Task], seed: int = 0) -> tuple[Pairing, ...]:
    """One partner per task, of another domain, each task a partner exactly once where the domains allow: a seeded
    derangement within the cross-domain rule. The tasks are put in one sequence, the largest domain first and the
    others in a seeded order, each domain's tasks shuffled; with ``m`` the largest domain's size, task ``i`` takes
    task ``i + m`` (mod n), which is of another domain whenever ``2m <= n``. When one domain holds more than half
    the tasks no such permutation exists: each of the others then takes a task of the largest domain, and the
    largest domain's tasks share the others round-robin. Raises ValueError for duplicate ids or a single domain."""
    ordered = sorted(tasks, key=lambda t: t.id)
    dup = sorted(i for i, c in Counter(t.id for t in ordered).items() if c > 1)
    if dup:
        raise ValueError(f"mismatched pairing: duplicate task id(s) {', '.join(dup)}")
    by_domain: dict[str, list[Task]] = {}
    for t in ordered:
        by_domain.setdefault(t.domain, []).append(t)
    if len(by_domain) < 2:
        raise ValueError(f"mismatched pairing: every task is of domain {ordered[0].domain!r}: no task of another "
                         f"domain to pair with" if ordered else "mismatched pairing: no tasks")
    rng = random.Random(f"inmind-mismatched-{seed}")
    domains = sorted(by_domain, key=lambda d: (-len(by_domain[d]), d))
    rest = domains[1:]
    rng.shuffle(rest)
    for d in sorted(by_domain):
        rng.shuffle(by_domain[d])
    seq = [t for d in (domains[0], *rest) for t in by_domain[d]]
    n, m = len(seq), len(by_domain[domains[0]])
    if 2 * m <= n:
        partner = {seq[i].id: seq[(i + m) % n] for i in range(n)}
    else:
        k = n - m
        partner = {**{seq[i].id: seq[m + i % k] for i in range(m)}, **{seq[m + j].id: seq[j] for j in range(k)}}
    return tuple(Pairing(t.id, t.domain, partner[t.id].id, partner[t.id].domain) for t in ordered)


def mismatched_fields(task: Task, partner: Task, answer: Answer) -> dict[str, str]:
    """The over-application judge's fields: ``task``'s remembered fact and bridge, ``partner``'s request, and the
    answer given to that request from ``task``'s state."""
    return {"user_message": task.user_message, "explanation": task.explanation, "query": partner.query,
            "context": answer.context_text(), "answer": answer.text}


def relevance_fields(task: Task, partner: Task) -> dict[str, str]:
    """The relevance screen's fields: ``task``'s fact and ``partner``'s request, nothing else (no answer, no
    system): the same request for every configuration of a task set."""
    return {"user_message": task.user_message, "query": partner.query}


# -- the control registry and a run's controls ----------------------------------------------------------------------

@dataclass(frozen=True)
class Control:
    """One negative control: its ``controls.names`` value, the metric it reports (MLflow, tables, report), the
    judge registry name that scores its answer, how its metric is shown (as ``judges.Judge``), and whether it needs
    the shared no-fact state."""

    name: str
    metric: str
    judge: str
    label: str
    short: str
    order: int
    no_fact_state: bool
    #: what the rate means, for the tables' notes
    means: str
    #: judge the answer of this other control (asked once) instead of asking a query of its own; selected with it
    answer_of: str | None = None


#: The controls, in the order a task runs them: adding one is an entry here (plus its query in ``run_controls``);
#: the metrics, the tables, the identity and the dry-run estimate follow from it.
CONTROLS: dict[str, Control] = {c.name: c for c in (
    Control("no_fact", "no_fact_warning", "answer_only", "No-fact warning", "NF", 80, True,
            "the indirect query answered from the background with no fact, judged answer-only: the warning with "
            "nothing remembered (the floor under answer-only)"),
    Control("no_fact_application", "no_fact_application", "application", "No-fact application", "NFA", 85, True,
            "the no-fact control's answer judged by the application judge: with no fact anywhere every 1 is a "
            "label-free application-judge false positive (the floor under application)", answer_of="no_fact"),
    Control("mismatched", "over_application", "over_application", "Over-application", "OA", 70, False,
            "an unrelated task's indirect query asked from this task's state, judged for bringing the remembered "
            "fact to bear: over-warning (the false-positive rate beside application)"),
)}
#: the controls by the metric they report
CONTROL_METRICS: dict[str, Control] = {c.metric: c for c in CONTROLS.values()}
#: the pairing method's version (the similarity and the draw): change either, bump it
PAIRING_VERSION = "cross-domain-derangement-v1"


@dataclass(frozen=True)
class ControlSpec:
    """A run's controls, resolved by the plan: the controls' names (registry order), the pairing's seed and, for
    ``mismatched``, each task's ``Pairing`` and partner task (fixed over the full task file, restricted to the run's
    tasks: a partner outside the run's subset still lends its query)."""

    names: tuple[str, ...]
    seed: int = 0
    pairings: Mapping[str, Pairing] = field(default_factory=dict)
    partners: Mapping[str, Task] = field(default_factory=dict)

    def __contains__(self, name: object) -> bool:
        return name in self.names

    @property
    def asked(self) -> tuple[str, ...]:
        """The controls that ask a query of their own (the others judge one of these controls' answers)."""
        return tuple(n for n in self.names if CONTROLS[n].answer_of is None)

    @property
    def no_fact(self) -> bool:
        return any(CONTROLS[n].no_fact_state for n in self.names)

    def identity(self, judges: Mapping[str, "Judge"]) -> dict[str, Any]:
        """The result identity's ``controls`` entry: the controls, their judges' prompt hashes and the pairing
        (with the relevance screen's prompt hash)."""
        out: dict[str, Any] = {"names": list(self.names), "judges": {
            n: _digest([j.version, j.system, j.template, j.reads]) for n, j in control_judges(self, judges).items()}}
        if "mismatched" in self.names:
            from inmind_exp.protocol.judges import RELEVANCE_JUDGE as R

            out["pairing"] = {"version": PAIRING_VERSION, "seed": self.seed,
                              "screen": _digest([R.version, R.system, R.template])}
        return out


def control_spec(names: Sequence[str], tasks: Sequence[Task], seed: int = 0,
                 universe: Sequence[Task] | None = None) -> ControlSpec | None:
    """The run's ``ControlSpec`` (None for no controls); ValueError naming an unknown control or a pairing the task
    set cannot make (every task of one domain). The pairing is made over ``universe`` (the whole task file; the run's
    tasks when None) and restricted to ``tasks``, so a subset keeps each task's partner of the full set."""
    unknown = sorted(set(names) - set(CONTROLS))
    if unknown:
        raise ValueError(f"unknown control(s) {', '.join(unknown)}; expected some of {', '.join(CONTROLS)}")
    chosen = set(names) | {n for n, c in CONTROLS.items() if c.answer_of in names}
    ordered = tuple(n for n in CONTROLS if n in chosen)
    if not ordered:
        return None
    pairings: dict[str, Pairing] = {}
    partners: dict[str, Task] = {}
    if "mismatched" in ordered:
        full = list(universe) if universe else list(tasks)
        by_id = {t.id: t for t in full}
        missing = sorted(t.id for t in tasks if by_id.get(t.id) != t)
        if missing:
            raise ValueError(f"mismatched pairing: task(s) {', '.join(missing[:5])} are not in the full task set")
        run_ids = {t.id for t in tasks}
        for p in mismatched_pairs(full, seed=seed):
            if p.task_id in run_ids:
                pairings[p.task_id] = p
                partners[p.task_id] = by_id[p.partner_id]
    return ControlSpec(ordered, seed, pairings, partners)


def control_judges(spec: ControlSpec, judges: Mapping[str, "Judge"]) -> dict[str, "Judge"]:
    """Each of the run's controls' judge: from the run's judge set (``answer_only``: the paper prompt under
    ``judges=paper``) or the control judges (``judges.CONTROL_JUDGES``)."""
    from inmind_exp.protocol.judges import CONTROL_JUDGES

    return {n: {**CONTROL_JUDGES, **judges}[CONTROLS[n].judge] for n in spec.names}


def pairings_json(spec: ControlSpec | None) -> list[dict[str, Any]]:
    """The run's pairing as rows (the ``controls.json`` artifact); empty without the mismatched control."""
    return [spec.pairings[k].to_dict() for k in sorted(spec.pairings)] if spec is not None else []


# -- running them ---------------------------------------------------------------------------------------------------

def build_no_fact(make_system: Callable[[Path], Any], trace: Trace, session_index: int, prefix_snapshot: Path,
                  workdir: Path, out: Path, phase: Callable[[str], None] = lambda p: None) -> None:
    """The no-fact state: a fresh system restored from the prefix snapshot, the rest of the background replayed
    unchanged (no fact pair anywhere), snapshotted to ``out``. Built once per configuration, with its prefix."""
    system = make_system(workdir)
    system.restore(prefix_snapshot)
    for i, s in enumerate(trace.sessions[session_index:], session_index):
        phase(f"no-fact ingesting {i + 1}/{len(trace.sessions)}")
        system.ingest_session(s.with_turn_ids())
    system.take_faults()
    system.snapshot(out)


def run_controls(spec: ControlSpec, task: Task, make_system: Callable[[Path], Any], judge_client: Any,
                 judges: Mapping[str, "Judge"], state: Path, no_fact_state: Path | None, workdir: Path,
                 attempts: int = 3, phase: Callable[[str], None] = lambda p: None, *,
                 ask: Callable[..., Answer]) -> dict[str, ControlResult]:
    """Each of the run's controls for ``task``: its query answered from a fresh instance restored from its state
    (the no-fact state, or the task's own post-injection ``state``) by the protocol's ``ask`` and judged. A failure
    is the control's ``error`` (never a score, never the task's error). A control with ``answer_of`` judges that
    control's answer (asked once) with its own judge."""
    from inmind_exp.protocol.judges import RELEVANCE_JUDGE, judge

    by_name = control_judges(spec, judges)
    out: dict[str, ControlResult] = {}
    for name in spec.names:
        screen: Verdict | None = None
        pairing = spec.pairings.get(task.id) if name == "mismatched" else None
        query = spec.partners[task.id].query if name == "mismatched" else task.query
        try:
            phase(f"control {name}")
            if (shared := CONTROLS[name].answer_of) is not None:
                source = out.get(shared)
                if source is None or source.answer is None:
                    raise RuntimeError(f"the {shared} control's answer failed: "
                                       f"{source.error if source else 'not asked'}")
                answer = source.answer
                fields = by_name[name].fields(task, answer)
            elif name == "no_fact":
                if no_fact_state is None:
                    raise RuntimeError("the no-fact state was not built with the prefix")
                answer = ask(make_system, no_fact_state, query, workdir / f"control-{name}", None, name)
                fields = by_name[name].fields(task, answer)
            else:
                partner = spec.partners[task.id]
                screen = judge(judge_client, RELEVANCE_JUDGE, relevance_fields(task, partner), attempts)
                if not screen.ok:
                    raise RuntimeError(f"relevance screen failed: {screen.error}")
                if screen.score == 1:  # the fact bears on the partner's request: no over-application to measure
                    out[name] = ControlResult(name, query, pairing=pairing.to_dict() if pairing else None,
                                              screen=screen)
                    continue
                answer = ask(make_system, state, query, workdir / f"control-{name}", None, name)
                fields = mismatched_fields(task, partner, answer)
            verdict = judge(judge_client, by_name[name], fields, attempts)
            out[name] = ControlResult(name, query, answer, verdict,
                                      error=f"judge failed: {verdict.error}" if verdict.error else None,
                                      pairing=pairing.to_dict() if pairing else None,
                                      screen=screen)
        except Exception as e:  # noqa: BLE001 - a control's failure is recorded on the control, not the task
            out[name] = ControlResult(name, query, error=f"{type(e).__name__}: {e}",
                                      pairing=pairing.to_dict() if pairing else None, screen=screen)
    return out


def _digest(value: Any) -> str:
    """sha256 (16 hex digits) of a value's JSON, as ``config.code.digest`` (which this floor cannot import)."""
    return hashlib.sha256(json.dumps(value, sort_keys=True, ensure_ascii=False).encode()).hexdigest()[:16]
