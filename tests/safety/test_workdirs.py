"""Worker temp dirs: pid-stamped, removed on close and at a normal exit, and removed at the next start when a
killed worker left them; a live worker's dir is never touched."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from inmind_exp.safety.workdirs import open_worker_dir, remove_stale
from tests.launch_helpers import REPO, env

WORKER = """
import sys, time
from inmind_exp.safety.workdirs import open_worker_dir
w = open_worker_dir(sys.argv[1])
(w.path / "scratch.bin").write_bytes(b"x" * 1000)
print(w.path, flush=True)
if sys.argv[2] == "sleep":
    time.sleep(120)
"""


def start_worker(base, mode):
    p = subprocess.Popen([sys.executable, "-c", WORKER, str(base), mode], cwd=REPO, env=env(),
                         stdout=subprocess.PIPE, text=True)
    return p, p.stdout.readline().strip()


def test_dir_is_pid_stamped_and_removed_on_close(tmp_path):
    w = open_worker_dir(tmp_path)
    assert w.path.parent == tmp_path and w.path.name.startswith(f"inmind-worker-{os.getpid()}-")
    (w.path / "f").write_text("x")
    w.close()
    w.close()
    assert not w.path.exists() and list(tmp_path.iterdir()) == []


def test_normal_exit_removes_the_dir(tmp_path):
    p, path = start_worker(tmp_path, "exit")
    assert p.wait(60) == 0
    assert path and not os.path.exists(path)


def test_killed_worker_dir_is_removed_at_next_start_and_live_ones_kept(tmp_path):
    dead, dead_path = start_worker(tmp_path, "sleep")
    live, live_path = start_worker(tmp_path, "sleep")
    try:
        os.kill(dead.pid, signal.SIGKILL)
        dead.wait()
        assert os.path.isdir(dead_path)  # a kill -9 leaves it behind ...
        legacy = tmp_path / "inmind-worker-abc123"  # the old mkdtemp layout: no owner record, left alone
        legacy.mkdir()
        w = open_worker_dir(tmp_path)  # ... and the next worker removes it
        assert not os.path.exists(dead_path) and os.path.isdir(live_path) and legacy.is_dir()
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted([os.path.basename(live_path), legacy.name, w.path.name])
        assert remove_stale(tmp_path) == []  # nothing else is stale: the live ones hold their locks
        w.close()
    finally:
        live.kill()
        live.wait()
    assert [p.name for p in remove_stale(tmp_path)] == [os.path.basename(live_path)]
