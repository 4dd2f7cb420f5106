"""Tasks running at once in one process that send the same request pay for it once: the first caller sends it, the
others wait for its reply (a cache hit for them). A failed leader call leaves each follower to make its own."""

from __future__ import annotations

import threading

from tests.fake_openai import Fault, FakeOpenAI
from inmind_exp.llm import CallCache, LLMClient
from inmind_exp.llm.inflight import SingleFlight
from inmind_exp.records import msgs
from tests.conftest import fake_endpoints

HELLO = msgs(("user", "hello, the same request from every task"))


def _race(clients: list[LLMClient]) -> list:
    out: list = [None] * len(clients)
    errors: list[BaseException] = []
    start = threading.Barrier(len(clients))

    def run(i: int) -> None:
        start.wait()
        try:
            out[i] = clients[i].chat(HELLO)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(clients))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors, errors
    return out


def test_the_same_request_from_tasks_in_flight_at_once_is_sent_once(tmp_path):
    with FakeOpenAI(delay_s=0.5) as fake:
        cache = CallCache(tmp_path / "cache")  # one process's cache, shared by its tasks' clients
        ep = fake_endpoints(fake.base_url, max_concurrency=8)["memory"]
        clients = [LLMClient(ep, cache=cache) for _ in range(4)]  # each task has its own client and meter
        replies = _race(clients)
        assert len(fake.requests) == 1
        assert len({r.text for r in replies}) == 1
        paid = [u.calls - u.cached_calls for u in (c.meter.snapshot()["memory"] for c in clients)]
        assert sorted(paid) == [0, 0, 0, 1]  # the leader paid; the followers' replies count as cache hits
        assert cache.flights.joined == 3
        # without a shared cache nothing is known about the others' requests: each task sends its own
        alone = [LLMClient(ep, cache=CallCache(tmp_path / f"own{i}")) for i in range(2)]
        _race(alone)
        assert len(fake.requests) == 3


def test_a_failed_leader_leaves_each_follower_to_make_its_own_call(tmp_path):
    with FakeOpenAI(delay_s=0.3) as fake:
        fake.faults.append(Fault(status=400, body={"error": {"message": "bad request"}}))  # the first request only
        cache = CallCache(tmp_path / "cache")
        ep = fake_endpoints(fake.base_url, max_concurrency=8, max_attempts=1)["memory"]
        clients = [LLMClient(ep, cache=cache) for _ in range(2)]
        results: list = []
        start = threading.Barrier(2)

        def run(c: LLMClient) -> None:
            start.wait()
            try:
                results.append(c.chat(HELLO).text)
            except Exception as e:  # noqa: BLE001 - the leader's 400
                results.append(type(e).__name__)

        threads = [threading.Thread(target=run, args=(c,)) for c in clients]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert len(fake.requests) == 2  # the follower did not take the failure as its own, nor was it lost
        assert sorted(results, key=len)[0] != sorted(results, key=len)[1]
        assert any(r == "fake answer" for r in results) and cache.flights.joined == 0


def test_a_single_flight_registry_pickles_empty():
    import pickle

    sf = SingleFlight()
    with sf.claim("chat", "k") as f:
        assert f.leader
        copy = pickle.loads(pickle.dumps(sf))
        with copy.claim("chat", "k") as g:
            assert g.leader  # nothing in flight travels with a copy
