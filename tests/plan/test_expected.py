"""The dry run's expected figures (``plan.expected``): the bound with the cross-task cache hits of the system's
measured hit profile taken off, the lead task paying its first-task share and each later task its later share (every
task the first's with ``run.cache_scope=task``), answer and judge calls as bounded; ``estimate.json`` per
configuration and in total; a malformed calibration named by file and key."""

from __future__ import annotations

import io
import json

import pytest

from tests.plan.test_estimate import plan_for

PROFILE = {"prefix": 0.5, "first_task": 0.8, "later_task": 0.25}


@pytest.fixture
def calibrated(monkeypatch):
    import inmind_exp.plan.expected as expected

    monkeypatch.setattr(expected, "load_calibration", lambda path=None: {"mem0": PROFILE})


def test_later_tasks_pay_only_their_share_of_the_bound(tmp_path, calibrated):
    from inmind_exp.plan.estimate import estimate, expected_estimate as expected

    plan = plan_for(tmp_path, "system=mem0", "embedding=minilm")
    bound = estimate(plan)
    exp = expected(plan, bound)
    n = bound["tasks_to_run"]
    assert n >= 3
    per_task = (bound["memory_calls"] - bound["prefix_chain_calls"]) / n
    want = bound["prefix_chain_calls"] * 0.5 + per_task * (0.8 + (n - 1) * 0.25)
    assert exp["memory_calls"] == pytest.approx(want)
    assert exp["memory_prompt_tokens"] == pytest.approx(bound["memory_prompt_tokens"] * want / bound["memory_calls"])
    assert (exp["answer_calls"], exp["judge_calls"]) == (bound["answer_calls"], bound["judge_calls"])
    assert exp["wall_s"] < bound["wall_s"]
    # each task its own samples: every task pays the first task's share
    own = plan_for(tmp_path / "own", "system=mem0", "embedding=minilm", "run.cache_scope=task")
    assert expected(own, estimate(own))["memory_calls"] == pytest.approx(
        bound["prefix_chain_calls"] * 0.5 + per_task * 0.8 * n)


def test_a_system_without_a_profile_is_expected_at_its_bound(tmp_path, calibrated):
    from inmind_exp.plan.estimate import estimate, expected_estimate as expected

    plan = plan_for(tmp_path, "system=a_mem", "embedding=minilm")
    bound = estimate(plan)
    assert expected(plan, bound)["memory_calls"] == bound["memory_calls"]


def test_the_dry_run_writes_estimate_json_per_configuration_and_total(tmp_path, calibrated, capsys):
    from inmind_exp.plan.estimate import SweepTotal, print_estimate, print_sweep_total

    total = SweepTotal()
    plans = [plan_for(tmp_path / name, f"system={name}", "embedding=minilm") for name in ("mem0", "a_mem")]
    for p in plans:
        print_estimate(p, total=total)
    print_sweep_total(total)
    out = capsys.readouterr().out
    assert "expected ~" in out and "upper bound ~" in out and "measured hit profile" in out
    data = json.loads((plans[-1].root / "estimate.json").read_text())
    assert set(data) == {plans[0].name, plans[1].name, "total"}
    keys = {"expected_calls", "expected_usd", "expected_wall_s", "upper_bound_calls", "upper_bound_usd"}
    assert all(set(v) == keys for v in data.values())
    mem0, a_mem = data[plans[0].name], data[plans[1].name]
    assert mem0["expected_calls"] < mem0["upper_bound_calls"] and mem0["expected_usd"] < mem0["upper_bound_usd"]
    assert a_mem["expected_calls"] == a_mem["upper_bound_calls"]  # no profile
    for k in ("expected_calls", "upper_bound_calls"):
        assert data["total"][k] == mem0[k] + a_mem[k]
    assert data["total"]["expected_usd"] == pytest.approx(mem0["expected_usd"] + a_mem["expected_usd"], abs=0.02)


def test_a_malformed_calibration_is_named_by_file_and_key(tmp_path):
    from inmind_exp.errors import PlanError
    from inmind_exp.plan.expected import load_calibration

    path = tmp_path / "calibration.json"
    path.write_text(json.dumps({"mem0": {**PROFILE, "later_task": "many"}}))
    with pytest.raises(PlanError, match=r"calibration.json: mem0.later_task='many'"):
        load_calibration(path)


def test_the_shipped_calibration_loads_and_each_entry_names_a_system():
    from inmind_exp.memory import SYSTEMS
    from inmind_exp.plan.expected import load_calibration

    cal = load_calibration()
    assert cal and set(cal) <= set(SYSTEMS.names())


def test_a_sweep_s_expected_wall_time_is_never_above_its_bound(tmp_path):
    """A sweep of a system with a measured hit profile (mem0) and one without memory calls (backbone): the lead task's
    chain was counted twice in the expected total (2h 59m expected against a 2h 44m bound on the leaderboard preset)."""
    from inmind_exp.plan.estimate import SweepTotal, print_estimate

    total = SweepTotal()
    for system, emb in (("backbone", "bm25"), ("mem0", "minilm"), ("naive_rag", "bm25")):
        print_estimate(plan_for(tmp_path, f"system={system}", f"embedding={emb}", "tracking.experiment=" + system),
                       out=io.StringIO(), total=total)
    assert total.wall_s(expected=True) <= total.wall_s()
    for name, _tasks, _c, _d, wall, _bc, _bd, bound_wall in total.rows:
        assert wall <= bound_wall, name
