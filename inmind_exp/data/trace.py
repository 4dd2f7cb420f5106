"""Load a LongMemEval-s style background trace (a list of instances; ``index`` picks one) into a ``Trace``.

Checked before any work: UTF-8 (an invalid byte is reported with its line and key), the size of every turn
(``MAX_FIELD_BYTES``), non-empty sessions and session ids, and a date per session in LongMemEval's format
(``2023/05/20 (Sat) 02:21``) or ISO 8601.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from inmind_exp.data.errors import DataError, Problem
from inmind_exp.data.text import MAX_FIELD_BYTES, decode, invalid_utf8, parse_date, strings, utf8_len
from inmind_exp.records import Session, Trace, Turn

BUNDLED_TRACE = Path(__file__).parent / "bundled" / "trace.json"
_ROLES = ("user", "assistant")


def load_trace(path: str | Path | None = None, index: int = 0) -> Trace:
    """Read ``haystack_sessions`` / ``haystack_session_ids`` / ``haystack_dates`` of instance ``index``."""
    path = Path(path) if path else BUNDLED_TRACE
    p = str(path)
    if not path.is_file():
        raise DataError([Problem(p, None, None, "trace file not found")])
    text = decode(path.read_bytes())
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        bad = invalid_utf8(text)
        line = text.count("\n", 0, _first_invalid(text)) + 1 if bad else e.lineno
        raise DataError([Problem(p, line, None, bad or f"invalid JSON: {e.msg} (column {e.colno})")]) from None
    instances = data if isinstance(data, list) else [data]
    if not instances:
        raise DataError([Problem(p, None, None, "file holds no instances")])
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(instances):
        raise DataError([Problem(p, None, "trace.index", f"index {index!r} out of range: file holds {len(instances)} "
                                                         f"instance(s), numbered 0 to {len(instances) - 1}")])
    inst = instances[index]
    where = f"instance {index}"
    if not isinstance(inst, dict):
        raise DataError([Problem(p, None, where, f"expected an object, got {type(inst).__name__}")])
    problems = _text_problems(p, text, data, index)
    if problems:
        raise DataError(problems)
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
    seen: dict[str, int] = {}
    for si, (raw, sid, date) in enumerate(zip(sessions_raw, ids, dates)):
        turns, probs = _turns(raw, p, f"{where}.haystack_sessions[{si}]")
        problems.extend(probs)
        if not isinstance(sid, (str, int)) or isinstance(sid, bool) or not str(sid).strip():
            problems.append(Problem(p, None, f"{where}.haystack_session_ids[{si}]", f"session id must be a non-empty string, got {sid!r}"))
        elif str(sid) in seen:
            problems.append(Problem(p, None, f"{where}.haystack_session_ids[{si}]",
                                    f"duplicate session id {sid!r} (first at {seen[str(sid)]})"))
        else:
            seen[str(sid)] = si
        if parse_date(date) is None:
            problems.append(Problem(p, None, f"{where}.haystack_dates[{si}]",
                                    f"date {date!r} is neither LongMemEval's 'YYYY/MM/DD (Day) HH:MM' nor ISO 8601"))
        sessions.append(Session(id=str(sid), date=str(date).strip(), turns=turns).with_turn_ids())
    if problems:
        raise DataError(problems)
    trace_id = str(inst.get("question_id", f"{path.stem}#{index}"))
    return Trace(id=trace_id, sessions=tuple(sessions))


def _first_invalid(text: str, start: int = 0) -> int:
    return next(i for i in range(start, len(text)) if "\udc80" <= text[i] <= "\udcff")


def _text_problems(path: str, text: str, data: Any, index: int) -> list[Problem]:
    """Invalid UTF-8 anywhere in the file (line and key) and oversize strings in the chosen instance (key).

    Invalid bytes are matched to the strings holding them in document order, which is the order of both."""
    problems: list[Problem] = []
    if invalid_utf8(text):
        pos = -1
        for key, s in strings(data):
            for _ in range(sum(1 for ch in s if "\udc80" <= ch <= "\udcff")):
                try:
                    pos = _first_invalid(text, pos + 1)
                    line: int | None = text.count("\n", 0, pos) + 1
                except StopIteration:  # a JSON escape like "\udcff" in the file, not a raw byte: no line to give
                    line = None
                problems.append(Problem(path, line, _instance_key(key), invalid_utf8(s) or ""))
    instance = data[index] if isinstance(data, list) else data
    prefix = f"instance {index}"
    for key, s in strings(instance, prefix):
        if utf8_len(s) > MAX_FIELD_BYTES:
            problems.append(Problem(path, None, key, f"field is {utf8_len(s)} bytes; the limit is {MAX_FIELD_BYTES}"))
    return problems


def _instance_key(key: str) -> str:
    """``[3].haystack_sessions[0]`` -> ``instance 3.haystack_sessions[0]`` (a list file); a single object is instance 0."""
    if key.startswith("["):
        i = key.index("]")
        return f"instance {key[1:i]}{key[i + 1:]}"
    return f"instance 0.{key}" if key else "instance 0"


def _turns(raw: Any, path: str, where: str) -> tuple[tuple[Turn, ...], list[Problem]]:
    if not isinstance(raw, list):
        return (), [Problem(path, None, where, "session is not a list of turns")]
    if not raw:
        return (), [Problem(path, None, where, "empty session: a session needs at least one turn")]
    turns, problems = [], []
    for ti, t in enumerate(raw):
        key = f"{where}[{ti}]"
        if not isinstance(t, dict) or t.get("role") not in _ROLES or not isinstance(t.get("content"), str):
            problems.append(Problem(path, None, key, "turn must be an object with role user|assistant and string content"))
            continue
        turns.append(Turn(role=t["role"], content=t["content"]))
    return tuple(turns), problems
