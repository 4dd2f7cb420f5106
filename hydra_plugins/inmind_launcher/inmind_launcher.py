"""``hydra/launcher=inmind`` (the project's default): a ``-m`` sweep is first planned in full, then run as one schedule.

Pass 1 runs Hydra's ``run_job`` for every job (job directories, ``.hydra/`` files and per-job logging as with the
basic launcher) with ``inmind_exp.run.sweep.collecting`` active, so ``launch.py`` only *plans* its configuration:
every job is validated before anything runs or any MLflow run is created, and if any fails, all failures are
reported and the process exits 2. Pass 2 runs every plan through ``inmind_exp.run.sweep.run_plans`` over one pool of
workers (one MLflow parent run, one child per configuration, each logged as its tasks finish) and returns each job's
value (its application rate) in its ``JobReturn``.
"""


import logging
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, List, Optional, Sequence

from hydra.core.config_store import ConfigStore
from hydra.core.utils import JobReturn, JobStatus, configure_log, filter_overrides, run_job, setup_globals
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, open_dict

from inmind_exp.console import EXIT_TASK_ERRORS, error_line, retry_summary, route_project_logs
from inmind_exp.secrets import scrub

log = logging.getLogger(__name__)


@dataclass
class InmindLauncherConf:
    _target_: str = "hydra_plugins.inmind_launcher.inmind_launcher.InmindLauncher"


ConfigStore.instance().store(group="hydra/launcher", name="inmind", node=InmindLauncherConf, provider="inmind-exp")


def _sweep_logging(sweep_dir: Path) -> None:
    """While the sweep runs, the project's messages go to the console and to ``<sweep dir>/launch.log``."""
    sweep_dir.mkdir(parents=True, exist_ok=True)
    fh = logging.FileHandler(sweep_dir / "launch.log")
    fh.setFormatter(logging.Formatter("[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"))
    route_project_logs(fh)


