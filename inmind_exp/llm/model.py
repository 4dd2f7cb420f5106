"""The one model wrapper every caller uses: over a provider (wire format only) it applies, in this order, the call
cache, the endpoint's concurrency and rate limits, retries with backoff, and usage accounting, to chat completions
and embeddings alike. Systems and judges call ``chat`` / ``chat_json`` / ``embed`` and never retry, cache or count
tokens themselves; the local MiniLM encoder is a provider under the same wrapper (``inmind_exp.llm.embed``).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, fields, replace
from typing import Any, Callable, Sequence

import numpy as np
import tenacity

from inmind_exp.errors import JSONReplyError, LLMCallError
from inmind_exp.llm.cache import CallCache, cache_key, is_count
from inmind_exp.llm.endpoint import Endpoint
from inmind_exp.llm.limits import Limiter, LimitRequest, limited
from inmind_exp.llm.provider import Completion, OpenAIProvider
from inmind_exp.llm.retry import backoff_seconds
from inmind_exp.llm.usage import UsageMeter
from inmind_exp.records import Message
from inmind_exp.safety.redact import scrub_obj

log = logging.getLogger(__name__)

#: cache directories whose failed write this process has logged (once each: every task would say it again)
_WARNED_CACHE_WRITE: set[str] = set()


@dataclass(frozen=True)
class CallPolicy:
    """Limits and retries for one provider: ``limit_key`` None means unlimited, ``max_attempts`` 1 means no retry."""

    limit_key: str | None = None
    max_concurrency: int = 1
    rpm: float | None = None
    tpm: float | None = None
    max_attempts: int = 1
    backoff_initial_s: float = 1.0
    backoff_max_s: float = 60.0

    @classmethod
    def of(cls, ep: Endpoint) -> "CallPolicy":
        """The endpoint's policy: each field is the endpoint's value of the same name (its defaults here are for a
        provider without an endpoint, a local encoder: unlimited, no retry)."""
        return cls(**{f.name: getattr(ep, f.name) for f in fields(cls)})


class Model:
    """Cache → limit → retry → meter around ``provider``. ``memo`` keeps embeddings of this process in memory too
    (for a local encoder, whose calls are not metered anyway)."""

    def __init__(self, provider: Any, policy: CallPolicy, *, role: str, cache: CallCache | None = None,
                 limiter: Limiter | None = None, meter: UsageMeter | None = None, memo: bool = False) -> None:
        self.provider = provider
        self.policy = policy
        self.role = role
        self.cache = cache
        self.limiter = limiter
        self.meter = meter or UsageMeter()
        self.http_calls = 0
        self.cache_write_failures = 0
        #: a scope added to every chat call's cache key (``run.cache_scope=task``: the task id), None: shared
        self.scope: str | None = None
        self._memo: dict[str, np.ndarray] | None = {} if memo else None

    # -- chat -------------------------------------------------------------------------------------------------
    def chat(self, messages: Sequence[Message], *, sample: int | str = 0,
             accept: Callable[[str], bool] | None = None, **kwargs: Any) -> Completion:
        """One chat completion; generation parameters left out take the role's configured defaults (see
        ``OpenAIProvider.chat_params``). ``sample`` separates repeated samples of the same prompt in the cache.
        ``accept`` judges a stored reply's text: one it refuses (a reply its caller could not parse) is never
        served from the cache but asked again, and the new reply replaces it."""
        params = self.provider.chat_params(**kwargs)
        wire = [m.to_openai() for m in messages]
        key = cache_key({**self.provider.chat_key(wire, params, sample), **({"scope": self.scope} if self.scope else {})})
        if self.cache is None:
            return self._paid_chat(wire, params, key)[0]

        def usable(hit: Any) -> bool:
            return hit is not None and (accept is None or accept(hit["text"]))

        hit = self._get("chat", key)
        if not usable(hit):
            with self.cache.flights.claim("chat", key) as flight:
                if flight.leader:
                    completion, stored = self._paid_chat(wire, params, key)
                    flight.publish(stored)
                    return completion
                hit = flight.value  # the same request, sent by a task running at the same time: its reply
                if not usable(hit):  # its call failed (or outlasted the wait, or was refused): this caller asks
                    return self._paid_chat(wire, params, key)[0]
        self.meter.add(self.role, hit["prompt_tokens"], hit["completion_tokens"], cached=True)
        self.meter.finished(self.role, hit.get("finish_reason"), _prompt_text(wire))
        return self._served(Completion.from_cache(hit, key))

    def _paid_chat(self, wire: list[dict[str, Any]], params: dict[str, Any],
                   key: str) -> tuple[Completion, dict[str, Any]]:
        """One paid chat call: the completion (token counts made valid, ``_counts``) and the entry cached for it,
        redacted: an endpoint may echo the key it was sent inside a normal reply, and the cache is on disk."""
        completion = self._call(lambda: self.provider.chat(wire, params), self.provider.estimate_tokens(wire, params))
        prompt_tokens, completion_tokens = self._counts(completion.prompt_tokens, completion.completion_tokens)
        if (prompt_tokens, completion_tokens) != (completion.prompt_tokens, completion.completion_tokens):
            completion = replace(completion, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens)
        self.meter.add(self.role, prompt_tokens, completion_tokens, cached=False,  # paid: counted
                       provider_cached=completion.provider_cached_tokens, reasoning=completion.reasoning_tokens)
        self.meter.finished(self.role, completion.finish_reason, _prompt_text(wire))
        stored = scrub_obj(completion.to_cache())
        self._store("chat", key, stored)
        return self._served(completion), stored

    def _served(self, completion: Completion) -> Completion:
        """Note the model the endpoint reported for ``completion`` and the endpoint's host (``UsageMeter.served``)."""
        ep = getattr(self.provider, "endpoint", None)
        self.meter.served(self.role, completion.model, ep.host if ep is not None else "")
        return completion

    def _counts(self, *counts: Any) -> tuple[int, ...]:
        """Token counts as the cache accepts them (``is_count``): one the endpoint sent negative or not an integer is
        0, noted on the meter as a ``bad_usage`` fault (cached as it came, the entry was refused on every read and the
        call paid again on every rerun)."""
        bad = [c for c in counts if not is_count(c)]
        if not bad:
            return tuple(counts)
        self.meter.note(self.role, "bad_usage", f"token count(s) {', '.join(map(repr, bad))} from the endpoint, "
                        f"counted as 0")
        return tuple(c if is_count(c) else 0 for c in counts)

    def chat_json(self, messages: Sequence[Message], *, attempts: int = 3,
                  validate: Callable[[dict[str, Any]], str | None] | None = None, json_mode: bool = True,
                  parse: Callable[[str], dict[str, Any]] | None = None, reask_failed: bool = False,
                  sample: int = 0, **kwargs: Any) -> tuple[dict[str, Any], Completion]:
        """Ask for a JSON object, up to ``attempts`` times. ``json_mode`` asks for JSON mode (``response_format``)
        and, after an unparseable or invalid reply (``validate`` returns a complaint), shows the model its reply
        with a one-line repair request; without it every attempt sends the same messages. An attempt that would
        repeat an earlier attempt's request is a new sample (its own cache key), so every attempt reaches the
        endpoint once and a rerun replays the same attempts from the cache. ``reask_failed`` (judges) goes further:
        a cached reply that did not parse is never served (``chat``'s ``accept``), so a rerun asks a failed attempt
        again. ``parse`` turns a reply's text into the object (``parse_json_object`` by default); ValueError means
        it did not parse."""
        read = parse or parse_json_object

        def check(text: str) -> dict[str, Any]:
            obj = read(text)
            problem = validate(obj) if validate else None
            if problem:
                raise ValueError(problem)
            return obj

        def parses(text: str) -> bool:
            try:
                check(text)
            except ValueError:
                return False
            return True

        if json_mode:
            kwargs["response_format"] = {"type": "json_object"}
        convo = list(messages)
        sent: list[list[Message]] = []
        last_raw = ""
        for _ in range(max(1, attempts)):
            repeat = sent.count(convo)  # a repeated request: its own cache key, apart from every other sample's
            comp = self.chat(convo, sample=sample if not repeat else f"{sample}/repeat{repeat}",
                             accept=parses if reask_failed else None, **kwargs)
            sent.append(convo)
            last_raw = comp.text
            try:
                return check(comp.text), comp
            except ValueError as e:
                if json_mode:
                    convo = list(messages) + [
                        Message("assistant", comp.text),
                        Message("user", f"That reply was not a valid JSON object ({e}). Reply again with only the JSON object."),
                    ]
        raise JSONReplyError(f"role '{self.role}': no valid JSON object after {attempts} attempt(s)", raw=last_raw)

    # -- embeddings -------------------------------------------------------------------------------------------
    def embed(self, texts: Sequence[str], *, dimensions: int | None = None, batch_size: int | None = 64) -> np.ndarray:
        """Float32 rows in input order, cached per text; the misses go to the provider ``batch_size`` at a time
        (None: all in one call)."""
        keys = [cache_key(self.provider.embed_key(t, dimensions)) for t in texts]
        out: list[np.ndarray | None] = [None] * len(texts)
        missing: list[int] = []
        for i, k in enumerate(keys):
            if self._memo is not None and k in self._memo:
                out[i] = self._memo[k]
                continue
            hit = self._get("embed", k) if self.cache is not None else None
            if hit is not None:
                out[i] = self._remember(k, np.asarray(hit["vector"], dtype=np.float32))
                self.meter.add(self.role, hit.get("tokens", 0), 0, cached=True)
            else:
                missing.append(i)
        step = batch_size or max(1, len(missing))
        for start in range(0, len(missing), step):
            idx = missing[start : start + step]
            batch = [texts[i] for i in idx]
            vectors, tokens = self._call(lambda: self.provider.embed(batch, dimensions), sum(len(t) // 4 for t in batch))
            (tokens,) = self._counts(tokens)
            per = tokens // max(1, len(batch))
            self.meter.add(self.role, tokens, 0, cached=False)
            for i, v in zip(idx, vectors):
                out[i] = self._remember(keys[i], v)
                self._store("embed", keys[i], {"vector": v.tolist(), "tokens": per})
        return np.vstack(out).astype(np.float32) if texts else np.zeros((0, dimensions or 0), dtype=np.float32)

    def _get(self, kind: str, key: str) -> Any | None:
        """The cache's entry; one it found unusable (``CallCache.invalid_here``) is noted on the meter."""
        assert self.cache is not None
        hit = self.cache.get(kind, key)
        if hit is None and getattr(self.cache, "invalid_here", None) and self.cache.invalid_here():
            self.meter.note(self.role, "invalid_cache_entry", f"unusable {kind} cache entry {key[:12]}..., asked again")
        return hit

    def _store(self, kind: str, key: str, value: Any) -> None:
        """Write a paid reply to the cache. A failed write (a full disk, a lost cache service) only costs a later
        cache hit: the reply is kept for its caller and already counted, since the call was paid. The first failure
        of a cache directory in this process is logged with its cause; ``cache_write_failures`` counts them all."""
        if self.cache is None:
            return
        try:
            self.cache.put(kind, key, value)
        except Exception as e:  # noqa: BLE001 - the cache is an optimisation; the paid result must not be lost
            self.cache_write_failures += 1
            where = getattr(self.cache, "dir", None) or "the cluster cache"
            if str(where) not in _WARNED_CACHE_WRITE:
                _WARNED_CACHE_WRITE.add(str(where))
                log.warning("role %s: cache write to %s failed (%s: %s); the reply is used but not cached",
                            self.role, where, type(e).__name__, e)

    def _remember(self, key: str, v: np.ndarray) -> np.ndarray:
        if self._memo is not None:
            self._memo[key] = v
        return v

    # -- limits and retries -----------------------------------------------------------------------------------
    def _call(self, fn: Callable[[], Any], est_tokens: int) -> Any:
        p = self.policy

        def once() -> Any:
            if p.limit_key is None:
                self.http_calls += 1
                return fn()
            with limited(self.limiter, LimitRequest(p.limit_key, est_tokens, p.max_concurrency, p.rpm, p.tpm)):
                self.http_calls += 1
                return fn()

        retrying = tenacity.Retrying(
            stop=tenacity.stop_after_attempt(p.max_attempts),
            wait=lambda rs: backoff_seconds(
                rs.attempt_number, rs.outcome.exception() if rs.outcome else None, p.backoff_initial_s, p.backoff_max_s
            ),
            retry=tenacity.retry_if_exception(self.provider.is_retryable),
            before_sleep=lambda rs: log.warning(
                "role %s: %s, retrying (attempt %d/%d)", self.role, type(rs.outcome.exception()).__name__,
                rs.attempt_number, p.max_attempts,
            ),
            reraise=True,
        )
        try:
            return retrying(once)
        except LLMCallError:
            raise
        except Exception as e:
            err = self.provider.failure(e, self.provider.is_retryable(e))
            if err is None:
                raise
            # not chained: the API error's text is the endpoint's body, which may echo the key (err is redacted)
            raise err from None


class LLMClient(Model):
    """One role's endpoint behind the wrapper: the ``openai`` provider with the endpoint's limits and retries."""

    def __init__(self, endpoint: Endpoint, *, cache: CallCache | None = None, limiter: Limiter | None = None,
                 meter: UsageMeter | None = None) -> None:
        super().__init__(OpenAIProvider(endpoint), CallPolicy.of(endpoint), role=endpoint.role, cache=cache,
                         limiter=limiter, meter=meter)
        self.endpoint = endpoint


def parse_json_object(text: str) -> dict[str, Any]:
    """Parse a JSON object from a reply, tolerating a surrounding code fence or prose; ValueError if none."""
    s = text.strip()
    if s.startswith("```"):
        s = s.strip("`")
        s = s[s.find("\n") + 1 :] if "\n" in s else s
    try:
        obj = json.loads(s)
    except json.JSONDecodeError:
        start, end = s.find("{"), s.rfind("}")
        if start < 0 or end <= start:
            raise ValueError("no JSON object found") from None
        try:
            obj = json.loads(s[start : end + 1])
        except json.JSONDecodeError as e:
            raise ValueError(f"invalid JSON: {e.msg}") from None
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
    return obj


def _prompt_text(wire: Sequence[dict[str, Any]]) -> str:
    """The text of a request's messages (what a cut reply's fault is matched against)."""
    return "\n".join(str(m.get("content") or "") for m in wire)
