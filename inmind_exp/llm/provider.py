"""Providers speak one API's wire format and classify its errors, nothing else: no cache, limits, retries or
accounting (``llm.model.Model`` adds those). ``OpenAIProvider`` is the real ``openai`` client against any
OpenAI-compatible endpoint, with the client's own retries off (``max_retries=0``).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence

import numpy as np
import openai

from inmind_exp.errors import LLMCallError
from inmind_exp.llm.endpoint import Endpoint
from inmind_exp.llm.deadline import bounded_http_client, call_limits
from inmind_exp.llm.retry import MalformedReply, is_retryable
from inmind_exp.safety.redact import scrub, strip_userinfo


@dataclass(frozen=True)
class Completion:
    """One chat completion, whether fresh or from the cache (``cached``)."""

    text: str
    tool_calls: tuple[dict[str, Any], ...] = ()
    finish_reason: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    #: of ``prompt_tokens``, those the provider served from its own prompt cache (billed at its cached-input price)
    provider_cached_tokens: int = 0
    #: of ``completion_tokens``, the hidden reasoning tokens a reasoning model reported (billed as output)
    reasoning_tokens: int = 0
    model: str = ""
    logprobs: list[dict[str, Any]] | None = None
    cached: bool = False
    latency_s: float = 0.0
    key: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def to_cache(self) -> dict[str, Any]:
        return {
            "text": self.text, "tool_calls": list(self.tool_calls), "finish_reason": self.finish_reason,
            "prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens, "model": self.model,
            "provider_cached_tokens": self.provider_cached_tokens, "reasoning_tokens": self.reasoning_tokens,
            "logprobs": self.logprobs, "latency_s": self.latency_s, "extra": self.extra,
        }

    @classmethod
    def from_cache(cls, d: dict[str, Any], key: str) -> "Completion":
        return cls(
            text=d["text"], tool_calls=tuple(d.get("tool_calls") or ()), finish_reason=d.get("finish_reason"),
            prompt_tokens=d.get("prompt_tokens", 0), completion_tokens=d.get("completion_tokens", 0),
            provider_cached_tokens=d.get("provider_cached_tokens", 0), reasoning_tokens=d.get("reasoning_tokens", 0),
            model=d.get("model", ""),
            logprobs=d.get("logprobs"), cached=True, latency_s=d.get("latency_s", 0.0),
            key=key, extra=d.get("extra", {}),
        )


class EmbeddingProvider(Protocol):
    """What ``Model.embed`` needs: a cache identity per text, and one call for a batch of texts."""

    def embed_key(self, text: str, dimensions: int | None) -> dict[str, Any]: ...

    def embed(self, batch: list[str], dimensions: int | None) -> tuple[list[np.ndarray], int]:
        """Vectors in input order and the prompt tokens the call used."""

    def is_retryable(self, exc: BaseException) -> bool: ...

    def failure(self, exc: BaseException, retryable: bool) -> LLMCallError | None: ...


def _short(e: BaseException, n: int = 300) -> str:
    """The exception's text, redacted (an endpoint may echo the key it was sent) and cut to ``n`` characters."""
    s = scrub(str(e))
    return s if len(s) <= n else s[:n] + "…"

for _name in ("httpx", "httpx2"):  # their INFO line per request prints the URL, in every process that calls out
    logging.getLogger(_name).setLevel(logging.WARNING)

#: one ``openai`` client per (base URL, key, timeout) in this process, shared by every role client of every task
_CLIENTS: dict[tuple[str, str, float], openai.OpenAI] = {}
_CLIENTS_LOCK = threading.Lock()


def shared_client(base_url: str, api_key: str, timeout_s: float) -> openai.OpenAI:
    """This process's ``openai`` client of an endpoint, built on first use. Building one (its httpx pool, its
    resources) costs ~50 ms of CPU: a worker running many tasks, each with a client per role, built hundreds of
    them, and opened a connection per client. The client is safe to share between threads (httpx's pool is; the
    deadline and size bounds of ``bounded_http_client`` are per thread)."""
    key = (base_url, api_key, float(timeout_s))
    with _CLIENTS_LOCK:
        client = _CLIENTS.get(key)
        if client is None:
            client = _CLIENTS[key] = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0,
                                                   timeout=timeout_s, http_client=bounded_http_client())
        return client


