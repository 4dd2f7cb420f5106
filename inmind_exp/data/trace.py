"""Load a LongMemEval-s style background trace (a list of instances; ``index`` picks one) into a ``Trace``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from inmind_exp.data.errors import DataError, Problem
from inmind_exp.records import Session, Trace, Turn

BUNDLED_TRACE = Path(__file__).parent / "bundled" / "trace.json"
_ROLES = ("user", "assistant")


def load_trace(path: str | Path | None = None, index: int = 0) -> Trace:
    """Read ``haystack_sessions`` / ``haystack_session_ids`` / ``haystack_dates`` of instance ``index``."""
    path = Path(path) if path else BUNDLED_TRACE
    p = str(path)
    if not path.is_file():
        raise DataError([Problem(p, None, None, "trace file not found")])
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except json.JSONDecodeError as e:
        raise DataError([Problem(p, e.lineno, None, f"invalid JSON: {e.msg} (column {e.colno})")]) from None
    instances = data if isinstance(data, list) else [data]
    if not instances:
        raise DataError([Problem(p, None, None, "file holds no instances")])
    if not -len(instances) <= index < len(instances):
        raise DataError([Problem(p, None, "trace.index", f"index {index} out of range: file holds {len(instances)} instance(s)")])
    inst = instances[index]
    where = f"instance {index}"
    if not isinstance(inst, dict):
        raise DataError([Problem(p, None, where, f"expected an object, got {type(inst).__name__}")])
    problems: list[Problem] = []
    for key in ("haystack_sessions", "haystack_session_ids", "haystack_dates"):
        if not isinstance(inst.get(key), list):
            problems.append(Problem(p, None, f"{where}.{key}", "missing or not a list"))
    if problems:
        raise DataError(problems)
    sessions_raw, ids, dates = inst["haystack_sessions"], inst["haystack_session_ids"], inst["haystack_dates"]
    if not (len(sessions_raw) == len(ids) == len(dates)):
        raise DataError([Problem(p, None, where, f"lengths differ: {len(sessions_raw)} sessions, {len(ids)} ids, {len(dates)} dates")])
    if not sessions_raw:
        raise DataError([Problem(p, None, f"{where}.haystack_sessions", "no sessions")])
    sessions = []
    for si, (raw, sid, date) in enumerate(zip(sessions_raw, ids, dates)):
        turns, probs = _turns(raw, p, f"{where}.haystack_sessions[{si}]")
        problems.extend(probs)
        sessions.append(Session(id=str(sid), date=str(date), turns=turns).with_turn_ids())
    if problems:
        raise DataError(problems)
    trace_id = str(inst.get("question_id", f"{path.stem}#{index}"))
    return Trace(id=trace_id, sessions=tuple(sessions))


def _turns(raw: Any, path: str, where: str) -> tuple[tuple[Turn, ...], list[Problem]]:
    if not isinstance(raw, list):
        return (), [Problem(path, None, where, "session is not a list of turns")]
    turns, problems = [], []
    for ti, t in enumerate(raw):
        key = f"{where}[{ti}]"
        if not isinstance(t, dict) or t.get("role") not in _ROLES or not isinstance(t.get("content"), str):
            problems.append(Problem(path, None, key, "turn must be an object with role user|assistant and string content"))
            continue
        turns.append(Turn(role=t["role"], content=t["content"]))
    return tuple(turns), problems
