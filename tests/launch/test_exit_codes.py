"""Exit codes scripts and CI can trust: 3 with a retry hint when tasks end in error, and a configuration whose shared
prefix fails (an endpoint error) ends with a clear message while the other configurations of the sweep run."""

from __future__ import annotations

import pytest

from tests.fake_openai import Fault, FakeOpenAI
from tests.launch_helpers import launch_cmd, mlflow_runs, run, write_small_data

#: every test here runs launch.py in a subprocess
pytestmark = pytest.mark.slow


def test_every_judge_reply_unparseable_exits_3_with_a_retry_hint(tmp_path):
    write_small_data(tmp_path / "data", n_tasks=2, n_sessions=3)
    with FakeOpenAI() as fake:
        fake.default_json = "this is not JSON at all"  # every JSON-mode (judge) request gets prose
        p = run(launch_cmd(tmp_path, fake.base_url, "system=backbone", "embedding=bm25", "run.judge_attempts=1",
                           "run.max_task_attempts=1", multirun=False))
    assert p.returncode == 3, p.stdout[-2000:] + p.stderr[-2000:]
    assert "2 of 2 tasks ended in an error (of the task or of a verdict) in 1 configuration(s)" in p.stderr
    assert "Rerun the same command to retry them" in p.stderr
    assert (p.stdout + p.stderr).count("Rerun the same command") == 1  # shown once on the terminal
    # the run's story, summary and retry hint included, is in the job directory's launch.log
    log = (tmp_path / "run" / "launch.log").read_text()
    assert "finished: 2/2 tasks, 2 errors; this run: " in log
    assert "2 of 2 tasks ended in an error (of the task or of a verdict) in 1 configuration(s)" in log and "Rerun the same command" in log


def test_a_prefix_failure_ends_its_configuration_and_the_sweep_goes_on(tmp_path):
    write_small_data(tmp_path / "data", n_tasks=2, n_sessions=6)
    marker = "single markdown memory file"  # always_in_state's updater prompt: the prefix's memory calls

    def refuse_updater(body):
        text = "\n".join(str(m.get("content")) for m in body.get("messages", []))
        return Fault(status=400, body={"error": {"message": "unsupported parameter", "type": "invalid_request_error"}}) \
            if marker in text else None

    with FakeOpenAI(validator=refuse_updater) as fake:
        p = run(launch_cmd(tmp_path, fake.base_url, "system=always_in_state,backbone", "embedding=bm25"))
    assert p.returncode == 3, p.stdout[-2000:] + p.stderr[-2000:]
    assert "error: always_in_state/bm25/turn5/vllm" in p.stderr or "error: always_in_state/" in p.stderr
    assert "HTTP 400" in p.stderr and "Traceback" not in p.stderr
    assert "1 configuration(s) failed: always_in_state/" in p.stderr
    assert "| backbone/bm25/" in p.stdout  # the other configuration ran and reported
    log = (tmp_path / "sweep" / "launch.log").read_text()
    assert "[inmind] sweep finished: 2 of 2 configurations" in log and "1 configuration(s) failed: always_in_state/" in log
    children = [r for r in mlflow_runs(tmp_path) if r.data.tags.get("inmind.kind") == "config"]
    assert {r.data.tags["inmind.system"]: r.info.status for r in children}["backbone"] == "FINISHED"


def test_a_400_with_escapes_in_its_body_is_shown_escaped_asked_once_and_not_called_rerunnable(tmp_path):
    """An endpoint refusing every chat call with HTTP 400 whose message holds terminal escapes (clear screen,
    retitle, colours): each task asks once (no task-level retry of a 400), the output and launch.log show the
    escapes as text, never raw, and the closing line says to fix the cause rather than to rerun."""
    write_small_data(tmp_path / "data", n_tasks=2, n_sessions=3)
    hostile = "bad request \x1b[2J\x1b]0;pwned\x07\x1b[31mred\x1b[0m\r\x9b"
    refuse = Fault(status=400, body={"error": {"message": hostile, "type": "invalid_request_error"}})
    with FakeOpenAI(validator=lambda body: refuse) as fake:
        p = run(launch_cmd(tmp_path, fake.base_url, "system=backbone", "embedding=bm25", multirun=False))
        asked = len(fake.chat_requests())
    out = p.stdout + p.stderr
    assert p.returncode == 3, out[-3000:]
    assert asked == 2  # one call per task: neither the client nor the task level retried the 400
    log = (tmp_path / "run" / "launch.log").read_text()
    for text in (out, log):
        assert "\x1b" not in text and "\x07" not in text and "\r" not in text and "\x9b" not in text
    assert "\\x1b[2J" in log and "HTTP 400" in log
    assert "fix the cause" in p.stderr and "Rerun the same command" not in out


