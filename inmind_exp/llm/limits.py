"""Concurrency and rate limits per endpoint.

``Limiter`` is the interface the client calls around every request. ``LocalLimiter`` enforces it inside one
process; ``inmind_exp.exec.executor`` provides a cluster-wide implementation backed by one Ray actor, so a limit holds across
every worker of a sweep.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator, Protocol


@dataclass(frozen=True)
class LimitRequest:
    """One request's claim on its endpoint's limits: the endpoint's ``key`` (``Endpoint.limit_key``), the tokens
    the request is estimated to use, and the limits it is held to (``rpm``/``tpm`` None: no rate limit)."""

    key: str
    tokens: int
    max_concurrency: int
    rpm: float | None = None
    tpm: float | None = None


class Limiter(Protocol):
    def acquire(self, request: LimitRequest) -> str:
        """Block until ``request`` may start; return a lease id."""

    def release(self, lease: str) -> None:
        """Free the lease's concurrency slot."""


@contextmanager
def limited(limiter: Limiter | None, request: LimitRequest) -> Iterator[None]:
    if limiter is None:
        yield
        return
    lease = limiter.acquire(request)
    try:
        yield
    finally:
        limiter.release(lease)


class RateWindow:
    """Sliding one-minute window of request starts and token estimates; pure bookkeeping, no waiting."""

    def __init__(self) -> None:
        self.events: list[tuple[float, int]] = []

    def wait_time(self, now: float, tokens: int, rpm: float | None, tpm: float | None) -> float:
        self.events = [(t, n) for t, n in self.events if now - t < 60.0]
        waits = [0.0]
        if rpm is not None and len(self.events) >= rpm:
            waits.append(60.0 - (now - self.events[-int(rpm)][0]))
        if tpm is not None and self.events:
            used = sum(n for _, n in self.events)
            if used + tokens > tpm:
                # wait until enough of the window has expired
                acc = used + tokens - tpm
                for t, n in self.events:
                    acc -= n
                    if acc <= 0:
                        waits.append(60.0 - (now - t))
                        break
        return max(waits)

    def record(self, now: float, tokens: int) -> None:
        self.events.append((now, tokens))


class LeaseBook:
    """The bookkeeping both limiters share: active leases per key, rate windows, expiry; never waits itself."""

    def __init__(self) -> None:
        self.active: dict[str, int] = {}
        self.windows: dict[str, RateWindow] = {}
        self.leases: dict[str, tuple[str, float]] = {}
        self.n = 0

    def try_acquire(self, request: LimitRequest, now: float, ttl_s: float = float("inf")) -> tuple[str | None, float]:
        """(lease, 0) when the request may start now, else (None, seconds worth waiting before trying again)."""
        self.expire(now)
        key = request.key
        window = self.windows.setdefault(key, RateWindow())
        wait = window.wait_time(now, request.tokens, request.rpm, request.tpm)
        if self.active.get(key, 0) < request.max_concurrency and wait <= 0:
            self.active[key] = self.active.get(key, 0) + 1
            window.record(now, request.tokens)
            self.n += 1
            lease = f"{key}#{self.n}"
            self.leases[lease] = (key, now + ttl_s)
            return lease, 0.0
        return None, wait if wait > 0 else 1.0

    def release(self, lease: str) -> bool:
        item = self.leases.pop(lease, None)
        if item is None:
            return False
        self.active[item[0]] -= 1
        return True

    def expire(self, now: float) -> None:
        """A holder that died with its lease must not block the endpoint forever."""
        for lease, (key, deadline) in list(self.leases.items()):
            if deadline < now:
                del self.leases[lease]
                self.active[key] -= 1


class LocalLimiter:
    """A process-local limiter: per-key concurrency sized by ``max_concurrency`` and RPM/TPM windows."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._book = LeaseBook()

    def acquire(self, request: LimitRequest) -> str:
        with self._cond:
            while True:
                lease, wait = self._book.try_acquire(request, time.monotonic())
                if lease is not None:
                    return lease
                self._cond.wait(timeout=wait)

    def release(self, lease: str) -> None:
        with self._cond:
            if self._book.release(lease):
                self._cond.notify_all()
