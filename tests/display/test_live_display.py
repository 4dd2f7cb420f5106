"""The live display (#25 item 3): under a pseudo-terminal the progress lines are redrawn in place (cursor-up and
clear codes, the block removed before the run's closing lines) and the spend grows before any task has finished;
through a pipe the same run prints the plain ``[progress]`` lines and no control codes; ``run.progress=off`` prints
none. The handler's block: one line per running configuration, the queued ones summarised, the sweep last."""

from __future__ import annotations

import io
import logging
import os
import pty
import re
import subprocess
import sys

import pytest

from inmind_exp.display.live import LiveConsole, quiet_argv
from tests.launch_helpers import REPO, env

SCRIPT = ["-m", "tests.live_display_script"]  # as a module: tests/ is not put first on sys.path
UP_CLEAR = re.compile(r"\x1b\[\d+F\x1b\[J")


def _under_pty(work, mode: str) -> str:
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, *SCRIPT, str(work), mode], cwd=REPO, env=env(), stdin=slave,
                            stdout=slave, stderr=subprocess.DEVNULL, close_fds=True)
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
    proc.wait(timeout=300)
    os.close(master)
    assert proc.returncode == 0, out[-3000:]
    return out.decode("utf-8", "replace")


def test_under_a_terminal_progress_updates_in_place(tmp_path):
    out = _under_pty(tmp_path, "auto")
    assert "END-OF-RUN" in out
    redraws = UP_CLEAR.findall(out)
    assert len(redraws) >= 3, out[-2000:]  # the block was redrawn in place, not appended
    assert out.count("[progress]") == 0  # the live block shows the configuration, not the plain prefix
    assert re.search(r"  backbone/bm25/turn5/vllm: \d/4 tasks · ETA ", out)
    block = [ln for ln in re.split(r"\r?\n|\x1b\[\d+F\x1b\[J", out) if ln.startswith("  backbone/bm25/turn5/vllm: ")]
    assert block and all(len(ln) <= 120 for ln in block), block  # never wider than the terminal (120 here)
    # spend counted as calls complete: a paid call is shown while no task has finished yet
    assert re.search(r"0/4 tasks [^\n]* · [1-9]\d* paid calls", out), out[:3000]
    # the block is cleared before the closing line: nothing of it follows the summary
    tail = out[out.index("backbone/bm25/turn5/vllm finished"):]
    assert "  backbone/bm25/turn5/vllm: " not in tail


