"""Entry point: compose the config with Hydra (``-m`` expands a sweep), run each configuration, print the table.
A ``-m`` sweep goes through the inmind launcher (hydra_plugins/inmind_launcher): every job is planned first, then
all run as one schedule over one pool of workers.

    python launch.py                                   # default run on the embedded local LLM
    python launch.py -m system=backbone,naive_rag embedding=minilm,bm25
    python launch.py dry_run=true -m system=a_mem,mem0  # estimated calls and tokens, nothing runs
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
from inmind_exp.errors import InmindError  # noqa: E402
from inmind_exp.metrics import results_table  # noqa: E402
from inmind_exp.run import plan_config, print_estimate, run_plan  # noqa: E402
from inmind_exp.run import sweep  # noqa: E402

register_configs()
_ROWS: list = []


def configure_logging() -> None:
    """The project's messages go to the console as plain lines and, with Hydra's format, to the job's log file
    (``launch.log``); third-party clients only warn (mlflow: ``MLFLOW_LOGGING_LEVEL``)."""
    for noisy in ("httpx", "httpx2", "openai", "urllib3", "filelock"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    ours = logging.getLogger("inmind_exp")
    ours.setLevel(logging.INFO)
    ours.propagate = False
    for h in list(ours.handlers):
        ours.removeHandler(h)
    console = logging.StreamHandler(sys.stdout)
    console.setFormatter(logging.Formatter("%(message)s"))
    ours.addHandler(console)
    for h in logging.getLogger().handlers:  # Hydra's file handler(s), so launch.log keeps the same messages
        if isinstance(h, logging.FileHandler):
            ours.addHandler(h)


@hydra.main(config_path="conf", config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> float | None:
    configure_logging()
    hc = HydraConfig.get()
    multirun = hc.mode == RunMode.MULTIRUN
    root = Path(hc.sweep.dir if multirun else hc.run.dir).resolve()
    job_dir = Path(hc.runtime.output_dir)
    collector = sweep.current()  # set while the inmind launcher plans a -m sweep: plan only, it runs them all
    try:
        plan = plan_config(cfg, root, job_dir)
        if cfg.dry_run:
            print_estimate(plan)
            return None
        if collector is not None:
            collector.add(plan)
            return None
        result = run_plan(plan, parent_key=f"sweep:{root}" if multirun else None, parent_name=f"sweep {root.name}")
    except InmindError as e:
        if collector is not None:
            collector.fail(str(e))  # every job is planned; the launcher reports all failures together
            return None
        print(f"error: {e}", file=sys.stderr, flush=True)
        sys.exit(2)
    except KeyboardInterrupt:
        sys.exit(130)  # the driver has said what is saved and how to resume
    _ROWS.append((result.plan.name, result.metrics))
    print("\n" + results_table(_ROWS) + "\n", flush=True)
    print(f"records: {job_dir / 'records.jsonl'}  |  MLflow run {result.run_id} in {plan.tracking.uri} "
          f"(experiment {plan.tracking.experiment})", flush=True)
    return result.metrics.rates["application"].pct


if __name__ == "__main__":
    main()
