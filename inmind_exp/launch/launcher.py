"""``hydra/launcher=inmind`` (the project's default): a ``-m`` sweep is first planned in full, then run as one schedule.
Hydra discovers the subclass in ``hydra_plugins/inmind_launcher/launcher.py``, which adds the end-of-sweep report.

At set-up the first job's endpoints are checked and, if they answer, Ray starts in the background. Every job is
composed once (Hydra's sweeper composes them to validate the batch; ``_ComposedOnce`` keeps them) and checked
(worker count, data, injection point) before any job directory exists. Pass 1 runs Hydra's ``run_job`` for every
job (job directories, ``.hydra/`` files and per-job logging as with the basic launcher) around the launcher's own
task function, which *plans* the job (each job is planned once, here; ``launch.main`` is not called): every job is
validated before anything runs or any MLflow run is created, and if any fails, all failures are reported and the
process exits 2 (a Ray started meanwhile is shut down unseen). Then every endpoint the plans call is checked (keys,
servers, tool support: what a single run checks) before any task runs, exit 2 on a problem. Pass 2 runs every plan
through ``inmind_exp.run.sweep.run_plans`` over one pool of workers (one MLflow parent run per sweep identity, one
child per configuration, each logged as its tasks finish) and returns each job's value (its application rate) in
its ``JobReturn``. One ``inmind_exp.run.session.Session`` holds the rows, failures, de-duplication and exit code.
A dry run prints each estimate and the total and writes nothing to MLflow.
"""


import logging
import sys
from pathlib import Path
from typing import Any, List, Sequence

from hydra.core.utils import JobReturn, JobStatus, configure_log, filter_overrides, run_job, setup_globals
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, open_dict

from inmind_exp.console import error_line, printable, retry_later, route_project_logs
from inmind_exp.errors import ClusterStartError
from inmind_exp.safety.redact import scrub

log = logging.getLogger("hydra_plugins.inmind_launcher")  # a Hydra launcher's lines, as before the move


def _sweep_logging(sweep_dir: Path) -> None:
    """While the sweep runs, the project's messages go to the console and to ``<sweep dir>/launch.log``."""
    sweep_dir.mkdir(parents=True, exist_ok=True)
    fh = logging.FileHandler(sweep_dir / "launch.log")
    fh.setFormatter(logging.Formatter("[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"))
    route_project_logs(fh)