@pytest.mark.slow
def test_through_a_pipe_the_plain_lines_and_no_control_codes(tmp_path):
    p = subprocess.run([sys.executable, *SCRIPT, str(tmp_path), "auto"], cwd=REPO, env=env(), capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "\x1b[" not in p.stdout
    assert re.search(r"^\[progress\] backbone/bm25/turn5/vllm: \d/4 tasks · ETA ", p.stdout, re.M)


def test_progress_off_prints_no_progress_lines(tmp_path):
    out = _under_pty(tmp_path, "off")
    assert "[progress]" not in out and not UP_CLEAR.search(out)
    assert "backbone/bm25/turn5/vllm finished: 4/4 tasks" in out


def test_the_block_summarises_queued_configurations_and_ends_with_the_sweep():
    stream = io.StringIO()
    h = LiveConsole(stream)
    h.setFormatter(logging.Formatter("%(message)s"))
    log = logging.getLogger("test.live")
    log.propagate, log.level = False, logging.INFO
    log.addHandler(h)
    try:
        log.info("[progress] a/x: 1/4 tasks (0 errors); running: 2 judging; 3s elapsed, ETA 9s; 4 paid calls")
        log.info("[progress] b/x: 0/4 tasks (0 errors); running: queued; 3s elapsed, ETA —; 0 paid calls")
        log.info("[progress] c/x: 0/4 tasks (0 errors); running: queued, 1 worker(s) starting; 3s elapsed")
        log.info("[progress] sweep: configuration 0 of 3 done, 1/12 tasks (0 errors); 3s elapsed, ETA 30s")
        assert h.block() == ["  a/x: 1/4 tasks (0 errors); running: 2 judging; 3s elapsed, ETA 9s; 4 paid calls",
                             "  2 queued: b/x, c/x",
                             "» sweep: configuration 0 of 3 done, 1/12 tasks (0 errors); 3s elapsed, ETA 30s"]
        log.info("[inmind] a/x finished: 4/4 tasks, 0 errors")
        assert h.block()[0] == "  2 queued: b/x, c/x"
        written = stream.getvalue()
        # the finished line is written above the block: clear (3 lines up), the message, the block again
        assert "\x1b[3F\x1b[J[inmind] a/x finished: 4/4 tasks, 0 errors\n  2 queued" in written
    finally:
        log.removeHandler(h)
        h.close()
    assert stream.getvalue().endswith("\x1b[2F\x1b[J")  # closed: the block is removed


def test_quiet_flag_is_progress_off():
    assert quiet_argv(["-m", "--quiet", "system=backbone"]) == ["-m", "run.progress=off", "system=backbone"]


def _progress(n_tasks: int):
    import types

    from inmind_exp.display.progress import PlanProgress

    plan = types.SimpleNamespace(tasks=[object()] * n_tasks, endpoints={}, embedding=None, prices={}, name="p")
    return PlanProgress(plan, {})


def _finish(p, k: int) -> None:
    import types

    for i in range(k):
        rec = types.SimpleNamespace(task_id=f"t{i}", error=None, failed_verdicts=(), attempts=1, usage={})
        p.records[rec.task_id] = rec
        p.new.append(rec)


def test_eta_counts_from_when_tasks_began_running_not_from_start_up():
    from inmind_exp.display.progress import SweepProgress

    p = _progress(10)
    p.started -= 600  # ten minutes of Ray and prefix start-up
    p(["prefix ingesting 1/2"])
    assert p.running_since is None  # a prefix build is not task time
    p(["answering indirect"])
    p.running_work = 0.0  # (what the phase is worth: the test below)
    p.running_since -= 20  # tasks have run for 20 s ...
    _finish(p, 2)  # ... and two finished: 0.1 task/s, 8 left
    assert abs(p.eta() - 80) < 2  # not (600 + 20) / 2 * 8
    q = _progress(10)
    q(["judging"])
    q.running_work = 0.0
    q.running_since -= 40
    _finish(q, 2)  # 0.05 task/s: 160 s left
    sweep = SweepProgress(2, 0)
    sweep.register(p)
    sweep.register(q)
    assert abs(sweep.eta() - 160) < 3  # the slower configuration ends the sweep (they run side by side)
    assert re.search(r"^\[progress\] sweep: 4/20 tasks · ETA 2m\d\ds · ", sweep.line())
    queued = _progress(10)  # a third configuration, not started: the sweep's ETA is at least the others'
    sweep.n = 3
    sweep.register(queued)
    assert re.search(r"^\[progress\] sweep: 4/30 tasks · ETA ≥2m\d\ds · ", sweep.line()), sweep.line()


def test_tasks_that_finish_together_still_get_an_eta_from_their_phases():
    """Four tasks ingesting side by side finish together: none has finished, yet the workers' ``ingesting i/n``
    says how far they are (#44 item 6: "ETA —" throughout)."""
    p = _progress(4)
    p(["ingesting 9/47"] * 4)  # the ingestion starts after the prefix (session 9)
    assert p.eta() is None  # not "ETA 0s" from work seen in no time
    p.running_since -= 30
    p(["ingesting 28/47"] * 4)  # half of the ingestion in 30 s
    eta = p.eta()
    assert eta is not None and 20 < eta < 60, eta  # the rest of the ingestion and the answers: about 30 s more
    line = p.line(["ingesting 28/47"] * 4)
    assert line.startswith("[progress] p: 0/4 tasks · ETA ") and "running: 4 ingesting (28/47) · " in line


def test_tasks_first_seen_well_under_way_count_from_the_last_idle_display():
    """A display that first sees tasks at ``answering naive`` (they ran between two displays) dates them from the
    previous display, not from now: "ETA 0s" at 0/6 tasks was the bug."""
    import time

    p = _progress(6)
    p([])  # a display with no task running yet
    p._idle_at -= 10  # ... ten seconds ago
    p(["answering naive"] * 6)
    assert abs(p.running_since - (time.perf_counter() - 10)) < 1
    assert p.eta() is not None and p.eta() >= 1


def test_a_live_line_fits_120_columns_with_the_figures_first(monkeypatch):
    """At 120 columns the figures (done/total, ETA, $) survive; the running phases of 32 tasks are one summary."""
    monkeypatch.setenv("COLUMNS", "120")
    p = _progress(125)
    p.plan.name = "naive_rag/minilm/middle/vllm"
    running = [f"ingesting {i}/47" for i in range(9, 41)] + ["answering naive"] * 8
    stream = io.StringIO()
    h = LiveConsole(stream)
    h.setFormatter(logging.Formatter("%(message)s"))
    h.emit(logging.LogRecord("x", logging.INFO, "", 0, p.line(running), None, None))
    (line,) = h.block()
    assert len(line) <= 120
    assert re.match(r"  naive_rag/minilm/middle/vllm: 0/125 tasks · ETA \S+ · \$ unpriced · running: "
                    r"32 ingesting \(9–40/47\), 8 answering naive", line), line


def test_spend_counts_calls_as_they_complete_and_never_fewer_than_the_records():
    from inmind_exp.records import Usage

    p = _progress(2)
    assert p.spend().paid_calls == 0
    p.live({"answerer": Usage(calls=3, prompt_tokens=30, completion_tokens=3)})
    assert p.spend().paid_calls == 3  # no task has finished: the board's count shows


def test_the_saved_mlflow_view_shows_the_headline_rates_with_their_bounds_first():
    from inmind_exp.tracking import runs_view_state

    cols = runs_view_state()["selectedColumns"]
    assert cols[:6] == [f"metrics.`{m}`" for m in ("application", "application_ci_low", "application_ci_high",
                                                  "target_recall", "target_recall_ci_low", "target_recall_ci_high")]