def test_composition_and_override_errors_exit_2(tmp_path):
    """``system=nonexistent`` or ``dataset.limit=abc`` is bad input (exit 2 with Hydra's one message), not a crash
    (exit 1, which Hydra's own handler gave); so is a sweep under Hydra's basic launcher (the inmind one is the only
    launcher)."""
    write_small_data(tmp_path / "data", n_tasks=2, n_sessions=3)
    for bad, said in (("system=nonexistent", "unknown system 'nonexistent'"),  # before Hydra: the known ones
                      ("dataset.limit=abc", "Error merging override dataset.limit=abc"),
                      ("hydra/launcher=basic", "a sweep runs under the inmind launcher only")):
        for multirun in (False, True) if bad != "hydra/launcher=basic" else (True,):
            p = run(launch_cmd(tmp_path, "http://127.0.0.1:9/v1", bad, multirun=multirun))
            assert p.returncode == 2, (bad, multirun, p.stderr[-2000:])
            assert said in p.stderr and "Traceback" not in p.stderr


def test_more_local_workers_than_the_machine_takes_exit_2(tmp_path):
    """``cluster.workers=1000`` on a local cluster declared 1000 CPUs (82 worker processes for 8 tasks): refused
    before Ray starts, naming the key and the machine's cap."""
    import os

    from inmind_exp.config.settings import local_cpu_cap

    assert local_cpu_cap() == max(2, 2 * (os.cpu_count() or 1))
    write_small_data(tmp_path / "data", n_tasks=2, n_sessions=3)
    for multirun in (False, True):
        p = run(launch_cmd(tmp_path, "http://127.0.0.1:9/v1", "cluster.workers=1000", multirun=multirun))
        assert p.returncode == 2, p.stderr[-2000:]
        assert f"cluster.workers=1000: a local cluster runs at most {local_cpu_cap()}" in p.stderr
        assert "Traceback" not in p.stderr and "Started a local Ray" not in p.stdout + p.stderr


def test_ray_that_does_not_start_is_tried_twice_then_exit_75_with_the_rerun_line(tmp_path):
    """A local Ray that fails to start (here: its temporary directory cannot be made; on a loaded host, "node timed
    out during startup") is tried once more, then the launch exits 75 (retry later) with the command, no traceback
    and no FAILED MLflow run (it exited 2 in a sweep, 1 with a traceback in a single run)."""
    import subprocess

    from tests.launch_helpers import REPO, env

    write_small_data(tmp_path / "data", n_tasks=2, n_sessions=3)
    (tmp_path / "not-a-dir").write_text("")
    e = env()
    e["RAY_TMPDIR"] = str(tmp_path / "not-a-dir" / "ray")
    with FakeOpenAI() as fake:
        for multirun in (True, False):
            p = subprocess.run(launch_cmd(tmp_path, fake.base_url, "system=backbone", "embedding=bm25",
                                          multirun=multirun), cwd=REPO, env=e, capture_output=True, text=True,
                               timeout=300)
            assert p.returncode == 75, p.stdout[-2000:] + p.stderr[-2000:]
            assert (p.stdout + p.stderr).count("a local Ray did not start") == 2  # the retry, then the error
            assert "a rerun may pass" in p.stderr and "launch.py" in p.stderr.splitlines()[-1]
            assert "Traceback" not in p.stderr
        assert fake.chat_requests() == []
    assert not (tmp_path / "mlflow.db").exists() or mlflow_runs(tmp_path) == []


def test_output_paths_are_probed_at_planning(tmp_path):
    """``tracking.uri`` under /proc passed ``os.access`` as root and failed after the tasks were paid; a
    ``run.cache_dir`` that is a file ended in a traceback. Both are exit 2 naming the key, before any call."""
    write_small_data(tmp_path / "data", n_tasks=2, n_sessions=3)
    (tmp_path / "a-file").write_text("")
    with FakeOpenAI() as fake:
        for bad, said in (("tracking.uri=sqlite:////proc/inmind/mlflow.db", "tracking.uri=sqlite:////proc/inmind"
                                                                            "/mlflow.db: cannot write in /proc"),
                          (f"run.cache_dir={tmp_path / 'a-file'}", f"run.cache_dir={tmp_path / 'a-file'}: "
                                                                   f"{tmp_path / 'a-file'} is not a directory")):
            p = run(launch_cmd(tmp_path, fake.base_url, "system=backbone", "embedding=bm25", bad, multirun=False))
            assert p.returncode == 2 and said in p.stderr, p.stderr[-2000:]
            assert "Traceback" not in p.stderr
        assert fake.chat_requests() == []
