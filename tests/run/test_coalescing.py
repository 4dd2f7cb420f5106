"""``run.resources.Coalescing``: callers that ask for a refresh while one runs are served by one later run (the sweep
parent's table is rebuilt once for configurations that finish together, not once each), every caller returns only
after a run that started after it asked, and a failed run serves nobody."""

from __future__ import annotations

import threading
import time

import pytest

from inmind_exp.run.resources import Coalescing


def test_callers_during_a_run_share_the_next_run():
    co = Coalescing()
    started: list[int] = []  # how many callers had asked when each run started
    asked = [0]
    lock = threading.Lock()
    first_running = threading.Event()
    release_first = threading.Event()

    def refresh() -> None:
        with lock:
            started.append(asked[0])
        if len(started) == 1:
            first_running.set()
            release_first.wait(5)

    def caller() -> float:
        with lock:
            asked[0] += 1
        co(refresh)
        return time.monotonic()

    first = threading.Thread(target=caller)
    first.start()
    assert first_running.wait(5)
    others = [threading.Thread(target=caller) for _ in range(6)]
    for t in others:
        t.start()
    time.sleep(0.3)  # all six are waiting behind the first run
    release_first.set()
    for t in [first, *others]:
        t.join(5)
    assert started == [1, 7]  # the first caller's run, then one run for the six that asked during it


def test_a_caller_alone_always_runs():
    co = Coalescing()
    runs = []
    for i in range(3):
        co(lambda i=i: runs.append(i))
    assert runs == [0, 1, 2]


def test_a_failed_run_serves_nobody():
    """Two callers wait behind a run; the first of them to run fails: the other, whom that run was to serve, runs
    it again instead of returning as if served."""
    co = Coalescing()
    gate = threading.Event()
    first_running = threading.Event()
    runs: list[str] = []
    errors: list[BaseException] = []

    def slow() -> None:
        runs.append("slow")
        first_running.set()
        gate.wait(5)

    def flaky() -> None:
        runs.append("flaky")
        if runs.count("flaky") == 1:
            raise RuntimeError("store down")

    def waiter() -> None:
        try:
            co(flaky)
        except RuntimeError as e:
            errors.append(e)

    t0 = threading.Thread(target=lambda: co(slow))
    t0.start()
    assert first_running.wait(5)
    waiters = [threading.Thread(target=waiter) for _ in range(2)]
    for t in waiters:
        t.start()
    time.sleep(0.3)
    gate.set()
    for t in [t0, *waiters]:
        t.join(5)
    assert len(errors) == 1 and runs == ["slow", "flaky", "flaky"]
    with pytest.raises(ZeroDivisionError):
        co(lambda: 1 / 0)
    co(lambda: runs.append("after"))
    assert runs[-1] == "after"
