"""Labels from what ran (issue #38, items 3 and 4): every answer and verdict records the model the endpoint reported
and the endpoint's host, a run stores the fidelity it computed from them (``fidelity.json``, an MLflow artifact, the
final tag), and analysis reads that record. Through the real openai client against the fake server, which can
report a model other than the one asked for."""

from __future__ import annotations

import json

import pytest

from inmind_exp.official.fidelity import SUCCESSOR
from inmind_exp.llm import CallCache, Endpoint, Models
from inmind_exp.memory import SYSTEMS
from inmind_exp.protocol.task import run_task
from inmind_exp.records import Task
from tests.conftest import fake_endpoints, make_trace
from tests.fake_openai import FakeOpenAI

TASK = Task(id="155", domain="health_wellness", user_message="I have a tree nut allergy.",
            assistant_message="Noted, thanks for telling me.", naive_query="What allergy do I have?",
            query="Any good macaron recipes for this weekend?", explanation="Macarons are made with almond flour.")


def run(models, tmp_path):
    backbone = SYSTEMS.get("backbone")
    return run_task(TASK, make_trace(), 1, lambda wd: backbone(models, None, wd), models, tmp_path / "w",
                    config_hash="h", system_name="backbone", evaluates_naive=True)


def test_answers_and_verdicts_record_the_served_model_and_host_cached_or_not(fake, tmp_path):
    fake.served_model = "qwen3-8b-instruct"  # a server that serves another model than the one asked for
    host = fake.base_url.split("//", 1)[1].split("/", 1)[0]
    models = Models.build(fake_endpoints(fake.base_url, model="gpt-5-mini"), CallCache(tmp_path / "cache"))
    rec = run(models, tmp_path)
    assert rec.error is None and len(rec.verdicts) == 4
    for answer in (rec.naive, rec.indirect):
        assert (answer.model, answer.host) == ("qwen3-8b-instruct", host)
    assert all((v.model, v.host) == ("qwen3-8b-instruct", host) for v in rec.verdicts.values())
    assert rec.served == {"answerer": (f"qwen3-8b-instruct @ {host}",), "judge": (f"qwen3-8b-instruct @ {host}",)}
    # the record round-trips, and a rerun answered from the call cache still says what served the replies
    assert type(rec).from_dict(json.loads(json.dumps(rec.to_dict()))) == rec
    fake.reset_log()
    again = run(Models.build(fake_endpoints(fake.base_url, model="gpt-5-mini"), CallCache(tmp_path / "cache")),
                tmp_path)
    assert fake.chat_requests() == [] and again.indirect.model == "qwen3-8b-instruct"
    assert again.verdicts["application"].model == "qwen3-8b-instruct"


def test_a_verdict_whose_call_failed_still_names_the_host(fake, tmp_path):
    models = Models.build(fake_endpoints(fake.base_url, max_attempts=1), CallCache(tmp_path / "cache"))
    fake.add_rule("[user_message]", {"score": "maybe"})
    rec = run(models, tmp_path)
    bad = rec.verdicts["application"]
    assert bad.error and bad.model == "fake-model" and bad.host == fake.base_url.split("//")[1].split("/")[0]


def test_the_host_never_holds_credentials():
    ep = Endpoint(role="judge", base_url="https://user:sk-secret-value@api.openai.com/v1", model="gpt-5-mini")
    assert ep.host == "api.openai.com"
    assert Endpoint(role="judge", base_url="http://127.0.0.1:8000/v1", model="m").host == "127.0.0.1:8000"


def compose_preset(*overrides: str):
    from hydra import compose, initialize_config_dir

    from inmind_exp.config.resolve import as_config
    from inmind_exp.config.schema import register_configs
    from inmind_exp.labels import CONF_DIR

    register_configs()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        return as_config(compose(config_name="config", overrides=["+preset=leaderboard", *overrides]))


