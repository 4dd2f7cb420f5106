"""Live progress. Each running unit (a task, or a configuration's prefix build) reports its phase to a ``PhaseBoard``
(a plain object in process, a ``num_cpus=0`` Ray actor on the head node in a cluster), fire-and-forget; the schedule
asks the board every ``run.progress_every_s`` seconds and logs one line per configuration (``PlanProgress.line``)
and, in a sweep, one for the sweep (``SweepProgress``), whether or not any task has finished. Paid and cached calls
are counted apart, and the cost is shown only when every paid model has a price in the llm config's ``prices``.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from inmind_exp.display.phases import ingest_start, summarize_phases, task_fraction
from inmind_exp.records import TaskRecord, Usage

log = logging.getLogger(__name__)


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
        return f"{self.calls()}{cost}"

    def calls(self) -> str:
        return f"{self.paid_calls} paid calls, {self.cached_calls} cached, {self.paid_tokens / 1000:.1f}k tokens paid"

    def dollars(self) -> str:
        """``$0.0123``, or ``$ unpriced`` when some paid model has no price."""
        return f"${self.cost_usd:.4f}" if self.cost_usd is not None else "$ unpriced"


def figures(done: int, total: int, eta: float | None, spend: Spend, at_least: bool = False) -> str:
    """What a progress line leads with (a terminal cuts a long line's end): ``3/10 tasks · ETA 1m20s · $0.0123``
    (``ETA ≥1m20s`` when ``at_least``: part of the work has no estimate yet)."""
    left = f"{'≥' if at_least else ''}{duration(eta)}" if eta is not None else "—"
    return f"{done}/{total} tasks · ETA {left} · {spend.dollars()}"


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
        #: the share of a task the running tasks have done, from their phases (``phases.task_fraction``) at the
        #: last display, and the first session their ingestion starts at
        self.running_work = 0.0
        self.ingest_from: int | None = getattr(plan, "session_index", None)
        #: the last display that saw no task running: a task first seen had started since then
        self._idle_at = self.started

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
        tasks = [p for p in running if not p.startswith("prefix")]
        if self.running_since is None:
            if tasks:  # they began after the last display that saw none (not now: they may be well on)
                self.running_since = self._idle_at
            else:
                self._idle_at = time.perf_counter()
        start = ingest_start(tasks)
        with self._lock:
            if start is not None:
                self.ingest_from = start if self.ingest_from is None else min(self.ingest_from, start)
            self.running_work = sum(task_fraction(p, self.ingest_from or 0) for p in tasks)
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
        """Tasks done per second since this run's tasks began running, the running tasks' phases counting as the
        share of a task they have done (tasks that all finish together still give a rate); None before any work."""
        with self._lock:
            work, since = len(self.new) + self.running_work, self.running_since
        elapsed = (now or time.perf_counter()) - since if since is not None else 0.0
        return work / elapsed if work > 0 and elapsed >= 1.0 else None

    def eta(self, now: float | None = None) -> float | None:
        """Seconds left at this configuration's rate (``rate``); None before any work was seen."""
        rate = self.rate(now)
        with self._lock:
            left = max(0.0, self.total - self.done - self.running_work)
        return None if rate is None else left / rate

    def line(self, running: Sequence[str], idle: str = "queued") -> str:
        """The periodic line, figures first (done/total · ETA · $), then errors, what the running units are doing
        (``idle`` when none), elapsed and calls."""
        doing = summarize_phases(running) if running else idle
        errors = f"{self.errors} errors{self.retried()} · " if self.errors or self.retried() else ""
        spend = self.spend()
        return (f"[progress] {self.plan.name}: {figures(self.done, self.total, self.eta(), spend)} · {errors}"
                f"running: {doing} · {duration(time.perf_counter() - self.started)} elapsed · {spend.calls()}")

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
        """Seconds until the last configuration is done: the maximum of the unfinished configurations' ETAs (they
        run side by side); None while no unfinished one has an ETA."""
        with self._lock:
            plans = list(self.plans)
        left = [e for p in plans if p.done < p.total and (e := p.eta(now)) is not None]
        return max(left) if left else (0.0 if plans and all(p.done >= p.total for p in plans) else None)

    def eta_is_partial(self, now: float | None = None) -> bool:
        """Whether some unfinished configuration (a queued one, one still building its prefix) has no ETA yet, or
        not every configuration has started: the sweep's ETA is then a lower bound."""
        with self._lock:
            plans = list(self.plans)
        return len(plans) < self.n or any(p.done < p.total and p.eta(now) is None for p in plans)

    def line(self) -> str:
        done, total, new, errors = self._tasks()
        elapsed = time.perf_counter() - self.started
        spend = self.spend()
        errs = f" · {errors} errors" if errors else ""
        return (f"[progress] sweep: {figures(done, total, self.eta(), spend, self.eta_is_partial())} · "
                f"{self.finished} of {self.n} "
                f"configurations done{errs} · {duration(elapsed)} elapsed · {spend.calls()}")

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
