"""The ``inmind`` command and ``python launch.py``: compose the config with Hydra (``-m`` expands a sweep) and launch
it through one ``run.session.Session`` (check, plan, run, report). A single run is a one-job launch here; a ``-m``
sweep goes through the inmind launcher (``launch.launcher``), the only one. Each exit code is ``errors.Exit``'s.

    inmind                                            # default run on the embedded local LLM
    inmind -m system=backbone,naive_rag embedding=minilm,bm25
    inmind -m dry_run=true system=a_mem,mem0          # estimated calls and tokens, nothing runs
"""

from __future__ import annotations

from inmind_exp import env

env.apply(env.DRIVER)

import logging  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

from omegaconf import DictConfig  # noqa: E402

from inmind_exp.console import fail, route_project_logs  # noqa: E402
from inmind_exp.display import stop  # noqa: E402
from inmind_exp.errors import Exit  # noqa: E402
from inmind_exp.labels import CONF_DIR  # noqa: E402


def single_run(cfg: DictConfig) -> None:
    """A launch without ``-m`` (Hydra's run mode): one job through the session's steps, as a sweep's jobs go."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from inmind_exp.run.session import Job, Session

    hc = HydraConfig.get()
    if hc.mode == RunMode.MULTIRUN:  # a -m sweep under another launcher (hydra/launcher=basic)
        fail(Exit.BAD_INPUT, f"hydra/launcher={hc.runtime.choices.get('hydra/launcher')}: a sweep runs under the "
                             "inmind launcher only (hydra/launcher=inmind, the default)")
    route_project_logs(*(h for h in logging.getLogger().handlers if isinstance(h, logging.FileHandler)))
    job = Job(cfg, Path(hc.run.dir).resolve(), Path(hc.runtime.output_dir), [str(o) for o in hc.overrides.task])
    code = Session().launch([cfg], [""], lambda: [job])
    if code:
        sys.exit(code)


def main() -> None:
    """The launch, then the process's exit without the interpreter's finalisation (``exiting.exit_now``: 1.3 s of
    CPU after the last line of a run that imported Ray and MLflow)."""
    from inmind_exp.exiting import exit_now

    try:
        launch()
        code: object = 0
    except SystemExit as e:  # the launch's own exits (errors.Exit) and Hydra's
        code = e.code
    exit_now(code)


def check_output_dir(argv: list[str]) -> None:
    """The job directory given on the command line (``hydra.run.dir``, or ``hydra.sweep.dir`` with ``-m``) is
    probed before Hydra makes it: one that cannot be written (read-only, under ``/proc``) exits 2 naming the key,
    where Hydra's own ``mkdir`` ended in a traceback and exit 1."""
    from inmind_exp.config.checks import check_writable
    from inmind_exp.errors import PlanError

    key = "hydra.sweep.dir" if {"-m", "--multirun"} & set(argv) else "hydra.run.dir"
    for arg in argv:
        name, _, value = arg.lstrip("+").partition("=")
        if name == key and value and "${" not in value:
            try:
                check_writable(f"{key}={value}", Path(value))
            except PlanError as e:
                fail(Exit.BAD_INPUT, str(e))


def launch() -> None:
    """Hydra over ``single_run``; a composition or override error exits 2 (not Hydra's 1, which says "a crash")."""
    import hydra
    from hydra.errors import CompactHydraException
    from omegaconf.errors import OmegaConfBaseException

    from inmind_exp.config.schema import register_configs
    from inmind_exp.launch.override_names import check_argv

    check_argv(CONF_DIR)  # "did you mean" for a near-miss group or key (exit 2)
    check_output_dir(sys.argv[1:])
    register_configs()
    stop.install()  # SIGTERM stops like Ctrl-C (installed again once Ray has started: inmind_exp.display.stop)
    full_error = os.environ.get("HYDRA_FULL_ERROR")
    os.environ["HYDRA_FULL_ERROR"] = "1"  # Hydra's errors reach us, not its sys.exit(1)
    try:
        hydra.main(config_path=str(CONF_DIR), config_name="config", version_base="1.3")(single_run)()
    except KeyboardInterrupt:  # before a configuration started (composing, planning): nothing ran
        stop.stopped()
    except (CompactHydraException, OmegaConfBaseException) as e:
        if full_error:
            raise
        cause = f"\n{e.__cause__}" if isinstance(e.__cause__, OmegaConfBaseException) else ""
        fail(Exit.BAD_INPUT, str(e) + cause)
