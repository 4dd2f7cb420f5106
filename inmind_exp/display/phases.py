"""Where each running unit is: a task, or a configuration's prefix build, reports its phase (``PhaseReporter``) to a
``PhaseBoard`` (a plain object in process, a ``num_cpus=0`` Ray actor on the head node in a cluster),
fire-and-forget; ``summarize_phases`` folds the phases of many units into one line of the live display."""

from __future__ import annotations

import re
import threading
import time
from typing import Any, Iterable

from inmind_exp.records import Usage


#: the phase of a unit that is assigned but has not reported yet
STARTING = "starting"


def unit_key(config_hash: str, task_id: str | None = None, attempt: int = 1) -> str:
    """The board key of one running unit: a task attempt, or (``task_id`` None) the configuration's prefix build."""
    return f"{config_hash}/prefix" if task_id is None else f"{config_hash}/{task_id}/{attempt}"


class PhaseBoard:
    """The latest phase of every running unit, by ``unit_key``. A report may carry its sequence number (a
    ``PhaseReporter``'s are increasing): one older than the last applied for its unit is dropped, so reports that
    arrive out of order (Ray orders no calls of a threaded or async actor, ``cluster_services``) never bring an old
    phase back, nor a finished unit's."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._phases: dict[str, str] = {}
        self._seq: dict[str, int] = {}  # the last sequence number applied, by unit
        self._usage: dict[str, dict[str, Usage]] = {}

    def _fresh(self, key: str, seq: int | None) -> bool:
        if seq is None:
            return True
        if seq < self._seq.get(key, -1):
            return False
        self._seq[key] = seq
        return True

    def set(self, key: str, phase: str, seq: int | None = None) -> None:
        with self._lock:
            if self._fresh(key, seq):
                self._phases[key] = phase

    def clear(self, key: str, seq: int | None = None) -> None:
        with self._lock:
            if self._fresh(key, seq):
                self._phases.pop(key, None)

    def snapshot(self) -> dict[str, str]:
        with self._lock:
            return dict(self._phases)

    def spent(self, key: str, role: str, usage: Usage) -> None:
        """One completed call of the unit ``key``: added to its configuration's running total (a task attempt that
        is retried keeps its calls here; its record never reaches the driver)."""
        config = key.split("/", 1)[0]
        with self._lock:
            by_role = self._usage.setdefault(config, {})
            by_role[role] = by_role.get(role, Usage()) + usage

    def forget(self, config: str) -> None:
        """Start a configuration's count afresh (a run of it begins: its spend is this run's)."""
        with self._lock:
            self._usage.pop(config, None)

    def usage(self) -> dict[str, dict[str, Usage]]:
        """Every call completed so far, by configuration hash and role."""
        with self._lock:
            return {c: dict(u) for c, u in self._usage.items()}


class PhaseReporter:
    """What a running unit calls with its phase. Fire-and-forget to a board actor (or a direct call to a plain
    board); with no board, or once the board is lost, it does nothing: progress never fails or slows a task."""

    def __init__(self, board: Any, key: str) -> None:
        self.board = board
        self.key = key
        self._seq = 0

    def _send(self, method: str, *args: Any) -> None:
        if self.board is None:
            return
        try:
            fn = getattr(self.board, method)
            remote = getattr(fn, "remote", None)
            (remote or fn)(self.key, *args)
        except Exception:  # noqa: BLE001 - the display is best effort
            self.board = None

    def _next(self) -> int:
        """Increasing within this reporter, and past any earlier reporter's of the same unit (a prefix built again
        after its worker died): nanoseconds of the wall clock."""
        self._seq = max(self._seq + 1, time.time_ns())
        return self._seq

    def __call__(self, phase: str) -> None:
        self._send("set", phase, self._next())

    def done(self) -> None:
        self._send("clear", self._next())

    def spent(self, role: str, usage: Usage) -> None:
        """A call of this unit completed (``UsageMeter.listener``): the spend line counts it now, not at the end."""
        self._send("spent", role, usage)


_POSITION = re.compile(r"^(.*?)\s*(\d+)/(\d+)$")


def summarize_phases(phases: Iterable[str]) -> str:
    """``['ingesting 31/47', 'ingesting 12/47', 'judging']`` -> ``'2 ingesting (12–31/47), 1 judging'``: a count
    and the span of positions per phase, so a line stays short however many tasks run."""
    counts: dict[str, int] = {}
    positions: dict[str, list[tuple[int, int]]] = {}
    for p in phases:
        m = _POSITION.match(p)
        kind = m.group(1) if m else p
        counts[kind] = counts.get(kind, 0) + 1
        if m:
            positions.setdefault(kind, []).append((int(m.group(2)), int(m.group(3))))
    parts = []
    for kind, n in counts.items():
        at = positions.get(kind)
        if at:
            lo, hi, of = min(i for i, _ in at), max(i for i, _ in at), max(t for _, t in at)
            kind += f" ({lo}/{of})" if lo == hi else f" ({lo}–{hi}/{of})"
        parts.append(f"{n} {kind}")
    return ", ".join(parts)


#: how far through a task each phase is (``task_fraction``): ingesting the rest of the trace is most of a task
_AFTER_INGEST = {"answering naive": 0.88, "answering indirect": 0.92, "judging": 0.96}
_INGEST_SHARE = 0.85


def task_fraction(phase: str, ingest_from: int = 0) -> float:
    """The share of a task done at ``phase``: ``ingesting i/n`` is ``(i - ingest_from) / (n - ingest_from)`` of the
    ingestion (``ingest_from``: the sessions of the prefix, not the task's); an unknown phase counts as not
    started."""
    m = _POSITION.match(phase)
    if m and m.group(1) == "ingesting":
        i, n = int(m.group(2)), int(m.group(3))
        return _INGEST_SHARE * max(0, i - ingest_from) / max(1, n - ingest_from)
    return next((f for k, f in _AFTER_INGEST.items() if phase.startswith(k)), 0.0)


def ingest_start(phases: Iterable[str]) -> int | None:
    """The lowest ``ingesting i/n`` position among ``phases`` less one (where a task's ingestion starts), or None."""
    at = [int(m.group(2)) for p in phases if (m := _POSITION.match(p)) and m.group(1) == "ingesting"]
    return min(at) - 1 if at else None
