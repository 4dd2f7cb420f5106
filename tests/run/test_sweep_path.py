"""A ``-m`` sweep fails as fast and as honestly as a single run: every check a single run makes before work (keys,
endpoints) runs before Ray starts, no "sweep finished" line for a sweep that never started, a retry hint only when
a rerun can help (with the exact command), Ctrl-C before anything ran prints the command too, and a dry run writes
nothing to MLflow. One MLflow parent run per sweep identity, and ``analysis`` lists a configuration once when two
sweeps of one store hold it."""

from __future__ import annotations

import signal
import socket
import subprocess
import time

import pytest

from tests.fake_openai import FakeOpenAI
from tests.launch_helpers import REPO, env, launch_cmd, mlflow_runs, run, sigint_default, write_small_data

RAY_STARTED = "Started a local Ray instance"


def _no_sweep_started(p: subprocess.CompletedProcess) -> None:
    out = p.stdout + p.stderr
    assert RAY_STARTED not in out and "sweep finished" not in out and "Rerun the same command" not in out, out[-3000:]


@pytest.mark.slow
def test_a_missing_key_stops_a_sweep_before_ray(tmp_path):
    write_small_data(tmp_path / "data", n_tasks=2, n_sessions=3)
    with FakeOpenAI() as fake:
        t0 = time.monotonic()
        p = run(launch_cmd(tmp_path, fake.base_url, "system=backbone,naive_rag", "embedding=bm25",
                           "llm.api_key_env=INMIND_TEST_KEY_NEVER_SET"))
        wall = time.monotonic() - t0
        assert [r for r in fake.requests if r.get("path", "").endswith("/chat/completions")] == []
    assert p.returncode == 2, p.stdout[-2000:] + p.stderr[-2000:]
    assert "INMIND_TEST_KEY_NEVER_SET" in p.stderr and "nothing was run" in p.stderr
    _no_sweep_started(p)
    assert mlflow_runs(tmp_path) == []
    assert wall < 60, f"{wall:.0f}s: the key check should come before Ray starts"


@pytest.mark.slow
def test_a_dead_endpoint_stops_a_sweep_before_ray(tmp_path):
    write_small_data(tmp_path / "data", n_tasks=2, n_sessions=3)
    p = run(launch_cmd(tmp_path, "http://127.0.0.1:9/v1", "system=backbone,naive_rag", "embedding=bm25"))
    assert p.returncode == 2, p.stdout[-2000:] + p.stderr[-2000:]
    assert "cannot reach http://127.0.0.1:9/v1" in p.stderr
    assert "2 of 2 configuration(s) cannot run; nothing was run" in p.stderr
    _no_sweep_started(p)
    assert mlflow_runs(tmp_path) == []


@pytest.mark.slow
def test_a_dry_run_sweep_writes_nothing_to_mlflow(tmp_path):
    write_small_data(tmp_path / "data", n_tasks=2, n_sessions=3)
    p = run(launch_cmd(tmp_path, "http://127.0.0.1:9/v1", "system=backbone,naive_rag", "embedding=bm25,minilm",
                       "dry_run=true"))
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    assert p.stdout.count("[dry run] ") == 3  # backbone/minilm repeats backbone/bm25: said once, not estimated
    assert "[dry run total] 3 configuration(s)" in p.stdout
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "mlruns").exists()
    _no_sweep_started(p)


@pytest.mark.slow
def test_ctrl_c_before_anything_ran_prints_the_command(tmp_path):
    """An endpoint that accepts connections and never answers holds the sweep in its endpoint check; Ctrl-C there
    exits 130 with the command to rerun, not a traceback."""
    write_small_data(tmp_path / "data", n_tasks=2, n_sessions=3)
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/v1"
        cmd = launch_cmd(tmp_path, url, "system=backbone,naive_rag", "embedding=bm25")
        # SIGINT as a terminal sends it (a shell's background job would start with it ignored)
        proc = subprocess.Popen(cmd, cwd=REPO, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                preexec_fn=sigint_default)
        # the first job's endpoints are checked as the launch starts (the check's failure is not repeated later)
        silent.settimeout(120)
        conn, _ = silent.accept()  # the check has connected; it now waits for the silent server's answer
        time.sleep(1.0)
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
        conn.close()
    assert proc.returncode == 130, out[-2000:] + err[-3000:]
    assert "interrupted: finished results are kept; resume with:" in err and "launch.py -m" in err
    assert f"llm.base_url={url}" in err.split("resume with:")[1]
    assert "Traceback" not in err and RAY_STARTED not in out + err