class OpenAIProvider:
    """Chat completions and embeddings of one role's endpoint over the ``openai`` client (``shared_client``)."""

    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint
        self.role = endpoint.role
        self._client: openai.OpenAI | None = None

    @property
    def client(self) -> openai.OpenAI:
        if self._client is None:
            self._client = shared_client(self.endpoint.base_url, self.endpoint.api_key(), self.endpoint.timeout_s)
        return self._client

    def _request(self, fn: Any, what: str) -> Any:
        """One API call under the endpoint's deadline and response-size cap; a 200 whose body is not the API's
        JSON (``what``) is a ``MalformedReply`` naming the endpoint, retried like a 5xx."""
        ep = self.endpoint
        try:
            with call_limits(ep.deadline_s, ep.max_response_bytes):
                resp = fn()
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise MalformedReply(f"HTTP 200 with a body that is not JSON ({type(e).__name__})") from None
        if isinstance(resp, (str, bytes)) or not hasattr(resp, what):
            text = resp if isinstance(resp, str) else repr(type(resp).__name__)
            raise MalformedReply(f"HTTP 200 with a body that is not a {what} reply: {text[:120]!r}")
        return resp

    # -- chat -------------------------------------------------------------------------------------------------
    def chat_params(self, *, temperature: Any = ..., max_tokens: Any = ..., top_p: Any = ...,
                    response_format: dict[str, Any] | None = None, tools: Sequence[dict[str, Any]] | None = None,
                    tool_choice: str | dict[str, Any] | None = None, logprobs: bool = False,
                    top_logprobs: int | None = None, stop: Sequence[str] | None = None) -> dict[str, Any]:
        """The request's parameters; ``...`` takes the role's default. A ``reasoning`` endpoint gets no temperature,
        top_p or logprobs (which its API refuses with HTTP 400) and its limit as ``max_completion_tokens``."""
        ep = self.endpoint
        params: dict[str, Any] = {
            "temperature": ep.temperature if temperature is ... else temperature,
            "top_p": ep.top_p if top_p is ... else top_p,
            ep.max_tokens_param: ep.max_tokens if max_tokens is ... else max_tokens,
            "seed": ep.seed,
            "response_format": response_format,
            "tools": list(tools) if tools else None,
            "tool_choice": tool_choice,
            "logprobs": True if logprobs else None,
            "top_logprobs": top_logprobs if logprobs else None,
            "stop": list(stop) if stop else None,
        }
        if ep.reasoning:
            for k in ("temperature", "top_p", "logprobs", "top_logprobs", "max_tokens"):
                params.pop(k, None)
            params["max_completion_tokens"] = ep.max_tokens if max_tokens is ... else max_tokens
        return {k: v for k, v in params.items() if v is not None}

    def estimate_tokens(self, wire: list[dict[str, Any]], params: dict[str, Any]) -> int:
        """A rough token count for rate limiting: a quarter of the JSON's characters plus the completion limit."""
        return len(json.dumps(wire)) // 4 + (params.get(self.endpoint.max_tokens_param) or 0)

    def chat_key(self, wire: list[dict[str, Any]], params: dict[str, Any], sample: int | str) -> dict[str, Any]:
        return {"kind": "chat", "endpoint": self.endpoint.identity, "messages": wire, "params": params,
                "extra_body": self.endpoint.extra_body, "sample": sample}

    def chat(self, wire: list[dict[str, Any]], params: dict[str, Any]) -> Completion:
        t0 = time.perf_counter()
        kwargs = dict(params)
        if self.endpoint.service_tier:  # sent, but not in ``chat_key``: a lane changes the price, not the answer
            kwargs["service_tier"] = self.endpoint.service_tier
        if self.endpoint.extra_body:
            kwargs["extra_body"] = self.endpoint.extra_body
        resp = self._request(lambda: self.client.chat.completions.create(model=self.endpoint.model, messages=wire,
                                                                          **kwargs), "choices")
        latency = time.perf_counter() - t0
        if not resp.choices:
            raise LLMCallError(f"role '{self.role}': endpoint returned no choices")
        choice = resp.choices[0]
        msg = choice.message
        tool_calls = tuple(
            {"id": tc.id, "type": "function", "function": {"name": tc.function.name, "arguments": tc.function.arguments}}
            for tc in (msg.tool_calls or [])
        )
        lp = None
        if getattr(choice, "logprobs", None) is not None and choice.logprobs.content:
            lp = [{"token": t.token, "logprob": t.logprob,
                   "top": [{"token": a.token, "logprob": a.logprob} for a in (t.top_logprobs or [])]}
                  for t in choice.logprobs.content]
        usage = resp.usage
        return Completion(
            text=msg.content or "", tool_calls=tool_calls, finish_reason=choice.finish_reason,
            prompt_tokens=getattr(usage, "prompt_tokens", 0) or 0,
            completion_tokens=getattr(usage, "completion_tokens", 0) or 0,
            provider_cached_tokens=getattr(getattr(usage, "prompt_tokens_details", None), "cached_tokens", 0) or 0,
            reasoning_tokens=getattr(getattr(usage, "completion_tokens_details", None), "reasoning_tokens", 0) or 0,
            model=resp.model or self.endpoint.model, logprobs=lp, latency_s=latency,
            extra={"system_fingerprint": getattr(resp, "system_fingerprint", None)},
        )

    # -- embeddings -------------------------------------------------------------------------------------------
    def embed_key(self, text: str, dimensions: int | None) -> dict[str, Any]:
        return {"kind": "embed", "endpoint": self.endpoint.identity, "text": text, "dimensions": dimensions}

    def embed(self, batch: list[str], dimensions: int | None) -> tuple[list[np.ndarray], int]:
        kwargs: dict[str, Any] = {"dimensions": dimensions} if dimensions else {}
        resp = self._request(lambda: self.client.embeddings.create(model=self.endpoint.model, input=batch, **kwargs),
                             "data")
        data = sorted(resp.data, key=lambda d: d.index)
        if len(data) != len(batch):
            raise LLMCallError(f"role '{self.role}': asked for {len(batch)} embeddings, got {len(data)}")
        tokens = getattr(resp.usage, "prompt_tokens", 0) or 0
        return [np.asarray(d.embedding, dtype=np.float32) for d in data], tokens

    # -- errors -----------------------------------------------------------------------------------------------
    def is_retryable(self, exc: BaseException) -> bool:
        return is_retryable(exc)

    def failure(self, exc: BaseException, retryable: bool) -> LLMCallError | None:
        """The ``LLMCallError`` for an API error that ended the call (None: not an API error, let it propagate)."""
        if not isinstance(exc, (openai.OpenAIError, MalformedReply)):
            return None
        ep = self.endpoint
        status = getattr(exc, "status_code", None)
        what = f"HTTP {status}" if status else type(exc).__name__
        if isinstance(exc, openai.APITimeoutError):
            what = f"timeout (llm.timeout_s={ep.timeout_s}, llm.deadline_s={ep.deadline_s})"
        return LLMCallError(f"role '{self.role}' ({strip_userinfo(ep.base_url)}, model {ep.model}): {what} after "
                            f"{'retries' if retryable else 'a non-retryable error'}: {_short(exc)}")
