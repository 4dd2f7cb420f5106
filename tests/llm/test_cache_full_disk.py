"""A cache write that fails (a full cache directory: every entry's file is ``/dev/full``, so the write raises
ENOSPC) keeps the answered call's result for its caller and counts the call, which was paid; a whole run with a
full cache ends with no task errors and its spend counts every request the endpoint received (#26 item 6)."""

from __future__ import annotations

import os

import pytest

import inmind_exp.llm.cache as cache_mod
from inmind_exp.llm import CallCache, LLMClient
from inmind_exp.records import msgs
from tests.conftest import fake_endpoints

HELLO = msgs(("user", "hello"))

pytestmark = pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")


@pytest.fixture
def full_cache(monkeypatch, tmp_path):
    """Every cache entry is written to /dev/full (ENOSPC on flush), as on a full disk."""
    import types

    def mkstemp(**_: object) -> tuple[int, str]:
        return os.open("/dev/full", os.O_WRONLY), str(tmp_path / "never-created.json")

    monkeypatch.setattr(cache_mod, "tempfile", types.SimpleNamespace(mkstemp=mkstemp))
    monkeypatch.setattr("inmind_exp.llm.model._WARNED_CACHE_WRITE", set())


def test_a_failed_chat_cache_write_keeps_the_reply_and_counts_the_call(fake, tmp_path, full_cache, caplog):
    ep = fake_endpoints(fake.base_url)["answerer"]
    client = LLMClient(ep, cache=CallCache(tmp_path / "cache"))
    assert client.chat(HELLO).text == "fake answer"
    assert client.chat(HELLO).text == "fake answer"  # not cached: asked again, and counted again
    usage = client.meter.snapshot()["answerer"]
    assert usage.calls == 2 and usage.cached_calls == 0 and usage.prompt_tokens > 0
    assert len(fake.chat_requests()) == 2
    assert client.cache_write_failures == 2
    warned = [r.getMessage() for r in caplog.records if "cache write" in r.getMessage()]
    assert len(warned) == 1 and "No space left on device" in warned[0] and str(tmp_path / "cache") in warned[0]


def test_a_failed_embedding_cache_write_keeps_the_vectors(fake, tmp_path, full_cache):
    ep = fake_endpoints(fake.base_url)["answerer"]
    client = LLMClient(ep, cache=CallCache(tmp_path / "cache"))
    rows = client.embed(["a text", "another"])
    assert rows.shape[0] == 2
    assert client.meter.snapshot()["answerer"].calls == 1 and client.cache_write_failures == 2


def test_a_run_with_a_full_cache_has_no_errors_and_counts_every_request(tmp_path, full_cache):
    from inmind_exp.plan.plan import plan_config
    from inmind_exp.run.driver import run_plan
    from inmind_exp.exec.executor import InProcessExecutor
    from inmind_exp.display.progress import Spend
    from inmind_exp.run.resources import Resources
    from tests.fake_openai import FakeOpenAI
    from tests.exec.test_runner_ray import compose

    with FakeOpenAI() as fake:
        cfg = compose(tmp_path, fake.base_url, "system=backbone", "embedding=bm25")
        plan = plan_config(cfg, tmp_path / "root", tmp_path / "job")
        result = run_plan(plan, executor=InProcessExecutor(), resources=Resources())
        requests = len(fake.chat_requests())
    assert result.records and not any(r.error for r in result.records)
    spend = Spend.of([r.usage for r in result.records], {}, {})
    assert spend.paid_calls == requests > 0 and spend.cached_calls == 0
