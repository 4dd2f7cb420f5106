"""``run.lead_task``: a configuration's first task starts alone and its later tasks follow it once it is done (they
ride on its cached background replies instead of racing it for them); other configurations' tasks are not held."""

from __future__ import annotations

from types import SimpleNamespace

from inmind_exp.exec.schedule import Schedule
from inmind_exp.display.spend_cap import CapRecord


def _job(name: str, lead: bool) -> SimpleNamespace:
    return SimpleNamespace(plan=SimpleNamespace(name=name, run=SimpleNamespace(lead_task=lead)))


def _schedule() -> Schedule:
    return Schedule(SimpleNamespace(spend_cap=CapRecord()), more=lambda: False)  # type: ignore[arg-type]


def test_later_tasks_wait_for_their_configurations_lead_task():
    s = _schedule()
    a, b = _job("a", True), _job("b", True)
    # two configurations sharing one prefix: their tasks become ready together
    s._ready([(a, "a1", 1), (b, "b1", 1), (a, "a2", 1), (a, "a3", 1), (b, "b2", 1)])  # type: ignore[list-item]
    assert [t for _, t, _ in s.ready_tasks] == ["a1", "b1"]
    assert s._work_left() == 5  # the held tasks are work left: the loop does not end without them
    s._follow(a)  # a's lead task is done
    assert [t for _, t, _ in s.ready_tasks] == ["a1", "b1", "a2", "a3"]
    s._follow(a)  # a later task of a finishing releases nothing more
    s._follow(b)
    assert [t for _, t, _ in s.ready_tasks] == ["a1", "b1", "a2", "a3", "b2"] and not s.following


def test_without_lead_task_every_task_is_ready_at_once():
    s = _schedule()
    c = _job("c", False)
    s._ready([(c, "c1", 1), (c, "c2", 1)])  # type: ignore[list-item]
    assert [t for _, t, _ in s.ready_tasks] == ["c1", "c2"] and not s.following
