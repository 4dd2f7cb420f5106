"""The InMind protocol for one task (paper Section 3.4 and Appendix 16): inject the fact pair into the trace,
replay it into a memory system, ask the naive and the indirect query from the same post-ingestion state, judge.

Pure Python, no Ray: the task workers (``inmind_exp.exec.worker``) call these functions, and unit tests call them directly.
"""

from __future__ import annotations

import time
import traceback
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

from inmind_exp.memory.answering import SHARED, Answerer
from inmind_exp.protocol.budget import context_items, context_tokens, prompt_tokens, what_ran
from inmind_exp.protocol.bounds import (exact_target_recall, fact_rank, fact_write_fault, part_recall,
                                        provenance_recall, provenance_recall_union)
from inmind_exp.protocol.judges import Judge, judge_task
from inmind_exp.llm import LLMCallError, Models
from inmind_exp.llm.endpoint import ROLES
from inmind_exp.llm.usage import served_of
from inmind_exp.safety.paths import remove_tree
from inmind_exp.records import (FACT_REPLY_TURN_ID, FACT_TURN_ID, Answer, Fault, InjectionSpec, Session, Task, TaskRecord,
                                Trace, Turn, Usage, Verdict)
from inmind_exp.memory import MemorySystem

if TYPE_CHECKING:
    from inmind_exp.protocol.controls import ControlSpec

SystemFactory = Callable[[Path], MemorySystem]
#: called with the phase a unit enters (``ingesting 3/47``, ``answering naive``, ``judging``): the live display
Phase = Callable[[str], None]


def _no_phase(phase: str) -> None:
    pass


def injection_session_index(trace: Trace, spec: InjectionSpec) -> int:
    """0-based index of the session that receives the fact pair; ValueError naming the key if out of range."""
    total = trace.n_user_turns
    if total == 0:
        raise ValueError(f"trace {trace.id!r} has no user turns")
    if spec.user_turn is not None:
        n = spec.user_turn
        if not 1 <= n <= total:
            raise ValueError(f"injection.user_turn={n} is outside the trace's 1..{total} user turns")
    elif spec.fraction is not None:
        if not 0.0 <= spec.fraction <= 1.0:
            raise ValueError(f"injection.fraction={spec.fraction} must be within [0, 1]")
        n = max(1, min(total, round(spec.fraction * total)))
    else:
        raise ValueError(f"injection {spec.name!r}: set injection.user_turn or injection.fraction")
    seen = 0
    for i, s in enumerate(trace.sessions):
        seen += sum(1 for t in s.turns if t.role == "user")
        if seen >= n:
            return i
    raise AssertionError("unreachable")


def inject(trace: Trace, task: Task, session_index: int) -> tuple[Session, ...]:
    """The trace's sessions with the task's (user, assistant) fact pair appended to session ``session_index``."""
    sessions = [s.with_turn_ids() for s in trace.sessions]
    s = sessions[session_index]
    pair = (Turn("user", task.user_message, injected=True, id=FACT_TURN_ID),
            Turn("assistant", task.assistant_message, injected=True, id=FACT_REPLY_TURN_ID))
    sessions[session_index] = Session(id=s.id, date=s.date, turns=s.turns + pair)
    return tuple(sessions)


def build_prefix(make_system: SystemFactory, trace: Trace, session_index: int, workdir: Path, snapshot_dir: Path,
                 phase: Phase = _no_phase) -> None:
    """Ingest the sessions before the injection point once and snapshot them for every task to restore."""
    system = make_system(workdir)
    for i, s in enumerate(trace.sessions[:session_index]):
        phase(f"prefix ingesting {i + 1}/{len(trace.sessions)}")
        system.ingest_session(s.with_turn_ids())
    system.snapshot(snapshot_dir)


