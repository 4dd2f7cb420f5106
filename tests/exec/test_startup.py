"""Start-up: a local Ray started by the executor hands its workers the worker environment defaults (inherited at
ray.init, checked on MKL_NUM_THREADS, which Ray itself never sets; the driver's own environment is left as it was),
its workers start with Ray, and closing returns promptly; a failed check starts no Ray; a run's actors end quietly;
planning re-reads no Hydra file already redacted; the exit skips only the interpreter's finalisation."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from inmind_exp import env

PROBE = """
import json, os, time
import ray
from inmind_exp.exec.executor import RayExecutor
from inmind_exp.config.settings import ClusterSettings

os.environ.pop("MKL_NUM_THREADS", None)
ex = RayExecutor()
ex.start(ClusterSettings(num_cpus=1, workers=1, object_store_memory=80_000_000))
spawned = len(ex.workers)

@ray.remote(num_cpus=0)
def worker_env():
    return os.environ.get("MKL_NUM_THREADS")

seen = ray.get(worker_env.remote(), timeout=120)
t = time.perf_counter()
ex.close()
closed = time.perf_counter() - t
print(json.dumps({"driver": os.environ.get("MKL_NUM_THREADS"), "worker": seen, "spawned": spawned,
                  "closed_s": closed}))
ex.shutdown()
ray.shutdown()
"""


@pytest.mark.slow
def test_local_ray_workers_get_the_worker_env_and_start_with_ray():
    e = {**os.environ, **env.RAY, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    e.pop("MKL_NUM_THREADS", None)
    out = subprocess.run([sys.executable, "-c", PROBE], env=e, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["worker"] == env.THREADS["MKL_NUM_THREADS"]  # what a worker process sees
    assert got["driver"] is None  # the driver's environment is restored after ray.init
    assert got["spawned"] == 1  # the pool started with Ray, before any plan was handed to it
    assert got["closed_s"] < 30


def test_overriding_restores_the_environment(monkeypatch):
    monkeypatch.setenv("INMIND_PROBE_A", "kept")
    monkeypatch.delenv("INMIND_PROBE_B", raising=False)
    with env.overriding({"INMIND_PROBE_A": "1", "INMIND_PROBE_B": "2"}):
        assert os.environ["INMIND_PROBE_A"] == "1" and os.environ["INMIND_PROBE_B"] == "2"
    assert os.environ["INMIND_PROBE_A"] == "kept" and "INMIND_PROBE_B" not in os.environ


def _ray_processes(ray_tmp: Path) -> list[int]:
    """Processes still running Ray out of ``ray_tmp`` (their command lines name its session directory)."""
    pids = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                cmdline = Path(f"/proc/{d}/cmdline").read_bytes()
            except OSError:
                continue
            if str(ray_tmp).encode() in cmdline:
                pids.append(int(d))
    return pids


@pytest.mark.slow
def test_a_failed_check_starts_no_ray(tmp_path):
    """Every job is planned and every endpoint checked before Ray starts: a dead endpoint in any job (the first or a
    later one) exits 2 with no Ray started, nothing left running and no MLflow store made."""
    import tempfile

    from tests.fake_openai import FakeOpenAI
    from tests.launch_helpers import launch_cmd, write_small_data

    write_small_data(tmp_path / "data", n_tasks=2, n_sessions=3)
    repo = Path(__file__).resolve().parents[2]
    for first_alive in (True, False):
        ray_tmp = Path(tempfile.mkdtemp(prefix="r", dir="/tmp"))  # short: Ray's socket paths live under it
        out = tmp_path / f"first_alive_{first_alive}"
        try:
            with FakeOpenAI() as fake:
                urls = [fake.base_url, "http://127.0.0.1:9/v1"] if first_alive else ["http://127.0.0.1:9/v1"] * 2
                cmd = [a for a in launch_cmd(out, fake.base_url, "system=backbone", "embedding=bm25")
                       if not a.startswith("llm.base_url=")] + ["llm.base_url=" + ",".join(dict.fromkeys(urls))]
                cmd = [a.replace(str(out / "data"), str(tmp_path / "data")) for a in cmd]
                e = {**env_for_launch(), "RAY_TMPDIR": str(ray_tmp)}
                p = subprocess.run(cmd, env=e, capture_output=True, text=True, timeout=300, cwd=repo)
            assert p.returncode == 2, p.stderr[-3000:]
            assert "cannot reach http://127.0.0.1:9/v1" in p.stderr and "Started a local Ray" not in p.stdout + p.stderr
            assert not list(ray_tmp.rglob("session_*")) and _ray_processes(ray_tmp) == []
            assert not (out / "mlflow.db").exists() and not list(out.glob(".mlflow.db*"))
        finally:
            shutil.rmtree(ray_tmp, ignore_errors=True)


@pytest.mark.slow
def test_a_run_ends_its_actors_quietly(tmp_path):
    """At the end of a run the pool's actors and the cluster services are ended before Ray is: the cache service
    does not abort with a C++ stack on the terminal (it did when its last handle was dropped at exit)."""
    from tests.fake_openai import FakeOpenAI
    from tests.launch_helpers import launch_cmd, write_small_data

    write_small_data(tmp_path / "data", n_tasks=2, n_sessions=3)
    with FakeOpenAI() as fake:
        p = subprocess.run(launch_cmd(tmp_path, fake.base_url, "system=naive_rag", "embedding=bm25", multirun=False),
                           env=env_for_launch(), capture_output=True, text=True, timeout=600,
                           cwd=Path(__file__).resolve().parents[2])
    assert p.returncode == 0, p.stderr[-3000:]
    assert "SIGABRT" not in p.stderr and "Stack trace" not in p.stderr, p.stderr[-3000:]


def test_a_hydra_file_is_redacted_again_when_its_text_or_the_secrets_change(tmp_path):
    """Redaction skips a file only when its text and the secrets are those it already found clean."""
    from inmind_exp.launch.redact_output import redact_yaml_file

    f = tmp_path / "config.yaml"
    f.write_text("llm:\n  model: m\n")
    assert not redact_yaml_file(f, {"sk-planted-one"})
    f.write_text("llm:\n  model: sk-planted-one\n")  # new text: checked again
    assert redact_yaml_file(f, {"sk-planted-one"}) and "sk-planted-one" not in f.read_text()
    text = f.read_text()
    assert not redact_yaml_file(f, {"sk-planted-one"}) and f.read_text() == text
    f.write_text("llm:\n  model: plain-words-secret\n")
    assert not redact_yaml_file(f, set())  # clean of no secrets ...
    assert redact_yaml_file(f, {"plain-words-secret"})  # ... but not of one learnt since
    assert "plain-words-secret" not in f.read_text()


def env_for_launch() -> dict[str, str]:
    from tests.launch_helpers import env as launch_env

    return launch_env()


@pytest.mark.slow
def test_naming_a_sweep_and_holding_its_report_import_neither_mlflow_nor_the_report_libraries():
    """Before a sweep's tasks run, the launcher names its MLflow parent run (``tracking.sweep_run_key``) and holds
    the end-of-sweep report's module: neither imports MLflow (the writer is imported from ``tracking.writer`` where
    it is used) nor scipy, pandas or matplotlib (``analysis`` imports nothing itself)."""
    from tests.launch_helpers import REPO, env as run_env

    code = ("import sys, analysis.sweep_report\n"
            "from inmind_exp.tracking import sweep_run_key\n"
            "print(sorted(m for m in ('scipy', 'pandas', 'matplotlib', 'mlflow') if m in sys.modules))\n")
    p = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=run_env(), capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.splitlines() == ["[]"]


EXIT_PROBE = """
import atexit, sys, threading, time
from pathlib import Path
from inmind_exp.exiting import exit_now
out = Path(sys.argv[1])
atexit.register(lambda: out.with_suffix('.atexit').write_text('ran'))
def late():
    time.sleep(0.3)
    out.with_suffix('.thread').write_text('joined')
