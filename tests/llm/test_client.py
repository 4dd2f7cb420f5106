"""The LLM client against the fake OpenAI-compatible server: retries, Retry-After, timeouts, permanent errors,
the persistent cache (zero requests on a rerun, sample index, concurrent writers) and JSON replies."""

from __future__ import annotations

import multiprocessing as mp
import time
from dataclasses import replace

import pytest

from inmind_exp.llm import CallCache, JSONReplyError, LLMCallError, LLMClient, Models
from inmind_exp.records import msgs
from tests.conftest import fake_endpoints
from tests.fake_openai import Fault

HELLO = msgs(("user", "hello"))


def client(fake, tmp_path, cache=True, **kw) -> LLMClient:
    ep = fake_endpoints(fake.base_url, **kw)["answerer"]
    return LLMClient(ep, cache=CallCache(tmp_path / "cache") if cache else None)


def test_retries_429_honouring_retry_after(fake, tmp_path):
    c = client(fake, tmp_path, backoff_initial_s=5.0, backoff_max_s=5.0)
    fake.fail_next(Fault(status=429, headers={"Retry-After": "0.3"}))
    t0 = time.perf_counter()
    comp = c.chat(HELLO)
    waited = time.perf_counter() - t0
    assert comp.text == "fake answer"
    assert len(fake.chat_requests()) == 2
    # waited what the server asked (0.3 s), not the 5 s exponential backoff
    assert 0.25 <= waited < 3.0


@pytest.mark.parametrize("asked", ["nan", "inf", "-5", "-inf", "soon"])
def test_retry_after_not_finite_or_negative_is_ignored(fake, tmp_path, asked):
    """A 429 whose Retry-After is nan/inf/negative takes the usual backoff (it raised inside tenacity's sleep)."""
    c = client(fake, tmp_path, backoff_initial_s=0.01, backoff_max_s=0.05)
    fake.fail_next(Fault(status=429, headers={"Retry-After": asked, "retry-after-ms": asked}))
    t0 = time.perf_counter()
    assert c.chat(HELLO).text == "fake answer"
    assert len(fake.chat_requests()) == 2 and time.perf_counter() - t0 < 3.0


def test_retries_500_then_succeeds(fake, tmp_path):
    c = client(fake, tmp_path)
    fake.fail_next(Fault(status=500), Fault(status=503))
    assert c.chat(HELLO).text == "fake answer"
    assert len(fake.chat_requests()) == 3


def test_retries_timeout(fake, tmp_path):
    c = client(fake, tmp_path, timeout_s=0.5)
    fake.fail_next(Fault(status=0, delay_s=1.5))
    assert c.chat(HELLO).text == "fake answer"
    assert len(fake.chat_requests()) == 2


def test_persistent_failure_is_an_error_after_bounded_attempts(fake, tmp_path):
    c = client(fake, tmp_path, max_attempts=3)
    fake.fail_next(*[Fault(status=500)] * 5)
    with pytest.raises(LLMCallError, match="HTTP 500"):
        c.chat(HELLO)
    assert len(fake.chat_requests()) == 3


def test_non_retryable_error_fails_at_once(fake, tmp_path):
    c = client(fake, tmp_path)
    fake.fail_next(Fault(status=400, body={"error": {"message": "bad request"}}))
    with pytest.raises(LLMCallError, match="HTTP 400"):
        c.chat(HELLO)
    assert len(fake.chat_requests()) == 1


def test_cache_makes_rerun_free_and_records_hit(fake, tmp_path):
    c1 = client(fake, tmp_path)
    a = c1.chat(HELLO, max_tokens=50)
    assert not a.cached
    fake.reset_log()
    c2 = client(fake, tmp_path)  # a new process would build a new client over the same directory
    b = c2.chat(HELLO, max_tokens=50)
    assert b.cached and b.text == a.text
    assert fake.requests == []
    usage = c2.meter.snapshot()["answerer"]
    assert usage.cached_calls == 1 and usage.cached_prompt_tokens == a.prompt_tokens


def test_cache_key_covers_parameters_and_sample(fake, tmp_path):
    c = client(fake, tmp_path)
    c.chat(HELLO)
    c.chat(HELLO, temperature=0.7)
    c.chat(HELLO, temperature=0.7, sample=1)
    c.chat(HELLO, response_format={"type": "json_object"})
    c.chat(msgs(("user", "hello!")))
    other_model = LLMClient(replace(c.endpoint, model="other"), cache=c.cache)
    other_model.chat(HELLO)
    assert len(fake.chat_requests()) == 6
    c.chat(HELLO, temperature=0.7, sample=1)
    assert len(fake.chat_requests()) == 6


def _writer(directory: str, worker: int, n: int) -> None:
    cache = CallCache(directory)
    for i in range(n):
        cache.put("chat", f"{i:064x}", {"text": f"reply {i}", "worker": worker, "i": i, "pad": "x" * 2000})  # a valid chat entry


def test_concurrent_cache_writers_lose_nothing(tmp_path):
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(str(tmp_path), w, 200)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    cache = CallCache(tmp_path)
    assert cache.count("chat") == 200
    for i in range(200):
        v = cache.get("chat", f"{i:064x}")
        assert v is not None and v["i"] == i and len(v["pad"]) == 2000
    assert not list(tmp_path.rglob(".tmp-*"))


