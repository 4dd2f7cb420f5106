"""SIGTERM (Slurm, Kubernetes, ``ray job stop``) and SIGHUP (a closed terminal) are a clean stop like Ctrl-C: a real
``launch.py -m`` against a slow fake endpoint gets the signal once a task is in the ledger; it exits 143 (129) with
the resume command, the finished results stay in the ledger, every MLflow run is KILLED and tagged interrupted, the
sweep lock is released, and no Ray process of the launch outlives it."""

from __future__ import annotations

import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from tests.fake_openai import FakeOpenAI
from tests.launch_helpers import REPO, env, launch_cmd, mlflow_runs, sigint_default, write_small_data


def _ray_processes(ray_tmp: Path) -> list[str]:
    out = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if str(ray_tmp) in line and "ps -eo" not in line]


@pytest.mark.slow
@pytest.mark.parametrize("sig,code,said,twice", [(signal.SIGTERM, 143, "terminated (SIGTERM)", False),
                                                 (signal.SIGHUP, 129, "terminated (SIGHUP)", False),
                                                 (signal.SIGINT, 130, "interrupted", False),
                                                 (signal.SIGINT, 130, "interrupted", True)],
                         ids=["SIGTERM", "SIGHUP", "SIGINT", "SIGINT-twice"])
def test_a_signal_stops_cleanly(tmp_path, sig, code, said, twice):
    """``twice``: a second Ctrl-C during the clean-up (it left the MLflow run RUNNING) only says to wait."""
    ray_tmp = Path(tempfile.mkdtemp(prefix="rs", dir="/tmp"))
    write_small_data(tmp_path / "data", n_tasks=6, n_sessions=3)
    try:
        with FakeOpenAI(delay_s=0.7) as fake:
            e = env()
            e["RAY_TMPDIR"] = str(ray_tmp)
            cmd = launch_cmd(tmp_path, fake.base_url, "system=naive_rag", "embedding=bm25", "cluster.workers=1",
                             "cluster.tasks_per_worker=1")  # one at a time: the stop lands between tasks
            proc = subprocess.Popen(cmd, cwd=REPO, env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                    preexec_fn=sigint_default)
            ledger_dir = tmp_path / "sweep" / "ledger"
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline and proc.poll() is None:
                if any(p.read_text().strip() for p in ledger_dir.glob("*.jsonl")):
                    break
                time.sleep(0.5)
            assert proc.poll() is None, "the launch ended before it could be stopped"
            proc.send_signal(sig)
            if twice:
                time.sleep(0.3)
                proc.send_signal(sig)
            out, err = proc.communicate(timeout=180)
        assert proc.returncode == code, out[-2000:] + err[-3000:]
        assert said in err and "resume with:" in err and "launch.py" in err
        assert "Traceback" not in err and "*** SIG" not in err
        done = [line for p in ledger_dir.glob("*.jsonl") for line in p.read_text().splitlines() if line.strip()]
        assert 1 <= len(done) < 6
        runs = mlflow_runs(tmp_path)
        assert runs and {r.info.status for r in runs} == {"KILLED"}
        assert {r.data.tags.get("inmind.incomplete") for r in runs} == {"interrupted"}  # the parent too
        assert (tmp_path / "sweep" / ".sweep.lock").read_text() == ""  # released: the next launch finds no record
        t0 = time.monotonic()
        while _ray_processes(ray_tmp) and time.monotonic() - t0 < 20:
            time.sleep(1)
        assert _ray_processes(ray_tmp) == []
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)


def test_a_second_interrupt_during_clean_up_only_says_to_wait(capsys):
    """A second Ctrl-C while the first one's clean-up ran left the MLflow run RUNNING. ``stop.shielded`` (around a
    driver's closing of its run after an interrupt, and the sweep's wait for its drivers) turns it into one line;
    the handlers are back afterwards."""
    import os
    import signal

    from inmind_exp.display import stop

    before = signal.getsignal(signal.SIGINT)
    with stop.shielded():
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGINT)
        saved = "clean-up finished"  # not cut short
    assert saved and signal.getsignal(signal.SIGINT) is before
    err = capsys.readouterr().err
    assert err.count("one moment") == 1 and "saving what finished" in err
