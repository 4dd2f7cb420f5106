"""LLM and embedding access: a provider (``provider``: the openai wire format and its errors) under one wrapper
(``model.Model``: cache, limits, retries, usage), one ``LLMClient`` per role, and ``Models``, the three roles."""

from __future__ import annotations

from dataclasses import dataclass

from inmind_exp.errors import EndpointError, JSONReplyError, LLMCallError
from inmind_exp.llm.cache import CallCache, cache_key
from inmind_exp.llm.endpoint import ROLES, Endpoint
from inmind_exp.llm.limits import Limiter, LocalLimiter
from inmind_exp.llm.model import CallPolicy, LLMClient, Model, parse_json_object
from inmind_exp.llm.provider import Completion, OpenAIProvider
from inmind_exp.llm.usage import UsageMeter


@dataclass
class Models:
    """The three role clients a task uses; they share one usage meter so a task's usage is one snapshot diff."""

    answerer: LLMClient
    judge: LLMClient
    memory: LLMClient
    meter: UsageMeter

    @classmethod
    def build(
        cls, endpoints: dict[str, Endpoint], cache: CallCache | None, limiter: Limiter | None = None
    ) -> "Models":
        meter = UsageMeter()
        clients = {r: LLMClient(endpoints[r], cache=cache, limiter=limiter, meter=meter) for r in ROLES}
        return cls(meter=meter, **clients)

    def http_calls(self) -> int:
        return sum(c.http_calls for c in (self.answerer, self.judge, self.memory))


__all__ = [
    "CallCache", "cache_key", "EndpointError", "JSONReplyError", "LLMCallError", "ROLES", "Endpoint", "Limiter",
    "LocalLimiter", "CallPolicy", "LLMClient", "Model", "parse_json_object", "Completion", "OpenAIProvider",
    "UsageMeter", "Models",
]