def test_a_leaderboard_run_against_a_local_endpoint_is_labelled_by_what_ran(release, tmp_path, monkeypatch):
    """``+preset=leaderboard llm.base_url=<local server>`` that reports another model: the run's stored fidelity
    names the host and the served model; the MLflow tag, the artifact, the results table, the submission and the
    analysis all say what the record says."""
    from analysis.mlflow_runs import load_experiment
    from analysis.official import protocol_cell, run_fidelity
    from inmind_exp.plan.plan import plan_config
    from inmind_exp.run.driver import run_plan
    from inmind_exp.exec.executor import InProcessExecutor
    from inmind_exp.run.resources import Resources
    from inmind_exp.tracking.writer import MlflowClient

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key-0000")
    with FakeOpenAI() as fake:
        fake.served_model = "llama-3.1-8b"
        host = fake.base_url.split("//", 1)[1].split("/", 1)[0]
        cfg = compose_preset("system=backbone", f"llm.base_url={fake.base_url}", "dataset.limit=2",
                             f"run.cache_dir={tmp_path / 'cache'}", f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}",
                             "tracking.experiment=test", "run.progress_every_s=0")
        plan = plan_config(cfg, tmp_path / "root", tmp_path / "job")
        before = plan.name
        result = run_plan(plan, executor=InProcessExecutor(), resources=Resources())
    assert before and all(r.error is None for r in result.records)
    stored = json.loads((tmp_path / "job" / "fidelity.json").read_text())
    assert stored["level"] == "" and stored["deviations"] == [
        "tasks=2 of 125",
        "answerer served model=llama-3.1-8b (asked for gpt-5-mini)",
        f"answerer host={host} (release: api.openai.com)",
        "judge served model=llama-3.1-8b (asked for gpt-5-mini)",
        f"judge host={host} (release: api.openai.com)"]
    assert stored["served"]["answerer"] == [f"llama-3.1-8b @ {host}"]
    assert "Protocol fidelity: not leaderboard-comparable" in (tmp_path / "job" / "results.md").read_text()
    sub = [json.loads(x) for x in (tmp_path / "job" / "submission.jsonl").read_text().splitlines()]
    assert sub and all(r["config"]["fidelity"] == stored["tag"] and r["config"]["judging"] == "self-judged"
                       and r["config"]["official"] is False for r in sub)

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    mlrun = client.get_run(result.run_id)
    assert mlrun.data.tags["inmind.fidelity"] == stored["tag"]  # the final tag: what ran, not what was configured
    assert "fidelity.json" in {a.path for a in client.list_artifacts(result.run_id)}
    loaded = load_experiment("test", f"sqlite:///{tmp_path / 'mlflow.db'}").runs[0]
    assert loaded.fidelity == stored and run_fidelity(loaded).tag == stored["tag"]
    assert protocol_cell(loaded) == "official tasks, 5 deviations"


def test_the_preset_follows_llm_model_for_every_role_and_labels_a_successor():
    from inmind_exp.official.fidelity import fidelity
    from inmind_exp.config.settings import role_endpoints

    cfg = compose_preset("llm.model=gpt-6-mini")
    assert {e.model for e in role_endpoints(cfg.llm).values()} == {"gpt-6-mini"}
    f = fidelity(cfg)
    assert f.tag == SUCCESSOR.format(model="gpt-6-mini") == (
        "successor model gpt-6-mini: not comparable with the paper's rows or earlier entries")
    # gpt-5-mini by name from another server is no leaderboard run
    local = fidelity(compose_preset("llm=vllm", "llm.base_url=http://127.0.0.1:8000/v1", "llm.model=gpt-5-mini"))
    assert "answerer host=127.0.0.1:8000 (release: api.openai.com)" in local.deviations and not local.official
    # the memory model is the submitter's choice: still leaderboard, not a paper row
    own = fidelity(compose_preset("llm.roles.memory.model=gpt-4o"))
    assert own.level == "leaderboard" and own.paper_gaps == ("memory model=gpt-4o",)


def test_paper_rows_sweeps_the_papers_nine_systems_under_its_embeddings_in_the_leaderboard_setting():
    import yaml

    from inmind_exp.official.fidelity import fidelity

    from inmind_exp.official.setting import PAPER_EMBEDDINGS, PAPER_SYSTEMS
    from inmind_exp.labels import CONF_DIR

    doc = yaml.safe_load((CONF_DIR / "preset" / "paper_rows.yaml").read_text())
    assert doc["defaults"] == ["leaderboard"] and doc["hydra"]["mode"] == "MULTIRUN"
    sweep = doc["hydra"]["sweeper"]["params"]
    assert tuple(sweep["system"].split(",")) == PAPER_SYSTEMS and tuple(sweep["embedding"].split(",")) == PAPER_EMBEDDINGS
    from hydra import compose, initialize_config_dir

    from inmind_exp.config.resolve import as_config
    from inmind_exp.config.schema import register_configs

    register_configs()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        cfg = compose(config_name="config", overrides=["+preset=paper_rows", "system=mem0", "embedding=emb3"])
    assert fidelity(as_config(cfg)).level == "paper"
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        cfg = compose(config_name="config", overrides=["+preset=paper_rows", "llm.model=gpt-6-mini"])
    assert fidelity(as_config(cfg)).tag == SUCCESSOR.format(model="gpt-6-mini")


@pytest.mark.slow
def test_paper_rows_dry_runs_as_one_command(release, tmp_path):
    import sys

    from tests.launch_helpers import REPO, run as run_cmd

    p = run_cmd([sys.executable, str(REPO / "launch.py"), "+preset=paper_rows", "dry_run=true",
                 f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}", f"hydra.sweep.dir={tmp_path / 'sweep'}",
                 f"run.cache_dir={tmp_path / 'cache'}"], timeout=300)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "[dry run total] 16 configuration(s): 2000 tasks to run" in p.stdout
    assert p.stdout.count(": as configured, paper (") == 16  # each of the paper's rows, before anything runs
