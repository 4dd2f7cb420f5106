"""The run package without Ray: a plan resolved from a composed config runs on the in-process executor against the
fake server, writes the ledger and MLflow, and a rerun of the same plan costs nothing; the dry-run estimate and the
verdicts follow the judge registry."""

from __future__ import annotations

from inmind_exp.protocol.judges import JUDGES, applicable
from inmind_exp.plan.ledger import Ledger
from inmind_exp.plan.estimate import estimate
from inmind_exp.plan.plan import plan_config
from inmind_exp.run.driver import run_plan
from inmind_exp.exec.executor import InProcessExecutor
from inmind_exp.run.resources import Resources
from tests.fake_openai import FakeOpenAI
from tests.exec.test_runner_ray import compose


def test_plan_runs_in_process_and_rerun_is_free(tmp_path):
    with FakeOpenAI() as fake:
        cfg = compose(tmp_path, fake.base_url, "system=backbone", "embedding=bm25")
        plan = plan_config(cfg, tmp_path / "root", tmp_path / "job")
        assert plan.name == "backbone/bm25/turn5/vllm" and len(plan.remaining()) == 4
        est = estimate(plan)
        assert est["judge_calls"] == 4 * len(applicable(evaluates_naive=False)) == 4 * (len(JUDGES) - 1)
        result = run_plan(plan, executor=InProcessExecutor(), resources=Resources())
        assert [r.task_id for r in result.records] == ["t1", "t2", "t3", "t4"]
        assert all(r.error is None for r in result.records)
        assert all(set(r.verdicts) == {j.name for j in applicable(False)} for r in result.records)
        assert len(Ledger(plan.ledger_path).path.read_text().splitlines()) == 4
        assert result.metrics.n_tasks == 4 and (tmp_path / "job" / "records.jsonl").is_file()

        fake.reset_log()
        again = plan_config(cfg, tmp_path / "root", tmp_path / "job")
        assert again.config_hash == plan.config_hash and again.remaining() == []
        assert estimate(again)["judge_calls"] == 0
        rerun = run_plan(again, executor=InProcessExecutor(), resources=Resources())
        assert fake.requests == [] and [r.task_id for r in rerun.records] == ["t1", "t2", "t3", "t4"]


def test_local_llm_roles_are_bound_once_the_server_is_up(tmp_path):
    """llm=local: the plan (and its config hash) is known before any server starts; the roles the server serves get
    its URL from ``bind``, and nothing can be sent to a worker before that."""
    import pytest
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    from inmind_exp.config.schema import register_configs
    from inmind_exp.errors import PlanError
    from tests.launch_helpers import REPO, write_small_data

    tasks, trace = write_small_data(tmp_path / "data")
    model = tmp_path / "model.gguf"
    model.write_bytes(b"not really a model")
    register_configs()
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = hydra_compose("config", overrides=[
            "llm=local", f"llm.model_path={model}", "llm.roles.judge.base_url=http://judge.example/v1",
            f"dataset.path={tasks}", f"trace.path={trace}", "injection.user_turn=5", "system=backbone",
            "embedding=bm25", f"run.cache_dir={tmp_path / 'cache'}"])
    from inmind_exp.llm.local_server import DEFAULT_CHAT_FORMAT, DEFAULT_N_CTX
    # conf/llm/local.yaml and the code's defaults (start_local_server, LocalServerConf) name the same server
    assert (cfg.llm.server.n_ctx, cfg.llm.server.chat_format) == (DEFAULT_N_CTX, DEFAULT_CHAT_FORMAT)
    plan = plan_config(cfg, tmp_path / "root", tmp_path / "job")
    assert plan.local is not None and plan.local.roles == ("answerer", "memory")
    assert plan.local.cache_id == (f"llama.cpp:file:model.gguf:{model.stat().st_size}:ctx{cfg.llm.server.n_ctx}"
                                    f":chat-{cfg.llm.server.chat_format}")
    assert plan.endpoints["answerer"].base_url == "" and plan.endpoints["judge"].base_url == "http://judge.example/v1"
    with pytest.raises(PlanError, match="answerer, memory"):
        plan.worker_spec()
    bound = plan.bind("http://127.0.0.1:4321/v1")
    spec = bound.worker_spec()
    assert spec.endpoints["answerer"].base_url == "http://127.0.0.1:4321/v1"
    assert spec.endpoints["answerer"].identity == f"{plan.local.cache_id}|{cfg.llm.model}"  # the port is not in it
    assert spec.endpoints["judge"] == plan.endpoints["judge"]
    assert estimate(plan)["tasks_to_run"] == 2  # dataset.limit=2 by default; the dry run needs no server


