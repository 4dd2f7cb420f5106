"""A cache entry of the wrong shape (valid JSON, a field missing) is a miss: the call is made again, the entry is
rewritten and the bad entry is counted; a truncated entry is a miss as before."""

from __future__ import annotations

import json

import numpy as np

from inmind_exp.llm import CallCache, LLMClient
from inmind_exp.records import msgs
from tests.conftest import fake_endpoints

HELLO = msgs(("user", "hello"))


def _only_entry(cache: CallCache, kind: str):
    (path,) = list((cache.dir / kind).glob("*/*.json"))
    return path


def test_chat_entry_without_text_is_a_miss_rewritten_and_counted(fake, tmp_path):
    ep = fake_endpoints(fake.base_url)["answerer"]
    cache = CallCache(tmp_path / "cache")
    assert LLMClient(ep, cache=cache).chat(HELLO).text == "fake answer"
    entry = _only_entry(cache, "chat")
    entry.write_text('{"prompt_tokens": 3, "completion_tokens": 2}')  # valid JSON, no "text"
    fake.reset_log()

    fresh = CallCache(tmp_path / "cache")
    comp = LLMClient(ep, cache=fresh).chat(HELLO)
    assert comp.text == "fake answer" and not comp.cached
    assert len(fake.chat_requests()) == 1  # asked the server again instead of failing
    assert fresh.invalid == {"chat": 1} and fresh.invalid_entries == 1
    fake.reset_log()
    again = LLMClient(ep, cache=CallCache(tmp_path / "cache")).chat(HELLO)
    assert again.cached and again.text == "fake answer" and fake.chat_requests() == []  # the entry was rewritten


def test_embedding_entry_without_vector_is_a_miss_rewritten_and_counted(fake, tmp_path):
    ep = fake_endpoints(fake.base_url)["answerer"]
    cache = CallCache(tmp_path / "cache")
    first = LLMClient(ep, cache=cache).embed(["a text"])
    _only_entry(cache, "embed").write_text('{"tokens": 2}')
    fresh = CallCache(tmp_path / "cache")
    second = LLMClient(ep, cache=fresh).embed(["a text"])
    np.testing.assert_allclose(first, second)
    assert fresh.invalid == {"embed": 1}
    assert CallCache(tmp_path / "cache").get("embed", _only_entry(cache, "embed").stem)["vector"]


def test_wrong_types_are_invalid_and_good_entries_are_not(tmp_path):
    cache = CallCache(tmp_path)
    good_chat = {"text": "hi", "tool_calls": [], "prompt_tokens": 1, "completion_tokens": 1}
    bad = {
        "chat": [{"text": None}, {"text": 5}, {"text": "x", "prompt_tokens": "many"}, {"text": "x", "tool_calls": "no"},
                 ["text"], "text"],
        "embed": [{"vector": []}, {"vector": "1,2"}, {"vector": [1.0, "x"]}, {"vector": [True]}, {"vector": [1.0], "tokens": -1}],
    }
    n = 0
    for kind, values in bad.items():
        for v in values:
            n += 1
            path = cache._path(kind, f"{n:064x}")  # written as a foreign writer would: put refuses these
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(v))
            assert cache.get(kind, f"{n:064x}") is None, (kind, v)
    assert cache.invalid == {"chat": 6, "embed": 5}
    cache.put("chat", "a" * 64, good_chat)
    cache.put("embed", "b" * 64, {"vector": [0.5, 1]})
    cache.put("other", "c" * 64, [1, 2])  # kinds without a schema accept any JSON
    assert cache.get("chat", "a" * 64) == good_chat and cache.get("embed", "b" * 64) == {"vector": [0.5, 1]}
    assert cache.get("other", "c" * 64) == [1, 2]
    assert cache.invalid_entries == 11


def test_truncated_entry_is_a_miss_and_counted(tmp_path):
    cache = CallCache(tmp_path)
    cache.put("chat", "d" * 64, {"text": "hello"})
    path = _only_entry(cache, "chat")
    path.write_text(path.read_text()[:5])
    assert cache.get("chat", "d" * 64) is None and cache.invalid == {"chat": 1}


def test_negative_token_counts_are_clamped_noted_and_cached(fake, tmp_path):
    """An endpoint reporting negative usage: the counts are taken as 0 with a ``bad_usage`` note, and the entry is
    cached in a shape the reader accepts (it was cached as sent, refused on read, and every rerun paid again)."""
    ep = fake_endpoints(fake.base_url)["answerer"]
    fake.usage = {"prompt_tokens": -7, "completion_tokens": -1, "total_tokens": -8}
    first = LLMClient(ep, cache=CallCache(tmp_path / "cache"))
    comp = first.chat(HELLO)
    assert (comp.prompt_tokens, comp.completion_tokens) == (0, 0) and comp.text == "fake answer"
    assert len(first.meter.notes("answerer")) == 1 and "-7" in first.meter.notes("answerer")[0][1]
    assert first.cache_write_failures == 0
    fake.reset_log()
    cache = CallCache(tmp_path / "cache")
    again = LLMClient(ep, cache=cache).chat(HELLO)
    assert again.cached and fake.chat_requests() == [] and cache.invalid_entries == 0


def test_put_refuses_what_get_would_refuse(tmp_path):
    import pytest

    cache = CallCache(tmp_path)
    with pytest.raises(ValueError):
        cache.put("chat", "e" * 64, {"text": "x", "prompt_tokens": -1})
    assert cache.count("chat") == 0


def test_an_unusable_entry_is_warned_about_by_its_file(tmp_path, caplog):
    import logging

    cache = CallCache(tmp_path)
    cache.put("chat", "f" * 64, {"text": "hello"})
    path = _only_entry(cache, "chat")
    path.write_bytes(b'{"text": "\xff')
    with caplog.at_level(logging.WARNING, logger="inmind_exp.llm.cache"):
        assert cache.get("chat", "f" * 64) is None
    assert f"cache entry {path} is unusable (UnicodeDecodeError)" in caplog.text