def ingest_task(
    make_system: SystemFactory, trace: Trace, task: Task, session_index: int, workdir: Path, prefix_snapshot: Path | None,
    faults: list[Fault] | None = None, phase: Phase = _no_phase,
) -> Path:
    """Replay the injected trace into a fresh system (restoring the shared prefix if given) and snapshot the result.

    Faults the system records while ingesting are appended to ``faults`` with phase ``ingest``.
    """
    sessions = inject(trace, task, session_index)
    system = make_system(workdir / "ingest")
    if prefix_snapshot is not None:
        system.restore(prefix_snapshot)
        start = session_index
    else:
        start = 0
    system.take_faults()  # faults of the shared prefix belong to the prefix, not to this task
    noted = _notes(system)
    for i, s in enumerate(sessions[start:], start):
        phase(f"ingesting {i + 1}/{len(sessions)}")
        cut = len(_cut_prompts(system, "memory"))
        system.ingest_session(s)
        for prompt, declared in _cut_calls(system, "memory", cut):
            # the turns the system said the call was writing (MemorySystem.writing); else the session's turns whose
            # text was in the cut call's prompt; all the session's if none is there verbatim
            turns = list(declared) if declared is not None else [
                t.id for t in s.turns if t.id and t.content.strip() and t.content.strip() in prompt]
            system.fault("truncated_reply", "memory", f"a memory-LLM reply was cut at the token limit while writing "
                         f"session {s.id}", turns or [t.id for t in s.turns if t.id])
    cut = len(_cut_prompts(system, "memory"))
    system.end_ingestion()
    last = [t.id for t in sessions[-1].turns if t.id] if sessions else []
    for _, declared in _cut_calls(system, "memory", cut):
        system.fault("truncated_reply", "memory", "a memory-LLM reply was cut at the token limit at the end of "
                     "ingestion", list(declared) if declared else last)
    _notes(system, noted)
    if faults is not None:
        faults.extend(_phase(system.take_faults(), "ingest"))
    post = workdir / "post_ingest"
    system.snapshot(post)
    return post


def ask(make_system: SystemFactory, state: Path, query: str, workdir: Path, faults: list[Fault] | None = None,
        phase: str = "query", answerer: Answerer = SHARED) -> Answer:
    """Answer ``query`` with the run's ``answerer`` from a fresh instance restored from ``state``: no query ever sees
    another's side effects."""
    system = make_system(workdir)
    system.restore(state)
    system.take_faults()
    cut = {role: len(_cut_prompts(system, role)) for role in ("memory", "answerer")}
    meter = _meter(system)
    served = len(meter.served_calls("answerer")) if meter is not None else 0
    noted = _notes(system)
    answer = system.answer(query, answerer)
    if meter is not None:  # what ran: the model the endpoint reported for the answer's calls, and its host
        model, host = served_of(meter.served_calls("answerer", served))
        answer = replace(answer, model=model, host=host)
    for role, before in cut.items():
        if n := len(_cut_prompts(system, role, before)):
            system.fault("truncated_reply", role, f"{n} {role} repl(ies) cut at the token limit")
    _notes(system, noted)
    if faults is not None:
        faults.extend(_phase(system.take_faults(), phase))
    return answer


def _cut_prompts(system: Any, role: str, since: int = 0) -> list[str]:
    """The prompts of the replies of ``role`` cut at the token limit, from the ``since``-th on (none when the
    system's models keep no meter)."""
    return [prompt for prompt, _ in _cut_calls(system, role, since)]


def _cut_calls(system: Any, role: str, since: int = 0) -> list[tuple[str, tuple[str, ...] | None]]:
    """Like ``_cut_prompts``, each with the turns the system declared for the call (None if it declared none)."""
    meter = _meter(system)
    return meter.cut_calls(role, since) if meter is not None else []


def _meter(system: Any) -> Any:
    """The usage meter of a system's models (None when they keep none)."""
    return getattr(getattr(system, "llm", None), "meter", None)


def _served_since(models: Models, before: Mapping[str, int]) -> dict[str, tuple[str, ...]]:
    """Per role, each distinct ``model @ host`` of the chat calls made since ``before`` (``_served_counts``)."""
    out = {}
    for role in ROLES:
        calls = models.meter.served_calls(role, before.get(role, 0))
        if calls:
            out[role] = tuple(dict.fromkeys(f"{m or '?'} @ {h or '?'}" for m, h in calls))
    return out


