"""``python -m analysis export-submission``: a configuration's records as the official release's submission file
(``inmind_exp.official.submission``), validated against the release's schema, with the run's protocol fidelity.

A run is exported from what it logged (MLflow, or a sweep directory), never rerun: one file per configuration.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from inmind_exp.official.fidelity import Fidelity
from inmind_exp.official.submission import FILE_NAME, Submission, build_submission, submission_config, write_submission

from analysis.load import Run
from analysis.official import run_fidelity


@dataclass(frozen=True)
class Export:
    run: Run
    path: Path
    submission: Submission
    fidelity: Fidelity


def file_name(run: Run) -> str:
    """``<label>.submission.jsonl`` with the label made a safe file name."""
    safe = re.sub(r"[^A-Za-z0-9._=-]+", "_", run.label).strip("_") or run.config.config_hash
    return f"{safe}.{FILE_NAME}"


def export_run(run: Run, path: Path, schema: dict, system: str | None = None) -> Export:
    """Write ``run``'s submission to ``path`` (validated first: nothing is written when a row is invalid)."""
    fid = run_fidelity(run)
    sub = build_submission(run.records, submission_config(run.label, run.config.config_hash, run.params, fid), system)
    write_submission(path, sub.rows, schema)
    return Export(run, Path(path), sub, fid)
