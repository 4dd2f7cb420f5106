"""Entry point: compose the config with Hydra (``-m`` expands a sweep), run each configuration, print the table.

    python launch.py                                   # default run on the embedded local LLM
    python launch.py -m system=backbone,naive_rag embedding=minilm,bm25
    python launch.py -m dry_run=true system=a_mem,mem0  # estimated calls and tokens, nothing runs
"""

from __future__ import annotations

import logging
import os
import sys

for _k, _v in {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
               "MLFLOW_LOGGING_LEVEL": "WARNING",
               "MLFLOW_DISABLE_TELEMETRY": "true", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}.items():
    os.environ.setdefault(_k, _v)

from pathlib import Path  # noqa: E402

import hydra  # noqa: E402
from hydra.core.hydra_config import HydraConfig  # noqa: E402
from hydra.types import RunMode  # noqa: E402
from omegaconf import DictConfig  # noqa: E402

from inmind_exp.config import register_configs  # noqa: E402
from inmind_exp.data import DataError  # noqa: E402
from inmind_exp.llm import EndpointError  # noqa: E402
from inmind_exp.llm.local_server import LocalModelError  # noqa: E402
from inmind_exp.metrics import results_table  # noqa: E402
from inmind_exp.runner import PlanError, plan_config, print_estimate, run_config  # noqa: E402

register_configs()
_ROWS: list = []


@hydra.main(config_path="conf", config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> float | None:
    for noisy in ("httpx", "httpx2", "openai", "urllib3", "filelock"):  # mlflow: MLFLOW_LOGGING_LEVEL above
        logging.getLogger(noisy).setLevel(logging.WARNING)
    hc = HydraConfig.get()
    multirun = hc.mode == RunMode.MULTIRUN
    root = Path(hc.sweep.dir if multirun else hc.run.dir).resolve()
    job_dir = Path(hc.runtime.output_dir)
    try:
        if cfg.dry_run:
            print_estimate(plan_config(cfg, root, job_dir), cfg.run.retry_errors)
            return None
        result = run_config(cfg, root, job_dir, parent_key=f"sweep:{root}" if multirun else None,
                            parent_name=f"sweep {root.name}")
    except (DataError, PlanError, EndpointError, LocalModelError) as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        sys.exit(2)
    except KeyboardInterrupt:
        sys.exit(130)  # the runner has said what is saved and how to resume
    _ROWS.append((result.plan.name, result.metrics))
    print("\n" + results_table(_ROWS) + "\n", flush=True)
    print(f"records: {job_dir / 'records.jsonl'}  |  MLflow run {result.run_id} in {cfg.tracking.uri} "
          f"(experiment {cfg.tracking.experiment})", flush=True)
    return result.metrics.rates["application"].pct


if __name__ == "__main__":
    main()
