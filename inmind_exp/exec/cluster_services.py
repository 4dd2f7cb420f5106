"""The Ray pool's services in one actor on the head node: the limiter (``exec.services.LimiterActor``), the call
cache (``exec.services.CacheActor``) with the cluster's single flight (``exec.services.FlightBook``) and the phase
board (``phases.PhaseBoard``).

One process instead of three: a Ray worker process costs ~1 s of CPU to start and ~170 MB, and on a 2-core machine
three of them started while the task actors did (and took two of the idle workers a local Ray starts with).
Each service keeps its own concurrency group (limiter waiters by the thousand on one event loop, cache reads and
writes on threads, the board one call at a time), and answers under its own method names, so the clients
(``RayLimiterClient``, ``RayCacheClient``, ``PhaseReporter``) and the schedule call it as they called the three.

Imported only where Ray runs (``executor.RayExecutor`` and the actor's process): it imports ray.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import ray

from inmind_exp.exec.services import CacheActor, FlightBook, LimiterActor
from inmind_exp.llm.limits import LimitRequest
from inmind_exp.records import Usage
from inmind_exp.display.phases import PhaseBoard

#: each service's concurrency group: how many of its calls run at once
CONCURRENCY_GROUPS = {"limiter": 1000, "cache": 32, "flights": 1000, "board": 1}


class ClusterServices:
    """The limiter, the cluster cache and the phase board of one pool (a Ray actor: ``RayExecutor`` declares it
    with ``ray.remote(concurrency_groups=CONCURRENCY_GROUPS)``)."""

    def __init__(self) -> None:
        self._limiter = LimiterActor()
        self._cache = CacheActor()
        self._flights = FlightBook()
        self._board = PhaseBoard()
        self._io = ThreadPoolExecutor(max_workers=CONCURRENCY_GROUPS["cache"], thread_name_prefix="inmind-cache")

    # -- the limiter: an asyncio condition, on its group's event loop ------------------------------------------

    @ray.method(concurrency_group="limiter")
    async def acquire(self, request: LimitRequest, lease_ttl_s: float) -> str:
        return await self._limiter.acquire(request, lease_ttl_s)

    @ray.method(concurrency_group="limiter")
    async def release(self, lease: str) -> None:
        await self._limiter.release(lease)

    # -- the cache: file reads and writes, on threads ----------------------------------------------------------

    async def _on_thread(self, fn: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._io, fn, *args)

    @ray.method(concurrency_group="cache")
    async def get(self, directory: str, kind: str, key: str) -> Any:
        return await self._on_thread(self._cache.get, directory, kind, key)

    @ray.method(concurrency_group="cache")
    async def put(self, directory: str, kind: str, key: str, value: Any) -> None:
        await self._on_thread(self._cache.put, directory, kind, key, value)

    @ray.method(concurrency_group="cache")
    async def count(self, directory: str, kind: str) -> int:
        return await self._on_thread(self._cache.count, directory, kind)

    # -- single flight: waiters by the thousand on their group's event loop (``FlightBook``) -------------------

    @ray.method(concurrency_group="flights")
    async def join_flight(self, directory: str, kind: str, key: str, timeout_s: float) -> tuple[bool, Any]:
        return await self._flights.join(directory, kind, key, timeout_s)

    @ray.method(concurrency_group="flights")
    async def land_flight(self, directory: str, kind: str, key: str, value: Any) -> None:
        self._flights.land(directory, kind, key, value)

    @ray.method(concurrency_group="flights")
    async def touch_flight(self, directory: str, kind: str, key: str) -> None:
        self._flights.touch(directory, kind, key)

    # -- the board: one call at a time (reports carry their sequence number: see PhaseBoard) --------------------

    @ray.method(concurrency_group="board")
    async def set(self, key: str, phase: str, seq: int | None = None) -> None:
        self._board.set(key, phase, seq)

    @ray.method(concurrency_group="board")
    async def clear(self, key: str, seq: int | None = None) -> None:
        self._board.clear(key, seq)

    @ray.method(concurrency_group="board")
    async def snapshot(self) -> dict[str, str]:
        return self._board.snapshot()

    @ray.method(concurrency_group="board")
    async def spent(self, key: str, role: str, usage: Usage) -> None:
        self._board.spent(key, role, usage)

    @ray.method(concurrency_group="board")
    async def forget(self, config: str) -> None:
        self._board.forget(config)

    @ray.method(concurrency_group="board")
    async def usage(self) -> dict[str, dict[str, Usage]]:
        return self._board.usage()
