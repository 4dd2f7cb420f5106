"""LLM and embedding access: a provider (``provider``: the openai wire format and its errors) under one wrapper
(``model.Model``: cache, limits, retries, usage), one ``LLMClient`` per role, and ``Models``, the three roles.

Names are imported on first use (PEP 562), so that a process needing only the cache, the limits or the cluster
services (``services``) does not import the openai client (~1 s)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from inmind_exp.lazy import lazy_names
from inmind_exp.llm.usage import UsageMeter

if TYPE_CHECKING:  # Models' annotations (the names themselves are imported on first use, below)
    from inmind_exp.llm.cache import CallCache
    from inmind_exp.llm.endpoint import Endpoint
    from inmind_exp.llm.limits import Limiter
    from inmind_exp.llm.model import LLMClient

#: each public name and the submodule it comes from
_LAZY = {
    "CallCache": "inmind_exp.llm.cache", "cache_key": "inmind_exp.llm.cache",
    "EndpointError": "inmind_exp.errors", "JSONReplyError": "inmind_exp.errors", "LLMCallError": "inmind_exp.errors",
    "ROLES": "inmind_exp.llm.endpoint", "Endpoint": "inmind_exp.llm.endpoint",
    "Limiter": "inmind_exp.llm.limits", "LocalLimiter": "inmind_exp.llm.limits",
    "CallPolicy": "inmind_exp.llm.model", "LLMClient": "inmind_exp.llm.model", "Model": "inmind_exp.llm.model",
    "parse_json_object": "inmind_exp.llm.model",
    "Completion": "inmind_exp.llm.provider", "OpenAIProvider": "inmind_exp.llm.provider",
}
__getattr__ = lazy_names(globals(), _LAZY)


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
        from inmind_exp.llm.endpoint import ROLES
        from inmind_exp.llm.model import LLMClient

        meter = UsageMeter()
        clients = {r: LLMClient(endpoints[r], cache=cache, limiter=limiter, meter=meter) for r in ROLES}
        return cls(meter=meter, **clients)

    def http_calls(self) -> int:
        return sum(c.http_calls for c in (self.answerer, self.judge, self.memory))


__all__ = [*_LAZY, "UsageMeter", "Models"]