def test_a_401_is_not_retried_at_task_level_and_gets_no_rerun_hint(tmp_path, caplog):
    """HTTP 400/401 are not retried by the client; the task level retried them once more anyway, and the closing
    line said a rerun may help. Now each task asks once, and the closing line says to fix the cause."""
    import logging

    from tests.fake_openai import Fault

    refused = Fault(status=401, body={"error": {"message": "bad key", "type": "invalid_request_error"}})
    with FakeOpenAI(validator=lambda body: refused) as fake:
        cfg = compose(tmp_path, fake.base_url, "system=backbone", "embedding=bm25", "run.max_task_attempts=3",
                      "dataset.limit=2")
        plan = plan_config(cfg, tmp_path / "root", tmp_path / "job")
        with caplog.at_level(logging.INFO, logger="inmind_exp"):
            result = run_plan(plan, executor=InProcessExecutor(), resources=Resources())
    assert all(r.error and "HTTP 401" in r.error for r in result.records) and len(result.records) == 2
    assert len(fake.chat_requests()) == 2  # one call per task: no retry by the client nor by the task level
    assert "fix the cause" in caplog.text and "Rerun the same command" not in caplog.text


def test_a_corrupt_ledger_line_is_skipped_with_a_warning_not_a_blocked_configuration(tmp_path, caplog):
    """Two invalid bytes in a reason (UnicodeDecodeError) or ``"verdicts": []`` (AttributeError) made every launch
    of the configuration exit 1. Now each bad line is skipped with a warning naming ``file:line``, and its task runs
    again."""
    import json
    import logging

    with FakeOpenAI() as fake:
        cfg = compose(tmp_path, fake.base_url, "system=backbone", "embedding=bm25", "dataset.limit=3")
        plan = plan_config(cfg, tmp_path / "root", tmp_path / "job")
        run_plan(plan, executor=InProcessExecutor(), resources=Resources())
        path = plan.ledger_path
        lines = path.read_bytes().splitlines(keepends=True)
        assert len(lines) == 3
        broken = sorted(json.loads(line)["task_id"] for line in lines[:2])
        lines[0] = lines[0].replace(b'"reason": "', b'"reason": "\xff\xfe', 1)
        bad = json.loads(lines[1])
        lines[1] = (json.dumps({**bad, "verdicts": []}) + "\n").encode()
        path.write_bytes(b"".join(lines))
        with caplog.at_level(logging.WARNING, logger="inmind_exp.plan.ledger"):
            again = plan_config(cfg, tmp_path / "root", tmp_path / "job")
        assert f"{path}:1: not a task record (UnicodeDecodeError" in caplog.text
        assert f"{path}:2: not a task record (AttributeError" in caplog.text
        assert sorted(t.id for t in again.remaining()) == broken
        result = run_plan(again, executor=InProcessExecutor(), resources=Resources())
        assert all(r.error is None for r in result.records) and len(result.records) == 3


def test_unusable_cache_entries_are_counted_in_the_run_summary(tmp_path, caplog):
    """Invalid cache entries were silent misses: each is now noted on its task's record (an ``invalid_cache_entry``
    diagnostic), the judges' calls included, and counted on the configuration's closing line."""
    import logging

    with FakeOpenAI() as fake:
        cfg = compose(tmp_path, fake.base_url, "system=backbone", "embedding=bm25", "dataset.limit=2")
        plan = plan_config(cfg, tmp_path / "root", tmp_path / "job")
        run_plan(plan, executor=InProcessExecutor(), resources=Resources())
        entries = sorted((tmp_path / "cache" / "chat").glob("*/*.json"))
        for p in entries:
            p.write_text('{"no": "text"}')
        ledger = Ledger(plan.ledger_path)
        ledger.path.unlink()  # the tasks run again, from the (now unusable) cache
        again = plan_config(cfg, tmp_path / "root", tmp_path / "job")
        with caplog.at_level(logging.INFO, logger="inmind_exp"):
            result = run_plan(again, executor=InProcessExecutor(), resources=Resources())
    noted = [f for r in result.records for f in r.faults if f.kind == "invalid_cache_entry"]
    # every entry counted, the judges' too (they run outside the system, and were missed: 4 of 8)
    assert len(noted) == len(entries) and all(f.diagnostic for f in noted)
    assert {f.where for f in noted} == {"answerer", "judge"}
    assert f"{len(noted)} unusable cache entries asked again" in caplog.text
    assert "is unusable (wrong shape); asked again and rewritten" in caplog.text
