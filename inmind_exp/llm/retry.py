"""Which LLM errors are worth retrying, and how long to wait: exponential backoff with jitter, honouring Retry-After."""

from __future__ import annotations

import math
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
    """Seconds the server asked us to wait (Retry-After or retry-after-ms), if it said so in a finite number ≥ 0;
    anything else (``nan``, ``inf``, a negative number, an HTTP date) is ignored: the usual backoff applies."""
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    if not headers:
        return None
    for name, scale in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        try:
            seconds = float(headers.get(name) or "") / scale
        except ValueError:
            continue
        if math.isfinite(seconds) and seconds >= 0:
            return seconds
    return None


def backoff_seconds(attempt: int, exc: BaseException | None, initial: float, maximum: float) -> float:
    """Wait before attempt ``attempt + 1``: the server's Retry-After when given, else full-jitter exponential."""
    asked = retry_after_seconds(exc) if exc is not None else None
    if asked is not None:
        return min(asked, maximum)
    cap = min(maximum, initial * (2 ** (attempt - 1)))
    return random.uniform(cap / 2, cap)