class InmindLauncher(Launcher):
    def __init__(self) -> None:
        super().__init__()
        self.config: DictConfig | None = None
        self.task_function: TaskFunction | None = None
        self.hydra_context: HydraContext | None = None
        self.cluster: Any = None  # the background start of Ray (inmind_exp.run.sweep.ClusterStart)
        self.session: Any = None  # the launch's run.session.Session, made in setup (its resources are checked there)

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.config = config
        self.hydra_context = hydra_context
        self.task_function = task_function
        if not isinstance(hydra_context.config_loader, _ComposedOnce):  # the sweeper shares this context
            hydra_context.config_loader = _ComposedOnce(hydra_context.config_loader, on_error=self._cancel_cluster)
        self._start_early()

    def _start_early(self) -> None:
        """Before Hydra's sweeper composes every job to validate the batch: compose the first job, check its
        endpoints (keys, servers) and, if they answer, start Ray and the pool's workers in the background
        (``sweep.ClusterStart``) while the jobs are composed, checked and planned. A dead endpoint starts no Ray
        (its error is reported when the jobs are checked, without a second request); a rerun (the sweep has a
        ledger: its work may all be done, which costs nothing) and anything this cannot read leave the start to
        ``_launch``, after the first job is planned."""
        from inmind_exp.launch.check_sweep import expand_overrides
        from inmind_exp.config.checks import check_base_urls
        from inmind_exp.run.session import Session
        from inmind_exp.config.settings import embedding_spec, local_server, role_endpoints
        from inmind_exp.run.sweep import ClusterStart

        assert self.hydra_context is not None and self.config is not None
        self.session = Session()
        if self.config.get("dry_run") or self.cluster is not None:
            return
        try:
            if any((Path(str(self.config.hydra.sweep.dir)) / "ledger").glob("*.jsonl")):
                return
            overrides = [str(o) for o in self.config.hydra.overrides.task]
            params = self.config.hydra.sweeper.get("params")
            first = expand_overrides(overrides, dict(params) if params else None)[0]
            cfg = self.hydra_context.config_loader.load_sweep_config(self.config, first)
            check_base_urls(cfg)  # a token in a URL's query: not sent anywhere (reported by _check_jobs)
            if local_server(cfg) is None:  # the embedded server's driver checks it once it has started it
                self.session.resources.preflight(role_endpoints(cfg.llm).values(),
                                                 embedding_spec(cfg.embedding, cfg.llm))
        except Exception as e:  # noqa: BLE001 - a bad job or a dead endpoint is reported by _launch, with the rest
            log.debug(f"no early start: {type(e).__name__}: {e}")
            return
        self.cluster = ClusterStart(self.config, self.session.resources)

    def _plan_job(self, planning: "_Planning", idx: int, overrides: Sequence[str]) -> JobReturn:
        """Hydra's job set-up (directory, .hydra files, logging) around the planning of one job: its plan is
        made once, here, and run in pass 2 (a dry run prints its estimate instead)."""
        shown = " ".join(filter_overrides(overrides))
        log.info(f"\t#{idx} : {shown}")
        sweep_config = self.hydra_context.config_loader.load_sweep_config(self.config, list(overrides))
        with open_dict(sweep_config):
            sweep_config.hydra.job.id = idx
            sweep_config.hydra.job.num = idx
        ret = run_job(hydra_context=self.hydra_context, task_function=lambda cfg: planning.plan(idx, shown, cfg),
                      config=sweep_config, job_dir_key="hydra.sweep.dir", job_subdir_key="hydra.sweep.subdir")
        if ret.status == JobStatus.FAILED:
            planning.errors.append((idx, shown, scrub(f"{type(ret._return_value).__name__}: {ret._return_value}")))
        return ret

    def _check_jobs(self, job_overrides: Sequence[Sequence[str]]) -> None:
        """What ``launch.check_sweep.CheckSweep`` checks (worker count, data files, injection point), on the configs
        the jobs will be planned from (Hydra's sweeper composed them to validate the batch; ``_ComposedOnce`` keeps
        them): on any problem, all are printed and the launch exits 2 before any job directory is made."""
        from inmind_exp.launch.check_sweep import stop_on_problems

        assert self.hydra_context is not None and self.config is not None
        loader = self.hydra_context.config_loader
        try:
            stop_on_problems([loader.load_sweep_config(self.config, list(o)) for o in job_overrides],
                             [list(o) for o in job_overrides])
        except SystemExit:  # no job starts, so RedactSecrets never cleans the multirun.yaml Hydra wrote: here
            from inmind_exp.launch.redact_output import config_secrets, redact_yaml_file

            redact_yaml_file(Path(str(self.config.hydra.sweep.dir)) / "multirun.yaml", config_secrets(self.config))
            raise

    def prepare_report(self, config: DictConfig, after: Any = None) -> None:
        """Called before the sweep runs: the plug-in class gets the end-of-sweep report ready (imports its modules
        in the background) once ``after`` (a ``threading.Event``: the tasks are under way) is set."""

    def report_at_end(self, config: DictConfig) -> None:
        """The end-of-sweep analysis report: the plug-in class in ``hydra_plugins/inmind_launcher`` supplies it (the
        core never imports ``analysis``)."""

    def _cancel_cluster(self) -> None:
        """End the Ray started in the background, if any, and its actors (``sweep.ClusterStart``); before anything
        ran, unseen."""
        if self.cluster is not None:
            self.cluster.cancel()
            self.cluster = None

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        from inmind_exp.display import stop

        try:
            return self._launch(job_overrides, initial_job_idx)
        except KeyboardInterrupt:  # while planning, checking or starting Ray: nothing ran; say how to rerun
            self._cancel_cluster()
            stop.stopped()
            raise  # not reached: stopped() exits
        finally:  # however the launch ends (an exit code, an interrupt while running), Ray's actors end quietly
            self._cancel_cluster()

    def _launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        from inmind_exp.console import INPUT_ERRORS
        from inmind_exp.errors import InmindError
        from inmind_exp.display import stop
        from inmind_exp.labels import varying_keys
        from inmind_exp.run.session import Session
        from inmind_exp.run.sweep import ClusterStart, preflight, run_plans

        setup_globals()
        assert self.hydra_context is not None and self.config is not None and self.task_function is not None
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        self._check_jobs(job_overrides)  # every job composed once and checked before any job directory exists
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        log.info(f"Planning {len(job_overrides)} jobs, then running them as one schedule")

        session, self.session = (self.session or Session()), None
        dry_run = bool(self.config.get("dry_run"))
        planning = _Planning(session, varying_keys([filter_overrides(o) for o in job_overrides]), dry_run)
        runs: List[JobReturn] = []
        early_check_done = dry_run or self.cluster is not None  # else the first planned job's endpoints, here
        for i, overrides in enumerate(job_overrides):
            runs.append(self._plan_job(planning, initial_job_idx + i, overrides))
            first = planning.plans.get(initial_job_idx + i)
            if not early_check_done and first is not None and not planning.errors:
                early_check_done = True
                # Ray and the pool's workers start once the first job's endpoints answer, while the other jobs are
                # planned and checked: a dead endpoint still exits at once, with no Ray started on the way; a launch
                # that stops before running (a bad job, a failed check, Ctrl-C) shuts that Ray down unseen
                if not preflight([first], session.resources):  # a failure is reported below, with the others'
                    self.cluster = ClusterStart(self.config, session.resources)
        if planning.errors:
            self._cancel_cluster()
            for idx, overrides, message in planning.errors:
                print(f"error: job #{idx} ({overrides or 'defaults'}): {printable(message)}", file=sys.stderr,
                      flush=True)
            print(f"error: {len(planning.errors)} of {len(job_overrides)} configuration(s) cannot run; nothing was "
                  f"run", file=sys.stderr, flush=True)
            sys.exit(2)
        if dry_run:  # the estimates are printed, then their total
            session.print_total()
            return runs

        _sweep_logging(sweep_dir)
        order = sorted(planning.plans)
        plans = [planning.plans[i] for i in order]
        keep, repeats = session.split(plans)  # e.g. backbone under every embedding: run once
        # every check a single run makes before work (keys, endpoints, tool support), before Ray starts
        bad = preflight([plans[k] for k in keep], session.resources)
        if bad or not keep:
            self._cancel_cluster()
        if bad:
            for plan, e in bad:
                print(f"error: {plan.name}: {printable(str(e))}", file=sys.stderr, flush=True)
            print(f"error: {len(bad)} of {len(keep)} configuration(s) cannot run; nothing was run", file=sys.stderr,
                  flush=True)
            sys.exit(2)
        # nothing is written to MLflow before every check has passed, and never in a dry run: each configuration
        # opens its MLflow run while its first tasks run (run.driver.run_plan)
        cluster_error = self.cluster.result() if keep and self.cluster is not None else None
        if isinstance(cluster_error, ClusterStartError):
            sys.exit(retry_later(cluster_error))
        if cluster_error is not None:
            print(f"error: {printable(str(cluster_error))}", file=sys.stderr, flush=True)
            sys.exit(2)
        root = plans[0].root
        self.prepare_report(self.config, getattr(session.resources.executor, "working", None))
        try:
            outcomes = run_plans([plans[k] for k in keep], parent_key=sweep_key(self.config, root),
                                 parent_name=f"sweep {root.name}", resources=session.resources)
        except KeyboardInterrupt:
            stop.stopped()  # each driver has said what is saved; exit 130 (SIGINT), 143 (SIGTERM) or 129 (SIGHUP)
        except ClusterStartError as e:
            sys.exit(retry_later(e))
        except InmindError as e:
            print(f"error: {printable(str(e))}", file=sys.stderr, flush=True)
            sys.exit(2)
        # every task has run: Ray and its actors end in the background while the table and the report are written
        ending = self.cluster.end() if self.cluster is not None else None
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
                failures.append((planning.plans[job].name, out))
                ret.status, ret._return_value = JobStatus.FAILED, out
                continue
            ret.return_value = session.add(out)
        if session.rows:
            print(session.table(full=f"results.md in each job directory under {sweep_dir}, and on the sweep's "
                                     "MLflow parent run"), flush=True)
            from inmind_exp.run.end_screen import records_line, view_line

            print(f"{records_line(plans, sweep_dir)}  |  parent run 'sweep {root.name}'\n{view_line(plans[0], session.resources)}",
                  flush=True)
        if any(isinstance(e, KeyboardInterrupt) for _, e in failures):
            _join(ending)
            stop.stopped()
        if failures and not session.rows and all(isinstance(e, INPUT_ERRORS) for _, e in failures):
            _join(ending)
            for name, e in failures:  # every configuration stopped at its preflight: bad input, nothing ran (exit 2)
                print(f"error: {name}: {error_line(e)}", file=sys.stderr, flush=True)
            sys.exit(2)
        self.report_at_end(self.config)  # here, not in Hydra's end callback: a nonzero exit below would skip it
        _join(ending)
        for name, e in failures:
            print(f"error: {name}: {error_line(e)}", file=sys.stderr, flush=True)
            session.fail(name, error_line(e))
        code = session.exit_code()
        if code:
            sys.exit(code)
        return runs


