"""Load and validate InMind task files (one JSON object per line), reporting every problem with file and line."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path
from typing import Iterator

from inmind_exp.data.errors import DataError, Problem
from inmind_exp.data.text import MAX_FIELD_BYTES, MAX_LINE_BYTES, decode, invalid_utf8, read_lines, strings, utf8_len
from inmind_exp.records import ACCEPTED_DOMAINS, ORIGINS, Task

REQUIRED_TEXT = ("id", "domain", "user_message", "assistant_message", "naive_query", "query", "explanation")
BUNDLED_TASKS = Path(__file__).parent / "bundled" / "tasks.jsonl"
#: A task id: 1-128 characters, letters, digits, ``.``, ``_`` and ``-``, starting with a letter or digit. Ids name
#: tasks in ledgers, records and MLflow; no path is ever built from one, but the pattern keeps them inert anyway.
TASK_ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def load_tasks(path: str | Path | None = None, limit: int | None = None) -> list[Task]:
    """Read a task file (the bundled set when ``path`` is None); raise ``DataError`` listing every problem."""
    path = Path(path) if path else BUNDLED_TASKS
    if not path.is_file():
        raise DataError([Problem(str(path), None, None, "task file not found")])
    problems: list[Problem] = []
    tasks: list[Task] = []
    seen: dict[str, int] = {}
    for lineno, obj in json_objects(path, problems):
        line_problems = check_text(obj, str(path), lineno) or _check_task(obj, str(path), lineno)
        tid = obj.get("id")
        if isinstance(tid, str) and tid.strip():
            if tid in seen:
                line_problems.append(Problem(str(path), lineno, "id", f"duplicate id {tid!r} (first on line {seen[tid]})"))
            else:
                seen[tid] = lineno
        problems.extend(line_problems)
        if not line_problems:
            tasks.append(Task.from_dict(obj))
    if not problems and not tasks:
        problems.append(Problem(str(path), None, None, "no tasks in file"))
    if problems:
        raise DataError(problems)
    return apply_limit(tasks, limit, path)


def json_objects(path: Path, problems: list[Problem]) -> Iterator[tuple[int, dict]]:
    """``(line number, JSON object)`` of every non-blank line of a JSONL file; a line that is too long, not JSON or
    not an object becomes a problem instead (shared by the bundled and the official task loaders)."""
    with open(path, "rb") as f:
        for lineno, raw, length in read_lines(f):
            if length > MAX_LINE_BYTES:
                problems.append(Problem(str(path), lineno, None, f"line is {length} bytes; the limit is {MAX_LINE_BYTES}"))
                continue
            line = decode(raw)
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                bad = invalid_utf8(line)
                problems.append(Problem(str(path), lineno, None, bad or f"invalid JSON: {e.msg} (column {e.colno})"))
                continue
            if not isinstance(obj, dict):
                problems.append(Problem(str(path), lineno, None, f"expected a JSON object, got {type(obj).__name__}"))
                continue
            yield lineno, obj


def apply_limit(tasks: list[Task], limit: int | None, path: Path) -> list[Task]:
    """The first ``limit`` tasks (all for None); a limit below 1 is a ``dataset.limit`` problem."""
    if limit is not None:
        if limit < 1:
            raise DataError([Problem(str(path), None, "dataset.limit", f"must be >= 1 or null, got {limit}")])
        tasks = tasks[:limit]
    return tasks


def sample_tasks(tasks: list[Task], n: int, seed: int, path: Path) -> list[Task]:
    """A seeded random sample of ``n`` tasks, stratified by domain, in file order: each domain gets its share of
    ``n`` (largest remainders, ties by domain name), drawn at random within the domain. Unlike ``dataset.limit``
    (the head of the file, which for the domain-sorted task files is health only at any small limit), a pilot of 20
    tasks spreads over the domains as the full set does; the same seed and file give the same tasks."""
    if n < 1 or n > len(tasks):
        raise DataError([Problem(str(path), None, "dataset.sample",
                                 f"must be between 1 and the {len(tasks)} tasks of the file, or null; got {n}")])
    by_domain: dict[str, list[int]] = {}
    for i, t in enumerate(tasks):
        by_domain.setdefault(t.domain, []).append(i)
    quota = {d: n * len(ix) / len(tasks) for d, ix in by_domain.items()}
    take = {d: int(q) for d, q in quota.items()}
    for d in sorted(quota, key=lambda d: (-(quota[d] - take[d]), d))[:n - sum(take.values())]:
        take[d] += 1
    rng = random.Random(seed)
    chosen = [i for d in sorted(by_domain) for i in rng.sample(by_domain[d], take[d])]
    return [tasks[i] for i in sorted(chosen)]


def check_text(obj: dict, path: str, lineno: int) -> list[Problem]:
    """Invalid UTF-8 and oversize fields, named by key; checked first, since the other checks read the text."""
    problems = []
    for key, text in strings(obj):
        bad = invalid_utf8(text)
        if bad:
            problems.append(Problem(path, lineno, key, bad))
        elif utf8_len(text) > MAX_FIELD_BYTES:
            problems.append(Problem(path, lineno, key, f"field is {utf8_len(text)} bytes; the limit is {MAX_FIELD_BYTES}"))
    return problems


def _check_task(obj: dict, path: str, lineno: int) -> list[Problem]:
    problems = []
    for key in REQUIRED_TEXT:
        if key not in obj:
            problems.append(Problem(path, lineno, key, "missing field"))
        elif not isinstance(obj[key], str):
            problems.append(Problem(path, lineno, key, f"must be a string, got {type(obj[key]).__name__}"))
        elif not obj[key].strip():
            problems.append(Problem(path, lineno, key, "empty text"))
    tid = obj.get("id")
    if isinstance(tid, str) and tid.strip() and not TASK_ID_PATTERN.fullmatch(tid):
        problems.append(Problem(path, lineno, "id", f"invalid id {tid[:80]!r}: ids are 1-128 letters, digits, '.', "
                                                    f"'_' or '-', starting with a letter or digit"))
    domain = obj.get("domain")
    if isinstance(domain, str) and domain.strip() and domain not in ACCEPTED_DOMAINS:
        problems.append(Problem(path, lineno, "domain",
                                f"unknown domain {domain!r}; expected one of {', '.join(ACCEPTED_DOMAINS)}"))
    origin = obj.get("origin", "source")
    if origin not in ORIGINS:
        problems.append(Problem(path, lineno, "origin", f"unknown origin {origin!r}; expected 'source' or 'expert'"))
    source = obj.get("source")
    if source is not None and (not isinstance(source, str) or not source.strip()):
        problems.append(Problem(path, lineno, "source", "must be a URL string or null"))
    return problems
