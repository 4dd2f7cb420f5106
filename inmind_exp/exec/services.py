"""The cluster services behind ``limits.Limiter`` and ``cache.CallCache`` on Ray: the limiter and the cache, each with
the client a worker calls through the same interface as the local ones; on a Ray pool both (and the phase board) are
served by one actor on the head node, ``run.cluster_services.ClusterServices``.

``LimiterActor`` keeps the ``LeaseBook`` of every endpoint for the whole cluster; ``CacheActor`` keeps the
``CallCache`` of each cache directory on the driver's node (``run.cache=cluster``). Losing either never fails a
task: a client falls back to limiting its own requests, or goes on uncached (logged once). ray is imported only
inside functions, so this module imports without it.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from inmind_exp.llm.inflight import SingleFlight
from inmind_exp.llm.limits import LimitRequest

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


class RayCacheClient:
    """The ``CallCache`` interface (get/put/count), forwarded to the shared ``CacheActor`` for one directory."""

    def __init__(self, actor: Any, directory: str):
        self.actor = actor
        self.dir = Path(directory)
        self.lost = False
        self.flights = SingleFlight()  # this worker's callers; the service itself serves every worker's later ones

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
