"""The cluster services behind ``limits.Limiter`` and ``cache.CallCache`` on Ray: the limiter and the cache, each with
the client a worker calls through the same interface as the local ones; on a Ray pool both (and the phase board) are
served by one actor on the head node, ``run.cluster_services.ClusterServices``.

``LimiterActor`` keeps the ``LeaseBook`` of every endpoint for the whole cluster; ``CacheActor`` keeps the
``CallCache`` of each cache directory on the driver's node (``run.cache=cluster``); ``FlightBook`` keeps the requests in
flight across the cluster, so two workers never pay for the same request at once (``ClusterFlights``). Losing either never fails a
task: a client falls back to limiting its own requests, or goes on uncached (logged once). ray is imported only
inside functions, so this module imports without it.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from contextlib import contextmanager
from typing import Any, Iterator

from inmind_exp.llm.inflight import WAIT_S, Flight, SingleFlight, _Flight
from inmind_exp.llm.limits import LimitRequest

#: a leader touches its flight this often while its call runs; a flight untouched for STALE_S is taken over
BEAT_S, STALE_S = 5.0, 60.0

log = logging.getLogger(__name__)


class LimiterActor:
    """Cluster-wide concurrency and RPM/TPM limits per endpoint, shared by every worker (an async Ray actor)."""

    def __init__(self) -> None:
        import asyncio

        from inmind_exp.llm.limits import LeaseBook

        self._cond = asyncio.Condition()
        self._book = LeaseBook()

    async def acquire(self, request: LimitRequest, lease_ttl_s: float) -> str:
        import asyncio

        async with self._cond:
            while True:
                lease, wait = self._book.try_acquire(request, time.monotonic(), lease_ttl_s)
                if lease is not None:
                    return lease
                try:
                    await asyncio.wait_for(self._cond.wait(), timeout=wait)
                except TimeoutError:
                    pass

    async def release(self, lease: str) -> None:
        async with self._cond:
            if self._book.release(lease):
                self._cond.notify_all()


class RayLimiterClient:
    """The ``Limiter`` interface of inmind_exp.llm.limits, forwarded to the shared ``LimiterActor``. Should the actor
    be lost, the worker falls back to limiting its own requests (logged once) instead of failing its task."""

    def __init__(self, actor: Any, lease_ttl_s: float = 1800.0):
        self.actor = actor
        self.lease_ttl_s = lease_ttl_s
        self._local: Any = None
        self._local_leases: set[str] = set()

    def __getstate__(self) -> dict[str, Any]:
        return {"actor": self.actor, "lease_ttl_s": self.lease_ttl_s}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["actor"], state["lease_ttl_s"])  # type: ignore[misc]

    def _fallback(self, error: BaseException) -> Any:
        if self._local is None:
            from inmind_exp.llm.limits import LocalLimiter

            log.warning(f"[inmind] the cluster limiter is unavailable ({type(error).__name__}); "
                        f"this worker now limits its own requests")
            self._local = LocalLimiter()
        return self._local

    def acquire(self, request: LimitRequest) -> str:
        import ray
        from ray.exceptions import RayActorError

        if self._local is None:
            try:
                return ray.get(self.actor.acquire.remote(request, self.lease_ttl_s))
            except RayActorError as e:
                self._fallback(e)
        lease = self._local.acquire(request)
        self._local_leases.add(lease)
        return lease

    def release(self, lease: str) -> None:
        if lease in self._local_leases:
            self._local_leases.discard(lease)
            self._local.release(lease)
        elif self._local is None:
            self.actor.release.remote(lease)


class CacheActor:
    """One call cache for the whole cluster (``run.cache=cluster``): lives on the driver's node and keeps the
    ``CallCache`` of each cache directory there, so no completion or embedding is paid twice across nodes that do
    not share a path. A threaded actor: gets and puts of many workers run at once (``CallCache`` is safe for that)."""

    def __init__(self) -> None:
        self._caches: dict[str, Any] = {}

    def _cache(self, directory: str) -> Any:
        from inmind_exp.llm import CallCache

        if directory not in self._caches:
            self._caches[directory] = CallCache(directory)
        return self._caches[directory]

    def get(self, directory: str, kind: str, key: str) -> Any:
        return self._cache(directory).get(kind, key)

    def put(self, directory: str, kind: str, key: str, value: Any) -> None:
        self._cache(directory).put(kind, key, value)

    def count(self, directory: str, kind: str) -> int:
        return self._cache(directory).count(kind)


class FlightBook:
    """The requests in flight across the cluster, by (cache directory, kind, key): the first worker to ``join`` a
    key leads (makes the call), the others wait in the service until it ``land``s and take its reply. The leader
    ``touch``es its flight every ``BEAT_S`` while its call runs; a flight untouched for ``STALE_S`` (its leader lost
    with its worker or node) is taken over by a caller, waiting or new. Asyncio bookkeeping, run on the services
    actor's event loop; no Ray here, so it is tested in-process."""

    def __init__(self) -> None:
        #: key -> [landed event, last touched (monotonic), reply box]
        self._flights: dict[tuple[str, str, str], list[Any]] = {}
        #: requests that waited for another worker's identical request instead of sending their own
        self.joined = 0

    def _lead(self, k: tuple[str, str, str]) -> tuple[bool, Any]:
        import asyncio

        self._flights[k] = [asyncio.Event(), time.monotonic(), [None]]
        return True, None

    async def join(self, directory: str, kind: str, key: str, timeout_s: float = WAIT_S) -> tuple[bool, Any]:
        """(True, None): the caller leads; (False, reply): another worker's reply (None when its call failed or
        outlasted ``timeout_s``: the caller then asks itself)."""
        import asyncio

        k = (directory, kind, key)
        flight = self._flights.get(k)
        if flight is None or time.monotonic() - flight[1] > STALE_S:
            return self._lead(k)
        done, _, box = flight
        deadline = time.monotonic() + timeout_s
        while not done.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return False, None
            try:
                await asyncio.wait_for(done.wait(), timeout=min(left, max(STALE_S / 2, 0.05)))
            except TimeoutError:
                if self._flights.get(k) is flight and time.monotonic() - flight[1] > STALE_S:
                    return self._lead(k)  # its leader stopped touching it: lost (a killed worker or node)
        self.joined += box[0] is not None
        return False, box[0]

    def touch(self, directory: str, kind: str, key: str) -> None:
        """The leader's call is still running."""
        flight = self._flights.get((directory, kind, key))
        if flight is not None:
            flight[1] = time.monotonic()

    def land(self, directory: str, kind: str, key: str, value: Any) -> None:
        """The leader's reply (None: its call failed), handed to every worker waiting for it."""
        flight = self._flights.pop((directory, kind, key), None)
        if flight is not None:
            flight[2][0] = value
            flight[0].set()