threading.Thread(target=late).start()
import concurrent.futures
pool = concurrent.futures.ThreadPoolExecutor(1)  # an idle pool thread (MLflow's artifact uploader) must not hang it
pool.submit(lambda: None).result()
sys.stdout.write('unflushed line')
exit_now(SystemExit(int(sys.argv[2])).code if sys.argv[2] != 'msg' else 'a message')
"""


@pytest.mark.slow
def test_exit_now_keeps_what_pythons_own_exit_does(tmp_path):
    """``launch.py`` leaves through ``exit_now``: the exit code is the SystemExit's, non-daemon threads are joined,
    atexit handlers run and buffered output is flushed (only the interpreter's finalisation is skipped)."""
    from tests.launch_helpers import REPO, env as run_env

    for arg, code in (("3", 3), ("0", 0), ("msg", 1)):
        out = tmp_path / f"probe{arg}"
        p = subprocess.run([sys.executable, "-c", EXIT_PROBE, str(out), arg], cwd=REPO, env=run_env(),
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == code and p.stdout == "unflushed line", (p.returncode, p.stdout, p.stderr[-1000:])
        assert out.with_suffix(".atexit").read_text() == "ran" and out.with_suffix(".thread").read_text() == "joined"
        assert ("a message" in p.stderr) is (arg == "msg")
