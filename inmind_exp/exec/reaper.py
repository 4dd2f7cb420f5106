"""A watchdog that ends a local Ray's processes when the driver that started them dies, ``kill -9`` included.

Ray's own clean-up runs in the driver (``atexit``), so a killed driver leaves its node behind: the GCS and the
raylet die with it (Ray starts them fate-sharing), the workers follow the raylet, but the dashboard and runtime-env
agents lived another 61 s (Ray's 60 s ``publish_error_to_driver`` timeout) holding memory and ports. Before a local
Ray starts, ``watch`` marks the environment its processes inherit with a token and starts this file as a small
process that reads a pipe only the driver holds and meanwhile notes the node's processes (the driver's descendants
whose environment carries the token, and theirs); the driver's death closes the pipe, and the watchdog kills them
(0.1–0.2 s after the ``kill -9``). It never touches a cluster it only joined (``cluster.address``), nor any
process outside the token's node.

This file is run by path with the standard library only (``python -I reaper.py``), so it starts in milliseconds.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
import uuid

#: the environment variable whose value marks the processes of one local Ray node
MARK = "INMIND_RAY_NODE"
#: how long the watchdog keeps killing (a raylet may start a worker while its agents are being killed)
SWEEP_S = 5.0
#: how often the watchdog notes the node's processes while the driver lives: often while the node starts (its
#: agents), then seldom (a worker started since dies with the raylet anyway)
POLL_S, POLL_LATER_S, STARTING_S = 0.5, 3.0, 30.0

#: the watchdogs this process started and the write ends of their pipes (never closed: the process's end closes them)
_watching: list[tuple[subprocess.Popen[bytes], int]] = []


def watch() -> dict[str, str]:
    """Start the watchdog of the local Ray about to be started, and return the environment value that marks that
    node's processes (to be set while ``ray.init`` starts them); nothing without ``/proc`` (not Linux)."""
    if not os.path.isdir("/proc"):
        return {}
    token = uuid.uuid4().hex
    read_end, write_end = os.pipe()  # both non-inheritable: no Ray process holds the write end
    environ = {k: v for k, v in os.environ.items() if k != MARK}
    proc = subprocess.Popen([sys.executable, "-I", os.path.abspath(__file__), token], stdin=read_end,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=environ,
                            start_new_session=True)  # away from the terminal's Ctrl-C and hang-up
    os.close(read_end)
    _watching.append((proc, write_end))
    return {MARK: token}


def process_table() -> dict[int, tuple[int, str]]:
    """Every process: pid -> (parent pid, start time in clock ticks: with the pid, a process's identity)."""
    table = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as f:
                    fields = f.read().rsplit(b")", 1)[1].split()
                table[int(entry)] = (int(fields[1]), fields[19].decode())
            except (OSError, IndexError, ValueError):
                continue
    return table


def _has_mark(pid: int, token: str) -> bool:
    """Whether ``pid``'s environment holds ``MARK=token``. A process that retitles itself (``setproctitle``: Ray's
    agents and workers) may have written over the memory this is read from, hence ``Watch``'s ancestry too."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f"{MARK}={token}".encode() in f.read().split(b"\0")
    except OSError:  # gone, or not ours to read
        return False


class Watch:
    """The processes of one node: those carrying its mark, and every descendant of one of them (seen while the
    driver lived, or since)."""

    def __init__(self, token: str, driver: int) -> None:
        self.token, self.driver = token, driver
        self.seen: dict[int, str] = {}  # pid -> start time

    def scan(self, everywhere: bool = False) -> None:
        """Note the node's processes among the driver's descendants (``everywhere``: among all processes, once the
        driver is gone and its children were handed to another parent)."""
        table = process_table()
        children: dict[int, list[int]] = {}
        for pid, (ppid, _) in table.items():
            children.setdefault(ppid, []).append(pid)
        todo = list(table) if everywhere else list(children.get(self.driver, []))
        while todo:
            pid = todo.pop()
            if pid == os.getpid() or pid not in table:
                continue
            ppid, started = table[pid]
            parent_seen = ppid in table and self.seen.get(ppid) == table[ppid][1]
            if self.seen.get(pid) == started or parent_seen or _has_mark(pid, self.token):
                self.seen[pid] = started
                todo += children.get(pid, [])
            elif not everywhere:
                todo += children.get(pid, [])

    def alive(self) -> list[int]:
        """The noted processes still running (same pid and start time; a zombie is not running)."""
        table = process_table()
        return [pid for pid, started in self.seen.items() if pid in table and table[pid][1] == started
                and process_state(pid) not in ("Z", "X", "")]


def process_state(pid: int) -> str:
    """``pid``'s state letter (``Z``: a zombie), or "" when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0].decode()
    except (OSError, IndexError):
        return ""


def reap(watch: Watch) -> int:
    """Kill the node's processes until none is left (or ``SWEEP_S`` passed); the number killed."""
    killed: set[int] = set()
    deadline = time.monotonic() + SWEEP_S
    while time.monotonic() < deadline:
        watch.scan(everywhere=True)
        pids = watch.alive()
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
            except OSError:
                pass
        time.sleep(0.05)
    return len(killed)


def main(token: str) -> None:
    """Note the node's processes while the driver lives; when the pipe on stdin closes (the
    driver's end), kill them."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    watch = Watch(token, os.getppid())
    started = time.monotonic()
    while True:
        ready, _, _ = select.select([0], [], [], POLL_S if time.monotonic() - started < STARTING_S else POLL_LATER_S)
        if ready and not os.read(0, 4096):
            break
        watch.scan()
    reap(watch)


if __name__ == "__main__":
    main(sys.argv[1])
