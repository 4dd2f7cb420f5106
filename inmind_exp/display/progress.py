"""Live progress. Each running unit (a task, or a configuration's prefix build) reports its phase to a ``PhaseBoard``
(a plain object in process, a ``num_cpus=0`` Ray actor on the head node in a cluster), fire-and-forget; the schedule
asks the board every ``run.progress_every_s`` seconds and logs one line per configuration (``PlanProgress.line``)
and, in a sweep, one for the sweep (``SweepProgress``), whether or not any task has finished. Paid and cached calls
are counted apart, and the cost is shown only when every paid model has a price in the llm config's ``prices``.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from inmind_exp.records import TaskRecord, Usage

log = logging.getLogger(__name__)

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


_POSITION = re.compile(r"^(.*?)\s*(\d+/\d+)$")


def summarize_phases(phases: Iterable[str]) -> str:
    """``['ingesting 31/47', 'ingesting 12/47', 'judging']`` -> ``'2 ingesting 12/47 31/47, 1 judging'``."""
    counts: dict[str, int] = {}
    positions: dict[str, list[str]] = {}
    for p in phases:
        m = _POSITION.match(p)
        kind = m.group(1) if m else p
        counts[kind] = counts.get(kind, 0) + 1
        if m:
            positions.setdefault(kind, []).append(m.group(2))
    parts = []
    for kind, n in counts.items():
        shown = " ".join(sorted(positions.get(kind, []), key=lambda s: int(s.split("/")[0])))
        parts.append(f"{n} {kind}" + (f" {shown}" if shown else ""))
    return ", ".join(parts)


def duration(seconds: float) -> str:
    s = int(round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


@dataclass(frozen=True)
class Spend:
    """What a set of records called: paid calls and tokens (cache hits excluded), cached calls, and the cost of the
    paid tokens, or None when some paid model has no price (no cost rather than a wrong one)."""

    paid_calls: int
    cached_calls: int
    paid_tokens: int
    cost_usd: float | None

    @classmethod
    def of(cls, usages: Iterable[dict[str, Usage]], prices: Any, models: dict[str, str]) -> "Spend":
        """The spend of usage dicts by role (a record's ``usage``, a prefix build's)."""
        usage: dict[str, Usage] = {}
        for by_role in usages:
            for role, u in by_role.items():
                usage[role] = usage.get(role, Usage()) + u
        roles = set(usage) or set(models)  # no call yet: priced when every model the plan calls is
        priced = prices and all(models.get(role) in prices for role in roles)
        from inmind_exp.protocol.metrics import cost_usd  # (metrics imports the judges, and so openai: not in the phase board)

        cost = (cost_usd(usage, prices, models) or 0.0) if priced else None  # None from cost_usd: no usage yet
        return cls(paid_calls=sum(u.calls - u.cached_calls for u in usage.values()),
                   cached_calls=sum(u.cached_calls for u in usage.values()),
                   paid_tokens=sum(u.paid_prompt_tokens + u.paid_completion_tokens for u in usage.values()),
                   cost_usd=cost)

    def __add__(self, other: "Spend") -> "Spend":
        cost = None if self.cost_usd is None or other.cost_usd is None else self.cost_usd + other.cost_usd
        return Spend(self.paid_calls + other.paid_calls, self.cached_calls + other.cached_calls,
                     self.paid_tokens + other.paid_tokens, cost)

    def text(self) -> str:
        cost = f", ${self.cost_usd:.4f}" if self.cost_usd is not None else ""
        return (f"{self.paid_calls} paid calls, {self.cached_calls} cached, {self.paid_tokens / 1000:.1f}k tokens "
                f"paid{cost}")


class PlanProgress:
    """One configuration's progress as its driver sees it: the records (shared with the driver, including those an
    earlier run left in the ledger) and the ones finished in this run, which alone count for rate and spend."""

    def __init__(self, plan: Any, records: dict[str, TaskRecord]) -> None:
        self.plan = plan
        self.records = records
        self.earlier = len(records)
        #: the usage of the records an earlier run left, by task: a rerun that re-asks a failed verdict adds its
        #: calls to that task's usage, and only what it added is this run's spend
        self.earlier_usage = {tid: r.usage for tid, r in records.items() if r.rejudgeable}
        self.new: list[TaskRecord] = []
        self.prefix_usage: list[dict[str, Usage]] = []
        self.started = time.perf_counter()
        self.models = {role: e.model for role, e in plan.endpoints.items()}
        if getattr(plan.embedding, "endpoint", None) is not None:  # an embeddings API meters as role "embedding"
            self.models["embedding"] = plan.embedding.endpoint.model
        self._lock = threading.Lock()
        #: when this run's tasks began running (the first display that saw a task assigned): the ETA's clock, so
        #: Ray's and the prefix's start-up do not count as task time
        self.running_since: float | None = None
        #: every call completed so far as the phase board counts them (``live``), None before it has reported
        self.live_usage: dict[str, Usage] | None = None
        #: why not every planned task finished, once the driver knows (``tags.CAPPED``, ...): the closing line says so
        self.incomplete: str | None = None

    def add(self, rec: TaskRecord) -> None:
        with self._lock:
            self.new.append(rec)
            if self.running_since is None:  # finished before any display saw it run
                self.running_since = self.started

    def live(self, usage: dict[str, Usage] | None) -> None:
        """The board's count of this configuration's completed calls (the executor's display step)."""
        if usage is not None:
            with self._lock:
                self.live_usage = dict(usage)

    def prefix_spent(self, usage: dict[str, Usage]) -> None:
        with self._lock:
            self.prefix_usage.append(usage)

    def __call__(self, running: list[str], idle: str = "queued") -> None:
        """The executor's periodic call: log the line."""
        if self.running_since is None and any(not p.startswith("prefix") for p in running):
            self.running_since = time.perf_counter()
        log.info(self.line(running, idle))

    @property
    def total(self) -> int:
        return len(self.plan.tasks)

    @property
    def done(self) -> int:
        return len(self.records)

    @property
    def errors(self) -> int:
        """Tasks that ended in an error, of the task or of one of its verdicts (a rerun asks only what failed)."""
        return sum(1 for r in list(self.records.values()) if r.error or r.failed_verdicts)

    def retried(self) -> str:
        """``, 2 retried`` when tasks of this run needed more than one attempt (else empty)."""
        with self._lock:
            n = sum(1 for r in self.new if r.attempts > 1)
        return f", {n} retried" if n else ""

    def _added(self, record: TaskRecord) -> dict[str, Usage]:
        """What this run spent on ``record``: all its usage, or what a rerun added to an earlier record's."""
        before = self.earlier_usage.get(record.task_id, {})
        return {role: u - before[role] if role in before else u for role, u in record.usage.items()}

    def spend(self) -> Spend:
        """This run's spend: the calls the board saw complete (every request answered, retried attempts included)
        or, when the records hold more (a board report still on its way, or no board), the records' and prefix's."""
        with self._lock:
            usages = [self._added(r) for r in self.new] + list(self.prefix_usage)
            live = self.live_usage
        recorded = Spend.of(usages, dict(self.plan.prices), self.models)
        if live is None:
            return recorded
        seen = Spend.of([live], dict(self.plan.prices), self.models)
        more = seen.paid_calls + seen.cached_calls > recorded.paid_calls + recorded.cached_calls
        return seen if more else recorded

    def rate(self, now: float | None = None) -> float | None:
        """Tasks finished per second since this run's tasks began running; None before one has finished."""
        with self._lock:
            finished, since = len(self.new), self.running_since
        if not finished or since is None:
            return None
        return finished / max(1e-6, (now or time.perf_counter()) - since)

    def eta(self, now: float | None = None) -> float | None:
        """Seconds left at this configuration's completion rate (``rate``); None before a task has finished."""
        rate = self.rate(now)
        return None if rate is None else max(0, self.total - self.done) / rate

    def line(self, running: Sequence[str], idle: str = "queued") -> str:
        """The periodic line: tasks, errors, what the running units are doing (``idle`` when none), elapsed, ETA,
        spend."""
        eta = self.eta()
        doing = summarize_phases(running) if running else idle
        return (f"[progress] {self.plan.name}: {self.done}/{self.total} tasks ({self.errors} errors"
                f"{self.retried()}); running: {doing}; {duration(time.perf_counter() - self.started)} elapsed, "
                f"ETA {duration(eta) if eta is not None else '—'}; {self.spend().text()}")

    def summary(self) -> str:
        """The closing line of a configuration: totals of this run and the tasks an earlier run had finished."""
        earlier = f", {self.earlier} from an earlier run" if self.earlier else ""
        how = "stopped at the spend cap" if self.incomplete == "capped" else "finished"
        with self._lock:
            invalid = sum(1 for r in self.new for f in r.faults if f.kind == "invalid_cache_entry")
        invalid_text = f", {invalid} unusable cache entries asked again" if invalid else ""
        return (f"[inmind] {self.plan.name} {how}: {self.done}/{self.total} tasks, {self.errors} errors"
                f"{self.retried()}{earlier}; "
                f"this run: {self.spend().text()}{invalid_text}, {duration(time.perf_counter() - self.started)}")


class SweepProgress:
    """A sweep's configurations: the periodic ``configuration k of N done`` line and the closing totals."""

    def __init__(self, n_configs: int, every_s: float) -> None:
        self.n = n_configs
        self.every_s = every_s
        self.plans: list[PlanProgress] = []
        self.finished = 0
        self.started = time.perf_counter()
        self.last = self.started
        self._lock = threading.Lock()

    def register(self, p: PlanProgress) -> None:
        with self._lock:
            self.plans.append(p)

    def configuration_done(self) -> None:
        with self._lock:
            self.finished += 1

    def tick(self) -> None:
        """Called by the schedule loop; logs the sweep line when ``every_s`` has passed (0 = never)."""
        now = time.perf_counter()
        if self.every_s <= 0 or now - self.last < self.every_s:
            return
        self.last = now
        log.info(self.line())

    def _tasks(self) -> tuple[int, int, int, int]:
        with self._lock:
            plans = list(self.plans)
        return (sum(p.done for p in plans), sum(p.total for p in plans), sum(len(p.new) for p in plans),
                sum(p.errors for p in plans))

    def eta(self, now: float | None = None) -> float | None:
        """Seconds left for every task of the sweep at the sum of its configurations' completion rates (they share
        one pool); None before any configuration has a rate."""
        with self._lock:
            plans = list(self.plans)
        rates = [r for r in (p.rate(now) for p in plans) if r]
        done, total, _, _ = self._tasks()
        return None if not rates else max(0, total - done) / sum(rates)

    def line(self) -> str:
        done, total, new, errors = self._tasks()
        elapsed = time.perf_counter() - self.started
        left = self.eta()
        eta = f"ETA {duration(left)}" if left is not None else "ETA —"
        return (f"[progress] sweep: configuration {self.finished} of {self.n} done, {done}/{total} tasks "
                f"({errors} errors); {duration(elapsed)} elapsed, {eta}; {self.spend().text()}")

    def spend(self) -> Spend:
        with self._lock:
            plans = list(self.plans)
        out: Spend | None = None
        for p in plans:
            out = p.spend() if out is None else out + p.spend()
        return out or Spend(0, 0, 0, None)

    def summary(self) -> str:
        done, total, _, errors = self._tasks()
        with self._lock:
            capped = sum(1 for p in self.plans if p.incomplete == "capped")
        how = (f"stopped at the spend cap: {capped} of {self.n} configurations capped" if capped else
               f"finished: {self.finished} of {self.n} configurations")
        return (f"[inmind] sweep {how}, {done}/{total} tasks, "
                f"{errors} errors; this run: {self.spend().text()}, {duration(time.perf_counter() - self.started)}")
