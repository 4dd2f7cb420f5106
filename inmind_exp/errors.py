"""One error base for everything the project raises on purpose, so an entry point catches one type.

Every kind says what is wrong and where (file, line, key, role, endpoint). ``DataError`` (``inmind_exp.data``)
reaches the entry point as a ``PlanError`` carrying the same text (see ``run.plan``).
"""

from __future__ import annotations


class InmindError(Exception):
    """Base of the project's expected errors: bad input, bad configuration, an unreachable endpoint, a failed call."""


class PlanError(InmindError, ValueError):
    """The configuration cannot run; raised before any expensive work starts."""


class EndpointError(InmindError, RuntimeError):
    """A role's endpoint is misconfigured or unreachable; raised before a sweep starts."""


class LocalModelError(InmindError, RuntimeError):
    """The local model file is missing, incomplete or does not match its published hash, or its server failed."""


class ClusterStartError(InmindError, RuntimeError):
    """A local Ray that did not start, twice (a loaded host: "node timed out during startup"): nothing ran, and a
    rerun may pass (``console.EXIT_RETRY_LATER``)."""


class TrackingError(InmindError, RuntimeError):
    """The MLflow store failed (full, damaged, locked): the finished results are in the ledger, and a rerun logs
    them without paying for a call."""


class LLMCallError(InmindError, RuntimeError):
    """A call that failed for good (permanent error, or retries exhausted); recorded as the task's error."""


class JSONReplyError(LLMCallError):
    """The model never produced a parseable JSON object within the allowed attempts."""

    def __init__(self, message: str, raw: str):
        super().__init__(message)
        self.raw = raw
