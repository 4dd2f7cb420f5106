"""Live progress against the fake server with a delay: running units report their phase (ingesting session i/n,
answering, judging), a line is logged every run.progress_every_s before any task has finished, the ETA appears once
one has, cached calls are neither paid calls nor cost, and (through launch.py on Ray) every line reaches launch.log."""

from __future__ import annotations

import dataclasses
import logging
import re

from inmind_exp.records import Usage
from inmind_exp.plan.plan import plan_config
from inmind_exp.run.driver import run_plan
from inmind_exp.exec.executor import InProcessExecutor
from inmind_exp.display.phases import PhaseBoard, PhaseReporter, summarize_phases, unit_key
from inmind_exp.display.progress import Spend
from inmind_exp.run.resources import Resources
from inmind_exp.exec.worker import TaskWorker
from tests.fake_openai import FakeOpenAI
from tests.launch_helpers import REPO, mlflow_runs, run, write_small_data
from tests.exec.test_runner_ray import compose

PHASE = re.compile(r"running: .*\b(ingesting \(\d+(–\d+)?/\d+\)|answering naive|answering indirect|judging)")


class Lines(logging.Handler):
    """The project's log messages, in order (the inmind_exp logger may not propagate to pytest's caplog)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())

    def __enter__(self) -> "Lines":
        ours = logging.getLogger("inmind_exp")
        self._level = ours.level
        ours.setLevel(logging.INFO)
        ours.addHandler(self)
        return self

    def __exit__(self, *exc: object) -> None:
        ours = logging.getLogger("inmind_exp")
        ours.removeHandler(self)
        ours.setLevel(self._level)


class RecordingBoard(PhaseBoard):
    def __init__(self) -> None:
        super().__init__()
        self.history: list[tuple[str, str]] = []

    def set(self, key: str, phase: str, seq: int | None = None) -> None:
        self.history.append((key, phase))
        super().set(key, phase, seq)


def test_phases_are_reported_in_protocol_order(tmp_path):
    board = RecordingBoard()
    with FakeOpenAI() as fake:
        plan = plan_config(compose(tmp_path, fake.base_url, "system=always_in_state", "embedding=bm25"),
                           tmp_path / "root", tmp_path / "job")
        worker = TaskWorker(board=board)
        try:
            spec = plan.worker_spec()
            built = worker.build_prefix(spec, plan.trace, plan.session_index)
            blob = built.blob
            task = plan.tasks[0]
            rec = worker.run_task(spec, task, plan.trace, plan.session_index, plan.prefix_hash, blob, 2)
        finally:
            worker.close()
    assert rec.error is None
    # the prefix's own calls (always_in_state updates its memory file per session) come back for the spend
    assert built.usage["memory"].calls >= plan.session_index and built.usage["memory"].cached_calls == 0
    n = len(plan.trace.sessions)
    prefix = [p for k, p in board.history if k == unit_key(plan.config_hash)]
    assert prefix == ["prefix starting", *[f"prefix ingesting {i}/{n}" for i in range(1, plan.session_index + 1)],
                      "prefix packing"]
    phases = [p for k, p in board.history if k == unit_key(plan.config_hash, task.id, 2)]
    assert phases == ["starting", *[f"ingesting {i}/{n}" for i in range(plan.session_index + 1, n + 1)],
                      "answering naive", "answering indirect", "judging"]
    assert board.snapshot() == {}  # a finished unit leaves the board


def test_reporter_never_fails_a_task():
    PhaseReporter(None, "k")("judging")  # no board: nothing happens

    class Gone:
        def set(self, *a):
            raise ConnectionError("actor died")

    r = PhaseReporter(Gone(), "k")
    r("judging")
    r("judging")  # once lost, the board is no longer called
    assert r.board is None


def test_board_drops_reports_that_arrive_late():
    """The board runs in an actor whose calls Ray does not order: a report older than the last one applied for its
    unit (a set after the unit's clear, an earlier phase after a later one) changes nothing; a later reporter of the
    same unit (a prefix built again) is newer than any earlier one's."""
    board = PhaseBoard()
    sent: list[tuple] = []

    class Recorder:  # captures what a reporter sends, to deliver it out of order
        def __getattr__(self, method):
            return lambda *args: sent.append((method, *args))

    first = PhaseReporter(Recorder(), "c/t1/1")
    first("ingesting 1/3")
    first("answering indirect")
    first.done()
    for method, *args in [sent[2], sent[0], sent[1]]:  # the clear arrives first
        getattr(board, method)(*args)
    assert board.snapshot() == {}
    sent.clear()
    again = PhaseReporter(Recorder(), "c/t1/1")
    again("judging")
    getattr(board, sent[0][0])(*sent[0][1:])
    assert board.snapshot() == {"c/t1/1": "judging"}
    board.set("c/t2/1", "starting")  # a report without a sequence number is applied as it comes
    assert board.snapshot()["c/t2/1"] == "starting"


def test_phase_summary_and_spend():
    assert summarize_phases(["ingesting 31/47", "judging", "ingesting 12/47"]) == "2 ingesting (12–31/47), 1 judging"
    assert summarize_phases(["ingesting 16/47"] * 3) == "3 ingesting (16/47)"
    paid = Usage(calls=3, prompt_tokens=3000, completion_tokens=300)
    cached = Usage(calls=2, prompt_tokens=2000, completion_tokens=200, cached_calls=2, cached_prompt_tokens=2000,
                   cached_completion_tokens=200)

    s = Spend.of([{"answerer": paid}, {"answerer": cached, "judge": cached}], {"m": (1.0, 2.0)},
                 {"answerer": "m", "judge": "m"})
    assert (s.paid_calls, s.cached_calls, s.paid_tokens) == (3, 4, 3300)
    assert abs(s.cost_usd - (3000 * 1.0 + 300 * 2.0) / 1e6) < 1e-12
    # a role whose model has no price: no cost at all rather than a partial one
    unpriced = Spend.of([{"answerer": paid, "judge": paid}], {"m": (1.0, 2.0)}, {"answerer": "m", "judge": "x"})
    assert unpriced.cost_usd is None
    assert "$" not in Spend.of([{"answerer": paid}], {}, {"answerer": "m"}).text()


def test_lines_while_no_task_has_finished_then_eta_and_free_rerun(tmp_path):
    with FakeOpenAI(delay_s=0.25) as fake, Lines() as lines:
        cfg = compose(tmp_path, fake.base_url, "system=naive_rag", "embedding=bm25", "run.progress_every_s=0.2")
        priced = {"fake-model": (1.0, 2.0)}
        plan = dataclasses.replace(plan_config(cfg, tmp_path / "root", tmp_path / "job"), prices=priced)
        result = run_plan(plan, executor=InProcessExecutor(), resources=Resources())
        assert all(r.error is None for r in result.records)
        first = lines.messages[:]
        lines.messages.clear()
        # a fresh run directory over the same call cache: every call is answered from the cache
        again = dataclasses.replace(plan_config(cfg, tmp_path / "root2", tmp_path / "job2"), prices=priced)
        run_plan(again, executor=InProcessExecutor(), resources=Resources())
        second = lines.messages[:]

    progress = [m for m in first if m.startswith("[progress] ")]
    before = [m for m in progress if " 0/4 tasks" in m]
    assert before, first  # lines while no task has finished ...
    assert any(PHASE.search(m) for m in before), before  # ... naming what the running task does
    # ... and an ETA as soon as the running task reports how far it is, before any task has finished
    assert any(re.search(r" 0/4 tasks · ETA \d", m) for m in before), before
    after = [m for m in progress if " 0/4 tasks" not in m]
    assert after and all(re.search(r"^\[progress\] \S+: [1-4]/4 tasks · ETA \d\S* · \$0\.\d{4} · ", m) for m in after), after
    assert all(re.search(r" · [1-9]\d* paid calls, \d+ cached, [\d.]+k tokens paid$", m) for m in after)
    (summary,) = [m for m in first if " finished: " in m]
    assert re.search(r"4/4 tasks, 0 errors; this run: [1-9]\d* paid calls, 0 cached, .*\$0\.\d{4}", summary)
    assert not any("Rerun" in m for m in first)  # no errors: no retry hint

    (summary,) = [m for m in second if " finished: " in m]
    assert re.search(r"4/4 tasks, 0 errors; this run: 0 paid calls, [1-9]\d* cached, 0\.0k tokens paid, \$0\.0000,",
                     summary), summary


def test_progress_every_s_zero_is_silent(tmp_path):
    with FakeOpenAI(delay_s=0.05) as fake, Lines() as lines:
        cfg = compose(tmp_path, fake.base_url, "system=backbone", "embedding=bm25", "dataset.limit=1")
        run_plan(plan_config(cfg, tmp_path / "root", tmp_path / "job"), executor=InProcessExecutor(),
                 resources=Resources())
    assert not [m for m in lines.messages if m.startswith("[progress] ")]
    assert [m for m in lines.messages if " finished: 1/1 tasks" in m]


def launch(tmp, base_url, sweep_dir, *overrides):
    tasks, trace = tmp / "data" / "tasks.jsonl", tmp / "data" / "longmemeval_s_small.json"
    import sys

    return run([sys.executable, str(REPO / "launch.py"), "-m",
                "llm=openai", f"llm.base_url={base_url}", "llm.model=gpt-4o-mini", "llm.max_attempts=2",
                f"dataset.path={tasks}", "dataset.limit=null", f"trace.path={trace}", "injection.user_turn=5",
                f"tracking.uri=sqlite:///{tmp / 'mlflow.db'}", "tracking.experiment=test", "embedding=bm25",
                f"hydra.sweep.dir={sweep_dir}", f"run.cache_dir={tmp / 'cache'}",
                "cluster.workers=2", "cluster.num_cpus=2", *overrides])


def test_sweep_progress_reaches_console_and_launch_log(tmp_path, monkeypatch):
    """A 2-configuration sweep on Ray, priced (gpt-4o-mini in conf/llm/openai.yaml): per-configuration lines with
    phases reported from inside the actors, the sweep line, the summaries, all in launch.log."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-fake-progress-test")
    write_small_data(tmp_path / "data", n_tasks=3)
    with FakeOpenAI(delay_s=0.4) as fake:
        # one task per worker: the tasks finish one by one, so a line between the first and the last shows an ETA
        p = launch(tmp_path, fake.base_url, tmp_path / "sweep", "system=backbone,naive_rag", "run.progress_every_s=0.5",
                   "cluster.tasks_per_worker=1")
        assert p.returncode == 0, p.stderr[-3000:]
        lines = [ln for ln in p.stdout.splitlines() if ln.startswith(("[progress]", "[inmind]"))]
        config_lines = [ln for ln in lines if ln.startswith("[progress] ") and not ln.startswith("[progress] sweep")]
        assert any(" 0/3 tasks" in ln and PHASE.search(ln) for ln in config_lines), "\n".join(lines)
        assert any(re.search(r"[12]/3 tasks .*ETA \d", ln) for ln in config_lines), "\n".join(lines)
        assert any(re.match(r"\[progress\] sweep: \d/6 tasks · ETA .* · 0 of 2 configurations done", ln) for ln in lines)
        assert not re.search(r"#\d+ : ", p.stdout + p.stderr)  # Hydra's per-job echo is silenced
        (summary,) = [ln for ln in lines if ln.startswith("[inmind] sweep finished")]
        assert re.search(r"2 of 2 configurations, 6/6 tasks, 0 errors; this run: [1-9]\d* paid calls, \d+ cached, "
                         r"[\d.]+k tokens paid, \$0\.\d{4}", summary), summary
        log = (tmp_path / "sweep" / "launch.log").read_text()
        for ln in lines:
            assert ln in log  # the sweep's launch.log holds the run's story
        jobs = [d for d in (tmp_path / "sweep").iterdir() if (d / "records.jsonl").is_file()]
        assert len(jobs) == 2
        for d in jobs:  # and each job directory its own configuration's
            job_log = (d / "launch.log").read_text()
            assert "[progress] " in job_log and " finished: 3/3 tasks" in job_log
            assert "[progress] sweep" not in job_log

    assert len(mlflow_runs(tmp_path)) == 3  # the parent and its two configurations
