"""What a launch shows at its edges, stated once: where the project's log messages go, an error printed before its
exit (``fail``), the one-line form of an error that ended a configuration, and the closing line when tasks errored."""

from __future__ import annotations

import logging
import shlex
import sys
from typing import Any, Iterable, Mapping, NoReturn, Sequence

from inmind_exp.errors import Exit
from inmind_exp.safety.redact import redact_overrides, scrub, visible


def _input_errors() -> tuple[type[BaseException], ...]:
    from inmind_exp.errors import EndpointError, LocalModelError, PlanError

    return (PlanError, EndpointError, LocalModelError)


#: errors found before any task ran (a bad config, data, key or endpoint): exit 2
INPUT_ERRORS = _input_errors()
NOISY_LOGGERS = ("httpx", "httpx2", "openai", "urllib3", "filelock", "matplotlib")  # matplotlib: "generated new fontManager"


def route_project_logs(*file_handlers: logging.Handler) -> None:
    """The ``inmind_exp`` loggers write plain lines to stdout and to ``file_handlers`` (a job's or sweep's
    ``launch.log``); third-party clients only warn (mlflow: ``MLFLOW_LOGGING_LEVEL``)."""
    from inmind_exp.safety.redact import install_log_redaction

    install_log_redaction(set())  # every log line of the driver goes through inmind_exp.safety.redact.scrub
    for noisy in NOISY_LOGGERS:
        logging.getLogger(noisy).setLevel(logging.WARNING)
    ours = logging.getLogger("inmind_exp")
    ours.setLevel(logging.INFO)
    ours.propagate = False
    for h in list(ours.handlers):
        ours.removeHandler(h)
    console = logging.StreamHandler(sys.stdout)
    console.setFormatter(logging.Formatter("%(message)s"))
    console.addFilter(lambda record: not getattr(record, "file_only", False))
    ours.addHandler(console)
    for h in file_handlers:
        ours.addHandler(h)


def error(*messages: str) -> None:
    """Print each message as ``error: <message>`` on stderr, secrets redacted and control characters escaped."""
    for message in messages:
        print(f"error: {printable(message)}", file=sys.stderr, flush=True)


def fail(code: Exit, *messages: str) -> NoReturn:
    """``error(*messages)``, then exit with ``code``: the one way a launch ends on an error it names."""
    error(*messages)
    raise SystemExit(int(code))


def retry_later(e: BaseException) -> NoReturn:
    """Exit ``Exit.RETRY_LATER`` on a ``ClusterStartError`` (or another start failure that can pass), with the
    command to rerun."""
    fail(Exit.RETRY_LATER, f"{e}; nothing ran, and a rerun may pass (a loaded host often starts Ray on a later "
                           f"try):\n  {resume_command()}")


def printable(text: str) -> str:
    """Text from outside (an error's message, an endpoint's body) as printed: secrets redacted, control characters
    as escapes."""
    return visible(scrub(text))


def error_line(e: BaseException) -> str:
    """The first line of what went wrong; a Ray task error carries the worker's exception as ``cause``."""
    cause = getattr(e, "cause", None) or e
    text = printable(str(cause)).strip()
    return text.splitlines()[0] if text else type(cause).__name__


#: ``log.info(..., extra=FILE_ONLY)``: a line for ``launch.log`` that the terminal gets otherwise (the closing line
#: launch.py and the launcher print to stderr), so it is not shown twice
FILE_ONLY = {"file_only": True}


def retry_summary(errored: list[tuple[str, int, int, int]], failed: list[str], retry_errors: bool = True,
                  messages: Sequence[str] = ()) -> str | None:
    """The closing line when ``errored`` (configuration, tasks errored, tasks, of the errored those a rerun cannot
    fix: ``permanent_errors``) holds errors or configurations ``failed`` (with their error ``messages``); None when
    every task finished. It says to rerun, with the exact command, only when a rerun can help: errored tasks other
    than permanent ones while ``run.retry_errors`` is on, or a configuration that failed for a reason that can pass
    (not a non-retryable endpoint error such as an HTTP 400 or 401)."""
    n_err = sum(e for _, e, _, _ in errored)
    if not n_err and not failed:
        return None
    parts = []
    if n_err:
        parts.append(f"{n_err} of {sum(n for _, _, n, _ in errored)} tasks ended in an error (of the task or of a "
                     f"verdict) in {sum(1 for _, e, _, _ in errored if e)} configuration(s)")
    if failed:
        parts.append(f"{len(failed)} configuration(s) failed: {', '.join(failed)}")
    transient = len(messages) < len(failed) or any(not permanent(m) for m in messages)
    fixable = n_err - sum(p for _, _, _, p in errored)
    if (fixable and retry_errors) or transient:
        return (f"[inmind] {'; '.join(parts)}. Rerun the same command to retry them (finished tasks are kept; errored "
                f"ones are retried while run.retry_errors=true, a failed verdict by asking the judge only):"
                f"\n  {resume_command()}")
    if fixable:
        return (f"[inmind] {'; '.join(parts)}. run.retry_errors=false keeps errored tasks as they are; to retry them:"
                f"\n  {resume_command()} run.retry_errors=true")
    return f"[inmind] {'; '.join(parts)}. A rerun fails the same way: fix the cause named above first."


def permanent(message: str) -> bool:
    """Whether an error cannot pass by itself (the provider names a non-retryable error: HTTP 400, 401, ...)."""
    return "non-retryable" in message


def permanent_errors(records: Iterable[Any]) -> int:
    """How many task records ended in an error a rerun cannot fix (``permanent``; a failed verdict can pass)."""
    return sum(1 for r in records if r.error and permanent(r.error))


def resume_command(change: Mapping[str, str] | None = None) -> str:
    """The command that resumes this launch (this process's own argv, secrets redacted), with the overrides in
    ``change`` set to their new values (an override of the same key, ``+`` or not, replaced)."""
    argv = [sys.executable, *sys.argv]
    for key, value in (change or {}).items():
        argv = [a for a in argv if a.lstrip("+").split("=", 1)[0] != key] + [f"{key}={value}"]
    return shlex.join(redact_overrides(argv))
