"""``hydra/launcher=inmind``, the only launcher: a ``-m`` sweep's jobs are composed here and handed to one
``run.session.Session``, whose steps (check, plan, run, report) a single run's one job goes through too
(``launch.cli``). Hydra discovers the subclass in ``hydra_plugins/inmind_launcher/launcher.py``, which adds the
end-of-sweep report (the core never imports ``analysis``)."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any, Sequence

from hydra.core.utils import JobReturn, configure_log, filter_overrides, run_job, setup_globals
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, open_dict

from inmind_exp.console import route_project_logs

log = logging.getLogger("hydra_plugins.inmind_launcher")  # a Hydra launcher's lines, as before the move


class InmindLauncher(Launcher):
    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.config = config
        self.hydra_context = hydra_context

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        """Compose every job, then ``Session.launch``: each job is checked before any job directory exists, then
        given Hydra's job set-up (directory, ``.hydra`` files), planned, run as one schedule and reported."""
        from inmind_exp.run.session import Session, Sweep
        from inmind_exp.safety.redact import redact_overrides
        from inmind_exp.tracking import sweep_run_key

        setup_globals()
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        root = Path(str(self.config.hydra.sweep.dir)).resolve()
        log.info(f"Planning {len(job_overrides)} jobs, then running them as one schedule")
        configs = [self.hydra_context.config_loader.load_sweep_config(self.config, list(o)) for o in job_overrides]
        returns: list[JobReturn] = []
        sweep = Sweep(root, sweep_run_key(root, [str(o) for o in self.config.hydra.overrides.task]), reporter=self)
        try:
            code = Session().launch(configs, [" ".join(redact_overrides(j)) for j in swept(job_overrides)],
                                    lambda: self._place(configs, job_overrides, initial_job_idx, returns), sweep)
        except SystemExit:
            if not returns:  # no job started, so RedactSecrets never cleans the multirun.yaml Hydra wrote: here
                from inmind_exp.launch.redact_output import config_secrets, redact_yaml_file

                redact_yaml_file(root / "multirun.yaml", config_secrets(self.config))
            raise
        if code:
            sys.exit(code)
        return returns

    def _place(self, configs: list[DictConfig], job_overrides: Sequence[Sequence[str]], initial_job_idx: int,
               returns: list[JobReturn]) -> list[Any]:
        """Hydra's job set-up (directory, ``.hydra`` files, per-job logging) of every job, as its basic launcher
        does it; each job's ``Job``. The sweep's ``launch.log`` then gets the project's messages."""
        from hydra.core.hydra_config import HydraConfig

        from inmind_exp.run.session import Job

        jobs: list[Job] = []
        for i, (cfg, overrides) in enumerate(zip(configs, job_overrides)):
            idx, shown = initial_job_idx + i, " ".join(filter_overrides(overrides))
            log.debug(f"\t#{idx} : {shown}")  # the configurations are named by their own lines next
            with open_dict(cfg):
                cfg.hydra.job.id = idx
                cfg.hydra.job.num = idx

            def place(task_cfg: DictConfig, shown: str = shown) -> None:
                hc = HydraConfig.get()
                jobs.append(Job(task_cfg, Path(hc.sweep.dir).resolve(), Path(hc.runtime.output_dir),
                                [str(o) for o in hc.overrides.task], shown))

            ret = run_job(hydra_context=self.hydra_context, task_function=place, config=cfg,
                          job_dir_key="hydra.sweep.dir", job_subdir_key="hydra.sweep.subdir")
            returns.append(ret)
            if len(jobs) <= i:
                _ = ret.return_value  # re-raises what failed Hydra's job set-up
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        fh = logging.FileHandler(sweep_dir / "launch.log")
        fh.setFormatter(logging.Formatter("[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"))
        route_project_logs(fh)
        return jobs

    def prepare(self, after: Any = None) -> None:
        """Called before the sweep runs: the plug-in class gets the end-of-sweep report ready (imports its modules
        in the background) once ``after`` (a ``threading.Event``: the tasks are under way) is set."""

    def report(self) -> None:
        """The end-of-sweep analysis report: the plug-in class in ``hydra_plugins/inmind_launcher`` supplies it."""


def swept(jobs: Sequence[Sequence[str]]) -> list[list[str]]:
    """Each job's overrides reduced to those that differ between jobs (what names a job in a message)."""
    varying = {i for i in range(len(jobs[0]) if jobs else 0) if len({tuple(j)[i] for j in jobs}) > 1}
    return [[o for i, o in enumerate(j) if i in varying] for j in jobs]
