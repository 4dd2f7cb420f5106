"""The InMind protocol for one task (paper Section 3.4 and Appendix 16): inject the fact pair into the trace,
replay it into a memory system, ask the naive and the indirect query from the same post-ingestion state, judge.

Pure Python, no Ray: the runner calls these functions inside actors, and unit tests call them directly.
"""

from __future__ import annotations

import shutil
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from inmind_exp.judges import exact_target_recall, judge_task
from inmind_exp.llm import LLMCallError, Models
from inmind_exp.records import Answer, Session, Task, TaskRecord, Trace, Turn
from systems.base import MemorySystem

SystemFactory = Callable[[Path], MemorySystem]


@dataclass(frozen=True)
class InjectionSpec:
    """Where the fact goes: the session holding the ``user_turn``-th user turn (1-based), or a ``fraction`` of them."""

    name: str
    user_turn: int | None = None
    fraction: float | None = None


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
    sessions = list(trace.sessions)
    s = sessions[session_index]
    pair = (Turn("user", task.user_message, injected=True), Turn("assistant", task.assistant_message, injected=True))
    sessions[session_index] = Session(id=s.id, date=s.date, turns=s.turns + pair)
    return tuple(sessions)


def build_prefix(make_system: SystemFactory, trace: Trace, session_index: int, workdir: Path, snapshot_dir: Path) -> None:
    """Ingest the sessions before the injection point once and snapshot them for every task to restore."""
    system = make_system(workdir)
    for s in trace.sessions[:session_index]:
        system.ingest_session(s)
    system.snapshot(snapshot_dir)


def ingest_task(
    make_system: SystemFactory, trace: Trace, task: Task, session_index: int, workdir: Path, prefix_snapshot: Path | None
) -> Path:
    """Replay the injected trace into a fresh system (restoring the shared prefix if given) and snapshot the result."""
    sessions = inject(trace, task, session_index)
    system = make_system(workdir / "ingest")
    if prefix_snapshot is not None:
        system.restore(prefix_snapshot)
        start = session_index
    else:
        start = 0
    for s in sessions[start:]:
        system.ingest_session(s)
    post = workdir / "post_ingest"
    system.snapshot(post)
    return post


def ask(make_system: SystemFactory, state: Path, query: str, workdir: Path) -> Answer:
    """Answer ``query`` from a fresh instance restored from ``state``: no query ever sees another's side effects."""
    system = make_system(workdir)
    system.restore(state)
    return system.answer(query)


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
) -> TaskRecord:
    """The whole protocol for one task; an LLM failure anywhere becomes the record's ``error``, never a score."""
    t0 = time.perf_counter()
    before = models.meter.snapshot()
    naive = indirect = None
    verdicts = {}
    exact = None
    error = None
    try:
        state = ingest_task(make_system, trace, task, session_index, workdir, prefix_snapshot)
        if evaluates_naive:
            naive = ask(make_system, state, task.naive_query, workdir / "naive")
        indirect = ask(make_system, state, task.query, workdir / "indirect")
        exact = exact_target_recall(task, indirect)
        verdicts = judge_task(models.judge, task, naive, indirect, attempts=judge_attempts)
        failed = [f"{k}: {v.error}" for k, v in sorted(verdicts.items()) if v.error]
        if failed:
            error = "judge failed: " + "; ".join(failed)
    except LLMCallError as e:
        error = f"{type(e).__name__}: {e}"
    except Exception as e:  # a system bug must not take the sweep down; it is recorded with its traceback
        error = f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=8)}"
    finally:
        if not keep_workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    usage = models.meter.diff(models.meter.snapshot(), before)
    return TaskRecord(
        config_hash=config_hash,
        task_id=task.id,
        domain=task.domain,
        system=system_name,
        injection_session=session_index,
        naive=naive,
        indirect=indirect,
        verdicts=verdicts,
        target_recall_exact=exact,
        usage=usage,
        latency_s=round(time.perf_counter() - t0, 3),
        error=error,
    )
