"""The dry-run estimate: calls and tokens per role, each role priced at its own model's prices (prompt and
completion), no cost when a model has no price, and one total line for a sweep in either launcher."""

from __future__ import annotations

import re

import pytest


def plan_for(tmp_path, *overrides: str):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    from inmind_exp.config.schema import register_configs
    from inmind_exp.plan.plan import plan_config
    from tests.launch_helpers import REPO, write_small_data

    tasks, trace = write_small_data(tmp_path / "data")
    register_configs()
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = hydra_compose("config", overrides=[
            "llm=openai", f"dataset.path={tasks}", "dataset.limit=null", f"trace.path={trace}",
            "injection.user_turn=5", f"run.cache_dir={tmp_path / 'cache'}", *overrides])
    return plan_config(cfg, tmp_path / "root", tmp_path / "job")


def test_each_role_is_priced_at_its_own_model_with_completions(tmp_path):
    from inmind_exp.plan.estimate import estimate, price

    plan = plan_for(tmp_path, "system=mem0", "llm.roles.judge.model=gpt-4o")
    est = estimate(plan)
    assert est["memory_calls"] > 0 and est["memory_completion_tokens"] > 0 and est["judge_completion_tokens"] > 0
    assert est["prompt_tokens"] == sum(est[f"{r}_prompt_tokens"] for r in ("memory", "answerer", "judge"))
    mini, big = (0.25, 2.0), (2.5, 10.0)  # conf/llm/openai.yaml: gpt-5-mini, gpt-4o per 1M tokens
    expected = sum(est[f"{r}_prompt_tokens"] * mini[0] / 1e6 + est[f"{r}_completion_tokens"] * mini[1] / 1e6
                   for r in ("memory", "answerer"))
    expected += est["judge_prompt_tokens"] * big[0] / 1e6 + est["judge_completion_tokens"] * big[1] / 1e6
    cost, unpriced = price(plan, est)
    assert unpriced == [] and cost == pytest.approx(expected)
    # pricing every token at the answerer's prompt rate (the old estimate) is far below this
    assert cost > 2 * est["prompt_tokens"] * mini[0] / 1e6


def test_a_model_without_a_price_gives_no_cost_and_is_named(tmp_path):
    from inmind_exp.plan.estimate import estimate, price

    plan = plan_for(tmp_path, "system=naive_rag", "llm.roles.judge.model=my-own-judge")
    cost, unpriced = price(plan, estimate(plan))
    assert cost is None and unpriced == ["my-own-judge"]


@pytest.mark.slow
def test_a_dry_run_sweep_ends_with_its_total(tmp_path):
    from tests.launch_helpers import launch_cmd, run, write_small_data

    write_small_data(tmp_path / "data")
    p = run(launch_cmd(tmp_path, "http://127.0.0.1:9/v1", "system=naive_rag,backbone", "embedding=bm25",
                       "dry_run=true", "cluster.tasks_per_worker=1"), timeout=300)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    per_config = [line for line in p.stdout.splitlines() if line.startswith("[dry run] ")]
    totals = [line for line in p.stdout.splitlines() if line.startswith("[dry run total]")]
    assert len(per_config) == 2 and len(totals) == 1, p.stdout[-2000:]
    calls = lambda line, kind: float(re.search(rf"(\d+) {kind}\b", line).group(1))  # noqa: E731
    for kind in ("answer", "judge"):
        assert calls(totals[0], kind) == sum(calls(line, kind) for line in per_config)
    assert "2 configuration(s): 8 tasks to run" in totals[0]
    assert "no price for fake-model" in totals[0]  # llm=vllm has no price table: no invented cost
    assert re.search(r"~\S+( \S+)? wall at 10 s per call, 2 in flight", totals[0]), totals[0]
    # ... and a one-screen table (#44 item 9): configuration | tasks | calls | $ | wall expected, then the bound's
    table = p.stdout[p.stdout.index("| configuration"):].splitlines()
    assert re.match(r"\| configuration +\| +tasks \| +calls \| +\$ \| +wall \| bound: calls \| +\$ \| +wall \|$",
                    table[0]), table
    rows = {r.split("|")[1].strip(): [c.strip() for c in r.split("|")[2:-1]] for r in table[2:5]}
    assert set(rows) == {"naive_rag/bm25/turn5/vllm", "backbone/bm25/turn5/vllm", "total"}
    assert rows["total"][0] == "8" and rows["naive_rag/bm25/turn5/vllm"][0] == "4/4"
    assert int(rows["total"][1].replace(",", "")) == sum(calls(line, kind) for line in per_config
                                                        for kind in ("memory", "answer", "judge"))
    assert {r[2] for r in rows.values()} == {r[5] for r in rows.values()} == {"no price"}
    assert all(r[1] == r[4] for r in rows.values())  # no memory calls: expected as bounded
    assert len(p.stdout[p.stdout.index("| configuration"):].splitlines()) < 25  # one screen


