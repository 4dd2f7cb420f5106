"""Concurrency and RPM limits of the process-local limiter."""

from __future__ import annotations

import threading
import time

from inmind_exp.llm.limits import LimitRequest, LocalLimiter, RateWindow, limited


def test_concurrency_cap_holds():
    lim = LocalLimiter()
    active, peak = [0], [0]
    lock = threading.Lock()

    def work():
        with limited(lim, LimitRequest("ep", 10, 2)):
            with lock:
                active[0] += 1
                peak[0] = max(peak[0], active[0])
            time.sleep(0.05)
            with lock:
                active[0] -= 1

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert peak[0] == 2


def test_rpm_window_asks_to_wait():
    w = RateWindow()
    now = 1000.0
    for i in range(3):
        assert w.wait_time(now + i, 1, rpm=3, tpm=None) == 0
        w.record(now + i, 1)
    assert w.wait_time(now + 3, 1, rpm=3, tpm=None) > 50
    assert w.wait_time(now + 61, 1, rpm=3, tpm=None) == 0


def test_tpm_window_asks_to_wait():
    w = RateWindow()
    w.record(0.0, 900)
    assert w.wait_time(1.0, 50, rpm=None, tpm=1000) == 0
    assert w.wait_time(1.0, 200, rpm=None, tpm=1000) > 55


def test_expired_lease_frees_its_slot():
    from inmind_exp.llm.limits import LeaseBook

    book = LeaseBook()
    lease, _ = book.try_acquire(LimitRequest("ep", 1, 1), now=0.0, ttl_s=10.0)
    assert lease is not None
    blocked, wait = book.try_acquire(LimitRequest("ep", 1, 1), now=5.0, ttl_s=10.0)
    assert blocked is None and wait > 0
    again, _ = book.try_acquire(LimitRequest("ep", 1, 1), now=11.0, ttl_s=10.0)  # the first holder died
    assert again is not None and not book.release(lease) and book.release(again)
