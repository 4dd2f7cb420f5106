"""Which LLM errors are worth retrying, and how long to wait: exponential backoff with jitter, honouring Retry-After."""

from __future__ import annotations

import random

import openai

from inmind_exp.errors import LLMCallError  # noqa: F401  (re-exported: its old home)

RETRYABLE_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}


class MalformedReply(Exception):
    """An HTTP 200 whose body is no API reply (a proxy's HTML error page, JSON cut short): retried like a 5xx."""


def is_retryable(exc: BaseException) -> bool:
    if isinstance(exc, MalformedReply):
        return True
    if isinstance(exc, (openai.APITimeoutError, openai.APIConnectionError)):
        return True
    if isinstance(exc, openai.APIStatusError):
        return exc.status_code in RETRYABLE_STATUS
    return False


def retry_after_seconds(exc: BaseException) -> float | None:
    """Seconds the server asked us to wait (Retry-After or retry-after-ms), if it said."""
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    if not headers:
        return None
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return float(ms) / 1000.0
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value:
        try:
            return float(value)
        except ValueError:
            return None
    return None


def backoff_seconds(attempt: int, exc: BaseException | None, initial: float, maximum: float) -> float:
    """Wait before attempt ``attempt + 1``: the server's Retry-After when given, else full-jitter exponential."""
    asked = retry_after_seconds(exc) if exc is not None else None
    if asked is not None:
        return min(max(asked, 0.0), maximum)
    cap = min(maximum, initial * (2 ** (attempt - 1)))
    return random.uniform(cap / 2, cap)