def _served_counts(models: Models) -> dict[str, int]:
    return {role: len(models.meter.served_calls(role)) for role in ROLES}


def _notes(system: Any, since: dict[str, int] | None = None) -> dict[str, int]:
    """How many notes per role the model wrapper made (``UsageMeter.note``: unusable token counts, an unusable
    cache entry); given the counts of an earlier call, each note since is recorded on the system as a diagnostic
    of its kind."""
    meter = _meter(system)
    if meter is None:
        return {}
    seen = {}
    for role in ("memory", "answerer"):
        notes = meter.notes(role)
        seen[role] = len(notes)
        for kind, detail in notes[(since or {}).get(role, len(notes)):]:
            system.fault(kind, role, detail)
    return seen


def _phase(faults: list[Fault], phase: str) -> list[Fault]:
    return [Fault(f.kind, f.where, f.detail, f.turns, phase) for f in faults]


def run_task(
    task: Task,
    trace: Trace,
    session_index: int,
    make_system: SystemFactory,
    models: Models,
    workdir: Path,
    *,
    config_hash: str,
    system_name: str,
    evaluates_naive: bool = True,
    prefix_snapshot: Path | None = None,
    judge_attempts: int = 3,
    keep_workdir: bool = False,
    phase: Phase = _no_phase,
    judges: dict[str, Judge] | None = None,
    controls: "ControlSpec | None" = None,
    no_fact_state: Path | None = None,
    previous: TaskRecord | None = None,
    answerer: Answerer = SHARED,
) -> TaskRecord:
    """The whole protocol for one task. A failure before both answers exist becomes the record's ``error``, never a
    score; a verdict that fails is an error of that verdict only (``Verdict.error``): the answers and the other
    verdicts stand, and the task leaves only that metric's rate.

    ``workdir`` must be a plain child of its parent (the worker names it by a hash of the task id); it is removed
    when the task ends unless ``keep_workdir``. ``judges`` is the judge prompt set (``JUDGES``, strict, if None).
    ``controls`` are the run's negative controls (``inmind_exp.protocol.controls``), asked after the task's own queries;
    ``no_fact_state`` the shared no-fact state they need for ``no_fact``. ``answerer`` answers every query (the
    run's ``answer=``; the system only supplies its recall and its native prompt). ``previous``, a record of this
    task whose answers exist but some verdict failed (``TaskRecord.failed_verdicts``), is completed instead: only
    its failed verdicts are asked again (judge calls only).
    """
    if ".." in Path(workdir).parts:
        raise ValueError(f"workdir {workdir} must not contain '..'")
    if previous is not None and previous.rejudgeable:
        return rejudge_failed(previous, task, models, judges, judge_attempts, phase)
    t0 = time.perf_counter()
    before, served = models.meter.snapshot(), _served_counts(models)
    naive = indirect = None
    verdicts = {}
    exact = None
    error = None
    faults: list[Fault] = []
    control_results = {}
    try:
        state = ingest_task(make_system, trace, task, session_index, workdir, prefix_snapshot, faults, phase)
        if evaluates_naive:
            phase("answering naive")
            naive = ask(make_system, state, task.naive_query, workdir / "naive", faults, "naive", answerer)
        phase("answering indirect")
        indirect = ask(make_system, state, task.query, workdir / "indirect", faults, "indirect", answerer)
        exact = exact_target_recall(task, indirect)
        phase("judging")
        verdicts = judge_task(models.judge, task, naive, indirect, attempts=judge_attempts, judges=judges)
        if controls is not None:
            from inmind_exp.protocol.controls import run_controls
            from inmind_exp.protocol.judges import JUDGES

            control_results = run_controls(controls, task, make_system, models.judge,
                                           JUDGES if judges is None else judges, state, no_fact_state, workdir,
                                           judge_attempts, phase, ask=partial(ask, answerer=answerer))
    except LLMCallError as e:
        error = f"{type(e).__name__}: {e}"
    except Exception as e:  # noqa: BLE001 - a system bug must not take the sweep down; recorded with its traceback
        error = f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=8)}"
    finally:
        if not keep_workdir:
            remove_tree(workdir.parent, workdir)
    return task_record(
        task, config_hash=config_hash, system_name=system_name, session_index=session_index, naive=naive,
        indirect=indirect, verdicts=verdicts, exact=exact, usage=models.meter.diff(models.meter.snapshot(), before),
        latency_s=round(time.perf_counter() - t0, 3), error=error, faults=faults, controls=control_results,
        served=_served_since(models, served),
    )


