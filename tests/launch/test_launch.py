"""End to end through ``launch.py``: a sweep against the fake OpenAI-compatible server, MLflow runs and metrics,
a rerun that makes no HTTP request and no duplicate run, resume after kill -9, and clear errors for bad input."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pytest

from tests.fake_openai import FakeOpenAI
from tests.launch_helpers import env, launch_cmd, mlflow_runs, run, write_small_data


@pytest.fixture
def small(tmp_path):
    write_small_data(tmp_path / "data")
    return tmp_path


@pytest.mark.slow
def test_sweep_end_to_end_then_rerun_is_free(small):
    with FakeOpenAI() as fake:
        fake.add_rule("[user_message] (the target fact)", {"score": 1, "reason": "present"})
        fake.add_rule("(what a correct answer must do)\n", {"score": 0, "reason": "not applied"})
        cmd = launch_cmd(small, fake.base_url, "system=backbone,naive_rag", "embedding=minilm,bm25")
        p = run(cmd)
        assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
        # injection.user_turn=5 (launch_cmd) is not the preset middle's turn 40: the label says turn5
        assert "| backbone/minilm/turn5/vllm " in p.stdout and "| naive_rag/minilm/turn5/vllm " in p.stdout
        # under the table, each configuration's protocol fidelity (a task file of our own: not the official set)
        assert ("- backbone/minilm/turn5/vllm: Protocol fidelity: not leaderboard-comparable; deviations: "
                "dataset=file, trace=file, injection=turn5") in p.stdout and "[custom task file]" in p.stdout
        # backbone uses no embedding: backbone/bm25 is the same configuration as backbone/minilm and runs once
        assert ("backbone/bm25/turn5/vllm: not run, same results as backbone/minilm/turn5/vllm (backbone uses no "
                "embedding") in p.stdout and "| backbone/bm25/turn5/vllm " not in p.stdout
        n_requests = len(fake.requests)
        assert n_requests > 0

        runs = mlflow_runs(small)
        parents = [r for r in runs if r.data.tags.get("inmind.kind") == "sweep"]
        children = [r for r in runs if r.data.tags.get("inmind.kind") == "config"]
        assert len(parents) == 1 and len(children) == 3
        assert all(c.data.tags["mlflow.parentRunId"] == parents[0].info.run_id for c in children)
        for c in children:
            m = c.data.metrics
            assert m["n_tasks"] == 4 and m["n_errors"] == 0
            assert m["target_recall"] == 100.0 and m["application"] == 0.0
            assert m["target_recall_ci_low"] < 100.0 and m["application_ci_high"] > 0.0
            assert c.data.params["system.name"] in ("backbone", "naive_rag")
            assert c.info.status == "FINISHED"
            if c.data.params["system.name"] == "backbone":
                assert "naive" not in m and m["target_recall_exact"] == 100.0
            else:
                assert m["naive"] == 100.0 and m["naive_n"] == 4
        assert not any("api_key" in k and not k.endswith("_env") for k in children[0].data.params)
        # the sweep ends with the analysis report, logged to the parent run (tracking.report_at_end)
        assert parents[0].data.tags.get("inmind.report") == "analysis/report.html"
        assert (small / "sweep" / "analysis" / "report.html").is_file() and "analysis report: " in p.stdout
        # under the end table, the verdict: each configuration against the best retrieval one (a tie at 0%
        # application, named first) and the backbone, Holm-adjusted over the 3 pairs
        out = p.stdout
        assert out.index("| naive_rag/minilm/turn5/vllm ") < out.index("verdict (application, paired") < out.index(
            "analysis report: ")
        assert ("  naive_rag/minilm/turn5/vllm − naive_rag/bm25/turn5/vllm: +0.0 points [" in out
                and "McNemar p = 1.000 (Holm-adjusted, 3 pairs), 0/0 discordant tasks\n" in out)
        assert "  †: degenerate interval" in out  # 4 tasks: the flag on the line is explained under it

        fake.reset_log()
        p2 = run(cmd)
        assert p2.returncode == 0, p2.stderr[-3000:]
        assert fake.requests == []  # finished work costs nothing: no call, not even a preflight
        assert len(mlflow_runs(small)) == 4


def _ledger_lines(sweep_dir):
    files = list((sweep_dir / "ledger").glob("*.jsonl")) if (sweep_dir / "ledger").is_dir() else []
    if not files:
        return []
    return [json.loads(line) for line in files[0].read_text().splitlines() if line.strip().endswith("}")]


@pytest.mark.slow
def test_resume_after_kill_loses_nothing_and_repeats_nothing(tmp_path):
    write_small_data(tmp_path / "data", n_tasks=6)
    with FakeOpenAI(delay_s=0.4) as fake:
        # two tasks at a time on the one worker: the kill comes between rounds, with tasks still in flight
        cmd = launch_cmd(tmp_path, fake.base_url, "system=naive_rag", "embedding=bm25", "cluster.workers=1",
                         "cluster.tasks_per_worker=2")
        proc = subprocess.Popen(cmd, cwd=tmp_path, env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
        deadline = time.time() + 300
        while time.time() < deadline and len(_ledger_lines(tmp_path / "sweep")) < 2:
            time.sleep(0.2)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
        before = _ledger_lines(tmp_path / "sweep")
        assert 2 <= len(before) < 6, "the sweep should have been killed part-way"
        done_queries = {r["naive"]["context"][-1]["content"] for r in before}

        fake.delay_s = 0.0
        fake.reset_log()
        p = run(cmd)
        assert p.returncode == 0, p.stderr[-3000:]
        after = _ledger_lines(tmp_path / "sweep")
        assert sorted({r["task_id"] for r in after}) == ["t1", "t2", "t3", "t4", "t5", "t6"]
        assert after[: len(before)] == before  # nothing computed before is lost or rewritten
        asked = [m["content"] for b in fake.chat_requests() for m in b["messages"] if m["role"] == "user"]
        assert not any(q in a for q in done_queries for a in asked)  # no finished task is computed twice
        configs = [r for r in mlflow_runs(tmp_path) if r.data.tags.get("inmind.kind") == "config"]
        assert len(configs) == 1 and configs[0].data.metrics["n_tasks"] == 6


@pytest.mark.slow
def test_bad_task_file_fails_fast_naming_file_and_line(small):
    bad = small / "data" / "tasks.jsonl"
    lines = bad.read_text().splitlines()
    lines[2] = lines[2].replace('"domain": "legal"', '"domain": "law"')
    bad.write_text("\n".join(lines) + "\n")
    p = run(launch_cmd(small, "http://127.0.0.1:9/v1", "system=backbone", multirun=False))
    assert p.returncode == 2
    assert f"{bad}:3 [domain]: unknown domain 'law'" in p.stderr


@pytest.mark.slow
def test_unreachable_endpoint_is_reported_before_work(small):
    p = run(launch_cmd(small, "http://127.0.0.1:9/v1", "system=backbone", multirun=False))
    assert p.returncode == 2
    assert "cannot reach http://127.0.0.1:9/v1" in p.stderr and "answerer" in p.stderr


@pytest.mark.slow
def test_unknown_system_suggests_a_name(small):
    p = run(launch_cmd(small, "http://127.0.0.1:9/v1", "system=naive_rgx", multirun=False))
    assert p.returncode == 2
    assert "unknown system 'naive_rgx'" in p.stderr and "did you mean naive_rag?" in p.stderr
    assert "provider=" not in p.stderr  # not Hydra's list of search paths


@pytest.mark.slow
def test_dry_run_estimates_without_calls(small):
    with FakeOpenAI() as fake:
        p = run(launch_cmd(small, fake.base_url, "system=always_in_state", "dry_run=true", multirun=False))
        assert p.returncode == 0, p.stderr[-2000:]
        assert "[dry run] always_in_state" in p.stdout and "4/4 tasks to run" in p.stdout
        assert fake.requests == []


@pytest.mark.slow
def test_sweep_is_planned_in_full_before_anything_runs(small):
    """The inmind launcher plans every job first: all invalid configurations are reported, nothing runs, no MLflow run."""
    with FakeOpenAI() as fake:
        p = run(launch_cmd(small, fake.base_url, "system=backbone,naive_rag", "embedding=bm25", "llm.temperature=0,9"))
        assert p.returncode == 2, p.stdout[-2000:] + p.stderr[-2000:]
        bad = [line for line in p.stderr.splitlines() if line.startswith("error: job #")]
        assert len(bad) == 2 and all("llm.temperature=9" in line for line in bad), p.stderr[-2000:]
        assert "2 of 4 configuration(s) cannot run" in p.stderr
        assert [r for r in fake.requests if r.get("path", "").endswith("/chat/completions")] == []
    assert [r for r in mlflow_runs(small)] == []


def test_a_failed_endpoint_check_is_not_repeated():
    """The launcher checks its first job's endpoints early and every job's later: a failing server is asked once per
    launch (its error raised again), and a passing one is not asked again either."""
    from tests.fake_openai import Fault

    from inmind_exp.llm.embed import EmbeddingSpec
    from inmind_exp.llm.endpoint import Endpoint
    from inmind_exp.run.resources import Resources

    bm25 = EmbeddingSpec(name="bm25", kind="bm25")
    with FakeOpenAI() as bad, FakeOpenAI() as good:
        bad.models_fault = Fault(status=500)
        res = Resources()
        errors = []
        for _ in range(2):
            with pytest.raises(Exception) as e:
                res.preflight([Endpoint(role="answerer", base_url=bad.base_url, model="m")], bm25)
            errors.append(str(e.value))
        assert errors[0] == errors[1] and "HTTP 500" in errors[0]
        assert [r["path"] for r in bad.requests] == ["/v1/models"]
        for _ in range(2):
            res.preflight([Endpoint(role="answerer", base_url=good.base_url, model="m")], bm25)
        assert [r["path"] for r in good.requests] == ["/v1/models"]