def _join(ending: Any) -> None:
    """Wait for Ray's teardown (``ClusterStart.end``) before the process exits."""
    if ending is not None:
        ending.join(60)


def sweep_key(config: DictConfig, root: Path) -> str:
    """The ``inmind.key`` of the sweep's MLflow parent run (``tracking.sweep_run_key``)."""
    from inmind_exp.tracking import sweep_run_key

    return sweep_run_key(root, [str(o) for o in config.hydra.overrides.task])


class _ComposedOnce:
    """Hydra's config loader, with each job's composed config kept: Hydra's sweeper composes every job to validate
    the batch, then the launcher checks and plans each from the same config (a copy each time; composing one job is
    ~0.3 s, three times per job before Ray could start)."""

    def __init__(self, loader: Any, on_error: Any = None) -> None:
        self._loader = loader
        self._on_error = on_error  # called when a job does not compose (the launch ends): the early Ray's end
        self._composed: dict[tuple[int, tuple[str, ...]], DictConfig] = {}

    def load_sweep_config(self, master_config: DictConfig, sweep_overrides: List[str]) -> DictConfig:
        import copy

        key = (id(master_config), tuple(sweep_overrides))
        if key not in self._composed:
            try:
                self._composed[key] = self._loader.load_sweep_config(master_config, list(sweep_overrides))
            except BaseException:
                if self._on_error is not None:
                    self._on_error()
                raise
        return copy.deepcopy(self._composed[key])

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)


class _Planning:
    """Pass 1's results: each job's plan by job index (or, in a dry run, its estimate printed), and the errors."""

    def __init__(self, session: Any, label_keys: list[str], dry_run: bool) -> None:
        self.session = session
        self.label_keys = label_keys
        self.dry_run = dry_run
        self.plans: dict[int, Any] = {}
        self.errors: list[tuple[int, str, str]] = []

    def plan(self, idx: int, overrides: str, cfg: DictConfig) -> None:
        """The task function of one job in pass 1 (inside Hydra's ``run_job``)."""
        from inmind_exp.errors import InmindError
        from inmind_exp.run.session import hydra_job_plan

        route_project_logs(*(h for h in logging.getLogger().handlers if isinstance(h, logging.FileHandler)))
        try:
            plan = hydra_job_plan(cfg, self.label_keys)
        except InmindError as e:
            self.errors.append((idx, overrides, scrub(str(e))))
            return None
        if self.dry_run:
            if self.session.repeat_of(plan) is None:
                self.session.estimate(plan)
            return None
        self.plans[idx] = plan
        return None
