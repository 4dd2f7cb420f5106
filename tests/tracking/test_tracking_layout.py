"""The MLflow layout that lets the UI compare systems: experiment kind, saved runs view, run and sweep names from the
swept overrides, coordinate tags, result-only params, step-0 rounded metrics, per-task table (replaced, not
appended, on resume), dataset input, and the sweep parent's combined table. Real MLflow on a temp SQLite store."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from inmind_exp import tracking as T
from inmind_exp.tracking.writer import Tracker
from inmind_exp.config.settings import flatten_params
from inmind_exp.records import Answer, Message, TaskRecord, Task, Verdict


def _record(task_id: str, app: int) -> TaskRecord:
    ans = Answer(text=f"answer {task_id}", context=(Message("system", "s"), Message("user", f"query {task_id}")))
    verdicts = {"application": Verdict("application", app), "target_recall": Verdict("target_recall", 1),
                "answer_only": Verdict("answer_only", None, error="unparseable")}
    return TaskRecord(config_hash="h", task_id=task_id, domain="legal", system="naive_rag", injection_session=3,
                      naive=None, indirect=ans, verdicts=verdicts, target_recall_exact=1, usage={}, latency_s=1.0)


def _plan(tmp: Path, judge: str, name: str = "naive_rag/minilm/middle/openai") -> SimpleNamespace:
    cfg = {  # a stored run's config, as plain data
        "system": {"name": "naive_rag", "params": {"top_k": 5}},
        "embedding": {"name": "minilm", "kind": "local", "model": "all-MiniLM-L6-v2", "dim": 384, "batch_size": 64},
        "injection": {"name": "middle", "user_turn": 40, "fraction": None},
        "llm": {"name": "openai", "provider": "openai", "model": "gpt-5-mini", "api_key_env": "OPENAI_API_KEY",
                "timeout_s": 300.0, "server": {"n_ctx": 4096}, "roles": {"judge": {"model": judge}}},
        "answer": {"mode": "shared"}, "cluster": {"workers": 2}, "tracking": {"uri": "x"},
        "run": {"judge_attempts": 3, "cache_dir": ".c"}, "dataset": {"path": "t.jsonl", "limit": None},
        "trace": {"path": None, "index": 0},
    }
    eps = {r: SimpleNamespace(model=judge if r == "judge" else "gpt-5-mini") for r in ("answerer", "judge", "memory")}
    tasks = [Task("t1", "legal", "u", "a", "nq", "q", "e"), Task("t2", "legal", "u2", "a2", "nq2", "q2", "e2")]
    return SimpleNamespace(cfg=cfg, name=name, config_hash=f"hash-{judge}", system_name="naive_rag",
                           answer_mode="shared", endpoints=eps, session_index=19,
                           trace=SimpleNamespace(sessions=[None] * 21), root=tmp / "sweep", tasks=tasks)


@pytest.fixture
def tracker(tmp_path):
    return Tracker(f"sqlite:///{tmp_path / 'mlflow.db'}", "exp")


def test_experiment_opens_on_runs_with_the_saved_view(tracker):
    exp = tracker.client.get_experiment(tracker.experiment_id)
    assert exp.tags[T.EXPERIMENT_KIND_TAG] == "custom_model_development"
    view = json.loads(exp.tags["mlflow.sharedViewState.inmind-table"])
    assert "metrics.`application`" in view["selectedColumns"] and view["orderByKey"] == "metrics.`application`"
    assert T.runs_view_url("http://h:5000/", "1") == "http://h:5000/#/experiments/1/runs?viewStateShareKey=inmind-table"


def test_sweep_and_config_runs_compare_out_of_the_box(tracker, tmp_path):
    (tmp_path / "sweep").mkdir()
    (tmp_path / "sweep" / "multirun.yaml").write_text(
        "hydra:\n  overrides:\n    task:\n    - llm=openai\n    - llm.roles.judge.model=gpt-5-mini,gpt-4o\n"
        f"    - dataset.path={tmp_path}/t.jsonl\n")
    tasks_file = tmp_path / "t.jsonl"
    tasks_file.write_text("{}\n")
    parent = tracker.open_sweep_run("sweep:k", tmp_path / "sweep")
    run_ids = []
    for judge, apps in (("gpt-5-mini", (1, 0, 0)), ("gpt-4o", (1, 1, 0))):
        plan = _plan(tmp_path, judge, f"naive_rag/minilm/middle/openai [judge.model={judge}]")
        rid = tracker.open_config_run(plan, flatten_params(plan.cfg), f"key-{judge}", parent, tasks_file)
        recs = [_record(f"t{i}", a) for i, a in enumerate(apps)]
        shown = tracker.log_config_results(rid, {"application": 100 / 3 * sum(apps), "n_tasks": 3.0}, recs, [])
        tracker.add_to_sweep(parent, rid, shown)
        run_ids.append(rid)

    p = tracker.client.get_run(parent)
    assert p.info.run_name == "sweep sweep: llm=openai llm.roles.judge.model=gpt-5-mini,gpt-4o"
    assert p.data.params["sweep.llm.roles.judge.model"] == "gpt-5-mini,gpt-4o"
    table = json.loads(Path(tracker.client.download_artifacts(parent, "results_table.json", str(tmp_path))).read_text())
    col = table["columns"].index("configuration")
    md = Path(tracker.client.download_artifacts(parent, "results.md", str(tmp_path))).read_text()
    assert md.index("| configuration") < md.index("Application") < md.index("## All metrics")  # the headline first
    assert sorted(r[col] for r in table["data"]) == ["naive_rag/minilm/middle/openai [judge.model=gpt-4o]",
                                                   "naive_rag/minilm/middle/openai [judge.model=gpt-5-mini]"]

    run = tracker.client.get_run(run_ids[1])
    assert run.info.run_name == "naive_rag/minilm/middle/openai [judge.model=gpt-4o]"  # the plan's label
    tags = run.data.tags
    assert (tags["inmind.system"], tags["inmind.embedding"], tags["inmind.injection"]) == ("naive_rag", "minilm", "middle")
    assert (tags["inmind.judge_model"], tags["inmind.answerer_model"], tags["inmind.answer_mode"]) == (
        "gpt-4o", "gpt-5-mini", "shared")
    assert tags["inmind.injection_point"] == "turn40 (session 20/21)"
    # a task file of the user's own, the shared answer prompt, the strict judges, gpt-4o judging: not official
    assert tags["inmind.task_set"] == "custom task file"
    assert tags["inmind.fidelity"].startswith("dataset=file; trace=bundled; answer=shared; judges=strict")
    assert "judge model=gpt-4o" in tags["inmind.fidelity"]
    fcol = table["columns"].index("fidelity")
    assert all(r[fcol].startswith("dataset=file") for r in table["data"])
    assert not any(c.endswith("_official") for c in table["columns"])  # not the official tasks: no such column
    params = run.data.params
    assert params["system.params.top_k"] == "5" and params["llm.roles.judge.model"] == "gpt-4o"
    assert params["inmind.config_hash"] == "hash-gpt-4o"
    assert not any(k.startswith(("cluster.", "tracking.", "llm.server.", "run.cache_dir")) for k in params)
    assert "llm.timeout_s" not in params and "llm.api_key_env" not in params
    hist = tracker.client.get_metric_history(run_ids[1], "application")
    assert [(m.step, m.value) for m in hist] == [(0, 66.67)]  # one rounded value at step 0: a bar, not a dot
    assert [d.dataset.name for d in run.inputs.dataset_inputs] == ["t"]

    rows = json.loads(Path(tracker.client.download_artifacts(run_ids[1], "records_table.json", str(tmp_path / "a")))
                      .read_text())
    assert len(rows["data"]) == 3
    cols = rows["columns"]
    assert rows["data"][0][cols.index("query")] == "query t0" and rows["data"][0][cols.index("answer_only")] == "error"

    # a resumed run replaces its per-task table instead of appending to it
    tracker.log_config_results(run_ids[1], {"application": 50.0}, [_record("t0", 1), _record("t1", 0)], [])
    rows = json.loads(Path(tracker.client.download_artifacts(run_ids[1], "records_table.json", str(tmp_path / "b")))
                      .read_text())
    assert len(rows["data"]) == 2


def test_the_sweep_headline_shows_the_in_context_naive_as_a_dash(tracker, tmp_path):
    """The parent's results.md: the backbone (its traits logged as params) answered the naive query in context, so
    its Naive is "–" with the note; the CSV-like table below keeps the number."""
    from inmind_exp.display import headline
    from inmind_exp.memory.traits import Traits

    (tmp_path / "sweep").mkdir()
    (tmp_path / "sweep" / "multirun.yaml").write_text("hydra:\n  overrides:\n    task:\n    - system=backbone\n")
    parent = tracker.open_sweep_run("sweep:b", tmp_path / "sweep")
    plan = _plan(tmp_path, "gpt-5-mini", "backbone/minilm/middle/openai")
    params = {**flatten_params(plan.cfg), **Traits(control="in_context", retrieval=False).params()}
    rid = tracker.open_config_run(plan, params, "key-b", parent, None)
    flat = {"application": 80.0, "application_n": 5.0, "n_tasks": 5.0, "naive": 100.0, "naive_n": 5.0}
    tracker.add_to_sweep(parent, rid, tracker.log_config_results(rid, flat, [], []))
    md = Path(tracker.client.download_artifacts(parent, "results.md", str(tmp_path))).read_text()
    head = md.split("## All metrics")[0]
    row = next(line for line in head.splitlines() if line.startswith("| backbone/"))
    assert [c.strip() for c in row.split("|")][5] == "–" and headline.IN_CONTEXT_NOTE in head
    assert "| 100.0 |" in md.split("## All metrics")[1]


def test_sweep_name_leaves_out_bookkeeping_overrides():
    assert T.sweep_name(Path("/x/multirun"), ["system=a,b", "tracking.uri=sqlite:///m.db", "hydra.sweep.dir=d"]) == \
        "sweep multirun: system=a,b"


def test_a_run_charts_the_rates_and_counts_and_keeps_every_value_in_metrics_json(tracker, tmp_path):
    """MLflow's metrics tab draws one chart per metric: a run logs the rates, counts, time and cost (about 30), and
    every value of ``RunMetrics.flat`` (per-role tokens, per-metric n and errors, judge-audit counts) goes to
    ``metrics.json``; the sweep parent's description is its headline table."""
    from inmind_exp.protocol.metrics import compute
    from inmind_exp.records import Usage

    (tmp_path / "sweep").mkdir()
    parent = tracker.open_sweep_run("sweep:m", tmp_path / "sweep")
    plan = _plan(tmp_path, "gpt-5-mini")
    rid = tracker.open_config_run(plan, flatten_params(plan.cfg), "key-m", parent, None)
    recs = [_record(f"t{i}", i % 2) for i in range(4)]
    recs = [TaskRecord(**{**r.__dict__, "usage": {"answerer": Usage(calls=2, prompt_tokens=100), "judge": Usage(
        calls=3, prompt_tokens=50, completion_tokens=9)}}) for r in recs]
    flat = {**compute(recs).flat(), "wall_s": 41.2, "cost_usd": 0.0123, "n_planned": 4.0}
    shown = tracker.log_config_results(rid, flat, recs, [])
    tracker.add_to_sweep(parent, rid, shown)
    logged = tracker.client.get_run(rid).data.metrics
    assert len(flat) > 60 and len(logged) <= 35, sorted(logged)
    for k in ("application", "application_ci_low", "application_ci_high", "application_n", "target_recall",
              "naive_n", "n_tasks", "n_planned", "wall_s", "cost_usd", "delta_application_recall"):
        assert k in logged, k
    assert not any(k.startswith(("answerer_", "judge_", "faults_")) for k in logged)
    every = json.loads(Path(tracker.client.download_artifacts(rid, "metrics.json", str(tmp_path / "m"))).read_text())
    assert set(every) == {k for k in flat} and every["answerer_prompt_tokens"] == 400.0
    desc = tracker.client.get_run(parent).data.tags["mlflow.note.content"]
    assert desc.startswith("| configuration") and "naive_rag/minilm/middle/openai" in desc and "Application" in desc
