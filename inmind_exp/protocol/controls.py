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
(judged by ``judges.OVER_APPLICATION_JUDGE``). This module chooses the pairs: a fixed, seeded pairing across domains
by low similarity between the two tasks' facts and bridges, so a partner's request is as unrelated to the fact as
the task set allows. It is deterministic (the tasks are sorted by id, every random choice comes from one seeded
generator), never pairs a task with itself or with a task of its own domain, and spreads partners (a task is taken
as a partner as rarely as the candidates allow). ``run_controls`` asks both controls' queries of one task; faults
a control's query raises are not the task's (its memory-fault rates do not change with the controls).
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import re
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import numpy as np

from inmind_exp.records import Answer, ControlResult, Task, Trace

if TYPE_CHECKING:
    from inmind_exp.protocol.judges import Judge

#: How many of the least similar candidates a partner is drawn from (the seed picks among them).
DEFAULT_POOL = 5

Similarity = Callable[[Sequence[str]], np.ndarray]


@dataclass(frozen=True)
class Pairing:
    """Task ``task_id`` is asked ``partner_id``'s indirect query; ``similarity`` is that of their fact + bridge texts
    (cosine, 0 = nothing shared). Written to the run's records as a plain dict."""

    task_id: str
    domain: str
    partner_id: str
    partner_domain: str
    similarity: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def pair_text(task: Task) -> str:
    """What the pairing compares: the task's fact and its bridge (the explanation)."""
    return f"{task.user_message}\n{task.explanation}"


_WORD = re.compile(r"[a-z0-9]+")


def tfidf_similarity(texts: Sequence[str]) -> np.ndarray:
    """Cosine similarity of TF-IDF vectors of lower-cased word tokens: needs no model, so the pairing is the same on
    every machine. Pass an embedding-based function instead for a semantic notion of "unrelated"."""
    docs = [Counter(_WORD.findall(t.casefold())) for t in texts]
    vocab = sorted({w for d in docs for w in d})
    index = {w: i for i, w in enumerate(vocab)}
    df = Counter(w for d in docs for w in d)
    n = len(docs)
    m = np.zeros((n, len(vocab)))
    for i, d in enumerate(docs):
        for w, c in d.items():
            m[i, index[w]] = (1.0 + math.log(c)) * math.log((1 + n) / (1 + df[w]) + 1.0)
    norms = np.linalg.norm(m, axis=1, keepdims=True)
    m = np.divide(m, norms, out=np.zeros_like(m), where=norms > 0)
    return m @ m.T


def mismatched_pairs(tasks: Sequence[Task], seed: int = 0, pool: int = DEFAULT_POOL,
                     similarity: Similarity = tfidf_similarity) -> tuple[Pairing, ...]:
    """One partner per task, from another domain, among the ``pool`` least similar candidates (fewest uses first,
    then the seeded draw). Raises ValueError for duplicate ids or a task with no task of another domain."""
    ordered = sorted(tasks, key=lambda t: t.id)
    ids = [t.id for t in ordered]
    dup = sorted(i for i, c in Counter(ids).items() if c > 1)
    if dup:
        raise ValueError(f"mismatched pairing: duplicate task id(s) {', '.join(dup)}")
    if pool < 1:
        raise ValueError(f"mismatched pairing: pool must be at least 1, got {pool}")
    sim = np.asarray(similarity([pair_text(t) for t in ordered]), dtype=float)
    if sim.shape != (len(ordered), len(ordered)):
        raise ValueError(f"mismatched pairing: similarity returned shape {sim.shape} for {len(ordered)} tasks")
    rng = random.Random(f"inmind-mismatched-{seed}")
    visit = list(range(len(ordered)))
    rng.shuffle(visit)  # who chooses first is seeded too, so no task systematically gets the best partners
    used: Counter[int] = Counter()
    out: dict[str, Pairing] = {}
    for i in visit:
        t = ordered[i]
        candidates = [j for j in range(len(ordered)) if j != i and ordered[j].domain != t.domain]
        if not candidates:
            raise ValueError(f"mismatched pairing: task {t.id!r} (domain {t.domain!r}) has no task of another domain")
        lowest = sorted(candidates, key=lambda j: (round(float(sim[i, j]), 12), ordered[j].id))[:pool]
        fewest = min(used[j] for j in lowest)
        j = rng.choice([j for j in lowest if used[j] == fewest])
        used[j] += 1
        p = ordered[j]
        out[t.id] = Pairing(t.id, t.domain, p.id, p.domain, round(float(sim[i, j]), 6))
    return tuple(out[tid] for tid in ids)


def mismatched_fields(task: Task, partner: Task, answer: Answer) -> dict[str, str]:
    """The over-application judge's fields: ``task``'s remembered fact and bridge, ``partner``'s request, and the
    answer given to that request from ``task``'s state."""
    return {"user_message": task.user_message, "explanation": task.explanation, "query": partner.query,
            "context": answer.context_text(), "answer": answer.text}


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
PAIRING_VERSION = "tfidf-lowest-pool-v1"


@dataclass(frozen=True)
class ControlSpec:
    """A run's controls, resolved by the plan: the controls' names (registry order), the pairing's seed and pool,
    and for ``mismatched`` each task's ``Pairing`` and partner task (computed once over the plan's tasks)."""

    names: tuple[str, ...]
    seed: int = 0
    pool: int = DEFAULT_POOL
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
        """The result identity's ``controls`` entry: the controls, their judges' prompt hashes and the pairing."""
        out: dict[str, Any] = {"names": list(self.names), "judges": {
            n: _digest([j.version, j.system, j.template, j.reads]) for n, j in control_judges(self, judges).items()}}
        if "mismatched" in self.names:
            out["pairing"] = {"version": PAIRING_VERSION, "seed": self.seed, "pool": self.pool}
        return out


def control_spec(names: Sequence[str], tasks: Sequence[Task], seed: int = 0, pool: int = DEFAULT_POOL
                 ) -> ControlSpec | None:
    """The run's ``ControlSpec`` (None for no controls); ValueError naming an unknown control or a pairing
    the task set cannot make (e.g. every task of one domain)."""
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
        by_id = {t.id: t for t in tasks}
        for p in mismatched_pairs(tasks, seed=seed, pool=pool):
            pairings[p.task_id] = p
            partners[p.task_id] = by_id[p.partner_id]
    return ControlSpec(ordered, seed, pool, pairings, partners)


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
    from inmind_exp.protocol.judges import judge

    by_name = control_judges(spec, judges)
    out: dict[str, ControlResult] = {}
    for name in spec.names:
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
                answer = ask(make_system, state, query, workdir / f"control-{name}", None, name)
                fields = mismatched_fields(task, spec.partners[task.id], answer)
            verdict = judge(judge_client, by_name[name], fields, attempts)
            out[name] = ControlResult(name, query, answer, verdict,
                                      error=f"judge failed: {verdict.error}" if verdict.error else None,
                                      pairing=pairing.to_dict() if pairing else None)
        except Exception as e:  # noqa: BLE001 - a control's failure is recorded on the control, not the task
            out[name] = ControlResult(name, query, error=f"{type(e).__name__}: {e}",
                                      pairing=pairing.to_dict() if pairing else None)
    return out


def _digest(value: Any) -> str:
    """sha256 (16 hex digits) of a value's JSON, as ``config.code.digest`` (which this floor cannot import)."""
    return hashlib.sha256(json.dumps(value, sort_keys=True, ensure_ascii=False).encode()).hexdigest()[:16]
