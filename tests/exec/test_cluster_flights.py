"""Single flight across the cluster (``exec.services.FlightBook`` / ``ClusterFlights``): tasks on different workers
sending the same request at once pay for it once. The services actor is stood in for by a ``FlightBook`` on an event
loop thread, so this runs without Ray; each worker has its own cache directory (nodes that share no path)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from inmind_exp.exec.services import ClusterFlights, FlightBook
from inmind_exp.llm import CallCache, LLMClient
from tests.conftest import fake_endpoints
from tests.fake_openai import Fault, FakeOpenAI
from tests.llm.test_inflight import HELLO, _race


class _Service:
    """The services actor's two flight methods, on their own event loop (as in ``ClusterServices``)."""

    def __init__(self) -> None:
        self.book = FlightBook()
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()

    def run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(60)

    def land(self, *args: Any) -> None:
        self.loop.call_soon_threadsafe(self.book.land, *args)


class _LocalFlights(ClusterFlights):
    def __init__(self, service: _Service, directory: str) -> None:
        super().__init__(None, directory)
        self.service = service

    def _join(self, kind: str, key: str, timeout_s: float) -> tuple[bool, Any]:
        return self.service.run(self.service.book.join(self.dir, kind, key, timeout_s))

    def _land(self, kind: str, key: str, value: Any) -> None:
        self.service.land(self.dir, kind, key, value)

    def _touch(self, kind: str, key: str) -> None:
        self.service.loop.call_soon_threadsafe(self.service.book.touch, self.dir, kind, key)


def _workers(tmp_path, service: _Service | None, n: int = 2) -> list[CallCache]:
    caches = [CallCache(tmp_path / f"node{i}") for i in range(n)]
    if service is not None:
        for c in caches:
            c.flights = _LocalFlights(service, "cache")  # the cache_dir every worker's spec names
    return caches


@pytest.mark.parametrize("shared", [True, False])
def test_tasks_on_two_workers_pay_for_the_same_request_once(tmp_path, shared):
    service = _Service() if shared else None
    caches = _workers(tmp_path, service)
    with FakeOpenAI(delay_s=0.5) as fake:
        ep = fake_endpoints(fake.base_url, max_concurrency=8)["memory"]
        clients = [LLMClient(ep, cache=caches[i % 2]) for i in range(4)]  # two tasks on each worker
        replies = _race(clients)
        assert len({r.text for r in replies}) == 1
        # without the cluster's book each worker's own single flight leads once: two paid calls
        assert len(fake.requests) == (1 if shared else 2)
        paid = sorted(u.calls - u.cached_calls for u in (c.meter.snapshot()["memory"] for c in clients))
        assert paid == ([0, 0, 0, 1] if shared else [0, 0, 1, 1])
    if shared:
        assert sum(c.flights.joined for c in caches) == 3


def test_a_failed_leader_leaves_each_worker_to_ask_itself(tmp_path):
    service = _Service()
    caches = _workers(tmp_path, service)
    with FakeOpenAI(delay_s=0.5) as fake:
        ep = fake_endpoints(fake.base_url, max_concurrency=8, max_attempts=1)["memory"]
        fake.fail_next(Fault(status=400, delay_s=0.5))  # not retryable: the leader's call fails
        clients = [LLMClient(ep, cache=c) for c in caches]
        out: list[Any] = [None, None]

        def run(i: int) -> None:
            try:
                out[i] = clients[i].chat(HELLO)
            except Exception as e:  # noqa: BLE001 - the leader's failure
                out[i] = e

        threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert sum(isinstance(o, Exception) for o in out) == 1  # the leader failed; the follower asked and got it
        assert len(fake.requests) == 2


def test_a_lost_leaders_flight_is_taken_over(monkeypatch):
    import inmind_exp.exec.services as services

    book = FlightBook()

    async def scenario() -> list[tuple[bool, Any]]:
        first = await book.join("d", "chat", "k")
        monkeypatch.setattr(services, "STALE_S", -1.0)  # the flight is now untouched for longer than allowed
        second = await book.join("d", "chat", "k", timeout_s=1.0)
        return [first, second]

    assert asyncio.run(scenario()) == [(True, None), (True, None)]


def test_a_waiter_takes_over_when_the_leader_stops_touching_and_keeps_waiting_while_it_does(monkeypatch):
    """A worker node killed while it led a flight left the others waiting WAIT_S (30 min): the two-node sweep test
    timed out. A waiter now takes the flight over once it is untouched for STALE_S, and not while it is touched."""
    import time

    import inmind_exp.exec.services as services

    monkeypatch.setattr(services, "STALE_S", 0.3)
    book = FlightBook()

    async def lost() -> tuple[tuple[bool, Any], float]:
        await book.join("d", "chat", "k")  # leads, then is never heard of again
        t0 = time.monotonic()
        return await book.join("d", "chat", "k", timeout_s=30.0), time.monotonic() - t0

    took, waited = asyncio.run(lost())
    assert took == (True, None) and waited < 2.0

    async def alive() -> tuple[bool, Any]:
        await book.join("d", "chat", "k2")

        async def leader() -> None:
            for _ in range(8):  # 1.2 s of touches, four times STALE_S
                await asyncio.sleep(0.15)
                book.touch("d", "chat", "k2")
            book.land("d", "chat", "k2", "reply")

        task = asyncio.ensure_future(leader())
        got = await book.join("d", "chat", "k2", timeout_s=30.0)
        await task
        return got

    assert asyncio.run(alive()) == (False, "reply")
