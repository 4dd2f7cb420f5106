"""One error base for everything the project raises on purpose, so an entry point catches one type.

Every kind says what is wrong and where (file, line, key, role, endpoint). ``DataError`` (``inmind_exp.data``)
reaches the entry point as a ``PlanError`` carrying the same text (see ``run.plan``).
"""

from __future__ import annotations

from enum import IntEnum


class Exit(IntEnum):
    """Every exit code of a launch, stated once (the README's "Exit codes" table says the same)."""

    OK = 0  #: every task finished without error
    CRASH = 1  #: a bug: the traceback is printed
    BAD_INPUT = 2  #: a config, override, data, key or endpoint problem, found before anything ran or was logged
    TASK_ERRORS = 3  #: some task ended in error, or a configuration failed while the others ran: rerun to retry
    SPEND_CAP = 4  #: stopped at run.max_usd / run.max_tokens: the closing lines print the command that finishes
    RETRY_LATER = 75  #: nothing ran but a rerun may pass (EX_TEMPFAIL): the sweep is locked, Ray did not start
    HANGUP = 129  #: SIGHUP; finished work is kept (the resume command is printed)
    INTERRUPTED = 130  #: Ctrl-C
    TERMINATED = 143  #: SIGTERM


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
    rerun may pass (``Exit.RETRY_LATER``)."""


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
