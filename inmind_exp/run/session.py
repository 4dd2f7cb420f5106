"""One launch's bookkeeping, the same for a single run, a ``-m`` sweep under Hydra's basic launcher (``launch.py``)
and the inmind launcher (``hydra_plugins/inmind_launcher``): the process resources it runs with, the rows of its
results table, what failed, which jobs repeat one already run (de-duplication), the dry run's total, the closing
retry hint and the exit code. It is an object made by the entry point and handed down, never a module global, so
``launch.main`` reads alone: it plans its job, then runs it or estimates it.
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Hashable, Sequence, TextIO

from inmind_exp.console import EXIT_TASK_ERRORS, permanent_errors, retry_summary
from inmind_exp.plan.dedupe import same_results_key, skip_message, split_duplicates
from inmind_exp.plan.estimate import SweepTotal, print_estimate, print_sweep_total
from inmind_exp.plan.plan import Plan
from inmind_exp.run.resources import Resources

log = logging.getLogger("inmind_exp.plan.dedupe")


@dataclass
class Session:
    """What one launch has run so far and how it ends. ``resources`` are the process's (local server, trackers,
    checked endpoints, the Ray executor), shared by every configuration of the launch."""

    resources: Resources = field(default_factory=Resources)
    rows: list[tuple[str, Any]] = field(default_factory=list)
    #: the configurations that are the in-context control (their Naive is shown "–", ``inmind_exp.display.headline``)
    in_context: set[str] = field(default_factory=set)
    #: each configuration's protocol-fidelity lines, printed under the table (``run.driver.protocol_note``)
    notes: list[str] = field(default_factory=list)
    #: (configuration, tasks errored, tasks, of those a rerun cannot fix) of every configuration run
    errored: list[tuple[str, int, int, int]] = field(default_factory=list)
    #: (configuration, message) of configurations that failed while running
    failed: list[tuple[str, str]] = field(default_factory=list)
    #: plans run or estimated, by what makes results equal, with the job's value (its application rate)
    ran: dict[Hashable, tuple[Plan, float | None]] = field(default_factory=dict)
    total: SweepTotal = field(default_factory=SweepTotal)
    #: ``run.retry_errors`` of the plans run: whether a rerun retries errored tasks
    retry_errors: bool = True
    #: configuration -> why it did not finish every planned task (``RunResult.incomplete``)
    incomplete: dict[str, str] = field(default_factory=dict)

    # -- de-duplication ----------------------------------------------------------------------------------------------

    def repeat_of(self, plan: Plan) -> tuple[Plan, float | None] | None:
        """The plan already run or estimated with the same results as ``plan`` (and its value), logged as a skip."""
        seen = self.ran.get(same_results_key(plan))
        if seen is not None:
            log.info(skip_message(plan, seen[0]))
        return seen

    def split(self, plans: Sequence[Plan]) -> tuple[list[int], dict[int, int]]:
        """``dedupe.split_duplicates`` over a planned sweep, each skipped job logged once."""
        keep, repeats = split_duplicates(plans)
        for i, j in repeats.items():
            log.info(skip_message(plans[i], plans[j]))
        return keep, repeats

    # -- outcomes ----------------------------------------------------------------------------------------------------

    def estimate(self, plan: Plan) -> None:
        """The dry run of ``plan``: its estimate printed and added to the launch's total."""
        self.ran[same_results_key(plan)] = (plan, None)
        print_estimate(plan, total=self.total)

    def print_total(self, out: TextIO | None = None) -> None:
        """The dry run's total over the configurations estimated (printed for two or more)."""
        print_sweep_total(self.total, out)

    def add(self, result: Any) -> float:
        """A configuration that ran (a ``RunResult``): its row, note and error count; returns its value."""
        from inmind_exp.display import headline
        from inmind_exp.run.driver import protocol_note

        value = result.metrics.rates["application"].pct
        self.ran[same_results_key(result.plan)] = (result.plan, value)
        self.rows.append((result.plan.name, result.metrics))
        if getattr(result.plan.system_cls, "control", "") == headline.IN_CONTEXT:
            self.in_context.add(result.plan.name)
        errors = sum(1 for r in result.records if r.error or r.failed_verdicts)  # as the progress counts them
        self.errored.append((result.plan.name, errors, result.metrics.n_tasks, permanent_errors(result.records)))
        self.notes.append(protocol_note(result))
        self.retry_errors = self.retry_errors and bool(result.plan.run.retry_errors)
        if getattr(result, "incomplete", None):
            self.incomplete[result.plan.name] = result.incomplete
        return value

    def fail(self, name: str, message: str) -> None:
        """A configuration that failed while running (the others go on)."""
        self.failed.append((name, message))

    def table(self, full: str) -> str:
        """The results table of every configuration run so far, with the protocol notes under it."""
        from inmind_exp.display import headline

        table = headline.terminal(self.rows, full=full, in_context=self.in_context, states=self.incomplete)
        return "\n" + table + "\n\n" + "\n".join(self.notes) + "\n"

    # -- the end -------------------------------------------------------------------------------------------------------

    def summary(self) -> str | None:
        """The closing line when a task errored or a configuration failed (``console.retry_summary``)."""
        return retry_summary(self.errored, [name for name, _ in self.failed], retry_errors=self.retry_errors,
                             messages=[m for _, m in self.failed])

    def spend_cap_line(self) -> str | None:
        """The closing line when the executor of this launch stopped a configuration at its spend cap, else None."""
        executor = self.resources.started_executor
        record = getattr(executor, "spend_cap", None)
        return None if record is None else record.closing_line()

    def exit_code(self, out: TextIO | None = None) -> int:
        """0 when every task of every configuration finished; 4 (``run.spend_cap``) when the spend cap stopped
        dispatch; else the summary is printed and the code is 3."""
        from inmind_exp.display.spend_cap import EXIT_SPEND_CAP

        if (capped := self.spend_cap_line()) is not None:
            print(capped, file=out or sys.stderr, flush=True)
            return EXIT_SPEND_CAP
        summary = self.summary()
        if summary is None:
            return 0
        print(summary, file=out or sys.stderr, flush=True)
        return EXIT_TASK_ERRORS


def hydra_job_plan(cfg: Any, label_keys: Sequence[str] | None = None) -> Plan:
    """The plan of the Hydra job running now (its sweep or run directory, its job directory and overrides, from
    ``HydraConfig``); ``label_keys`` are the keys its sweep varies that a label does not show already."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from inmind_exp.errors import PlanError
    from inmind_exp.config.settings import local_cpu_problems
    from inmind_exp.plan.plan import plan_config

    if problems := local_cpu_problems(cfg):  # a sweep's jobs were checked already (launch.check_sweep.check_job)
        raise PlanError("; ".join(problems))
    hc = HydraConfig.get()
    root = Path(hc.sweep.dir if hc.mode == RunMode.MULTIRUN else hc.run.dir).resolve()
    return plan_config(cfg, root, Path(hc.runtime.output_dir), list(label_keys or []),
                       [str(o) for o in hc.overrides.task])
