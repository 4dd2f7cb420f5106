"""Resolved settings of one LLM role: where to call, which model, generation defaults, limits and retry policy."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import Any

from inmind_exp.errors import EndpointError
from inmind_exp.safety.redact import remember, strip_userinfo, without_userinfo

ROLES: tuple[str, ...] = ("answerer", "judge", "memory")


@dataclass(frozen=True)
class Endpoint:
    """One role's endpoint. ``cache_id`` names the endpoint in cache keys (stable across local-server ports).
    These defaults are also ``llm.*``'s: ``config.LLMConf`` takes each shared setting's default from here."""

    role: str
    base_url: str
    model: str
    api_key_env: str | None = None
    cache_id: str | None = None
    timeout_s: float = 300.0
    max_concurrency: int = 4
    rpm: float | None = None
    tpm: float | None = None
    max_attempts: int = 6
    backoff_initial_s: float = 1.0
    backoff_max_s: float = 60.0
    temperature: float | None = 0.0
    top_p: float | None = None
    max_tokens: int | None = 512
    max_tokens_param: str = "max_tokens"
    #: a reasoning model: no temperature, top_p or logprobs are sent, and the limit goes as max_completion_tokens
    reasoning: bool = False
    seed: int | None = None
    #: the provider's processing lane (OpenAI: ``flex`` at batch prices, slower, at times refused with a retryable
    #: 429); sent with each request, never part of a cache key (the same model answers in every lane)
    service_tier: str | None = None
    extra_body: dict[str, Any] = field(default_factory=dict)
    #: the whole call (connect + response) must end within this many seconds, else it is a retryable timeout
    deadline_s: float | None = 600.0
    #: a reply larger than this is an error for its task (``inmind_exp.llm.deadline``)
    max_response_bytes: int | None = 4 * 1024 * 1024

    @property
    def identity(self) -> str:
        """What distinguishes this endpoint's answers in the cache: the server and the model."""
        return f"{self.cache_id or self.base_url.rstrip('/')}|{self.model}"

    @property
    def host(self) -> str:
        """The server as records name it: ``host[:port]`` of the base URL, never its credentials or path."""
        from urllib.parse import urlsplit

        return urlsplit(without_userinfo(self.base_url)).netloc

    @property
    def limit_key(self) -> str:
        """Concurrency and rate limits are shared by every role that calls the same server."""
        return self.base_url.rstrip("/")

    def api_key(self) -> str:
        """The key from the environment (never stored in config or logs); a placeholder for keyless servers."""
        if not self.api_key_env:
            return "not-needed"
        key = os.environ.get(self.api_key_env)
        if not key:
            raise EndpointError(
                f"role '{self.role}': environment variable {self.api_key_env} is not set "
                f"(needed for {strip_userinfo(self.base_url)}, model {self.model})"
            )
        remember([key])  # from now on redacted wherever this process writes or prints it
        return key

    def with_base_url(self, base_url: str, cache_id: str | None = None) -> "Endpoint":
        return replace(self, base_url=base_url, cache_id=cache_id or self.cache_id)

    def public_dict(self) -> dict[str, Any]:
        """Settings safe to log: everything here is a name or a number, never a key."""
        return {k: v for k, v in self.__dict__.items() if k != "extra_body"}
