"""One driver per sweep: a second process is refused with the holder named, or waits; a driver killed with -9
leaves a record that the next launch reports and takes over."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from inmind_exp.safety.sweep_lock import LOCK_NAME, SweepLock, SweepLockedError
from tests.launch_helpers import REPO, env

HOLD = """
import sys, time
from inmind_exp.safety.sweep_lock import SweepLock
lock = SweepLock(sys.argv[1], command="launch.py -m system=mem0 llm.api_key=***").acquire()
print("held", flush=True)
time.sleep(float(sys.argv[2]))
lock.release()
print("released", flush=True)
"""

RACE = """
import sys, time
from inmind_exp.safety.sweep_lock import SweepLock, SweepLockedError
start = float(sys.argv[2])
while time.time() < start:
    pass
try:
    SweepLock(sys.argv[1]).acquire()
    print("won", flush=True)
    time.sleep(1.5)
except SweepLockedError as e:
    print("lost", e, flush=True)
"""


def holder_process(directory, seconds=60.0):
    p = subprocess.Popen([sys.executable, "-c", HOLD, str(directory), str(seconds)], cwd=REPO, env=env(),
                         stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "held"
    return p


def test_second_driver_is_refused_with_the_holder_named(tmp_path):
    p = holder_process(tmp_path)
    try:
        with pytest.raises(SweepLockedError) as err:
            SweepLock(tmp_path).acquire()
        msg = str(err.value)
        assert f"pid {p.pid} on host {socket.gethostname()}" in msg and "started 20" in msg
        assert "llm.api_key=***" in msg and "run.wait_for_lock=true" in msg and str(tmp_path) in msg
        assert err.value.holder.pid == p.pid
    finally:
        p.kill()
        p.wait()


@pytest.mark.slow
def test_two_processes_racing_exactly_one_wins(tmp_path):
    start = time.time() + 1.0
    procs = [subprocess.Popen([sys.executable, "-c", RACE, str(tmp_path), str(start)], cwd=REPO, env=env(),
                              stdout=subprocess.PIPE, text=True) for _ in range(4)]
    outs = [p.communicate(timeout=60)[0] for p in procs]
    assert sorted(o.split()[0] for o in outs) == ["lost", "lost", "lost", "won"], outs


@pytest.mark.slow
def test_kill_9_of_the_holder_then_takeover_reports_the_dead_driver(tmp_path):
    p = holder_process(tmp_path)
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    record = json.loads((tmp_path / LOCK_NAME).read_text())
    assert record["pid"] == p.pid  # the killed driver's record is still there ...
    lock = SweepLock(tmp_path, command="launch.py again").acquire()  # ... but its lock went with it
    try:
        assert lock.stale is not None and lock.stale.pid == p.pid and lock.stale.alive_here() is False
        now = json.loads((tmp_path / LOCK_NAME).read_text())
        assert now["pid"] == os.getpid() and now["command"] == "launch.py again"
    finally:
        lock.release()
    assert (tmp_path / LOCK_NAME).read_text() == ""  # a clean release leaves no record
    with SweepLock(tmp_path) as again:
        assert again.stale is None


def test_wait_mode_gets_the_lock_when_the_holder_finishes(tmp_path):
    p = holder_process(tmp_path, seconds=1.5)
    t0 = time.monotonic()
    lock = SweepLock(tmp_path).acquire(wait=True, timeout_s=30, poll_s=0.1)
    waited = time.monotonic() - t0
    try:
        assert 0.5 < waited < 20 and lock.stale is None and lock.held
    finally:
        lock.release()
    assert p.wait(10) == 0


def test_wait_mode_times_out_naming_the_holder(tmp_path):
    p = holder_process(tmp_path)
    try:
        t0 = time.monotonic()
        with pytest.raises(SweepLockedError, match=rf"timed out after \d+ s waiting .* pid {p.pid}"):
            SweepLock(tmp_path).acquire(wait=True, timeout_s=1.0, poll_s=0.2)
        assert 0.9 < time.monotonic() - t0 < 10
    finally:
        p.kill()
        p.wait()


@pytest.mark.slow
def test_the_holder_record_never_holds_a_secret(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["launch.py", "-m", "+x.OPENAI_API_KEY=sk-secret-in-argv-1"])
    with SweepLock(tmp_path):
        text = (tmp_path / LOCK_NAME).read_text()
    assert "sk-secret-in-argv-1" not in text and "OPENAI_API_KEY=***" in text


LOCK_CB = "hydra.callbacks.sweep_lock._target_=inmind_exp.launch.hold_lock.HoldSweepLock"  # on by default; restated


@pytest.mark.slow
def test_launch_refuses_a_held_sweep_then_takes_over_after_kill_9(tmp_path):
    """Through ``launch.py`` with the callback of WIRING.md: exit 75 naming the holder, nothing written; after the
    holder is killed the same command runs and reports the dead driver."""
    from tests.launch_helpers import launch_cmd, run, write_small_data

    write_small_data(tmp_path / "data")
    cmd = launch_cmd(tmp_path, "http://127.0.0.1:9/v1", "dry_run=true", "system=backbone,naive_rag", LOCK_CB)
    p = holder_process(tmp_path / "sweep")
    try:
        refused = run(cmd)
        assert refused.returncode == 75, refused.stderr[-2000:]
        assert f"pid {p.pid} on host" in refused.stderr and "Only one driver may run a sweep" in refused.stderr
        assert not (tmp_path / "sweep" / "multirun.yaml").exists()  # refused before Hydra wrote anything
    finally:
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
    after = run(cmd)
    assert after.returncode == 0, after.stderr[-2000:]
    said = [line for line in after.stderr.splitlines() if "lock" in line]  # one short line (#44 item 7)
    assert len(said) == 1 and f"the last driver of this sweep (pid {p.pid} on host" in said[0], after.stderr[-2000:]
    assert len(said[0]) < 200 and "command" not in said[0]
    assert (tmp_path / "sweep" / LOCK_NAME).read_text() == ""  # released at the end of the sweep


@pytest.mark.slow
def test_a_real_launch_that_exits_2_after_taking_the_lock_leaves_it_free(tmp_path):
    """A planning error (exit 2) comes after the lock callback has run: the next launch takes the lock without a
    word about a dead driver (#44 item 7: every documented exit left a stale lock and a warning)."""
    from tests.launch_helpers import launch_cmd, run, write_small_data

    write_small_data(tmp_path / "data")
    bad = run(launch_cmd(tmp_path, "http://127.0.0.1:9/v1", "dry_run=true", "system=backbone,naive_rag",
                         "injection.user_turn=100000"))
    assert bad.returncode == 2, bad.stderr[-2000:]
    assert (tmp_path / "sweep" / LOCK_NAME).read_text() == ""
    good = run(launch_cmd(tmp_path, "http://127.0.0.1:9/v1", "dry_run=true", "system=backbone,naive_rag"))
    assert good.returncode == 0, good.stderr[-2000:]
    assert "lock" not in good.stdout + good.stderr


EXITS = """
import os, signal, sys, time
from omegaconf import OmegaConf
from inmind_exp.launch.hold_lock import HoldSweepLock
from inmind_exp.display import stop

stop.install()
HoldSweepLock().on_multirun_start(OmegaConf.create({"hydra": {"sweep": {"dir": sys.argv[1]}}}))
print("held", flush=True)
how = sys.argv[2]
try:
    if how == "exit":
        sys.exit(int(sys.argv[3]))
    if how == "raise":
        raise RuntimeError("a crash")
    if how == "signal":
        os.kill(os.getpid(), getattr(signal, sys.argv[3]))
    time.sleep(30)
except KeyboardInterrupt:
    stop.stopped()
"""


@pytest.mark.slow
@pytest.mark.parametrize("how, code", [(("exit", "2"), 2), (("exit", "4"), 4), (("raise",), 1),
                                       (("signal", "SIGINT"), 130), (("signal", "SIGTERM"), 143),
                                       (("signal", "SIGHUP"), 129)],
                         ids=["exit2", "spend-cap-exit4", "crash", "SIGINT", "SIGTERM", "SIGHUP"])
def test_every_way_out_of_a_launch_releases_the_sweep_lock(tmp_path, how, code):
    """Hydra's end callbacks never run after an exit 2, 4 or an interrupt: the lock is released at exit anyway,
    and SIGHUP (a closed terminal) stops like Ctrl-C with 129 and the resume command, so the next launch finds no
    record of a dead driver."""
    p = subprocess.run([sys.executable, "-c", EXITS, str(tmp_path / "sweep"), *how], cwd=REPO, env=env(),
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == code, p.stderr[-2000:]
    assert "held" in p.stdout
    assert (tmp_path / "sweep" / LOCK_NAME).read_text() == ""
    if how[0] == "signal" and how[1] != "SIGINT":
        assert f"terminated ({how[1]})" in p.stderr and "resume with:" in p.stderr
    again = SweepLock(tmp_path / "sweep").acquire()
    assert again.stale is None
    again.release()


@pytest.mark.slow
def test_a_sighup_ignored_at_start_stays_ignored():
    """Under ``nohup`` the launch must survive its terminal closing: ``stop.install`` leaves an ignored SIGHUP."""
    code = ("import signal; signal.signal(signal.SIGHUP, signal.SIG_IGN)\n"
            "from inmind_exp.display import stop; stop.install()\n"
            "assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN\n"
            "assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL\n")
    p = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env(), capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
