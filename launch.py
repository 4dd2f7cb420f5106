"""Entry point: compose the config with Hydra (``-m`` expands a sweep), run each configuration, print the table.
A ``-m`` sweep goes through the inmind launcher (hydra_plugins/inmind_launcher): every job is planned first, then
all run as one schedule over one pool of workers.

    python launch.py                                   # default run on the embedded local LLM
    python launch.py -m system=backbone,naive_rag embedding=minilm,bm25
    python launch.py -m dry_run=true system=a_mem,mem0  # estimated calls and tokens, nothing runs

Exit codes: 0 every task finished without error; 1 a crash (a bug: traceback); 2 bad input (config, data, missing
key, unreachable endpoint), found before anything ran or was logged; 3 the launch ran but some task ended in error or
a configuration failed while the others ran (rerun the same command to retry them); 75 another driver holds this
sweep; 4 stopped at the spend cap run.max_usd / run.max_tokens before every task ran (rerun with a higher cap
to finish; nothing finished is paid again); 130 interrupted, 143 terminated by SIGTERM (finished work is kept: rerun the same command, printed).
"""

from __future__ import annotations

from inmind_exp import env

env.apply(env.DRIVER)

import logging  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import hydra  # noqa: E402
from hydra.core.hydra_config import HydraConfig  # noqa: E402
from hydra.types import RunMode  # noqa: E402
from omegaconf import DictConfig  # noqa: E402

from inmind_exp.config import register_configs  # noqa: E402
from inmind_exp.console import EXIT_TASK_ERRORS, error_line, retry_summary, route_project_logs  # noqa: E402
from inmind_exp.errors import InmindError  # noqa: E402
from inmind_exp import headline  # noqa: E402
from inmind_exp.run import plan_config, print_estimate, run_plan  # noqa: E402
from inmind_exp.run import stop, sweep  # noqa: E402
from inmind_exp.run.driver import protocol_note  # noqa: E402
from inmind_exp.run.dedupe import same_results_key, skip_message  # noqa: E402
from inmind_exp.secrets import scrub  # noqa: E402

register_configs()
stop.install()  # SIGTERM stops like Ctrl-C (installed again once Ray has started: inmind_exp.run.stop)
_ROWS: list = []
#: each configuration's protocol-fidelity lines, printed under the table (inmind_exp.run.driver.protocol_note)
_NOTES: list[str] = []
#: (configuration, tasks errored, tasks) of every configuration run, and configurations that failed while running
_ERRORED: list[tuple[str, int, int]] = []
_FAILED: list[tuple[str, str]] = []
#: plans this process ran in a basic-launcher sweep, by what makes results equal, with the job's value
_RAN: dict = {}


def sweep_label_keys(root: Path) -> list[str]:
    """The keys a basic-launcher sweep varies (its overrides in ``multirun.yaml``, expanded as Hydra does) that a
    run label does not already show; the inmind launcher knows them from its planning pass."""
    from inmind_exp.run.labels import varying_keys
    from inmind_exp.sweep_check import expand_overrides
    from inmind_exp.tracking import sweep_overrides

    params = HydraConfig.get().sweeper.get("params")
    try:
        return varying_keys(expand_overrides(sweep_overrides(root), dict(params) if params else None))
    except Exception:  # noqa: BLE001  (a name is cosmetic: never fail a run over it)
        return []


def configure_logging() -> None:
    """The project's messages go to the console and, with Hydra's format, to the job's ``launch.log``."""
    route_project_logs(*(h for h in logging.getLogger().handlers if isinstance(h, logging.FileHandler)))


@hydra.main(config_path="conf", config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> float | None:
    configure_logging()
    hc = HydraConfig.get()
    multirun = hc.mode == RunMode.MULTIRUN
    root = Path(hc.sweep.dir if multirun else hc.run.dir).resolve()
    job_dir = Path(hc.runtime.output_dir)
    collector = sweep.current()  # set while the inmind launcher plans a -m sweep: plan only, it runs them all
    label_keys = collector.label_keys if collector is not None else (sweep_label_keys(root) if multirun else [])
    try:
        plan = plan_config(cfg, root, job_dir, label_keys, [str(o) for o in hc.overrides.task])
    except InmindError as e:
        if collector is not None:
            collector.fail(scrub(str(e)))  # every job is planned; the launcher reports all failures together
            return None
        print(f"error: {scrub(str(e))}", file=sys.stderr, flush=True)
        sys.exit(2)
    key = same_results_key(plan)
    # a job repeating one already run or estimated (e.g. backbone under another embedding): say so, run nothing;
    # outside a dry run the inmind launcher de-duplicates the plans it collects itself
    if multirun and (cfg.dry_run or collector is None) and key in _RAN:
        kept, value = _RAN[key]
        logging.getLogger("inmind_exp.run.dedupe").info(skip_message(plan, kept))
        return value
    if cfg.dry_run:
        _RAN[key] = (plan, None)
        print_estimate(plan)
        return None
    if collector is not None:
        collector.add(plan)
        return None
    try:
        result = run_plan(plan, parent_key=f"sweep:{root}" if multirun else None, parent_name=f"sweep {root.name}")
    except KeyboardInterrupt:
        stop.stopped()  # the driver has said what is saved; exit 130 (SIGINT) or 143 (SIGTERM)
    except InmindError as e:
        msg = error_line(e)
        if not _ROWS and not _FAILED and not multirun:
            print(f"error: {plan.name}: {msg}", file=sys.stderr, flush=True)
            sys.exit(2 if is_input_error(e) else EXIT_TASK_ERRORS)
        # in a sweep, one configuration's failure (e.g. an endpoint error while its shared prefix is built) ends
        # that configuration with a clear message and the others still run
        print(f"error: {plan.name}: {msg}", file=sys.stderr, flush=True)
        _FAILED.append((plan.name, msg))
        return None
    _RAN[key] = (plan, result.metrics.rates["application"].pct)
    _ROWS.append((result.plan.name, result.metrics))
    _ERRORED.append((result.plan.name, result.metrics.n_errors, result.metrics.n_tasks))
    _NOTES.append(protocol_note(result))
    print("\n" + headline.terminal(_ROWS, full=str(job_dir / "results.md")) + "\n\n" + "\n".join(_NOTES) + "\n",
          flush=True)
    from inmind_exp.run.end_screen import view_line

    print(f"records: {job_dir / 'records.jsonl'}  |  MLflow run {result.run_id}\n{view_line(plan)}", flush=True)
    return result.metrics.rates["application"].pct


def is_input_error(e: BaseException) -> bool:
    """Errors found before any task ran: a bad config, data, key or endpoint (exit 2)."""
    from inmind_exp.console import INPUT_ERRORS

    return isinstance(e, INPUT_ERRORS)


def exit_code() -> int:
    """0 when every task of every configuration finished; 3 (with a summary saying how to retry) otherwise."""
    from inmind_exp.run import spend_cap

    if (capped := spend_cap.closing_line()) is not None:
        print(capped, file=sys.stderr, flush=True)
        return spend_cap.EXIT_SPEND_CAP
    summary = retry_summary(_ERRORED, [name for name, _ in _FAILED])
    if summary is None:
        return 0
    print(summary, file=sys.stderr, flush=True)
    return EXIT_TASK_ERRORS


if __name__ == "__main__":
    from inmind_exp.override_names import check_argv

    check_argv(Path(__file__).parent / "conf")  # "did you mean" for a near-miss group or key (exit 2)
    main()
    sys.exit(exit_code())
