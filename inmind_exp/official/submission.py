"""Task records as the official release's submission: one JSON object per task (``task_id``, ``system``,
``config``, ``naive{context,answer}``, ``query{context,answer}``), the contract of
``evaluation/schema/submission.schema.json``, validated with ``jsonschema`` against the release's schema before
anything is written.

``context`` is the exact text the answerer was shown and the judges read (``Answer.context_text()``: under
``answer=paper`` the text that replaced the release prompt's ``{context}``), so the release's
``build_judge_payloads.py`` builds from these rows the requests ``judges=paper`` sends. One record is one row
(``submission_row``); a whole configuration is ``build_submission``. Every task with both answers is a row, whatever
its verdicts (the InMind team judges the rows again). A task with no naive or no indirect answer cannot fill the
contract: it is left out and counted
(``Submission.skipped``); the release counts a missing task as not 1, and its ``validate_submission.py`` refuses an
incomplete file unless given ``--allow-partial``. Only official tasks (integer ``task_id``) can be exported.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

from inmind_exp.errors import InmindError
from inmind_exp.records import Answer, TaskRecord

FILE_NAME = "submission.jsonl"


class SubmissionError(InmindError, ValueError):
    """Records that cannot be exported (not official tasks), or a row the release's schema rejects."""


@dataclass(frozen=True)
class Submission:
    """The rows to write, in task order, and the tasks left out with why."""

    rows: tuple[dict[str, Any], ...]
    skipped: tuple[tuple[str, str], ...] = field(default_factory=tuple)

    def summary(self) -> str:
        text = f"{len(self.rows)} task(s) exported"
        if self.skipped:
            text += (f", {len(self.skipped)} left out (the release counts them as not 1): "
                     + ", ".join(f"{t} ({why})" for t, why in self.skipped))
        return text


def official_task_id(record: TaskRecord) -> int:
    """The release's integer ``task_id`` of a record (official tasks keep it as their id)."""
    try:
        return int(record.task_id)
    except ValueError:
        raise SubmissionError(f"task {record.task_id!r} is not an official task (its id is not the release's integer "
                              "task_id): only runs of dataset=official can be exported as a submission") from None


def _turn(record: TaskRecord, name: str, answer: Answer | None) -> dict[str, str]:
    if answer is None:
        raise SubmissionError(f"task {record.task_id} ({record.system}): no {name} answer; the release needs both "
                              f"turns of every task (backbone: system.params.answer_naive=true)")
    return {"context": answer.context_text(), "answer": answer.text}


def submission_row(record: TaskRecord, config: Mapping[str, Any] | None = None,
                   system: str | None = None) -> dict[str, Any]:
    """The release's per-task row for ``record`` (its ``task_id`` must be the release's integer id as text); a
    record without both answers raises ``SubmissionError`` (``build_submission`` leaves such records out)."""
    return {"task_id": official_task_id(record), "system": system or record.system, "config": dict(config or {}),
            "naive": _turn(record, "naive", record.naive), "query": _turn(record, "indirect", record.indirect)}


def skip_reason(record: TaskRecord) -> str | None:
    """Why a record cannot fill the contract, or None when it can: both answers are all it needs (a failed verdict
    is no reason; neither is an error after both answers existed)."""
    if record.naive is not None and record.indirect is not None:
        return None
    if record.error is not None:
        return "task errored"
    if record.naive is None:
        return "no naive answer" + (" (+system.params.answer_naive=true asks the backbone)"
                                    if record.system == "backbone" else "")
    if record.indirect is None:
        return "no indirect answer"
    return None


def build_submission(records: Iterable[TaskRecord], config: Mapping[str, Any] | None = None,
                     system: str | None = None) -> Submission:
    """The submission of one configuration's records: ``config`` is its ``config`` object (``submission_config``),
    ``system`` the name written (default: each record's system)."""
    rows, skipped, seen = [], [], set()
    for r in records:
        tid = official_task_id(r)
        if tid in seen:
            raise SubmissionError(f"task {tid} appears twice: export one configuration's records at a time")
        seen.add(tid)
        why = skip_reason(r)
        if why is not None:
            skipped.append((r.task_id, why))
            continue
        rows.append(submission_row(r, config, system))
    rows.sort(key=lambda row: row["task_id"])
    return Submission(tuple(rows), tuple(skipped))


def submission_rows(records: Iterable[TaskRecord], config: Mapping[str, Any] | None = None,
                    system: str | None = None) -> list[dict[str, Any]]:
    """The rows of ``build_submission`` (records that cannot fill the contract left out)."""
    return list(build_submission(records, config, system).rows)


#: Flattened-config keys a submission's ``config`` carries: what defines the method and protocol, without the
#: local paths, endpoint addresses and variable names that mean nothing outside this machine.
CONFIG_PREFIXES = ("system.", "embedding.", "injection.", "answer.", "judges.", "dataset.", "trace.", "llm.")
CONFIG_DROP_SUFFIXES = ("base_url", "_env", "path", "release_dir", "cache_dir")
CONFIG_DROP_PARTS = (".server.", ".prices.", "timeout", "concurrency", "backoff", "max_attempts", "rpm", "tpm")


def config_params(params: Mapping[str, str]) -> dict[str, str]:
    """The method and protocol keys of a flattened config (``CONFIG_PREFIXES``), nulls and local details dropped."""
    return {k: str(v) for k, v in sorted(params.items())
            if k.startswith(CONFIG_PREFIXES) and not k.endswith(CONFIG_DROP_SUFFIXES)
            and not any(p in k for p in CONFIG_DROP_PARTS) and v not in (None, "None", "null", "")}


#: What every exported row says of its verdicts: ours, never the InMind team's (the team judges submissions again).
SELF_JUDGED = "self-judged"


def submission_config(label: str, config_hash: str, params: Mapping[str, str], fidelity: Any) -> dict[str, Any]:
    """The ``config`` object of every row: the configuration's label, hash, method params (``config_params``), the
    protocol fidelity the run recorded (``inmind_exp.official.fidelity.Fidelity``: its level, deviations, and the models and
    hosts that served it) and ``self-judged``."""
    return {"label": label, "config_hash": config_hash, "params": config_params(params),
            "fidelity": fidelity.tag, "level": fidelity.level, "official": bool(fidelity.official),
            "deviations": list(fidelity.deviations), "paper_gaps": list(fidelity.paper_gaps),
            "served": {k: list(v) for k, v in sorted(fidelity.served.items())}, "judging": SELF_JUDGED}


def validate_rows(rows: Iterable[Mapping[str, Any]], schema: Mapping[str, Any]) -> None:
    """Every row against the release's schema (``Release.schema()``); the first failure names the row and field."""
    import jsonschema

    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    validator = cls(schema)
    for i, row in enumerate(rows, 1):
        err = jsonschema.exceptions.best_match(validator.iter_errors(row))
        if err is not None:
            where = "/".join(str(p) for p in err.absolute_path) or "(row)"
            raise SubmissionError(f"submission row {i} (task_id {row.get('task_id')!r}): {where}: {err.message}")


def write_submission(path: Path, rows: Iterable[Mapping[str, Any]], schema: Mapping[str, Any]) -> Path:
    """Validate every row, then write them, one JSON object per line (nothing is written when a row is invalid)."""
    rows = list(rows)
    validate_rows(rows, schema)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n")
    tmp.replace(path)
    return path
