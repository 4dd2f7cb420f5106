"""SIGTERM (what Slurm, Kubernetes and ``ray job stop`` send) and SIGHUP (the terminal or the SSH session closed)
stop a launch as cleanly as Ctrl-C: the signal is raised in the main thread as ``Terminated``, a
``KeyboardInterrupt``, so every interrupt path runs (finished results stay in the ledger, MLflow runs are marked
KILLED, workers and actors are stopped, the sweep lock is released) and the launch exits 128 + the signal (143,
129) with the command that resumes it. A SIGHUP ignored when the launch started (``nohup``) stays ignored. Ray
installs its own SIGTERM handler when it starts (it tears its processes down under the driver and exits 1), so
``install`` runs again after ``ray.init``.
"""

from __future__ import annotations

import signal
import sys
import threading
from contextlib import contextmanager
from typing import Any, Iterator

from inmind_exp.console import resume_command

from inmind_exp.errors import Exit

_received: list[int] = []


class Terminated(KeyboardInterrupt):
    """The process got SIGTERM or SIGHUP: handled like an interrupt, exits 128 + the signal."""


def _handler(signum: int, frame: Any) -> None:
    if _received:  # a second SIGTERM while stopping: the first one's clean-up is under way, let it finish
        return
    _received.append(signum)
    raise Terminated()


def install() -> None:
    """Handle SIGTERM and SIGHUP (unless ignored, as under ``nohup``) in this process as ``Terminated`` (only the
    main thread can install a handler)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _handler)
        if signal.getsignal(signal.SIGHUP) is not signal.SIG_IGN:
            signal.signal(signal.SIGHUP, _handler)


@contextmanager
def shielded() -> Iterator[None]:
    """Inside the block, Ctrl-C and SIGTERM only say to wait (main thread; elsewhere a no-op): the clean-up after a
    first interrupt (finished results logged, MLflow runs marked KILLED, drivers joined) is not cut short by a second
    one, which left MLflow runs RUNNING."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    said: list[int] = []

    def wait(signum: int, frame: Any) -> None:
        if not said:
            said.append(signum)
            print("[inmind] stopping: saving what finished and closing the MLflow runs, one moment (kill -9 ends at "
                  "once and leaves them RUNNING)", file=sys.stderr, flush=True)

    previous = {s: signal.signal(s, wait) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def terminated() -> bool:
    return bool(_received)


def exit_code() -> int:
    """128 + the signal after SIGTERM (143) or SIGHUP (129), else 130 (an interrupt)."""
    return 128 + _received[0] if _received else int(Exit.INTERRUPTED)


def stopped() -> None:
    """Say how to resume and exit with 130 (SIGINT), 143 (SIGTERM) or 129 (SIGHUP)."""
    what = f"terminated ({signal.Signals(_received[0]).name})" if _received else "interrupted"
    print(f"[inmind] {what}: finished results are kept; resume with:\n  {resume_command()}", file=sys.stderr,
          flush=True)
    sys.exit(exit_code())
