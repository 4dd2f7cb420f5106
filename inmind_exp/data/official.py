"""Loaders for the official InMind release's tasks and background trace, read through a ``Release`` (every read
SHA-256 checked), each problem reported as ``file:line [key]`` before any work.

The release's task format is not the bundled one (an integer ``task_id``, no ``id``/``source``/``origin``, the fields
``entity_1``, ``entity_2``, ``relation`` and ``provenance``), so it has its own loader rather than a bent generic one.
Each task becomes a ``Task`` with ``id=str(task_id)``, the official domain name, ``extra["task_id"]`` the integer and
the other official fields kept in ``extra``.

The background (``lme_s_background.jsonl``) holds one turn per line, ``id`` ``<session>-turn-<k>``; turns are grouped
into sessions by that id exactly as the release's ``evaluation/scripts/build_timeline.py`` groups them (a session's
turns must be contiguous), the release's turn ids are kept (they name provenance), the text is replayed unchanged
(each turn ends with its ``---TIMESTAMP: ...`` line), and a session's date is its turns' ``timestamp_mapping`` value
(LongMemEval's ``2022/10/03 (Mon) 01:36``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

from inmind_exp.data.errors import DataError, Problem
from inmind_exp.data.release import BACKGROUND, TASKS, Release
from inmind_exp.data.tasks import apply_limit, check_text, json_objects
from inmind_exp.data.text import parse_date
from inmind_exp.records import ACCEPTED_DOMAINS, Session, Task, Trace, Turn

#: the official fields that become the ``Task``'s own text fields
TEXT_FIELDS = ("user_message", "assistant_message", "naive_query", "query", "explanation")
#: official fields kept in ``Task.extra`` (with ``task_id``), each a string or null (null in some of the tasks)
EXTRA_TEXT = ("entity_1", "entity_2", "relation")
TRACE_ID = "lme_s_background"
_ROLES = ("user", "assistant")


def load_official_tasks(release: Release, limit: int | None = None) -> list[Task]:
    """The release's tasks in file order (the first ``limit`` of them); ``DataError`` lists every problem."""
    path = release.path(TASKS)
    problems: list[Problem] = []
    tasks: list[Task] = []
    seen: dict[int, int] = {}
    for lineno, obj in _objects(path, problems):
        line_problems = _check_task(obj, str(path), lineno)
        tid = obj.get("task_id")
        if not line_problems:
            if tid in seen:
                line_problems.append(Problem(str(path), lineno, "task_id",
                                             f"duplicate task_id {tid} (first on line {seen[tid]})"))
            else:
                seen[tid] = lineno
        problems.extend(line_problems)
        if not line_problems:
            tasks.append(official_task(obj))
    if not problems and not tasks:
        problems.append(Problem(str(path), None, None, "no tasks in file"))
    if problems:
        raise DataError(problems)
    return apply_limit(tasks, limit, path)


def official_task(obj: dict[str, Any]) -> Task:
    """One checked official task line as a ``Task`` (the contract other modules rely on, see the module docstring)."""
    extra = {k: v for k, v in obj.items() if k not in TEXT_FIELDS and k != "domain"}
    return Task(id=str(obj["task_id"]), domain=obj["domain"], **{k: obj[k] for k in TEXT_FIELDS}, extra=extra)


def _objects(path: Path, problems: list[Problem]) -> Iterator[tuple[int, dict]]:
    """``(line number, JSON object)`` of every line whose text is valid (``tasks.json_objects``, then the per-field
    UTF-8 and size check); bad lines become problems."""
    for lineno, obj in json_objects(path, problems):
        bad = check_text(obj, str(path), lineno)
        if bad:
            problems.extend(bad)
            continue
        yield lineno, obj


