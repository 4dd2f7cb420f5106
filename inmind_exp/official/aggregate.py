"""The release's own aggregate, beside ours: a metric is the number of ``score: 1`` verdicts divided by 125, so an
errored or missing task counts as not 1 (``evaluation/README.md``, "Judging").

Our rates (``inmind_exp.protocol.metrics``) leave out the tasks that failed, and a failed verdict from its metric's rate only.
The two agree only when every one of the 125 tasks ran and was judged. Both count per verdict: a failed verdict is
"not 1" for its own metric here, and the task's other verdicts count. The official ones are named ``<metric>_official``
(``application_official`` = score-1 application verdicts / 125) so nobody mistakes one for the other; they are
reported for runs of the official tasks only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from inmind_exp.official.setting import N_TASKS
from inmind_exp.protocol.judges import JUDGES
from inmind_exp.records import TaskRecord

SUFFIX = "_official"
NOTE = (f"official = score-1 verdicts / {N_TASKS} (the release's aggregate: a failed verdict or a missing task "
        "counts as not 1, per metric); the unsuffixed rates are over the tasks that ran, each leaving out only the "
        "tasks whose verdict of it failed")


@dataclass(frozen=True)
class OfficialRate:
    """``successes`` score-1 verdicts of the release's ``total`` tasks; ``judged`` tasks had a valid verdict."""

    metric: str
    successes: int
    judged: int
    total: int = N_TASKS

    @property
    def pct(self) -> float:
        return 100.0 * self.successes / self.total

    @property
    def name(self) -> str:
        return self.metric + SUFFIX


def official_rates(records: Iterable[TaskRecord], total: int = N_TASKS) -> dict[str, OfficialRate]:
    """Per judge metric, the release's aggregate over ``records`` (one task counted once: the last record wins).
    A task that failed (no answers: no submission row) counts as not 1; otherwise every valid verdict counts,
    whatever other verdict of its task failed: the release scores each metric on its own."""
    by_task = {r.task_id: r for r in records}
    out = {}
    for name in JUDGES:
        verdicts = [r.verdicts.get(name) for r in by_task.values() if r.error is None]
        ok = [v for v in verdicts if v is not None and v.ok]
        out[name] = OfficialRate(name, sum(1 for v in ok if v.score == 1), len(ok), total)
    return out


def official_metrics(records: Iterable[TaskRecord], total: int = N_TASKS) -> dict[str, float]:
    """MLflow metrics: ``<metric>_official`` (percent of ``total``) and ``<metric>_official_k`` (score-1 count)."""
    out: dict[str, float] = {}
    for r in official_rates(records, total).values():
        out[r.name] = r.pct
        out[f"{r.name}_k"] = float(r.successes)
    return out


def official_line(records: Iterable[TaskRecord], total: int = N_TASKS) -> str:
    """One results-table line: every official aggregate as ``name k/125 = pct%``."""
    cells = [f"{r.name} {r.successes}/{r.total} = {r.pct:.1f}%" for r in official_rates(records, total).values()]
    return ("Release aggregate (score-1 verdicts / 125, a failed verdict or a missing task counts as not 1; the "
            "table's rates leave out failed tasks, and a failed verdict from its own metric only): " + ", ".join(cells))