def test_chat_json_reasks_after_invalid_reply(fake, tmp_path):
    c = client(fake, tmp_path)
    replies = iter(["not json at all", '{"score": 1, "reason": "ok"}'])
    fake.add_rule("judge me", lambda body: next(replies))
    obj, comp = c.chat_json(msgs(("user", "judge me")), attempts=3)
    assert obj == {"score": 1, "reason": "ok"}
    reqs = fake.chat_requests()
    assert len(reqs) == 2 and reqs[0]["response_format"] == {"type": "json_object"}
    assert "not a valid JSON object" in reqs[1]["messages"][-1]["content"]


def test_chat_json_gives_up_with_raw_reply(fake, tmp_path):
    c = client(fake, tmp_path)
    fake.add_rule("judge me", "never json")
    with pytest.raises(JSONReplyError) as err:
        c.chat_json(msgs(("user", "judge me")), attempts=2)
    assert err.value.raw == "never json"
    assert len(fake.chat_requests()) == 2


def test_embeddings_cached_per_text(fake, tmp_path):
    c = client(fake, tmp_path)
    v1 = c.embed(["a cat", "a dog"])
    assert v1.shape == (2, 64)
    v2 = c.embed(["a dog", "a bird"])
    assert (v2[0] == v1[1]).all()
    embed_reqs = [r for r in fake.requests if r["path"].endswith("/embeddings")]
    assert [r["body"]["input"] for r in embed_reqs] == [["a cat", "a dog"], ["a bird"]]


def test_models_share_one_meter(fake, tmp_path):
    m = Models.build(fake_endpoints(fake.base_url), CallCache(tmp_path / "c"))
    m.answerer.chat(HELLO)
    m.judge.chat(msgs(("user", "judge")))
    snap = m.meter.snapshot()
    assert set(snap) == {"answerer", "judge"} and snap["answerer"].calls == 1


def test_missing_key_names_role_and_endpoint(fake, tmp_path, monkeypatch):
    monkeypatch.delenv("INMIND_TEST_KEY", raising=False)
    c = client(fake, tmp_path, api_key_env="INMIND_TEST_KEY")
    from inmind_exp.llm import EndpointError

    with pytest.raises(EndpointError, match=r"role 'answerer'.*INMIND_TEST_KEY.*127\.0\.0\.1"):
        c.chat(HELLO)


def test_repeated_attempts_are_new_requests_and_a_rerun_replays_them_unless_failures_are_reasked(fake, tmp_path):
    c = client(fake, tmp_path)
    fake.add_rule("judge me", "never json")
    with pytest.raises(JSONReplyError):  # the same messages three times: three requests, not one and two cache hits
        c.chat_json(msgs(("user", "judge me")), attempts=3, json_mode=False)
    assert len(fake.chat_requests()) == 3 and "response_format" not in fake.chat_requests()[0]
    fake.reset_log()
    with pytest.raises(JSONReplyError):  # a memory call's rerun replays its attempts: no call is paid twice
        c.chat_json(msgs(("user", "judge me")), attempts=3, json_mode=False)
    assert fake.chat_requests() == []
    fake.rules.clear()
    replies = iter(["still not", '{"score": 1}'])
    fake.add_rule("judge me", lambda body: next(replies))
    obj, _ = c.chat_json(msgs(("user", "judge me")), attempts=3, json_mode=False, reask_failed=True)
    assert obj == {"score": 1} and len(fake.chat_requests()) == 2  # a judge's rerun asks the failed attempts again
    fake.reset_log()
    assert c.chat_json(msgs(("user", "judge me")), attempts=3, json_mode=False)[0] == obj
    assert fake.chat_requests() == []  # the good reply is served: the failed first attempt, then the cached second


def test_a_roles_service_tier_is_sent_retried_when_refused_and_shares_the_cache(fake, tmp_path):
    """``llm.roles.memory.service_tier=flex``: the memory role's requests carry it, a lane's refusal (429, resource
    unavailable) is retried, and the same request in another lane is a cache hit (a lane is a price, not an answer)."""
    from omegaconf import OmegaConf

    from inmind_exp.config.settings import role_endpoints
    from tests.exec.test_runner_ray import compose

    cfg = compose(tmp_path, fake.base_url, "llm.roles.memory.service_tier=flex")
    eps = role_endpoints(OmegaConf.to_object(cfg.llm))  # type: ignore[arg-type]
    assert eps["memory"].service_tier == "flex" and eps["answerer"].service_tier is None
    flex = client(fake, tmp_path, service_tier="flex", backoff_initial_s=0.01)
    fake.fail_next(Fault(status=429, body={"error": {"message": "Resource unavailable", "type": "resource_unavailable"}}))
    assert flex.chat(HELLO).text == "fake answer"
    assert [b.get("service_tier") for b in fake.chat_requests()] == ["flex", "flex"]
    standard = client(fake, tmp_path)
    standard.chat(HELLO)
    assert len(fake.chat_requests()) == 2  # served from the cache the flex call filled