def _check_task(obj: dict[str, Any], path: str, lineno: int) -> list[Problem]:
    problems = []
    tid = obj.get("task_id")
    if "task_id" not in obj:
        problems.append(Problem(path, lineno, "task_id", "missing field"))
    elif isinstance(tid, bool) or not isinstance(tid, int) or tid < 0:
        problems.append(Problem(path, lineno, "task_id", f"must be a non-negative integer, got {tid!r}"))
    for key in ("domain", *TEXT_FIELDS):
        if key not in obj:
            problems.append(Problem(path, lineno, key, "missing field"))
        elif not isinstance(obj[key], str):
            problems.append(Problem(path, lineno, key, f"must be a string, got {type(obj[key]).__name__}"))
        elif not obj[key].strip():
            problems.append(Problem(path, lineno, key, "empty text"))
    domain = obj.get("domain")
    if isinstance(domain, str) and domain.strip() and domain not in ACCEPTED_DOMAINS:
        problems.append(Problem(path, lineno, "domain",
                                f"unknown domain {domain!r}; expected one of {', '.join(ACCEPTED_DOMAINS)}"))
    for key in EXTRA_TEXT:
        if obj.get(key) is not None and not isinstance(obj[key], str):
            problems.append(Problem(path, lineno, key, f"must be a string or null, got {type(obj[key]).__name__}"))
    if obj.get("provenance") is not None and not isinstance(obj["provenance"], dict):
        problems.append(Problem(path, lineno, "provenance", f"must be an object, got {type(obj['provenance']).__name__}"))
    return problems


def session_of(turn_id: str) -> str | None:
    """The session id of a background turn id (``<session>-turn-<k>``), as ``build_timeline.session_id`` splits it."""
    if "-turn-" not in turn_id:
        return None
    return turn_id.rsplit("-turn-", 1)[0]


def load_official_trace(release: Release) -> Trace:
    """The release's background trace as a ``Trace`` of contiguous sessions; ``DataError`` lists every problem."""
    path = release.path(BACKGROUND)
    p = str(path)
    problems: list[Problem] = []
    order: list[str] = []
    turns: dict[str, list[Turn]] = {}
    dates: dict[str, tuple[str, int]] = {}
    last_line: dict[str, int] = {}
    previous: str | None = None
    for lineno, obj in _objects(path, problems):
        tid, role, content = obj.get("id"), obj.get("role"), obj.get("content")
        sid = session_of(tid) if isinstance(tid, str) else None
        if sid is None or not sid.strip():
            problems.append(Problem(p, lineno, "id", f"turn id must be a string '<session>-turn-<k>', got {tid!r}"))
            continue
        if role not in _ROLES:
            problems.append(Problem(p, lineno, "role", f"must be user or assistant, got {role!r}"))
        if not isinstance(content, str):
            problems.append(Problem(p, lineno, "content", f"must be a string, got {type(content).__name__}"))
        date = _date(obj.get("timestamp_mapping"), p, lineno, problems)
        if sid != previous and sid in turns:
            problems.append(Problem(p, lineno, "id", f"session {sid!r} is not contiguous: its turns resumed after "
                                                     f"other sessions (its earlier turns end on line {last_line[sid]})"))
            continue
        previous = sid
        if sid not in turns:
            order.append(sid)
            turns[sid] = []
        last_line[sid] = lineno
        if date is not None:
            first = dates.setdefault(sid, (date, lineno))
            if first[0] != date:
                problems.append(Problem(p, lineno, "timestamp_mapping", f"date {date!r} differs from {first[0]!r} "
                                                                        f"of the session's turn on line {first[1]}"))
        if role in _ROLES and isinstance(content, str):
            turns[sid].append(Turn(role=role, content=content, id=tid))
    if not problems and not order:
        problems.append(Problem(p, None, None, "no turns in file"))
    if problems:
        raise DataError(problems)
    return Trace(id=TRACE_ID, sessions=tuple(Session(id=s, date=dates[s][0], turns=tuple(turns[s])) for s in order))


def _date(mapping: Any, path: str, lineno: int, problems: list[Problem]) -> str | None:
    """The one date of a turn's ``timestamp_mapping`` (``{"question:<id>": "2022/10/03 (Mon) 01:36"}``)."""
    values = set(mapping.values()) if isinstance(mapping, dict) else set()
    if len(values) != 1:
        problems.append(Problem(path, lineno, "timestamp_mapping",
                                f"expected an object holding one date, got {json.dumps(mapping)[:120]}"))
        return None
    (date,) = values
    if parse_date(date) is None:
        problems.append(Problem(path, lineno, "timestamp_mapping",
                                f"date {date!r} is neither LongMemEval's 'YYYY/MM/DD (Day) HH:MM' nor ISO 8601"))
        return None
    return str(date).strip()
