"""Leaving a launch's process without the interpreter's finalisation: once a launch has imported Ray, MLflow, torch,
pandas and matplotlib, tearing every module and object down takes 2-3 s of a 2-core machine after the last line has
been printed. What Python's own exit does that matters still happens, in its order: the non-daemon threads are
joined, the ``atexit`` handlers run (logging's flush and close, Ray's shutdown, ``weakref.finalize`` callbacks such
as temporary directories' removal), and stdout and stderr are flushed."""

from __future__ import annotations

import atexit
import os
import sys
import threading
from typing import Any


def exit_code(code: Any) -> int:
    """The process exit code of ``SystemExit(code)``, as Python computes it (a message is printed to stderr: 1)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return int(code)
    print(code, file=sys.stderr)
    return 1


def exit_now(code: Any) -> None:
    """Exit with ``code`` (a ``SystemExit`` code) after joining threads, running atexit handlers and flushing."""
    status = exit_code(code)
    # what Python's exit does first: the threading module's exit hooks (concurrent.futures wakes its idle pool
    # threads, e.g. MLflow's artifact uploader), then every non-daemon thread is joined
    threading._shutdown()  # type: ignore[attr-defined]
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - a closed or broken stream: nothing more can be said
            pass
    os._exit(status)
