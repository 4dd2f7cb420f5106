"""Entry point: compose the config with Hydra (``-m`` expands a sweep), run each configuration, print the table.
A ``-m`` sweep goes through the inmind launcher (hydra_plugins/inmind_launcher): every job is planned first, then
all run as one schedule over one pool of workers.

    python launch.py                                   # default run on the embedded local LLM
    python launch.py -m system=backbone,naive_rag embedding=minilm,bm25
    python launch.py -m dry_run=true system=a_mem,mem0  # estimated calls and tokens, nothing runs

Exit codes (docs/running.md, "Exit codes", has them in one table): 0 every task finished without error; 1 a crash (a bug:
traceback); 2 bad input (config, override, data, missing key, unreachable endpoint), found before anything ran or was
logged; 3 the launch ran but some task ended in error or a configuration failed while the others ran (rerun the same
command to retry them); 4 stopped at the spend cap run.max_usd / run.max_tokens before every task ran (the closing
lines print the command, with the cap, that finishes; nothing finished is paid again); 75 nothing ran but a rerun may
pass (another driver holds this sweep, Ray did not start); 130 interrupted, 143 terminated by SIGTERM, 129 by SIGHUP
(finished work is kept: rerun the same command, printed). Every exit but kill -9 releases the lock.
"""

from __future__ import annotations

from inmind_exp import env

env.apply(env.DRIVER)

import logging  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import hydra  # noqa: E402
from hydra.core.hydra_config import HydraConfig  # noqa: E402
from hydra.types import RunMode  # noqa: E402
from omegaconf import DictConfig  # noqa: E402

from inmind_exp.config.schema import register_configs  # noqa: E402
from inmind_exp.console import (EXIT_TASK_ERRORS, error_line, printable, retry_later,  # noqa: E402
                                route_project_logs)
from inmind_exp.errors import ClusterStartError, InmindError  # noqa: E402
from inmind_exp.launch.check_sweep import EXIT_BAD_INPUT  # noqa: E402
from inmind_exp.run.driver import run_plan  # noqa: E402
from inmind_exp.display import stop  # noqa: E402
from inmind_exp.run.session import Session, hydra_job_plan  # noqa: E402

register_configs()
stop.install()  # SIGTERM stops like Ctrl-C (installed again once Ray has started: inmind_exp.display.stop)


def sweep_label_keys(root: Path) -> list[str]:
    """The keys a basic-launcher sweep varies (its overrides in ``multirun.yaml``, expanded as Hydra does) that a
    run label does not already show; the inmind launcher knows them from its planning pass."""
    from inmind_exp.labels import varying_keys
    from inmind_exp.launch.check_sweep import expand_overrides
    from inmind_exp.tracking import sweep_overrides

    params = HydraConfig.get().sweeper.get("params")
    try:
        return varying_keys(expand_overrides(sweep_overrides(root), dict(params) if params else None))
    except Exception:  # noqa: BLE001  (a name is cosmetic: never fail a run over it)
        return []


def configure_logging() -> None:
    """The project's messages go to the console and, with Hydra's format, to the job's ``launch.log``."""
    route_project_logs(*(h for h in logging.getLogger().handlers if isinstance(h, logging.FileHandler)))


