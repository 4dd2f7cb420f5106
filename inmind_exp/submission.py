"""One task record as a row of the official release's submission format (``evaluation/schema/submission.schema.json``):
``task_id`` (the release's integer id), ``system``, ``config``, and ``naive`` / ``query``, each the exact context the
answerer was shown (``Answer.context_text()``: under ``answer=paper`` the text that replaced the release prompt's
``{context}``) and its answer. The release's ``build_judge_payloads.py`` builds its judge requests from these rows,
so the same context and answer are what this project's ``judges=paper`` requests carry.
"""

from __future__ import annotations

from typing import Any, Mapping

from inmind_exp.records import Answer, TaskRecord


class SubmissionError(ValueError):
    """A record that cannot be a submission row (no integer task id, or a turn without an answer)."""


def _turn(record: TaskRecord, name: str, answer: Answer | None) -> dict[str, str]:
    if answer is None:
        raise SubmissionError(f"task {record.task_id} ({record.system}): no {name} answer; the release needs both "
                              f"turns of every task (backbone: system.params.answer_naive=true)")
    return {"context": answer.context_text(), "answer": answer.text}


def submission_row(record: TaskRecord, config: Mapping[str, Any] | None = None,
                   system: str | None = None) -> dict[str, Any]:
    """The release's per-task row for ``record`` (its ``task_id`` must be the release's integer id as text)."""
    try:
        task_id = int(record.task_id)
    except ValueError:
        raise SubmissionError(f"task {record.task_id!r}: not an official task id (an integer)") from None
    return {"task_id": task_id, "system": system or record.system, "config": dict(config or {}),
            "naive": _turn(record, "naive", record.naive), "query": _turn(record, "indirect", record.indirect)}
