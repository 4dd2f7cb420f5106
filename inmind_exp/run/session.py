"""One launch, the same for a single run (a one-job sweep) and a ``-m`` sweep: its steps (``check`` every composed
job, ``plan`` every job, ``run`` the plans as one schedule, ``report``), the process resources it runs with, the
rows of its results table, what failed, which jobs repeat one already run, the dry run's total and the exit code.
The entry point (``launch.launcher``) composes the jobs, makes one ``Session`` and calls ``launch``; every error
that ends the launch leaves through ``console.fail`` with its ``errors.Exit`` code.
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Hashable, Sequence, TextIO

from inmind_exp.console import (INPUT_ERRORS, error, error_line, fail, permanent_errors, retry_later,
                                retry_summary)
from inmind_exp.errors import ClusterStartError, Exit, InmindError
from inmind_exp.plan.dedupe import same_results_key, skip_message, split_duplicates
from inmind_exp.plan.estimate import SweepTotal, print_estimate, print_sweep_total
from inmind_exp.plan.plan import Plan
from inmind_exp.run.resources import Resources

log = logging.getLogger("inmind_exp.plan.dedupe")


@dataclass(frozen=True)
class Job:
    """One configuration of a launch: its composed config (without the ``hydra`` node), its sweep (or run)
    directory, its job directory, its task overrides and how a message names it (its swept overrides)."""

    cfg: Any
    root: Path
    job_dir: Path
    overrides: list[str]
    shown: str = ""


@dataclass(frozen=True)
class Sweep:
    """What a ``-m`` sweep adds to its jobs: its directory, its MLflow parent run's key and name, and the hooks of
    the end-of-sweep report (``prepare(after)`` before the tasks run, ``report()`` once they have)."""

    root: Path
    parent_key: str
    reporter: Any = None

@dataclass
class Session:
    """What one launch has run so far and how it ends. ``resources`` are the process's (local server, trackers,
    checked endpoints, the Ray executor), shared by every configuration of the launch."""

    resources: Resources = field(default_factory=Resources)
    rows: list[tuple[str, Any]] = field(default_factory=list)
    #: the configurations that are the in-context control (their Naive is shown "–", ``inmind_exp.display.headline``)
    in_context: set[str] = field(default_factory=set)
    #: each configuration's protocol-fidelity lines, printed under the table (``official.outputs.protocol_note``)
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

    # -- the launch's steps ----------------------------------------------------------------------------------------

    def launch(self, configs: Sequence[Any], names: Sequence[str], place: Callable[[], list[Job]],
               sweep: Sweep | None = None) -> int:
        """Check every composed job (``configs``, named by ``names``) before any job directory exists, ``place``
        them (Hydra's job set-up: directories, ``.hydra`` files), plan every job, run the plans as one schedule and
        report; the exit code. An error that stops the launch exits through ``console.fail``."""
        from inmind_exp.display import stop

        try:
            self.check(configs, names)
            plans = self.plan(place())
            if configs and configs[0].get("dry_run"):
                self.print_total()
                return int(Exit.OK)
            keep, _ = self.split(plans)  # e.g. backbone under every embedding: run once
            plans = [plans[k] for k in keep]
            return self.report(plans, self.run(plans, sweep), sweep)
        except KeyboardInterrupt:  # while checking or planning (nothing ran), or between the steps
            stop.stopped()
            raise  # not reached: stopped() exits
        finally:
            self.resources.end()  # Ray's actors end quietly, before the session lets go of them

    def check(self, configs: Sequence[Any], names: Sequence[str]) -> None:
        """``config.checks.check_job`` of every job (worker count, data files, injection point, base URLs); on any
        problem exit 2 listing them all."""
        from inmind_exp.config.checks import check_job

        many = len(configs) > 1
        problems = [f"job #{n} ({name}): {p}" if many else p
                    for n, (cfg, name) in enumerate(zip(configs, names)) for p in check_job(cfg)]
        if problems:
            fail(Exit.BAD_INPUT, f"{len(problems)} problem(s) in {len(configs)} job(s) of the sweep; nothing was run:\n"
                 + "\n".join(f"  - {p}" for p in problems))

    def plan(self, jobs: Sequence[Job]) -> list[Plan]:
        """Every job's plan (each once); a dry run prints each estimate instead and returns none. On any error exit
        2 naming every failing job, before anything ran or any MLflow run was created."""
        from hydra.core.utils import filter_overrides

        from inmind_exp.labels import varying_keys
        from inmind_exp.plan.plan import plan_config

        label_keys = varying_keys([filter_overrides(j.overrides) for j in jobs]) if len(jobs) > 1 else []
        plans, errors = [], []
        for n, job in enumerate(jobs):
            try:
                plan = plan_config(job.cfg, job.root, job.job_dir, label_keys, job.overrides)
            except InmindError as e:
                errors.append(f"job #{n} ({job.shown or 'defaults'}): {e}" if len(jobs) > 1 else str(e))
                continue
            if not job.cfg.get("dry_run"):
                plans.append(plan)
            elif self.repeat_of(plan) is None:
                self.estimate(plan)
        if errors:
            fail(Exit.BAD_INPUT, *errors, *([f"{len(errors)} of {len(jobs)} configuration(s) cannot run; nothing "
                                           "was run"] if len(jobs) > 1 else []))
        return plans

    def run(self, plans: list[Plan], sweep: Sweep | None) -> list[Any]:
        """Check every endpoint the plans call (keys, servers, the systems' own needs) before Ray starts, start it
        (a start that fails twice exits 75), then run the plans over one pool (``sweep.run_plans``); each plan's
        ``RunResult`` or the exception that ended it."""
        from inmind_exp.display import stop
        from inmind_exp.run.sweep import preflight, run_plans

        if bad := preflight(plans, self.resources):
            fail(Exit.BAD_INPUT, *(f"{plan.name}: {e}" for plan, e in bad),
                 *([f"{len(bad)} of {len(plans)} configuration(s) cannot run; nothing was run"] if len(plans) > 1
                   else []))
        if sweep is not None and sweep.reporter is not None:
            sweep.reporter.prepare(getattr(self.resources.executor, "working", None))
        try:
            if any(p.remaining() for p in plans):  # Ray and the pool's workers, before any driver starts
                self.resources.executor.start(plans[0].cluster)
            return run_plans(plans, parent_key=sweep.parent_key if sweep else None,
                             parent_name=f"sweep {sweep.root.name}" if sweep else "sweep", resources=self.resources)
        except KeyboardInterrupt:
            stop.stopped()  # each driver has said what is saved; exit 130 (SIGINT), 143 (SIGTERM) or 129 (SIGHUP)
        except ClusterStartError as e:
            retry_later(e)
        except InmindError as e:
            fail(Exit.BAD_INPUT, str(e))
        raise AssertionError("not reached")

    def report(self, plans: list[Plan], outcomes: Sequence[Any], sweep: Sweep | None) -> int:
        """The results table, where the records and the MLflow runs are, the end-of-sweep report and the exit code;
        a configuration that failed is named (exit 2 when every one stopped at its preflight: nothing ran)."""
        from inmind_exp.display import stop
        from inmind_exp.run.end_screen import records_line, view_line

        failures: list[tuple[str, BaseException]] = []
        results = []
        for plan, out in zip(plans, outcomes):
            if isinstance(out, BaseException):
                failures.append((plan.name, out))
            else:
                self.add(out)
                results.append(out)
        if self.rows:
            if sweep is None:
                full, where = str(plans[0].job_dir / "results.md"), f"MLflow run {results[0].run_id}"
            else:
                full = f"results.md in each job directory under {sweep.root}, and on the sweep's MLflow parent run"
                where = f"parent run 'sweep {sweep.root.name}'"
            print(self.table(full=full), flush=True)
            print(f"{records_line(plans, sweep.root if sweep else None)}  |  {where}\n"
                  f"{view_line(plans[0], self.resources)}", flush=True)
        if any(isinstance(e, KeyboardInterrupt) for _, e in failures):
            stop.stopped()
        if failures and not self.rows and all(isinstance(e, INPUT_ERRORS) for _, e in failures):
            fail(Exit.BAD_INPUT, *(f"{name}: {error_line(e)}" for name, e in failures))  # each stopped at its check
        if sweep is not None and sweep.reporter is not None:
            sweep.reporter.report()
        for name, e in failures:
            error(f"{name}: {error_line(e)}")
            self.fail(name, error_line(e))
        return self.exit_code()

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
        from inmind_exp.official.outputs import protocol_note

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
        if (capped := self.spend_cap_line()) is not None:
            print(capped, file=out or sys.stderr, flush=True)
            return int(Exit.SPEND_CAP)
        summary = self.summary()
        if summary is None:
            return int(Exit.OK)
        print(summary, file=out or sys.stderr, flush=True)
        return int(Exit.TASK_ERRORS)