def run_job(cfg: DictConfig, session: Session) -> float | None:
    """Plan this Hydra job and run it (or, with ``dry_run=true``, estimate it); its value is its application rate.
    A ``-m`` sweep under the inmind launcher never comes here (the launcher plans and runs every job itself): this
    is a single run, or one job of a sweep under Hydra's basic launcher, whose results ``session`` collects."""
    configure_logging()
    hc = HydraConfig.get()
    multirun = hc.mode == RunMode.MULTIRUN
    root = Path(hc.sweep.dir if multirun else hc.run.dir).resolve()
    job_dir = Path(hc.runtime.output_dir)
    try:
        plan = hydra_job_plan(cfg, sweep_label_keys(root) if multirun else [])
    except InmindError as e:
        print(f"error: {printable(str(e))}", file=sys.stderr, flush=True)
        sys.exit(2)
    # a job repeating one already run or estimated (e.g. backbone under another embedding): say so, run nothing
    if multirun and (seen := session.repeat_of(plan)) is not None:
        return seen[1]
    if cfg.dry_run:
        session.estimate(plan)
        return None
    try:
        parent_key = None
        if multirun:
            from inmind_exp.tracking import sweep_overrides, sweep_run_key

            # the sweep's overrides (multirun.yaml), not this job's: every job of the sweep finds one parent
            parent_key = sweep_run_key(root, sweep_overrides(root) or [str(o) for o in hc.overrides.task])
        result = run_plan(plan, parent_key=parent_key, parent_name=f"sweep {root.name}",
                          resources=session.resources)
    except KeyboardInterrupt:
        stop.stopped()  # the driver has said what is saved; exit 130 (SIGINT), 143 (SIGTERM) or 129 (SIGHUP)
    except ClusterStartError as e:  # nothing ran, and a rerun may pass: exit 75 with the command
        sys.exit(retry_later(e))
    except InmindError as e:
        msg = error_line(e)
        if not session.rows and not session.failed and not multirun:
            print(f"error: {plan.name}: {msg}", file=sys.stderr, flush=True)
            sys.exit(2 if is_input_error(e) else EXIT_TASK_ERRORS)
        # in a sweep, one configuration's failure (e.g. an endpoint error while its shared prefix is built) ends
        # that configuration with a clear message and the others still run
        print(f"error: {plan.name}: {msg}", file=sys.stderr, flush=True)
        session.fail(plan.name, msg)
        return None
    value = session.add(result)
    print(session.table(full=str(job_dir / "results.md")), flush=True)
    from inmind_exp.run.end_screen import view_line

    print(f"records: {job_dir / 'records.jsonl'}  |  MLflow run {result.run_id}\n{view_line(plan, session.resources)}", flush=True)
    return value


def is_input_error(e: BaseException) -> bool:
    """Errors found before any task ran: a bad config, data, key or endpoint (exit 2)."""
    from inmind_exp.console import INPUT_ERRORS

    return isinstance(e, INPUT_ERRORS)


def main() -> int:
    """Run Hydra over ``run_job`` with one ``Session`` for the whole launch; the launch's exit code."""
    session = Session()

    @hydra.main(config_path="conf", config_name="config", version_base="1.3")
    def task(cfg: DictConfig) -> float | None:
        return run_job(cfg, session)

    from hydra.errors import CompactHydraException
    from omegaconf.errors import OmegaConfBaseException

    full_error = os.environ.get("HYDRA_FULL_ERROR")
    os.environ["HYDRA_FULL_ERROR"] = "1"  # Hydra's errors reach us, not its sys.exit(1), which says "a crash"
    try:
        task()
    except KeyboardInterrupt:  # before a configuration started (composing, planning): nothing ran
        stop.stopped()
    except (CompactHydraException, OmegaConfBaseException) as e:  # composition or override error: bad input
        if full_error:
            raise
        cause = f"\n{e.__cause__}" if isinstance(e.__cause__, OmegaConfBaseException) else ""
        print(f"error: {printable(str(e) + cause)}", file=sys.stderr, flush=True)
        return EXIT_BAD_INPUT
    finally:
        session.resources.end()  # Ray's actors end quietly, before the session lets go of them
    session.print_total()  # a basic-launcher dry run of two or more configurations: their total
    return session.exit_code()


if __name__ == "__main__":
    from inmind_exp.launch.override_names import check_argv

    check_argv(Path(__file__).parent / "conf")  # "did you mean" for a near-miss group or key (exit 2)
    from inmind_exp.exiting import exit_now

    try:
        code = main()
    except SystemExit as e:  # the launch's own exits (2, 3, 4, 75, 129, 130, 143) and Hydra's
        code = e.code
    exit_now(code)  # without the interpreter's finalisation (seconds): threads joined, atexit run, output flushed
