"""The spend cap: ``run.max_usd`` (dollars at ``llm.prices``) and ``run.max_tokens`` (paid tokens) stop the
dispatch of new tasks once the paid spend of this launch so far (every configuration of a sweep together, as the
progress lines count it) plus the estimate of the tasks in flight and of the next one would pass the cap. Tasks in
flight finish and are recorded; the tasks not started stay out of the ledger, so rerunning with a higher cap resumes
them and pays nothing for what finished (cache hits cost nothing). The launch then exits ``EXIT_SPEND_CAP`` (4).

The estimate of one task is the dry run's upper bound (``run.estimate``) divided over the tasks still to run, prefix
build included, so the cap stops early rather than late. The schedulers call ``SpendCap.allows`` before handing out a
task; the logic lives here so their hook is one call. Which configurations stopped is a ``CapRecord`` the executor
keeps (``executor.spend_cap``), read by the launch's ``Session`` for its exit code: no module state."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any, Iterable

from inmind_exp.run.plan import Plan

log = logging.getLogger(__name__)

#: the exit code of a launch that stopped at its spend cap before every task ran (launch.py, the sweep launcher)
EXIT_SPEND_CAP = 4


class CapRecord:
    """The configurations an executor stopped at a spend cap, with the message that said so (thread-safe: the
    schedulers of a sweep's plans add to it); the executor keeps one for its life, the ``Session`` reads it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reached: dict[str, str] = {}

    def add(self, name: str, message: str) -> None:
        with self._lock:
            self._reached[name] = message

    def reached(self) -> dict[str, str]:
        """The configurations that stopped at a spend cap (name -> message)."""
        with self._lock:
            return dict(self._reached)

    def closing_line(self) -> str | None:
        """The launch's closing line when a cap stopped it (exit ``EXIT_SPEND_CAP``), else None."""
        names = sorted(self.reached())
        if not names:
            return None
        return (f"stopped at the spend cap (run.max_usd / run.max_tokens) before every task ran: {', '.join(names)}. "
                f"Rerun the same command with a higher cap to finish; finished tasks are not run or paid again.")


@dataclass(frozen=True)
class TaskEstimate:
    """One task's estimated paid tokens and dollars (None: a model without a price)."""

    tokens: float
    usd: float | None


def task_estimate(plan: Plan) -> TaskEstimate:
    """The dry run's estimate of ``plan``'s remaining work, per task still to run."""
    from inmind_exp.run.estimate import estimate, price

    est = estimate(plan)
    n = max(1, int(est["tasks_to_run"]))
    cost, _ = price(plan, est)
    return TaskEstimate((est["prompt_tokens"] + est["completion_tokens"]) / n, None if cost is None else cost / n)


class SpendCap:
    """The caps of the plans a scheduler runs, checked before each task is handed out; a plan it stops goes into
    ``record`` (the executor's)."""

    def __init__(self, record: CapRecord) -> None:
        self.record = record
        self._estimates: dict[str, TaskEstimate] = {}
        self._stopped: set[str] = set()

    @staticmethod
    def applies(plan: Plan) -> bool:
        return plan.run.max_usd is not None or plan.run.max_tokens is not None

    def _estimate(self, plan: Plan) -> TaskEstimate:
        if plan.config_hash not in self._estimates:
            self._estimates[plan.config_hash] = task_estimate(plan)
        return self._estimates[plan.config_hash]

    def allows(self, plan: Plan, spent: Iterable[Any], in_flight: Iterable[Plan]) -> bool:
        """May one more task of ``plan`` start? ``spent`` are the ``progress.Spend`` of every configuration of this
        launch so far, ``in_flight`` the plans of the tasks running now. The first refusal per plan is logged."""
        if not self.applies(plan):
            return True
        if plan.config_hash in self._stopped:
            return False
        spent = list(spent)
        running = [*in_flight, plan]
        paid = sum(s.paid_tokens for s in spent)
        ahead = sum(self._estimate(p).tokens for p in running)
        over = []
        if plan.run.max_tokens is not None and paid + ahead > plan.run.max_tokens:
            over.append(f"run.max_tokens={plan.run.max_tokens}: {paid} paid tokens so far + about {ahead:.0f} for the "
                        f"tasks in flight and the next")
        if plan.run.max_usd is not None:
            est = [self._estimate(p).usd for p in running]
            costs = [s.cost_usd for s in spent]
            if any(c is None for c in [*est, *costs]):
                from inmind_exp.run.plan_checks import price_override

                models = {e.model for p in running for e in [*p.endpoints.values(), getattr(p.embedding, "endpoint", None)]
                          if e is not None}
                unpriced = sorted(models - set(plan.prices)) or ["MODEL"]
                over.append(f"run.max_usd={plan.run.max_usd:g}: a model of this launch has no price in llm.prices, "
                            f"so its spend cannot be held to a dollar cap (price it: "
                            f"{' '.join(map(price_override, unpriced))}; or use run.max_tokens)")
            elif sum(costs) + sum(est) > plan.run.max_usd:
                over.append(f"run.max_usd={plan.run.max_usd:g}: ${sum(costs):.4f} spent so far + about "
                            f"${sum(est):.4f} for the tasks in flight and the next")
        if not over:
            return True
        self._stopped.add(plan.config_hash)
        msg = (f"[inmind] {plan.name}: stopped dispatching at the spend cap ({'; '.join(over)}); the tasks in flight "
               f"finish, the others are not started. Finished results are kept: rerun with a higher cap to finish "
               f"(nothing finished is paid again).")
        log.warning(msg)
        self.record.add(plan.name, msg)
        return False


def spends(progresses: Iterable[Any]) -> list[Any]:
    """The ``Spend`` so far of each progress object that keeps one (``progress.PlanProgress.spend``)."""
    return [p.spend() for p in progresses if callable(getattr(p, "spend", None))]
