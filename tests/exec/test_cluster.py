"""A real two-node Ray cluster on 127.0.0.1 (a head and a worker node, each with its own raylet, one CPU each),
started inside the test: a sweep through ``launch.py`` joins it, runs tasks on both nodes, gets its API key to
workers that were started without it, survives the worker node being killed mid-run (its task is retried on the
head; the limiter and cache live on the head), ends with exact metrics, and leaves the key in no file it or Ray
wrote.

The cluster is stopped by killing the process groups this test started (never ``ray stop``, which would stop every
Ray on the host)."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.fake_openai import FakeOpenAI
from tests.launch_helpers import REPO, env, launch_cmd, mlflow_runs, write_small_data

#: every test here starts a two-node Ray cluster and launch.py in subprocesses
pytestmark = pytest.mark.slow

RAY = str(Path(sys.executable).parent / "ray")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _node_env() -> dict[str, str]:
    e = env()
    e["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "1"  # a second node on the same machine
    e.pop("INMIND_TEST_KEY", None)
    e.pop("PYTHONPATH", None)  # the nodes get the project's code from the driver (cluster.ship_code, py_modules)
    return e


class LocalCluster:
    """Head + one worker node as ``ray start --block`` subprocesses, each in its own session (process group)."""

    def __init__(self, temp_dir: Path):
        self.temp_dir = temp_dir
        self.port = _free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.procs: list[subprocess.Popen] = []

    def _start(self, args: list[str], log_name: str) -> None:
        log = open(self.temp_dir.parent / log_name, "w")
        self.procs.append(subprocess.Popen([RAY, "start", *args, "--block"], env=_node_env(), stdout=log,
                                           stderr=subprocess.STDOUT, start_new_session=True))

    def start(self, timeout_s: float = 150.0) -> None:
        self._start(["--head", f"--port={self.port}", "--node-ip-address=127.0.0.1", "--num-cpus=1",
                     "--include-dashboard=false", f"--temp-dir={self.temp_dir}"], "head.log")
        self._wait_nodes(1, timeout_s)
        self._start([f"--address={self.address}", "--node-ip-address=127.0.0.1", "--num-cpus=1"], "worker.log")
        self._wait_nodes(2, timeout_s)

    def _wait_nodes(self, n: int, timeout_s: float) -> None:
        probe = ("import sys, time, ray; ray.init(address=sys.argv[1], log_to_driver=False)\n"
                 "end = time.time() + float(sys.argv[3])\n"
                 "while time.time() < end and sum(1 for x in ray.nodes() if x['Alive']) < int(sys.argv[2]):\n"
                 "    time.sleep(0.5)\n"
                 "sys.exit(0 if sum(1 for x in ray.nodes() if x['Alive']) >= int(sys.argv[2]) else 1)\n")
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            if any(p.poll() is not None for p in self.procs):
                raise RuntimeError(f"ray start exited: see {self.temp_dir.parent}/*.log")
            p = subprocess.run([sys.executable, "-c", probe, self.address, str(n), str(deadline - time.time())],
                               env=_node_env(), capture_output=True, text=True, timeout=timeout_s + 30)
            if p.returncode == 0:
                return
            time.sleep(1)
        raise RuntimeError(f"the cluster did not reach {n} node(s) in {timeout_s:.0f}s")

    def stop(self) -> None:
        for p in self.procs:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for p in self.procs:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                pass
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self._kill_stragglers()

    def _kill_stragglers(self) -> None:
        """Ray daemons that left our process groups: found by our unique temp dir or port on their command line."""
        marks = (str(self.temp_dir), f"127.0.0.1:{self.port}", f"--gcs-address=127.0.0.1:{self.port}")
        out = subprocess.run(["ps", "-eo", "pid=,args="], capture_output=True, text=True).stdout
        for line in out.splitlines():
            pid_s, _, args = line.strip().partition(" ")
            if any(m in args for m in marks) and int(pid_s) != os.getpid():
                try:
                    os.kill(int(pid_s), signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass


@pytest.fixture
def cluster():
    base = Path(tempfile.mkdtemp(prefix="inmc-", dir="/tmp"))  # short: Ray's socket paths must stay < 108 bytes
    c = LocalCluster(base / "ray")
    try:
        c.start()
        yield c
    finally:
        c.stop()
        shutil.rmtree(base, ignore_errors=True)


def _placements(directory: Path) -> list[dict]:
    return [json.loads(line) for f in directory.glob("*.jsonl") for line in f.read_text().splitlines() if line.strip()]


def _kill_worker_node_once_it_ran_a_task(cluster: LocalCluster, placement_dir: Path, proc: subprocess.Popen) -> bool:
    """Kill the worker node (its ``ray start`` process group) as soon as tasks have finished on two nodes."""
    deadline = time.time() + 600
    while time.time() < deadline and proc.poll() is None:
        if len({r["node"] for r in _placements(placement_dir)}) >= 2:
            worker_node = cluster.procs[1]
            os.killpg(worker_node.pid, signal.SIGKILL)
            worker_node.wait(30)
            return True
        time.sleep(0.2)
    return False


def _files_containing(root: Path, needle: bytes) -> list[str]:
    hits = []
    for p in root.rglob("*"):
        try:
            if p.is_file() and not p.is_symlink() and needle in p.read_bytes():
                hits.append(str(p))
        except OSError:
            pass
    return hits


def test_sweep_on_two_nodes_with_key_only_in_the_driver(cluster, tmp_path):
    t0 = time.time()
    write_small_data(tmp_path / "data", n_tasks=6)
    key = "sk-inmind-test-" + secrets.token_hex(12)
    with FakeOpenAI(delay_s=0.3) as fake:
        fake.add_rule("[user_message] (the target fact)", {"score": 1, "reason": "present"})
        fake.add_rule("(what a correct answer must do)\n", {"score": 0, "reason": "not applied"})
        cmd = launch_cmd(tmp_path, fake.base_url, "system=backbone,naive_rag", "embedding=bm25", "cluster=ray",
                         f"cluster.address={cluster.address}", "cluster.workers=2", "llm.api_key_env=INMIND_TEST_KEY")
        e = env()
        e["INMIND_TEST_KEY"] = key
        out, err = tmp_path / "launch.out", tmp_path / "launch.err"
        with open(out, "w") as fo, open(err, "w") as fe:
            proc = subprocess.Popen(cmd, cwd=REPO, env=e, stdout=fo, stderr=fe, start_new_session=True)
            try:
                killed = _kill_worker_node_once_it_ran_a_task(cluster, tmp_path / "sweep" / "placement", proc)
                rc = proc.wait(900)
            finally:
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = out.read_text(), err.read_text()
        assert rc == 0, stdout[-3000:] + stderr[-3000:]
        assert killed, "the worker node should have been killed mid-run"
        assert key not in stdout and key not in stderr

    children = [r for r in mlflow_runs(tmp_path) if r.data.tags.get("inmind.kind") == "config"]
    assert len(children) == 2
    for c in children:
        m = c.data.metrics
        assert m["n_tasks"] == 6 and m["n_errors"] == 0, m  # a worker without the key would record errors
        assert m["target_recall"] == 100.0 and m["application"] == 0.0

    placements = _placements(tmp_path / "sweep" / "placement")
    assert sorted({(r["task_id"], r["config"]) for r in placements}) == sorted(
        {(t, c.data.tags["inmind.config_hash"]) for t in ("t1", "t2", "t3", "t4", "t5", "t6") for c in children})
    nodes = {r["node"] for r in placements}
    assert len(nodes) == 2 and "" not in nodes, placements  # both the head's and the worker node's raylet ran tasks

    needle = key.encode()
    leaks = _files_containing(tmp_path, needle) + _files_containing(cluster.temp_dir, needle)
    assert leaks == []
    assert list(cluster.temp_dir.glob("session_*/logs/*")), "the Ray session logs should have been searched"
    lost = [line for line in stdout.splitlines() if " lost (" in line or "will run again" in line]
    print(f"two-node sweep test took {time.time() - t0:.0f}s; after the kill: {lost}")
