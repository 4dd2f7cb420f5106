"""Single flight per cache key: when tasks running at once in one process send the same request (the same cache
key), one of them calls the endpoint and the others wait for its reply instead of paying for it again. Kept beside
each cache object, so it spans exactly the callers that share that cache; across processes the cache file (or the
cluster cache service) still serves later callers."""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Any, Iterator

#: how long a request waits for the same request already in flight before sending its own (beyond any one call's
#: deadline and retries at the default llm.* settings)
WAIT_S = 1800.0


class _Flight:
    def __init__(self) -> None:
        self.done = threading.Event()
        self.value: Any = None  # the reply in cache form, or None when the leader failed


class Flight:
    """What ``SingleFlight.claim`` yields: ``leader`` says whether this caller makes the call; a follower finds the
    leader's reply in ``value`` (None when the leader's call failed: the follower then calls itself)."""

    def __init__(self, leader: bool, flight: _Flight):
        self.leader = leader
        self._flight = flight

    @property
    def value(self) -> Any:
        return self._flight.value

    def publish(self, value: Any) -> None:
        self._flight.value = value


class SingleFlight:
    """Process-local registry of the requests in flight, by (kind, key)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._flights: dict[tuple[str, str], _Flight] = {}
        #: requests that waited for another caller's identical request instead of sending their own
        self.joined = 0

    def __getstate__(self) -> dict[str, Any]:  # a lock does not pickle; a copy starts with nothing in flight
        return {}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__()

    @contextmanager
    def claim(self, kind: str, key: str, timeout_s: float | None = WAIT_S) -> Iterator[Flight]:
        """The first caller of a key leads (its block makes the call and ``publish``es the reply); a later caller
        waits until the leader's block ends (at most ``timeout_s``) and follows."""
        k = (kind, key)
        with self._lock:
            flight = self._flights.get(k)
            leader = flight is None
            if leader:
                flight = self._flights[k] = _Flight()
        if not leader:
            flight.done.wait(timeout_s)
            with self._lock:
                self.joined += flight.value is not None
            yield Flight(False, flight)
            return
        try:
            yield Flight(True, flight)
        finally:
            with self._lock:
                self._flights.pop(k, None)
            flight.done.set()
