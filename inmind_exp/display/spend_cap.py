"""The spend cap: ``run.max_usd`` (dollars at ``llm.prices``) and ``run.max_tokens`` (paid tokens) stop the
dispatch of new tasks once the paid spend of this launch so far (every configuration of a sweep together, as the
progress lines count it) plus the estimate of the tasks in flight and of the next one would pass the cap. Tasks in
flight finish and are recorded; the tasks not started stay out of the ledger, so rerunning with a higher cap resumes
them and pays nothing for what finished (cache hits cost nothing). The launch then exits ``Exit.SPEND_CAP`` (4).

The estimate of one task is the largest paid cost of one task of that configuration seen so far (this run's and
the ledger's, cache hits excluded), and before any task of it was paid, the dry run's upper bound (``run.estimate``)
divided over the tasks still to run, prefix build included: the bound is several times what a task costs, so it
only holds the first tasks back. The schedulers call ``SpendCap.allows`` before handing out a task; the logic lives
here so their hook is one call. Which configurations stopped, with their progress, is a ``CapRecord`` the executor
keeps (``executor.spend_cap``), read by the launch's ``Session`` for its exit code and its closing lines (the tasks
left, what they should cost and the command whose cap finishes them): no module state."""

from __future__ import annotations

import logging
import math
import threading
from dataclasses import dataclass
from typing import Any, Iterable

from inmind_exp.plan.plan import Plan

log = logging.getLogger(__name__)

#: the exit code of a launch that stopped at its spend cap before every task ran (launch.py, the sweep launcher)


class CapRecord:
    """The configurations an executor stopped at a spend cap, with the message that said so and their progress
    (thread-safe: the schedulers of a sweep's plans add to it); the executor keeps one for its life, the
    ``Session`` reads it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reached: dict[str, str] = {}
        self._stopped: dict[str, tuple[Plan, Any]] = {}

    def add(self, name: str, message: str, plan: Plan | None = None, progress: Any = None) -> None:
        with self._lock:
            self._reached[name] = message
            if plan is not None:
                self._stopped[name] = (plan, progress)

    def reached(self) -> dict[str, str]:
        """The configurations that stopped at a spend cap (name -> message)."""
        with self._lock:
            return dict(self._reached)

    def left(self) -> dict[str, int]:
        """The tasks each stopped configuration did not run (name -> count)."""
        with self._lock:
            stopped = dict(self._stopped)
        return {name: max(0, len(plan.tasks) - len(getattr(progress, "records", {}))) for name, (plan, progress)
                in stopped.items()}

    def closing_line(self) -> str | None:
        """The launch's closing lines when a cap stopped it (exit ``Exit.SPEND_CAP``), else None: which
        configurations stopped with the tasks they left, what those should cost, and the command that finishes."""
        names = sorted(self.reached())
        if not names:
            return None
        with self._lock:
            stopped = dict(self._stopped)
        left = self.left()
        where = ", ".join(f"{n} ({left[n]} of {len(stopped[n][0].tasks)} tasks left)" if n in stopped else n
                          for n in names)
        head = f"stopped at the spend cap before every task ran: {where}."
        if not stopped:
            return f"{head} Rerun with a higher cap to finish; finished tasks are not run or paid again."
        plans = [plan for plan, _ in stopped.values()]
        per = {n: per_task(plan, progress) for n, (plan, progress) in stopped.items()}
        tokens = sum(left[n] * per[n].tokens for n in stopped)
        usd = None if any(per[n].usd is None for n in stopped) else sum(left[n] * (per[n].usd or 0.0) for n in stopped)
        change: dict[str, str] = {}
        cost = f"about {tokens / 1000:.1f}k paid tokens"
        if usd is not None:
            cost += f", ${usd:.4f}"
        if any(p.run.max_usd is not None for p in plans) and usd is not None:
            change["run.max_usd"] = f"{math.ceil(max(usd * FINISH_MARGIN, 0.01) * 100) / 100:.2f}"
        if any(p.run.max_tokens is not None for p in plans):
            change["run.max_tokens"] = str(math.ceil(max(tokens * FINISH_MARGIN, 1)))
        from inmind_exp.console import resume_command

        seen = [per[n].observed for n in stopped]
        how = ("at the largest cost of one task seen so far" if all(seen) else
               "at the dry run's upper bound (no task paid yet)" if not any(seen) else
               "at the largest task seen so far, or the dry run's upper bound where none was paid yet")
        finish = (f"; to finish them (finished tasks are not run or paid again):\n  {resume_command(change)}"
                  if change else "; a model has no price in llm.prices: price it or cap run.max_tokens instead")
        return f"{head}\n{sum(left.values())} tasks left, {cost} {how}{finish}"


#: the finishing command's cap is this much above the tasks' estimate (each may cost a little more than the largest
#: seen so far)
FINISH_MARGIN = 1.25


@dataclass(frozen=True)
class TaskEstimate:
    """One task's estimated paid tokens and dollars (None: a model without a price); ``observed`` when it is the
    largest cost of a finished task, else the dry run's bound."""

    tokens: float
    usd: float | None
    observed: bool = False


