"""Role clients of one endpoint share the process's ``openai`` client (built once, ~50 ms of CPU each time, with its
own connection pool), across tasks and threads; another endpoint, key or timeout gets a client of its own."""

from __future__ import annotations

import threading

from inmind_exp.llm import CallCache, LLMClient
from inmind_exp.llm.provider import shared_client
from inmind_exp.records import msgs
from tests.conftest import fake_endpoints
from tests.fake_openai import FakeOpenAI


def test_clients_of_one_endpoint_share_one_openai_client(tmp_path, monkeypatch):
    with FakeOpenAI(delay_s=0.05) as fake:
        eps = fake_endpoints(fake.base_url)
        clients = [LLMClient(eps["answerer"], cache=CallCache(tmp_path / "c")) for _ in range(8)]
        texts: list[str] = []
        threads = [threading.Thread(target=lambda c=c, i=i: texts.append(c.chat(msgs(("user", f"q{i}"))).text))
                   for i, c in enumerate(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(texts) == 8 and len(fake.chat_requests()) == 8
        assert len({id(c.provider.client) for c in clients}) == 1
        judge = LLMClient(eps["judge"], cache=None)  # another role of the same endpoint
        assert judge.provider.client is clients[0].provider.client
        ep = eps["answerer"]
    key = ep.api_key()
    assert shared_client(ep.base_url, key, ep.timeout_s) is clients[0].provider.client
    assert shared_client(ep.base_url, key + "-other", ep.timeout_s) is not clients[0].provider.client
    assert shared_client(ep.base_url + "/x", key, ep.timeout_s) is not clients[0].provider.client
    assert shared_client(ep.base_url, key, ep.timeout_s + 1) is not clients[0].provider.client
