"""``python -m analysis export-submission``: a configuration's records as the official release's submission file
(``inmind_exp.official.submission``), validated against the release's schema, with the run's protocol fidelity.

A run is exported from what it logged (MLflow, or a sweep directory), never rerun: one file per configuration.
"""

from __future__ import annotations

import argparse
import re
import sys
from typing import Callable
from dataclasses import dataclass
from pathlib import Path

from inmind_exp.official.fidelity import Fidelity
from inmind_exp.data.release import ReleaseError, find_release
from inmind_exp.official.submission import (FILE_NAME, SELF_JUDGED, Submission, SubmissionError, build_submission,
                                           submission_config, write_submission)

from analysis.load import Run, RunSet
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


def export_selected(args: argparse.Namespace, load: Callable[[], RunSet]) -> int:
    """``export-submission``: the selected runs (``--run``, default every run) of the loaded run set, each written
    and validated against the release's schema; 2 when the release is missing or any run could not be exported."""
    try:
        schema = find_release(args.release_dir, where="export-submission").schema()
    except ReleaseError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    runset = load()
    runs = [runset.get(ref) for ref in args.run] if args.run else list(runset.runs)
    out = Path(args.out)
    single = out.suffix == ".jsonl"
    if single and len(runs) != 1:
        print(f"error: --out {out} is one file but {len(runs)} configurations are selected: give a directory, or "
              "one --run", file=sys.stderr)
        return 2
    failed = 0
    for run in runs:
        try:
            ex = export_run(run, out if single else out / file_name(run), schema, system=args.system)
        except SubmissionError as e:
            print(f"error: {run.label}: {e}", file=sys.stderr)
            failed += 1
            continue
        print(f"[analysis] {run.label}: {ex.path}: {ex.submission.summary()} ({SELF_JUDGED}: the InMind team "
              f"judges submissions again)\n[analysis]   {ex.fidelity.line()}")
    return 2 if failed else 0