def rejudge_failed(previous: TaskRecord, task: Task, models: Models, judges: dict[str, Judge] | None,
                   attempts: int, phase: Phase = _no_phase) -> TaskRecord:
    """``previous`` with its failed verdicts asked again on its stored answers (every other field kept; the calls
    added to its usage): what a rerun does for a task whose answers exist."""
    t0 = time.perf_counter()
    before, served = models.meter.snapshot(), _served_counts(models)
    phase("judging (rerun of failed verdicts)")
    verdicts = judge_task(models.judge, task, previous.naive, previous.indirect, attempts=attempts, judges=judges,
                          done=previous.verdicts)
    usage = dict(previous.usage)
    for role, u in models.meter.diff(models.meter.snapshot(), before).items():
        usage[role] = usage[role] + u if role in usage else u
    merged = dict(previous.served)
    for role, seen in _served_since(models, served).items():
        merged[role] = tuple(dict.fromkeys((*merged.get(role, ()), *seen)))
    return replace(previous, verdicts=verdicts, usage=usage, served=merged,
                   latency_s=round(previous.latency_s + time.perf_counter() - t0, 3))


def task_record(
    task: Task,
    *,
    config_hash: str,
    system_name: str,
    session_index: int,
    naive: Answer | None = None,
    indirect: Answer | None = None,
    verdicts: dict[str, Verdict] | None = None,
    exact: int | None = None,
    usage: dict[str, Usage] | None = None,
    latency_s: float = 0.0,
    error: str | None = None,
    attempts: int = 1,
    faults: list[Fault] | tuple[Fault, ...] = (),
    controls: dict[str, Any] | None = None,
    served: dict[str, tuple[str, ...]] | None = None,
) -> TaskRecord:
    """The one way a ``TaskRecord`` is built: the provenance rates and the fact-write fault derive from the answers
    and faults here, so a finished task and one that never ran carry the same fields."""
    return TaskRecord(
        config_hash=config_hash,
        task_id=task.id,
        domain=task.domain,
        system=system_name,
        injection_session=session_index,
        naive=naive,
        indirect=indirect,
        verdicts=dict(verdicts or {}),
        target_recall_exact=exact,
        usage=dict(usage or {}),
        latency_s=latency_s,
        error=error,
        attempts=attempts,
        naive_recall_provenance=provenance_recall(naive),
        target_recall_provenance=provenance_recall(indirect),
        faults=tuple(faults),
        fact_write_fault=fact_write_fault(list(faults)),
        naive_recall_provenance_union=provenance_recall_union(naive),
        target_recall_provenance_union=provenance_recall_union(indirect),
        visible_state_recall_provenance=part_recall(indirect, True),
        retrieved_recall_provenance=part_recall(indirect, False),
        context_tokens=context_tokens(indirect),
        prompt_tokens=prompt_tokens(indirect),
        context_items=context_items(indirect),
        ran=what_ran(indirect),
        naive_fact_rank=fact_rank(naive),
        target_fact_rank=fact_rank(indirect),
        controls=dict(controls or {}),
        served=dict(served or {}),
    )


def failed_record(task: Task, *, config_hash: str, system_name: str, session_index: int, error: str,
                  attempts: int) -> TaskRecord:
    """The record of a task that produced none (its worker died on every attempt): an error, never a score."""
    return task_record(task, config_hash=config_hash, system_name=system_name, session_index=session_index,
                       error=error, attempts=attempts)
