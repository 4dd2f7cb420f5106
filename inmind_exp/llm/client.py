"""The one LLM client every caller uses: the real ``openai`` client wrapped with cache, retries, limits and accounting.

Systems and judges call ``chat`` / ``chat_json`` / ``embed`` and never retry, cache or count tokens themselves.
The openai client's own retries are off (``max_retries=0``); tenacity does the retrying here.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
import openai
import tenacity

from inmind_exp.errors import JSONReplyError
from inmind_exp.llm.cache import CallCache, cache_key
from inmind_exp.llm.endpoint import Endpoint
from inmind_exp.llm.limits import Limiter, limited
from inmind_exp.llm.retry import LLMCallError, backoff_seconds, is_retryable
from inmind_exp.llm.usage import UsageMeter
from inmind_exp.records import Message

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Completion:
    """One chat completion, whether fresh or from the cache (``cached``)."""

    text: str
    tool_calls: tuple[dict[str, Any], ...] = ()
    finish_reason: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    model: str = ""
    logprobs: list[dict[str, Any]] | None = None
    cached: bool = False
    latency_s: float = 0.0
    key: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def to_cache(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "tool_calls": list(self.tool_calls),
            "finish_reason": self.finish_reason,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "model": self.model,
            "logprobs": self.logprobs,
            "latency_s": self.latency_s,
            "extra": self.extra,
        }


def _estimate_tokens(messages: Sequence[dict[str, Any]], max_tokens: int | None) -> int:
    return len(json.dumps(messages)) // 4 + (max_tokens or 0)


class LLMClient:
    """Calls one role's endpoint. ``sample`` separates repeated samples of the same prompt in the cache."""

    def __init__(
        self,
        endpoint: Endpoint,
        *,
        cache: CallCache | None = None,
        limiter: Limiter | None = None,
        meter: UsageMeter | None = None,
    ) -> None:
        self.endpoint = endpoint
        self.role = endpoint.role
        self.cache = cache
        self.limiter = limiter
        self.meter = meter or UsageMeter()
        self._client: openai.OpenAI | None = None
        self.http_calls = 0

    @property
    def client(self) -> openai.OpenAI:
        if self._client is None:
            self._client = openai.OpenAI(
                base_url=self.endpoint.base_url,
                api_key=self.endpoint.api_key(),
                max_retries=0,
                timeout=self.endpoint.timeout_s,
            )
        return self._client

    # -- chat -------------------------------------------------------------------------------------------------
    def chat(
        self,
        messages: Sequence[Message],
        *,
        temperature: float | None | type[...] = ...,
        max_tokens: int | None | type[...] = ...,
        top_p: float | None | type[...] = ...,
        response_format: dict[str, Any] | None = None,
        tools: Sequence[dict[str, Any]] | None = None,
        tool_choice: str | dict[str, Any] | None = None,
        logprobs: bool = False,
        top_logprobs: int | None = None,
        stop: Sequence[str] | None = None,
        sample: int = 0,
    ) -> Completion:
        """One chat completion; parameters left as ``...`` take the role's configured defaults. On a ``reasoning``
        endpoint temperature, top_p and logprobs are never sent (the completion's ``logprobs`` is then None: callers
        that gate on logprobs fall back and record it)."""
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
        if ep.reasoning:  # what reasoning-model APIs refuse with HTTP 400; logprobs come back as None
            for k in ("temperature", "top_p", "logprobs", "top_logprobs", "max_tokens"):
                params.pop(k, None)
            params["max_completion_tokens"] = ep.max_tokens if max_tokens is ... else max_tokens
        params = {k: v for k, v in params.items() if v is not None}
        wire = [m.to_openai() for m in messages]
        key = cache_key(
            {"kind": "chat", "endpoint": ep.identity, "messages": wire, "params": params,
             "extra_body": ep.extra_body, "sample": sample}
        )
        if self.cache is not None:
            hit = self.cache.get("chat", key)
            if hit is not None:
                self.meter.add(self.role, hit["prompt_tokens"], hit["completion_tokens"], cached=True)
                return _completion_from(hit, cached=True, key=key)
        completion = self._call_with_retries(
            lambda: self._chat_once(wire, params), _estimate_tokens(wire, params.get(ep.max_tokens_param)), key
        )
        if self.cache is not None:
            self.cache.put("chat", key, completion.to_cache())
        self.meter.add(self.role, completion.prompt_tokens, completion.completion_tokens, cached=False)
        return completion

    def _chat_once(self, wire: list[dict[str, Any]], params: dict[str, Any]) -> Completion:
        t0 = time.perf_counter()
        kwargs = dict(params)
        if self.endpoint.extra_body:
            kwargs["extra_body"] = self.endpoint.extra_body
        resp = self.client.chat.completions.create(model=self.endpoint.model, messages=wire, **kwargs)
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
            lp = [
                {"token": t.token, "logprob": t.logprob,
                 "top": [{"token": a.token, "logprob": a.logprob} for a in (t.top_logprobs or [])]}
                for t in choice.logprobs.content
            ]
        usage = resp.usage
        return Completion(
            text=msg.content or "",
            tool_calls=tool_calls,
            finish_reason=choice.finish_reason,
            prompt_tokens=getattr(usage, "prompt_tokens", 0) or 0,
            completion_tokens=getattr(usage, "completion_tokens", 0) or 0,
            model=resp.model or self.endpoint.model,
            logprobs=lp,
            latency_s=latency,
            extra={"system_fingerprint": getattr(resp, "system_fingerprint", None)},
        )

    def chat_json(
        self,
        messages: Sequence[Message],
        *,
        attempts: int = 3,
        validate: Callable[[dict[str, Any]], str | None] | None = None,
        **kwargs: Any,
    ) -> tuple[dict[str, Any], Completion]:
        """Ask for a JSON object; on an unparseable or invalid reply (``validate`` returns a complaint), show the
        model its reply and ask again, which is a new prompt and so a new cache key."""
        convo = list(messages)
        last_raw = ""
        for _ in range(max(1, attempts)):
            comp = self.chat(convo, response_format={"type": "json_object"}, **kwargs)
            last_raw = comp.text
            try:
                obj = parse_json_object(comp.text)
                problem = validate(obj) if validate else None
                if problem:
                    raise ValueError(problem)
                return obj, comp
            except ValueError as e:
                convo = list(messages) + [
                    Message("assistant", comp.text),
                    Message("user", f"That reply was not a valid JSON object ({e}). Reply again with only the JSON object."),
                ]
        raise JSONReplyError(f"role '{self.role}': no valid JSON object after {attempts} attempt(s)", raw=last_raw)

    # -- embeddings -------------------------------------------------------------------------------------------
    def embed(self, texts: Sequence[str], *, dimensions: int | None = None, batch_size: int = 64) -> np.ndarray:
        """Embeddings through the API, cached per text; returns float32 rows in input order."""
        ep = self.endpoint
        keys = [
            cache_key({"kind": "embed", "endpoint": ep.identity, "text": t, "dimensions": dimensions}) for t in texts
        ]
        out: list[np.ndarray | None] = [None] * len(texts)
        missing: list[int] = []
        for i, k in enumerate(keys):
            hit = self.cache.get("embed", k) if self.cache is not None else None
            if hit is not None:
                out[i] = np.asarray(hit["vector"], dtype=np.float32)
                self.meter.add(self.role, hit.get("tokens", 0), 0, cached=True)
            else:
                missing.append(i)
        for start in range(0, len(missing), batch_size):
            idx = missing[start : start + batch_size]
            batch = [texts[i] for i in idx]
            vectors, tokens = self._call_with_retries(
                lambda: self._embed_once(batch, dimensions), sum(len(t) // 4 for t in batch), keys[idx[0]]
            )
            per = tokens // max(1, len(batch))
            for i, v in zip(idx, vectors):
                out[i] = v
                if self.cache is not None:
                    self.cache.put("embed", keys[i], {"vector": v.tolist(), "tokens": per})
            self.meter.add(self.role, tokens, 0, cached=False)
        return np.vstack(out).astype(np.float32) if texts else np.zeros((0, dimensions or 0), dtype=np.float32)

    def _embed_once(self, batch: list[str], dimensions: int | None) -> tuple[list[np.ndarray], int]:
        kwargs: dict[str, Any] = {"dimensions": dimensions} if dimensions else {}
        resp = self.client.embeddings.create(model=self.endpoint.model, input=batch, **kwargs)
        data = sorted(resp.data, key=lambda d: d.index)
        if len(data) != len(batch):
            raise LLMCallError(f"role '{self.role}': asked for {len(batch)} embeddings, got {len(data)}")
        tokens = getattr(resp.usage, "prompt_tokens", 0) or 0
        return [np.asarray(d.embedding, dtype=np.float32) for d in data], tokens

    # -- retries ----------------------------------------------------------------------------------------------
    def _call_with_retries(self, fn: Callable[[], Any], est_tokens: int, key: str) -> Any:
        ep = self.endpoint

        def once() -> Any:
            with limited(self.limiter, ep.limit_key, est_tokens, ep.max_concurrency, ep.rpm, ep.tpm):
                self.http_calls += 1
                return fn()

        retrying = tenacity.Retrying(
            stop=tenacity.stop_after_attempt(ep.max_attempts),
            wait=lambda rs: backoff_seconds(
                rs.attempt_number, rs.outcome.exception() if rs.outcome else None, ep.backoff_initial_s, ep.backoff_max_s
            ),
            retry=tenacity.retry_if_exception(is_retryable),
            before_sleep=lambda rs: log.warning(
                "role %s: %s, retrying (attempt %d/%d)", self.role, type(rs.outcome.exception()).__name__,
                rs.attempt_number, ep.max_attempts,
            ),
            reraise=True,
        )
        try:
            return retrying(once)
        except LLMCallError:
            raise
        except openai.OpenAIError as e:
            status = getattr(e, "status_code", None)
            what = f"HTTP {status}" if status else type(e).__name__
            raise LLMCallError(
                f"role '{self.role}' ({ep.base_url}, model {ep.model}): {what} after "
                f"{'retries' if is_retryable(e) else 'a non-retryable error'}: {_short(e)}"
            ) from e


def _short(e: BaseException, n: int = 300) -> str:
    s = str(e)
    return s if len(s) <= n else s[:n] + "…"


def _completion_from(d: dict[str, Any], cached: bool, key: str) -> Completion:
    return Completion(
        text=d["text"],
        tool_calls=tuple(d.get("tool_calls") or ()),
        finish_reason=d.get("finish_reason"),
        prompt_tokens=d.get("prompt_tokens", 0),
        completion_tokens=d.get("completion_tokens", 0),
        model=d.get("model", ""),
        logprobs=d.get("logprobs"),
        cached=cached,
        latency_s=d.get("latency_s", 0.0),
        key=key,
        extra=d.get("extra", {}),
    )


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