class InmindLauncher(Launcher):
    def __init__(self) -> None:
        super().__init__()
        self.config: Optional[DictConfig] = None
        self.task_function: Optional[TaskFunction] = None
        self.hydra_context: Optional[HydraContext] = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.config = config
        self.hydra_context = hydra_context
        self.task_function = task_function

    def _plan_job(self, collector: Any, idx: int, overrides: Sequence[str]) -> JobReturn:
        """Hydra's job set-up (directory, .hydra files, logging) around launch.py's task function, which only plans."""
        collector.job, collector.overrides = idx, " ".join(filter_overrides(overrides))
        log.info(f"\t#{idx} : {collector.overrides}")
        sweep_config = self.hydra_context.config_loader.load_sweep_config(self.config, list(overrides))
        with open_dict(sweep_config):
            sweep_config.hydra.job.id = idx
            sweep_config.hydra.job.num = idx
        ret = run_job(hydra_context=self.hydra_context, task_function=self.task_function, config=sweep_config,
                      job_dir_key="hydra.sweep.dir", job_subdir_key="hydra.sweep.subdir")
        if ret.status == JobStatus.FAILED:
            collector.fail(scrub(f"{type(ret._return_value).__name__}: {ret._return_value}"))
        return ret

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        from inmind_exp.console import INPUT_ERRORS
        from inmind_exp.errors import InmindError
        from inmind_exp import headline
        from inmind_exp.run.dedupe import skip_message, split_duplicates
        from inmind_exp.run.driver import protocol_note
        from inmind_exp.run import stop
        from inmind_exp.run.labels import varying_keys
        from inmind_exp.run.sweep import PlanCollector, collecting, run_plans, start_cluster, warm_up
        from inmind_exp.sweep_report import report_at_end

        setup_globals()
        assert self.hydra_context is not None and self.config is not None and self.task_function is not None
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        log.info(f"Planning {len(job_overrides)} jobs, then running them as one schedule")

        warm = warm_up(self.config)
        collector = PlanCollector(label_keys=varying_keys([filter_overrides(o) for o in job_overrides]))
        runs: List[JobReturn] = []
        planned: List[BaseException] = []

        def plan_all() -> None:
            try:
                with collecting(collector):
                    for i, overrides in enumerate(job_overrides):
                        runs.append(self._plan_job(collector, initial_job_idx + i, overrides))
            except BaseException as e:  # noqa: BLE001 - re-raised in the main thread
                planned.append(e)

        # plan in a helper thread while this (long-lived) thread starts Ray: both take seconds
        planner = threading.Thread(target=plan_all, name="inmind-planner", daemon=True)
        planner.start()
        cluster_error = start_cluster(self.config) if len(job_overrides) else None
        while planner.is_alive():
            planner.join(0.2)
        warm.join()
        if planned:
            raise planned[0]
        if collector.errors:
            for idx, overrides, message in collector.errors:
                print(f"error: job #{idx} ({overrides or 'defaults'}): {message}", file=sys.stderr, flush=True)
            print(f"error: {len(collector.errors)} of {len(job_overrides)} configuration(s) cannot run; nothing was "
                  f"run", file=sys.stderr, flush=True)
            sys.exit(2)
        if not collector.plans:  # a dry run: the estimates are printed, then their total
            from inmind_exp.run.estimate import print_sweep_total

            print_sweep_total()
            return runs

        if cluster_error is not None:
            print(f"error: {scrub(str(cluster_error))}", file=sys.stderr, flush=True)
            sys.exit(2)
        order = sorted(collector.plans)
        plans = [collector.plans[i] for i in order]
        root = plans[0].root
        _sweep_logging(sweep_dir)
        keep, repeats = split_duplicates(plans)  # e.g. backbone under every embedding: run once
        for i, j in repeats.items():
            logging.getLogger("inmind_exp.run.dedupe").info(skip_message(plans[i], plans[j]))
        try:
            outcomes = run_plans([plans[k] for k in keep], parent_key=f"sweep:{root}", parent_name=f"sweep {root.name}")
        except KeyboardInterrupt:
            stop.stopped()  # each driver has said what is saved; exit 130 (SIGINT) or 143 (SIGTERM)
        except InmindError as e:
            print(f"error: {scrub(str(e))}", file=sys.stderr, flush=True)
            sys.exit(2)
        rows: list[Any] = []
        notes: list[str] = []
        failures: list[tuple[str, BaseException]] = []
        by_job: dict[int, Any] = {order[k]: out for k, out in zip(keep, outcomes)}
        stands_for = {order[i]: order[j] for i, j in repeats.items()}
        for i, ret in enumerate(runs):
            job = initial_job_idx + i
            if job in stands_for:  # a skipped duplicate returns the value of the job that ran for it
                out = by_job.get(stands_for[job])
                if out is not None and not isinstance(out, BaseException):
                    ret.return_value = out.metrics.rates["application"].pct
                continue
            out = by_job.get(job)
            if out is None:
                continue
            if isinstance(out, BaseException):
                failures.append((collector.plans[initial_job_idx + i].name, out))
                ret.status, ret._return_value = JobStatus.FAILED, out
                continue
            rows.append((out.plan.name, out.metrics))
            notes.append(protocol_note(out))
            ret.return_value = out.metrics.rates["application"].pct
        if rows:
            print("\n" + headline.terminal(rows, full=f"results.md in each job directory under {sweep_dir}, and "
                                                      "on the sweep's MLflow parent run") + "\n\n" + "\n".join(notes)
                  + "\n", flush=True)
            from inmind_exp.run.end_screen import records_line, view_line

            print(f"{records_line(plans, sweep_dir)}  |  parent run 'sweep {root.name}'\n{view_line(plans[0])}",
                  flush=True)
        if any(isinstance(e, KeyboardInterrupt) for _, e in failures):
            stop.stopped()
        if failures and not rows and all(isinstance(e, INPUT_ERRORS) for _, e in failures):
            for name, e in failures:  # every configuration stopped at its preflight: bad input, nothing ran (exit 2)
                print(f"error: {name}: {error_line(e)}", file=sys.stderr, flush=True)
            sys.exit(2)
        report_at_end(self.config)  # here, not only in the callback: a nonzero exit below skips Hydra's end callbacks
        for name, e in failures:
            print(f"error: {name}: {error_line(e)}", file=sys.stderr, flush=True)
        from inmind_exp.run import spend_cap

        if (capped := spend_cap.closing_line()) is not None:
            print(capped, file=sys.stderr, flush=True)
            sys.exit(spend_cap.EXIT_SPEND_CAP)
        summary = retry_summary([(name, m.n_errors, m.n_tasks) for name, m in rows], [n for n, _ in failures])
        if summary is not None:
            print(summary, file=sys.stderr, flush=True)
            sys.exit(EXIT_TASK_ERRORS)
        return runs
