"""The live display: on a terminal the progress lines update in place (one line per running configuration, one
line summarising the queued ones, the sweep's line last) under the messages that scroll above them; elsewhere (a
pipe, a file, CI) they stay the plain ``[progress]`` lines. ``run.progress`` picks: ``auto`` (in place when stdout
is a terminal), ``live``, ``plain`` or ``off`` (no progress lines on the console; ``--quiet`` on the command line).
The job's ``launch.log`` always gets the plain lines. Plain ANSI (cursor up, clear to end): nothing to install.

It is a logging handler in place of the console's: the schedulers keep logging lines and never know how they are
shown."""

from __future__ import annotations

import logging
import re
import shutil
from contextlib import contextmanager
from typing import IO, Iterator

#: ``[progress] <name>: <rest>``; the sweep's own line has the name ``sweep``
_PROGRESS = re.compile(r"^\[progress\] (.+?): (.*)$")
#: ``[inmind] <name> finished: ...``: the configuration's line leaves the live block
_FINISHED = re.compile(r"^\[inmind\] (.+?) finished: ")
SWEEP = "sweep"
#: ANSI: move to the start of the line n lines up; clear from the cursor to the end of the screen
_UP = "\x1b[{n}F"
_CLEAR = "\x1b[J"


def _is_progress(record: logging.LogRecord) -> bool:
    return record.getMessage().startswith("[progress] ")


class LiveConsole(logging.Handler):
    """The console handler of a live display: ``[progress]`` lines are kept by configuration and redrawn in place
    as a block at the bottom; every other message is written above the block."""

    def __init__(self, stream: IO[str]) -> None:
        super().__init__(logging.INFO)
        self.stream = stream
        self.lines: dict[str, str] = {}  # configuration -> its latest progress text, in first-seen order
        self.drawn = 0

    def width(self) -> int:
        return max(40, shutil.get_terminal_size((120, 24)).columns)

    def block(self) -> list[str]:
        """The lines of the live block: each running configuration, the queued ones in one line, the sweep."""
        running, queued = [], []
        for name, text in self.lines.items():
            if name == SWEEP:
                continue
            (queued if re.search(r"running: queued", text) else running).append((name, text))
        out = [f"  {name}: {text}" for name, text in running]
        if queued:
            names = ", ".join(n for n, _ in queued)
            out.append(f"  {len(queued)} queued: {names}")
        if SWEEP in self.lines:
            out.append(f"» sweep: {self.lines[SWEEP]}")
        w = self.width() - 1
        return [line if len(line) <= w else line[: w - 1] + "…" for line in out]  # never wrapped: redraw stays exact

    def _clear(self) -> str:
        if not self.drawn:
            return ""
        n, self.drawn = self.drawn, 0
        return _UP.format(n=n) + _CLEAR

    def _draw(self) -> str:
        lines = self.block()
        self.drawn = len(lines)
        return "".join(line + "\n" for line in lines)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            msg = self.format(record)
            m = _PROGRESS.match(msg)
            if m:
                self.lines[m.group(1)] = m.group(2)
                self.stream.write(self._clear() + self._draw())
            else:
                done = _FINISHED.match(msg)
                if done:
                    self.lines.pop(done.group(1), None)
                self.stream.write(self._clear() + msg + "\n" + self._draw())
            self.stream.flush()
        except Exception:  # noqa: BLE001 - logging's contract: report, never raise
            self.handleError(record)

    def close(self) -> None:
        """Remove the block: what follows (the results table) starts on a clean screen."""
        try:
            self.stream.write(self._clear())
            self.stream.flush()
        except Exception:  # noqa: BLE001
            pass
        self.lines.clear()
        super().close()


def _console(logger: logging.Logger) -> logging.StreamHandler | None:
    return next((h for h in logger.handlers if type(h) is logging.StreamHandler), None)


def wants_live(mode: str, stream: IO[str]) -> bool:
    """In place for ``live``, and for ``auto`` when ``stream`` is a terminal."""
    return mode == "live" or (mode == "auto" and hasattr(stream, "isatty") and stream.isatty())


@contextmanager
def display(mode: str, logger_name: str = "inmind_exp") -> Iterator[None]:
    """While the block runs, the console handler of ``logger_name`` shows progress as ``mode`` says (module doc);
    afterwards the plain handler is back. Without a console handler (a test, a library use) nothing changes."""
    logger = logging.getLogger(logger_name)
    console = _console(logger)
    if console is None or mode == "plain":
        yield
        return
    if mode == "off":
        drop = logging.Filter()
        drop.filter = lambda record: not _is_progress(record)  # type: ignore[method-assign]
        console.addFilter(drop)
        try:
            yield
        finally:
            console.removeFilter(drop)
        return
    if not wants_live(mode, console.stream):
        yield
        return
    live = LiveConsole(console.stream)
    live.setFormatter(console.formatter)
    for f in console.filters:
        live.addFilter(f)
    logger.removeHandler(console)
    logger.addHandler(live)
    try:
        yield
    finally:
        logger.removeHandler(live)
        live.close()
        logger.addHandler(console)


def quiet_argv(argv: list[str]) -> list[str]:
    """``--quiet`` / ``-q`` on launch.py's command line is ``run.progress=off``."""
    return ["run.progress=off" if a in ("--quiet", "-q") else a for a in argv]


