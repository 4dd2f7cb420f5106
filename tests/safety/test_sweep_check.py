"""All jobs of a sweep expanded and composed up front, and a bad value in a later job stops a real launch before
job 0 runs."""

from __future__ import annotations

import pytest

from tests.launch_helpers import expand_overrides, expand_sweep, launch_cmd, run, write_small_data


def test_expand_overrides_matches_hydra_order():
    jobs = expand_overrides(["system=backbone,naive_rag", "injection.user_turn=5,100000", "dataset.limit=1"])
    assert jobs == [
        ["system=backbone", "injection.user_turn=5", "dataset.limit=1"],
        ["system=backbone", "injection.user_turn=100000", "dataset.limit=1"],
        ["system=naive_rag", "injection.user_turn=5", "dataset.limit=1"],
        ["system=naive_rag", "injection.user_turn=100000", "dataset.limit=1"],
    ]
    assert expand_overrides(["a=1"], params={"b": "2,3"}) == [["b=2", "a=1"], ["b=3", "a=1"]]


def test_expand_sweep_composes_every_job():
    cfgs = expand_sweep(["system=backbone,naive_rag", "embedding=minilm,bm25", "cluster.workers=3"])
    assert [(c.system.name, c.embedding.name) for c in cfgs] == [
        ("backbone", "minilm"), ("backbone", "bm25"), ("naive_rag", "minilm"), ("naive_rag", "bm25")]
    assert all(c.cluster.workers == 3 and "hydra" not in c for c in cfgs)


@pytest.mark.slow
def test_launch_with_bad_later_job_stops_before_any_job(tmp_path):
    write_small_data(tmp_path / "data")
    cmd = launch_cmd(tmp_path, "http://127.0.0.1:9/v1", "dry_run=true", "injection.user_turn=5,100000",
                     "cluster.workers=2,0")  # every job is checked before any runs (Session.check)
    p = run(cmd)
    assert p.returncode == 2, p.stdout[-2000:] + p.stderr[-2000:]
    assert "4 job(s) of the sweep; nothing was run" in p.stderr
    assert "job #1 (injection.user_turn=5 cluster.workers=0): cluster.workers=0: must be an integer >= 1" in p.stderr
    assert "job #2 (injection.user_turn=100000 cluster.workers=2): injection.user_turn=100000 is outside" in p.stderr
    assert "job #3 (injection.user_turn=100000 cluster.workers=0)" in p.stderr and "job #0" not in p.stderr
    assert "Launching" not in p.stdout + p.stderr  # Hydra never got to launch job 0
    assert not any((tmp_path / "sweep").glob("*/.hydra"))  # and no job directory was made


@pytest.mark.slow
def test_a_query_string_in_a_base_url_is_refused_before_anything(tmp_path):
    """``llm.base_url=http://host/v1?token=...``: exit 2 naming the key, before any job directory or request, and
    the token nowhere in the output or on disk (it reached MLflow params, config.yaml and an httpx INFO line)."""
    from tests.fake_openai import FakeOpenAI

    token = "plantedQueryToken0123456789"
    write_small_data(tmp_path / "data")
    with FakeOpenAI() as fake:
        p = run(launch_cmd(tmp_path, f"'{fake.base_url}?token={token}'", "system=backbone", "embedding=bm25"))
    assert p.returncode == 2, p.stdout[-2000:] + p.stderr[-2000:]
    assert "llm.base_url=http://127.0.0.1:" in p.stderr and "takes no query string" in p.stderr
    assert token not in p.stdout + p.stderr and fake.requests == []
    assert not any(token.encode() in f.read_bytes() for f in tmp_path.rglob("*") if f.is_file())


def test_check_base_urls_names_every_key_with_a_query():
    import pytest
    from omegaconf import OmegaConf

    from inmind_exp.errors import PlanError
    from inmind_exp.config.checks import check_base_urls

    cfg = OmegaConf.create({"llm": {"base_url": "http://u:pw@h:8000/v1", "roles": {
        "answerer": {"base_url": None}, "judge": {"base_url": "https://j/v1?sig=abc"}, "memory": {}}},
        "embedding": {"base_url": "http://e/v1#xyzzy"}})
    with pytest.raises(PlanError) as e:
        check_base_urls(cfg)
    msg = str(e.value)
    assert "llm.roles.judge.base_url=https://j/v1?***" in msg and "embedding.base_url=http://e/v1?***" in msg
    assert "abc" not in msg and "xyzzy" not in msg and not msg.startswith("llm.base_url")
    check_base_urls(OmegaConf.create({"llm": {"base_url": "http://u:pw@h:8000/v1"}}))  # user-info is allowed