class ClusterFlights:
    """Single flight across the cluster, with the interface of ``inflight.SingleFlight``: this worker's callers of a
    key first meet in its own ``SingleFlight``; their leader then joins the cluster's ``FlightBook`` (one call to the
    services actor), so a request another worker already has in flight is waited for instead of paid twice. Should
    the service be lost, the worker goes on with its own single flight (logged once)."""

    def __init__(self, actor: Any, directory: str):
        self.actor = actor
        self.dir = str(directory)
        self.local = SingleFlight()
        self.cluster_joined = 0
        self.lost = False

    def __getstate__(self) -> dict[str, Any]:
        return {"actor": self.actor, "directory": self.dir}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["actor"], state["directory"])  # type: ignore[misc]

    @property
    def joined(self) -> int:
        return self.local.joined + self.cluster_joined

    def _join(self, kind: str, key: str, timeout_s: float) -> tuple[bool, Any]:
        import ray
        from ray.exceptions import RayActorError

        try:
            lead, value = ray.get(self.actor.join_flight.remote(self.dir, kind, key, timeout_s))
            return bool(lead), value
        except RayActorError as e:
            self.lost = True
            log.warning(f"[inmind] the cluster's single flight is unavailable ({type(e).__name__}); this worker "
                        f"goes on with its own")
            return True, None

    def _land(self, kind: str, key: str, value: Any) -> None:
        self.actor.land_flight.remote(self.dir, kind, key, value)

    def _touch(self, kind: str, key: str) -> None:
        self.actor.touch_flight.remote(self.dir, kind, key)

    @contextmanager
    def _beating(self, kind: str, key: str) -> Iterator[None]:
        """Touch the flight every ``BEAT_S`` while this worker's call runs (a lost worker stops, and is replaced)."""
        stop = threading.Event()

        def beat() -> None:
            while not stop.wait(BEAT_S):
                try:
                    self._touch(kind, key)
                except Exception:  # noqa: BLE001 - the service lost: followers take over after STALE_S
                    return

        threading.Thread(target=beat, name="inmind-flight-beat", daemon=True).start()
        try:
            yield
        finally:
            stop.set()

    @contextmanager
    def claim(self, kind: str, key: str, timeout_s: float | None = WAIT_S) -> Iterator[Flight]:
        wait = WAIT_S if timeout_s is None else timeout_s
        with self.local.claim(kind, key, timeout_s) as flight:
            if not flight.leader or self.lost:
                yield flight
                return
            lead, value = self._join(kind, key, wait)
            if not lead:
                self.cluster_joined += value is not None
                flight.publish(value)  # this worker's own followers take it too
                followed = _Flight()
                followed.value = value
                yield Flight(False, followed)
                return
            try:
                with self._beating(kind, key):
                    yield flight
            finally:
                if not self.lost:
                    self._land(kind, key, flight.value)


class RayCacheClient:
    """The ``CallCache`` interface (get/put/count), forwarded to the shared ``CacheActor`` for one directory."""

    def __init__(self, actor: Any, directory: str):
        self.actor = actor
        self.dir = Path(directory)
        self.lost = False
        self.flights: SingleFlight | ClusterFlights = ClusterFlights(actor, directory)

    def _call(self, method: str, *args: Any) -> Any:
        """The service's answer; should it be lost, the worker goes on uncached (logged once), never fails a task."""
        import ray
        from ray.exceptions import RayActorError

        if self.lost:
            return None
        try:
            return ray.get(getattr(self.actor, method).remote(str(self.dir), *args))
        except RayActorError as e:
            self.lost = True
            log.warning(f"[inmind] the cluster cache is unavailable ({type(e).__name__}); this worker goes on uncached")
            return None

    def get(self, kind: str, key: str) -> Any | None:
        return self._call("get", kind, key)

    def put(self, kind: str, key: str, value: Any) -> None:
        self._call("put", kind, key, value)  # waited for: stored before the next call can ask for it

    def count(self, kind: str) -> int:
        return int(self._call("count", kind) or 0)
