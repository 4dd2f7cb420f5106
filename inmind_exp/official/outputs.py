"""What a run of one configuration writes beside its records for the release's protocol: the fidelity's lines under
its results table, the submission (runs of the official tasks) and ``controls.json`` (runs with negative controls).
The driver's ``OfficialOutputs`` recorder (``inmind_exp.run.recorders``) calls these with the plan that ran."""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from inmind_exp.errors import InmindError
from inmind_exp.official.aggregate import official_line
from inmind_exp.official.fidelity import Fidelity, fidelity
from inmind_exp.official.setting import retrieval_note
from inmind_exp.records import TaskRecord

log = logging.getLogger(__name__)


def protocol_lines(fid: Fidelity, records: Iterable[TaskRecord], top_k: Any = None) -> list[str]:
    """The results table's protocol lines: the fidelity (with the configuration's ``top_k`` against the release's
    example), what tasks ran, and for official tasks the release's own aggregate beside our paired rates."""
    note = retrieval_note(top_k)
    return [f"- {fid.line()}", *([f"- Retrieval: {note}"] if note else []), f"- Tasks: {fid.task_set}",
            *([f"- {official_line(records)}"] if fid.official_data else [])]


def protocol_note(result: Any) -> str:
    """The lines printed under the terminal's results table for one configuration (a ``RunResult``): its fidelity,
    and for the official tasks the release's aggregate."""
    fid = fidelity(result.plan, result.records)
    lines = [f"- {result.plan.name}: {fid.line()}" + ("" if fid.official_data else f" [{fid.task_set}]")]
    if (note := retrieval_note(result.plan.system_params.get("top_k"))) is not None:
        lines.append(f"  {note}")
    if fid.official_data:
        lines.append(f"  {official_line(result.records)}")
    return "\n".join(lines)


def export_submission(plan: Any, records: list[TaskRecord], fid: Fidelity) -> Path | None:
    """A run of the official tasks writes the release's submission (validated against its schema) beside
    ``records.jsonl``; a failure is logged, never lost records (they are written whatever this does)."""
    from inmind_exp.data.release import find_release
    from inmind_exp.official.submission import FILE_NAME, build_submission, submission_config, write_submission

    try:
        release = find_release(plan.release_dir)
        sub = build_submission(records, submission_config(plan.name, plan.config_hash, plan.params, fid))
        path = write_submission(plan.job_dir / FILE_NAME, sub.rows, release.schema())
    except InmindError as e:
        log.error(f"[inmind] {plan.name}: submission not written: {e}")
        return None
    log.info(f"[inmind] {plan.name}: submission {path}: {sub.summary()}")
    return path


def write_controls(plan: Any, records: Sequence[TaskRecord] = ()) -> Path | None:
    """``controls.json``: the run's negative controls and the mismatched pairing (each task's partner), the same
    pairing every task record carries, each pair with the relevance screen's verdict for review (``related`` 1: the
    pair was excluded; None: not screened, e.g. the task failed); None for a run without controls."""
    if plan.controls is None:
        return None
    from inmind_exp.protocol.controls import pairings_json

    screens = {r.task_id: c.screen for r in records if (c := r.controls.get("mismatched")) is not None and c.screen}
    pairs = [{**p, "screen": {"related": s.score, "reason": s.reason, "prompt_version": s.prompt_version,
                              "error": s.error} if (s := screens.get(p["task_id"])) is not None else None}
             for p in pairings_json(plan.controls)]
    path = plan.job_dir / "controls.json"
    path.write_text(json.dumps({"controls": list(plan.controls.names), "seed": plan.controls.seed,
                                "pairings": pairs},
                               indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return path


def screen_verdicts_path(plan: Any) -> Path | None:
    """The relevance screen's verdicts of a task set, shared by every run with the same task file, pairing, screen
    prompt and judge model: ``<run.cache_dir>/relevance/<key>.json``; None without the mismatched control."""
    if plan.controls is None or "mismatched" not in plan.controls:
        return None
    judge = plan.endpoints.get("judge")
    key = _digest([plan.identity.get("dataset"), plan.identity["controls"]["pairing"], judge.model if judge else ""])
    return Path(plan.run.cache_dir) / "relevance" / f"{key}.json"


def write_screen_verdicts(plan: Any, records: Sequence[TaskRecord]) -> Path | None:
    """Merge this run's relevance-screen verdicts (the valid ones) into the task set's file (``screen_verdicts_path``),
    one entry per pair, sorted by task id, for review across runs; written whole and renamed into place. The calls
    themselves are reused on a rerun through the call cache, which this file only mirrors."""
    path = screen_verdicts_path(plan)
    if path is None:
        return None
    pairs: dict[str, Any] = {}
    if path.is_file():
        try:
            pairs = json.loads(path.read_text(encoding="utf-8")).get("pairs", {})
        except (OSError, ValueError) as e:
            log.warning(f"[inmind] {path}: unreadable, rewritten from this run's verdicts ({e})")
    for r in records:
        c = r.controls.get("mismatched")
        if c is not None and c.screen is not None and c.screen.ok and c.pairing is not None:
            pairs[r.task_id] = {"partner_id": c.pairing["partner_id"], "related": c.screen.score,
                                "reason": c.screen.reason, "prompt_version": c.screen.prompt_version,
                                "model": c.screen.model}
    judge = plan.endpoints.get("judge")
    body = {"dataset": plan.identity.get("dataset"), "pairing": plan.identity["controls"]["pairing"],
            "judge_model": judge.model if judge else "", "related": sum(p["related"] for p in pairs.values()),
            "screened": len(pairs), "pairs": dict(sorted(pairs.items()))}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(body, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:16]
