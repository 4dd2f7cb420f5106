"""A killed driver's local Ray ends with it: the watchdog (``exec.reaper``) kills exactly the processes its node's
mark is on, and after ``kill -9`` of a driver every process of its node is gone within seconds (Ray's agents lived
61 s before it)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from inmind_exp.exec import reaper
from tests.launch_helpers import alive, descendants

DRIVER = """
import time
from inmind_exp.exec.executor import RayExecutor
from inmind_exp.config.settings import ClusterSettings

ex = RayExecutor()
ex.start(ClusterSettings(num_cpus=1, workers=1, object_store_memory=80_000_000))
ex.ray.get([w.ready_ref for w in ex.workers if w.ready_ref is not None], timeout=240)
print("ready", flush=True)
time.sleep(600)
"""


def _describe(pids: list[int]) -> list[str]:
    out = []
    for pid in pids:
        try:
            env = [e for e in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0") if b"INMIND" in e]
            out.append(f"{pid} {Path(f'/proc/{pid}/cmdline').read_bytes()[:25]!r} {env}")
        except OSError as e:
            out.append(f"{pid} {e}")
    return out


def test_the_watchdog_kills_the_nodes_processes_and_no_other():
    """A marked process and its child (unmarked: a retitled Ray agent's environment reads empty) are the node's and
    are killed, also once their parent is gone; a process with another node's mark is left alone."""
    token = "t" + os.urandom(6).hex()
    marked = subprocess.Popen(["sh", "-c", f"env -u {reaper.MARK} sleep 60 & echo $!; wait"],
                              env={**os.environ, reaper.MARK: token}, stdout=subprocess.PIPE, text=True)
    other = subprocess.Popen(["sleep", "60"], env={**os.environ, reaper.MARK: "someone-else"})
    try:
        assert marked.stdout is not None
        child = int(marked.stdout.readline())
        watch = reaper.Watch(token, os.getpid())
        watch.scan()
        assert sorted(watch.alive()) == sorted([marked.pid, child])
        marked.kill()  # the child is handed to another parent: still the node's
        marked.wait()
        assert reaper.reap(watch) == 1 and alive([child]) == []
        assert other.poll() is None
    finally:
        for p in (marked, other):
            p.kill()
            p.wait()


@pytest.mark.slow
def test_kill_9_of_a_driver_ends_its_ray_node_at_once():
    ray_tmp = tempfile.mkdtemp(prefix="rr", dir="/tmp")  # short: Ray's socket paths live under it
    repo = Path(__file__).resolve().parents[2]
    environ = {**os.environ, "RAY_TMPDIR": ray_tmp, "PYTHONPATH": str(repo)}
    driver = subprocess.Popen([sys.executable, "-c", DRIVER], env=environ, cwd=repo, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True)
    node: list[int] = []
    try:
        assert driver.stdout is not None and driver.stdout.readline().strip() == "ready"
        time.sleep(1.0)  # the agents are up
        node = descendants(driver.pid)
        assert len(node) >= 4  # gcs, raylet, agents, workers, the watchdog
        driver.kill()
        driver.wait()
        t0 = time.monotonic()
        while alive(node) and time.monotonic() - t0 < 20:
            time.sleep(0.1)
        gone_s = time.monotonic() - t0
        assert alive(node) == [], f"still running {gone_s:.1f} s after kill -9: {_describe(alive(node))}"
        assert gone_s < 10  # Ray alone: 61 s (its agents wait out publish_error_to_driver)
    finally:
        if driver.poll() is None:
            node = node or descendants(driver.pid)
            driver.kill()
        for pid in alive(node):  # only on failure: what this test's driver started
            os.kill(pid, 9)
        shutil.rmtree(ray_tmp, ignore_errors=True)
