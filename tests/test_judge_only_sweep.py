"""A sweep that only changes the judge costs only judge calls (issue #22 item 2): the dry run counts no memory or
answer call for a configuration that differs from an answered one only in its judge, and the run sends none (they
are call-cache hits); in one sweep such a configuration waits for its leader, so the two never miss the cache at
the same time. Against the fake server, through the real client."""

from __future__ import annotations

import re

import pytest

from inmind_exp.protocol.judges import JUDGES
from tests.fake_openai import FakeOpenAI

JUDGE_SYSTEMS = {j.system for j in JUDGES.values()}


def _kinds(requests) -> tuple[int, int]:
    """(judge requests, every other chat or embedding request) among the fake server's POSTs."""
    posts = [r["body"] for r in requests if r["method"] == "POST"]
    judge = sum(1 for b in posts if "messages" in b and b["messages"][0]["content"] in JUDGE_SYSTEMS)
    return judge, len(posts) - judge


def _plan(tmp_path, base_url: str, *overrides: str):
    from inmind_exp.plan.plan import plan_config
    from tests.test_runner_ray import compose

    cfg = compose(tmp_path, base_url, "cluster.workers=1", "system=mem0", "embedding=emb3", *overrides)
    job = "job-" + "-".join(o.replace("=", "_").replace("/", "_") for o in overrides)
    return plan_config(cfg, tmp_path / "root", tmp_path / job)


def test_only_the_judges_parts_leave_the_answers_key(tmp_path, monkeypatch):
    from inmind_exp.plan.reuse import answers_identity, answers_key, leaders

    monkeypatch.setenv("OPENAI_API_KEY", "fake")
    url = "http://127.0.0.1:9/v1"
    a = _plan(tmp_path, url, "llm.roles.judge.model=judge-a")
    b = _plan(tmp_path, url, "llm.roles.judge.model=judge-b")
    c = _plan(tmp_path, url, "run.judge_attempts=2")
    d = _plan(tmp_path, url, "llm.roles.answerer.model=other-answerer")
    assert len({a.config_hash, b.config_hash, c.config_hash, d.config_hash}) == 4
    assert answers_key(a) == answers_key(b) == answers_key(c) != answers_key(d)
    ident = answers_identity(a.identity)
    assert "judges" not in ident and "judge" not in ident["roles"] and "judges" not in ident["code"]
    assert ident["roles"]["answerer"] == a.identity["roles"]["answerer"] and ident["system"] == a.identity["system"]
    assert leaders([a, d, b, c]) == {2: 0, 3: 0}  # the answerer change leads its own group
    assert leaders([a, a]) == {}  # an equal configuration is a duplicate (run.dedupe), not a judge variant


def test_a_judge_only_variant_of_a_finished_run_is_estimated_and_run_with_judge_calls_only(tmp_path, monkeypatch):
    from inmind_exp.plan.ledger import Ledger
    from inmind_exp.plan.estimate import estimate
    from inmind_exp.run.driver import run_plan
    from inmind_exp.exec.executor import InProcessExecutor
    from inmind_exp.run.resources import Resources

    monkeypatch.setenv("OPENAI_API_KEY", "fake")
    with FakeOpenAI() as fake:
        first = _plan(tmp_path, fake.base_url, "llm.roles.judge.model=fake-model")
        est = estimate(first)
        assert est["memory_calls"] > 0 and est["answer_calls"] > 0 and est["answers_cached_tasks"] == 0
        run_plan(first, executor=InProcessExecutor(), resources=Resources())
        judge0, other0 = _kinds(fake.requests)
        assert other0 > 0 and judge0 == est["judge_calls"]

        variant = _plan(tmp_path, fake.base_url, "llm.roles.judge.model=judge-b")
        other_answerer = _plan(tmp_path, fake.base_url, "llm.roles.answerer.model=answerer-b")
        est = estimate(variant)
        assert est["answers_cached_tasks"] == len(variant.tasks) == 4
        assert (est["memory_calls"], est["answer_calls"], est["memory_prompt_tokens"]) == (0, 0, 0)
        assert est["judge_calls"] == judge0
        assert estimate(other_answerer)["answer_calls"] > 0  # a changed answerer is no judge-only variant

        fake.reset_log()
        result = run_plan(variant, executor=InProcessExecutor(), resources=Resources())
        assert all(r.error is None for r in result.records)
        judge1, other1 = _kinds(fake.requests)
        assert (judge1, other1) == (est["judge_calls"], 0)  # the call count is the dry run's: judge calls only
        assert {b["model"] for b in fake.chat_requests()} == {"judge-b"}
        before = Ledger(first.ledger_path).load()
        assert {r.task_id: r.indirect for r in result.records} == {k: v.indirect for k, v in before.items()}


def test_a_sweep_over_judge_models_runs_memory_and_answers_once(tmp_path, monkeypatch):
    from tests.launch_helpers import launch_cmd, run, write_small_data

    monkeypatch.setenv("OPENAI_API_KEY", "fake")

    write_small_data(tmp_path / "data")
    with FakeOpenAI() as fake:
        cmd = launch_cmd(tmp_path, fake.base_url, "system=mem0", "embedding=emb3",
                         "llm.roles.judge.model=fake-model,judge-b")
        dry = run([*cmd, "dry_run=true"])
        assert dry.returncode == 0, dry.stderr[-2000:]
        lines = [x for x in dry.stdout.splitlines() if x.startswith("[dry run] ")]
        assert len(lines) == 2 and "only re-judged" not in lines[0]
        assert "4 of them only re-judged" in lines[1] and "~0 memory + 0 answer + 16 judge calls" in lines[1]
        memory = re.search(r"~(\d+) memory", lines[0]).group(1)
        assert f"~{memory} memory + 8 answer + 32 judge calls" in dry.stdout  # the total: memory and answers once
        assert fake.requests == []

        done = run(cmd)
        assert done.returncode == 0, done.stderr[-3000:]
        posts = [r for r in fake.requests if r["method"] == "POST"]
        start_b = min(r["t"] for r in posts if r["body"].get("model") == "judge-b")
        after = [r for r in posts if r["t"] >= start_b]
        assert after and all(r["body"].get("model") == "judge-b" for r in after)  # the variant: judge calls only
        assert sum(1 for r in posts if r["body"].get("model") == "judge-b") == 16
