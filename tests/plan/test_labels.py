"""Run labels name the effective injection point and every other key a sweep varies; configurations that compute
the same results (an embedding-free system under several embeddings) share one config hash and are run once."""

from __future__ import annotations

from pathlib import Path

import pytest

from inmind_exp.plan.plan import plan_config
from inmind_exp.plan.dedupe import split_duplicates
from inmind_exp.labels import injection_label, label_suffix, preset_point, varying_keys
from tests.launch_helpers import expand_overrides
from tests.exec.test_runner_ray import compose


@pytest.mark.parametrize("name, turn, fraction, label", [
    ("middle", 40, None, "middle"),          # the preset's own point
    ("middle", 100, None, "turn100"),        # injection.user_turn=100 overrides the preset
    ("early", 100, 0.05, "turn100"),         # user_turn wins over the preset's fraction
    ("early", None, 0.05, "early"),
    ("late", None, 0.5, "frac0.5"),
    ("position", 40, None, "turn40"),        # the numeric preset is always named by its turn
    ("position", "12", None, "turn12"),      # MLflow params arrive as strings
    ("mine", 7, None, "turn7"),              # a preset with no file: the point itself
])
def test_injection_label_names_the_effective_point(name, turn, fraction, label):
    assert injection_label(name, turn, fraction) == label


def test_presets_are_read_from_the_config_group():
    assert preset_point("middle") == ("turn", 40) and preset_point("late") == ("frac", 0.9)
    assert preset_point("no_such_preset") is None


def test_varying_keys_are_those_that_differ_and_the_label_does_not_show():
    jobs = expand_overrides(["system=a_mem,naive_rag", "embedding=minilm,emb3", "system.params.top_k=5,10",
                             "llm.roles.judge.model=gpt-4o", "injection.user_turn=40,100", "hydra.verbose=true"])
    assert len(jobs) == 16
    assert varying_keys(jobs) == ["system.params.top_k"]
    assert varying_keys([["a=1", "b=2"], ["a=1"]]) == ["b"]  # missing in one job: its default there
    assert label_suffix(["system.params.top_k", "llm.roles.judge.model"],
                        {"system.params.top_k": 5, "llm.roles.judge.model": "gpt-4o"}) == "[top_k=5 judge.model=gpt-4o]"
    assert label_suffix([], {}) == ""


def _plan(tmp_path: Path, *overrides: str, keys=()):
    cfg = compose(tmp_path, "http://127.0.0.1:9/v1", *overrides)
    return plan_config(cfg, tmp_path / "root", tmp_path / "job", list(keys), list(overrides))


def test_plan_name_shows_the_effective_injection_and_swept_keys(tmp_path):
    # compose() sets injection.user_turn=5 over the default preset middle (turn 40)
    assert _plan(tmp_path, "system=naive_rag", "embedding=bm25").name == "naive_rag/bm25/turn5/vllm"
    assert _plan(tmp_path, "system=naive_rag", "embedding=bm25", "injection=early", "injection.user_turn=null").name \
        == "naive_rag/bm25/early/vllm"
    assert _plan(tmp_path, "system=naive_rag", "embedding=bm25", "injection=early", "injection.user_turn=3").name == \
        "naive_rag/bm25/turn3/vllm"
    assert _plan(tmp_path, "system=naive_rag", "embedding=bm25", "injection=late", "injection.user_turn=null",
                 "injection.fraction=0.5").name == "naive_rag/bm25/frac0.5/vllm"
    a = _plan(tmp_path, "system=naive_rag", "embedding=bm25", "system.params.top_k=3", "trace=smoke",
              keys=["system.params.top_k", "trace"])
    b = _plan(tmp_path, "system=naive_rag", "embedding=bm25", "system.params.top_k=7", keys=["system.params.top_k"])
    assert a.name.endswith(" [top_k=3 trace=smoke]") and b.name == "naive_rag/bm25/turn5/vllm [top_k=7]"
    assert a.config_hash != b.config_hash


def test_embedding_free_systems_share_one_hash_across_embeddings(tmp_path):
    hashes = {}
    for system in ("backbone", "always_in_state", "naive_rag"):
        for emb in ("minilm", "bm25"):
            hashes[system, emb] = _plan(tmp_path, f"system={system}", f"embedding={emb}").config_hash
    assert hashes["backbone", "minilm"] == hashes["backbone", "bm25"]
    assert hashes["always_in_state", "minilm"] == hashes["always_in_state", "bm25"]
    assert hashes["naive_rag", "minilm"] != hashes["naive_rag", "bm25"]  # a retriever's embedding changes results

    plans = [_plan(tmp_path, f"system={s}", f"embedding={e}")
             for s in ("backbone", "naive_rag") for e in ("minilm", "bm25")]
    keep, repeats = split_duplicates(plans)
    assert keep == [0, 2, 3] and repeats == {1: 0}


@pytest.mark.slow
def test_sweep_labels_show_every_swept_key(tmp_path):
    from tests.launch_helpers import launch_cmd, run, write_small_data

    write_small_data(tmp_path / "data")
    p = run(launch_cmd(tmp_path, "http://127.0.0.1:9/v1", "system=naive_rag", "embedding=bm25",
                       "system.params.top_k=1,2", "injection.user_turn=3,5", "dry_run=true"), timeout=300)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    names = sorted(line.split("[dry run] ", 1)[1].split(" (config")[0]
                   for line in p.stdout.splitlines() if "[dry run] " in line)
    assert names == ["naive_rag/bm25/turn3/vllm [top_k=1]", "naive_rag/bm25/turn3/vllm [top_k=2]",
                     "naive_rag/bm25/turn5/vllm [top_k=1]", "naive_rag/bm25/turn5/vllm [top_k=2]"], p.stdout[-2000:]


@pytest.mark.slow
def test_dry_run_of_an_embedding_sweep_estimates_an_embedding_free_system_once(tmp_path):
    from tests.launch_helpers import launch_cmd, run, write_small_data

    write_small_data(tmp_path / "data")
    p = run(launch_cmd(tmp_path, "http://127.0.0.1:9/v1", "system=backbone,naive_rag", "embedding=minilm,bm25",
                       "dry_run=true"), timeout=300)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    estimated = [line.split("[dry run] ", 1)[1].split(" (config")[0] for line in p.stdout.splitlines()
                 if "[dry run] " in line]
    assert sorted(estimated) == ["backbone/minilm/turn5/vllm", "naive_rag/bm25/turn5/vllm", "naive_rag/minilm/turn5/vllm"]
    assert "backbone/bm25/turn5/vllm: not run, same results as backbone/minilm/turn5/vllm" in p.stdout