def task_estimate(plan: Plan) -> TaskEstimate:
    """The dry run's estimate of ``plan``'s remaining work, per task still to run (an upper bound)."""
    from inmind_exp.plan.estimate import estimate, price

    est = estimate(plan)
    n = max(1, int(est["tasks_to_run"]))
    cost, _ = price(plan, est)
    return TaskEstimate((est["prompt_tokens"] + est["completion_tokens"]) / n, None if cost is None else cost / n)


def observed(progress: Any) -> TaskEstimate | None:
    """The largest paid tokens and dollars of one task among ``progress``'s records (this run's and the ledger's;
    tasks answered from the cache left out), or None before one was paid."""
    from inmind_exp.display.progress import Spend

    records = list(getattr(progress, "records", {}).values())
    plan, models = getattr(progress, "plan", None), getattr(progress, "models", None)
    if plan is None or models is None:
        return None
    paid = [s for s in (Spend.of([r.usage], dict(plan.prices), models) for r in records) if s.paid_tokens > 0]
    if not paid:
        return None
    usd = None if any(s.cost_usd is None for s in paid) else max(s.cost_usd or 0.0 for s in paid)
    return TaskEstimate(float(max(s.paid_tokens for s in paid)), usd, observed=True)


def per_task(plan: Plan, progress: Any) -> TaskEstimate:
    """What the cap reserves for one more task of ``plan``: the largest observed, else the dry run's bound."""
    return observed(progress) or task_estimate(plan)


class SpendCap:
    """The caps of the plans a scheduler runs, checked before each task is handed out; a plan it stops goes into
    ``record`` (the executor's)."""

    def __init__(self, record: CapRecord) -> None:
        self.record = record
        self._bounds: dict[str, TaskEstimate] = {}
        self._stopped: set[str] = set()

    @staticmethod
    def applies(plan: Plan) -> bool:
        return plan.run.max_usd is not None or plan.run.max_tokens is not None

    def _estimate(self, plan: Plan, progress: Any) -> TaskEstimate:
        seen = observed(progress) if progress is not None else None
        if seen is not None:
            return seen
        if plan.config_hash not in self._bounds:
            self._bounds[plan.config_hash] = task_estimate(plan)
        return self._bounds[plan.config_hash]

    def allows(self, plan: Plan, progresses: Iterable[Any], in_flight: Iterable[Plan]) -> bool:
        """May one more task of ``plan`` start? ``progresses`` are the ``progress.PlanProgress`` of every
        configuration of this launch (their spend so far and the cost of their finished tasks), ``in_flight`` the
        plans of the tasks running now. The first refusal per plan is logged."""
        if not self.applies(plan):
            return True
        if plan.config_hash in self._stopped:
            return False
        progresses = list(progresses)
        by_plan = {getattr(getattr(p, "plan", None), "config_hash", None): p for p in progresses}
        spent = spends(progresses)
        running = [*in_flight, plan]
        estimates = [self._estimate(p, by_plan.get(p.config_hash)) for p in running]
        paid = sum(s.paid_tokens for s in spent)
        ahead = sum(e.tokens for e in estimates)
        basis = "the largest task so far" if all(e.observed for e in estimates) else "the dry run's bound"
        over = []
        if plan.run.max_tokens is not None and paid + ahead > plan.run.max_tokens:
            over.append(f"run.max_tokens={plan.run.max_tokens}: {paid} paid tokens so far + about {ahead:.0f} for the "
                        f"tasks in flight and the next at {basis}")
        if plan.run.max_usd is not None:
            est = [e.usd for e in estimates]
            costs = [s.cost_usd for s in spent]
            if any(c is None for c in [*est, *costs]):
                from inmind_exp.config.checks import price_override

                models = {e.model for p in running for e in [*p.endpoints.values(), getattr(p.embedding, "endpoint", None)]
                          if e is not None}
                unpriced = sorted(models - set(plan.prices)) or ["MODEL"]
                over.append(f"run.max_usd={plan.run.max_usd:g}: a model of this launch has no price in llm.prices, "
                            f"so its spend cannot be held to a dollar cap (price it: "
                            f"{' '.join(map(price_override, unpriced))}; or use run.max_tokens)")
            elif sum(costs) + sum(e or 0.0 for e in est) > plan.run.max_usd:
                over.append(f"run.max_usd={plan.run.max_usd:g}: ${sum(costs):.4f} spent so far + about "
                            f"${sum(e or 0.0 for e in est):.4f} for the tasks in flight and the next at {basis}")
        if not over:
            return True
        self._stopped.add(plan.config_hash)
        msg = (f"[inmind] {plan.name}: stopped dispatching at the spend cap ({'; '.join(over)}); the tasks in flight "
               f"finish, the others are not started (the command that finishes them comes at the end).")
        log.warning(msg)
        self.record.add(plan.name, msg, plan, by_plan.get(plan.config_hash))
        return False


def spends(progresses: Iterable[Any]) -> list[Any]:
    """The ``Spend`` so far of each progress object that keeps one (``progress.PlanProgress.spend``)."""
    return [p.spend() for p in progresses if callable(getattr(p, "spend", None))]
