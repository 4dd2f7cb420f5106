"""Every numeric setting and system parameter is range-checked when a configuration is planned: a value out of
range is one ``PlanError`` naming its key (exit 2 before Ray or MLflow), never a run that hangs or retrieves
nothing. ``launch.py -m`` probes at the end: ``top_k=-1`` and ``llm.rpm=0`` exit 2 before any run is created."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from inmind_exp.errors import PlanError
from inmind_exp.memory import SYSTEMS
from inmind_exp.memory.ranges import Range, at_least, positive, unit
from tests.launch_helpers import REPO, launch_cmd, mlflow_runs, run, write_small_data


def test_range_problems():
    assert at_least(1).problem(1) is None and at_least(1).problem(0) == "must be an integer >= 1"
    assert at_least(1).problem(2.5) == "must be an integer >= 1"
    assert positive(nullable=True).problem(None) is None and positive().problem(0) == "must be a number > 0"
    assert "not null" in positive().problem(None)
    assert unit().problem(1.5) == "must be a number >= 0 and <= 1" and unit().problem(True) is not None
    assert "str" in at_least(1).problem("5") and Range().problem(-3.0) is None


@pytest.mark.parametrize("path", sorted((REPO / "conf" / "system").glob("*.yaml")), ids=lambda p: p.stem)
def test_every_system_preset_is_in_range(path):
    node = OmegaConf.load(path)
    if "name" not in node:  # an alias composing another preset
        return
    cls = SYSTEMS.get(node.name)
    params = OmegaConf.to_container(node.params) if node.get("params") else {}
    assert cls.check_params(params) == []
    numeric = {k for k, v in params.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    assert numeric <= set(cls.param_ranges), f"{node.name}: no declared range for {sorted(numeric - set(cls.param_ranges))}"


def _plan(tmp_path: Path, *overrides: str):
    """A plan of ``tests.exec.test_runner_ray.compose``'s small data with "embedding=bm25" and ``overrides``."""
    from inmind_exp.plan.plan import plan_config
    from tests.exec.test_runner_ray import compose

    return plan_config(compose(tmp_path, "http://127.0.0.1:9/v1", "embedding=bm25", *overrides), tmp_path / "root",
                       tmp_path / "job")


BAD = [
    ("llm.max_concurrency=0", "llm.max_concurrency=0: must be an integer >= 1"),
    ("llm.rpm=0", "llm.rpm=0.0: must be a number > 0 (or null)"),
    ("llm.rpm=-5", "llm.rpm=-5.0: must be a number > 0"),
    ("llm.tpm=0", "llm.tpm=0.0: must be a number > 0"),
    ("llm.timeout_s=0", "llm.timeout_s=0.0: must be a number > 0"),
    ("llm.max_attempts=0", "llm.max_attempts=0: must be an integer >= 1"),
    ("run.max_task_attempts=0", "run.max_task_attempts=0: must be an integer >= 1"),
    ("run.judge_attempts=0", "run.judge_attempts=0: must be an integer >= 1"),
    ("llm.roles.judge.max_concurrency=0", "llm.roles.judge.max_concurrency=0: must be an integer >= 1"),
    ("llm.roles.memory.timeout_s=-1", "llm.roles.memory.timeout_s=-1.0: must be a number > 0"),
    ("system.params.top_k=-1", "system.params.top_k=-1 (naive_rag): must be an integer >= 1"),
    ("system.params.top_k=0", "system.params.top_k=0 (naive_rag): must be an integer >= 1"),
]


@pytest.mark.parametrize("override,message", BAD, ids=[b[0] for b in BAD])
def test_out_of_range_setting_is_a_plan_error_naming_its_key(tmp_path, override, message):
    with pytest.raises(PlanError) as e:
        _plan(tmp_path, "system=naive_rag", override)
    assert message in str(e.value)


def test_thresholds_of_a_system_are_checked(tmp_path):
    with pytest.raises(PlanError, match=r"system.params.mid_term_similarity_threshold=1.5 \(memoryos\): must be a "
                                        r"number >= -1 and <= 1"):
        _plan(tmp_path, "system=memoryos", "embedding=minilm", "system.params.mid_term_similarity_threshold=1.5")


def test_defaults_plan(tmp_path):
    assert _plan(tmp_path, "system=naive_rag").system_params["top_k"] == 5


@pytest.mark.slow
def test_out_of_range_sweep_exits_2_before_ray_or_mlflow(tmp_path):
    write_small_data(tmp_path / "data")
    p = run(launch_cmd(tmp_path, "http://127.0.0.1:9/v1", "system=naive_rag", "embedding=bm25",
                       "system.params.top_k=-1,5", "llm.rpm=0"), timeout=300)
    assert p.returncode == 2, p.stderr[-3000:]
    assert "system.params.top_k=-1 (naive_rag): must be an integer >= 1" in p.stderr
    assert "llm.rpm=0.0: must be a number > 0 (or null)" in p.stderr
    assert "Started a local Ray" not in p.stdout + p.stderr
    assert mlflow_runs(tmp_path) == []