def test_the_retry_hint_says_the_command_and_only_when_a_rerun_helps():
    from inmind_exp.console import retry_summary
    from inmind_exp.console import resume_command

    hint = retry_summary([("a", 2, 4, 0)], [])
    assert "Rerun the same command to retry them" in hint and hint.endswith("\n  " + resume_command())
    off = retry_summary([("a", 2, 4, 0)], [], retry_errors=False)
    assert "Rerun the same command" not in off and off.endswith(resume_command() + " run.retry_errors=true")
    permanent = ("role 'memory' (http://x/v1, model m): HTTP 400 after a non-retryable error: unsupported parameter")
    fixed = retry_summary([("b", 0, 4, 0)], ["a"], messages=[permanent])
    assert "Rerun" not in fixed and "fix the cause" in fixed and "1 configuration(s) failed: a" in fixed
    passing = retry_summary([("b", 0, 4, 0)], ["a"], messages=["role 'memory' (...): HTTP 503 after retries: busy"])
    assert "Rerun the same command" in passing
    assert retry_summary([("a", 0, 4, 0)], []) is None
    # tasks that all failed with a 400/401 (non-retryable): no rerun hint; one transient error among them: the hint
    refused = retry_summary([("a", 2, 4, 2)], [])
    assert "Rerun" not in refused and "fix the cause" in refused and "2 of 4 tasks" in refused
    assert "Rerun the same command" in retry_summary([("a", 3, 4, 2)], [])


def _parents(tmp_path):
    return {r.info.run_id: r for r in mlflow_runs(tmp_path) if r.data.tags.get("inmind.kind") == "sweep"}


@pytest.mark.slow
def test_two_sweeps_in_one_directory_have_a_parent_each_and_analysis_lists_a_configuration_once(tmp_path):
    write_small_data(tmp_path / "data", n_tasks=2, n_sessions=3)
    with FakeOpenAI() as fake:
        first = launch_cmd(tmp_path, fake.base_url, "system=backbone", "embedding=bm25",
                           "tracking.report_at_end=false")
        p = run(first)
        assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
        (one,) = _parents(tmp_path).values()
        name_one = one.info.run_name
        p = run(launch_cmd(tmp_path, fake.base_url, "system=backbone,naive_rag", "embedding=bm25",
                           "tracking.report_at_end=false"))
        assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
        parents = _parents(tmp_path)
        assert len(parents) == 2 and parents[one.info.run_id].info.run_name == name_one  # not renamed
        children = [r for r in mlflow_runs(tmp_path) if r.data.tags.get("inmind.kind") == "config"]
        by_parent = {pid: sorted(c.data.tags["inmind.system"] for c in children
                                 if c.data.tags.get("mlflow.parentRunId") == pid) for pid in parents}
        assert sorted(by_parent.values()) == [["backbone"], ["backbone", "naive_rag"]]
        fake.reset_log()
        p = run(first)  # the first sweep again: its own parent found again, nothing recomputed
        assert p.returncode == 0 and len(_parents(tmp_path)) == 2 and fake.chat_requests() == []

    from analysis.mlflow_runs import load_experiment

    runset = load_experiment("test", f"sqlite:///{tmp_path / 'mlflow.db'}")
    labels = [r.label for r in runset.runs]
    assert sorted(labels) == ["backbone/bm25/turn5/vllm", "naive_rag/bm25/turn5/vllm"], labels
    assert any("same configuration" in s and "backbone" in s for s in runset.skipped), runset.skipped
    # one sweep's report still reads that sweep's runs only
    assert len(load_experiment("test", f"sqlite:///{tmp_path / 'mlflow.db'}",
                               parent_run_id=one.info.run_id).runs) == 1