def test_the_wall_time_estimate_follows_latency_slots_and_chains(tmp_path):
    """Calls spread over the slots in flight (workers x tasks per worker, capped by the tightest endpoint limit), plus
    the prefix chain and one task's chain (two with ``run.lead_task``: the first task runs alone, then the others),
    at ``run.latency_s`` per call; twice the latency is twice the time."""
    from inmind_exp.plan.estimate import estimate

    one = estimate(plan_for(tmp_path, "system=naive_rag", "embedding=bm25", "run.latency_s=2",
                            "cluster.workers=8", "llm.max_concurrency=3"))
    assert one["slots"] == 3  # 8 workers, but the endpoint lets 3 calls through
    calls = one["memory_calls"] + one["answer_calls"] + one["judge_calls"]
    assert one["task_chain_calls"] == calls / one["tasks_to_run"]  # naive_rag: no memory calls, nothing in a prefix
    assert one["chains"] == 2  # run.lead_task (the default) and more than one task
    assert one["wall_s"] == pytest.approx(2 * (calls / 3 + 2 * one["task_chain_calls"]))
    unled = estimate(plan_for(tmp_path, "system=naive_rag", "embedding=bm25", "run.latency_s=2",
                              "cluster.workers=8", "llm.max_concurrency=3", "run.lead_task=false"))
    assert unled["chains"] == 1 and unled["wall_s"] == pytest.approx(2 * (calls / 3 + one["task_chain_calls"]))
    slow = estimate(plan_for(tmp_path, "system=naive_rag", "embedding=bm25", "run.latency_s=4",
                             "cluster.workers=8", "llm.max_concurrency=3"))
    assert slow["wall_s"] == pytest.approx(2 * one["wall_s"])
    assert estimate(plan_for(tmp_path, "system=naive_rag", "embedding=bm25", "cluster.workers=2",
                             "cluster.tasks_per_worker=3", "llm.max_concurrency=32"))["slots"] == 6
    stateful = estimate(plan_for(tmp_path, "system=mem0", "embedding=minilm", "run.latency_s=2", "cluster.workers=2",
                                 "cluster.tasks_per_worker=1"))
    assert stateful["prefix_chain_calls"] > 0 and stateful["slots"] == 2
    task_calls = stateful["memory_calls"] + stateful["answer_calls"] + stateful["judge_calls"] - stateful["prefix_chain_calls"]
    assert stateful["wall_s"] == pytest.approx(
        2 * (stateful["prefix_chain_calls"] + task_calls / 2 + 2 * stateful["task_chain_calls"]))


def test_a_latency_that_is_not_positive_is_refused_before_any_work(tmp_path):
    from inmind_exp.errors import PlanError

    with pytest.raises(PlanError, match=r"run.latency_s=0"):
        plan_for(tmp_path, "system=naive_rag", "embedding=bm25", "run.latency_s=0")
