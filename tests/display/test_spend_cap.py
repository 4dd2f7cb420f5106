"""``run.max_usd`` / ``run.max_tokens`` stop the dispatch of new tasks once the spend so far plus the in-flight
estimate would pass the cap, say so, exit 4, and leave a resumable sweep: rerunning with a higher cap runs only the
tasks not started and pays nothing again (#25 item 5). Against the fake OpenAI-compatible server."""

from __future__ import annotations

from dataclasses import replace

import re

import pytest

from inmind_exp.errors import PlanError
from inmind_exp.plan.plan import plan_config
from inmind_exp.run.driver import run_plan
from inmind_exp.exec.executor import InProcessExecutor
from inmind_exp.run.resources import Resources
from inmind_exp.run.session import Session
from inmind_exp.display.spend_cap import task_estimate
from inmind_exp.errors import Exit
from tests.fake_openai import FakeOpenAI
from tests.launch_helpers import launch_cmd, run, write_small_data
from tests.exec.test_runner_ray import compose


def many_tasks(tmp_path, n: int):
    """The small task set written out to ``n`` distinct tasks (each copy asks its own questions: no cache hits), so a
    cap can stop part-way once the largest task seen is what it reserves."""
    import json

    tasks, _ = write_small_data(tmp_path / "data")
    base = [json.loads(line) for line in tasks.read_text().splitlines()]
    out = tmp_path / "data" / "many.jsonl"
    out.write_text("".join(json.dumps({**t, "id": f"{t['id']}-{i}", "user_message": f"{t['user_message']} ({i})",
                                       "query": f"{t['query']} ({i})", "naive_query": f"{t['naive_query']} ({i})"})
                           + "\n" for i in range(n // len(base)) for t in base))
    return f"dataset.path={out}"


def test_a_token_cap_stops_dispatch_and_a_rerun_resumes_paying_only_the_rest(tmp_path, caplog):
    data = many_tasks(tmp_path, 16)
    with FakeOpenAI() as fake:
        cfg = compose(tmp_path, fake.base_url, "system=backbone", "embedding=bm25", data)
        plan = plan_config(cfg, tmp_path / "root", tmp_path / "job")
        est = task_estimate(plan).tokens
        # the first task fits (0 + the dry run's bound); then each reserves the largest task seen, far below it
        capped = plan_config(compose(tmp_path, fake.base_url, "system=backbone", "embedding=bm25", data,
                                     f"run.max_tokens={int(est) + 600}"), tmp_path / "root", tmp_path / "job")
        executor = InProcessExecutor()
        first = run_plan(capped, executor=executor, resources=Resources())
        asked_first = len(fake.chat_requests())
        done = len(first.records)
        assert 1 < done < len(plan.tasks) and not any(r.error for r in first.records)
        assert capped.name in executor.spend_cap.reached()  # the executor's record, no module state
        said = [r.getMessage() for r in caplog.records if "spend cap" in r.getMessage()]
        assert len(said) == 1 and f"run.max_tokens={int(est) + 600}" in said[0] and "largest task so far" in said[0]
        closing = executor.spend_cap.closing_line()
        assert f"({len(plan.tasks) - done} of {len(plan.tasks)} tasks left)" in closing
        finish = re.search(r"run\.max_tokens=(\d+)$", closing)
        assert finish, closing
        # the report's first warning names what is missing and how to finish (#44 item 1)
        from analysis.mlflow_runs import load_experiment
        from analysis.notices import warnings

        store = f"sqlite:///{tmp_path / 'mlflow.db'}"
        runset = load_experiment("test", store)
        assert runset.incomplete == ((capped.name, done, len(plan.tasks), "capped"),)
        first_warning = warnings(runset)[0]
        assert first_warning.startswith("Incomplete: 1 configuration(s) did not finish: ")
        assert f"{len(plan.tasks) - done} of {len(plan.tasks)} planned tasks missing: stopped at the spend cap" \
            in first_warning and "higher run.max_usd" in first_warning

        again = plan_config(compose(tmp_path, fake.base_url, "system=backbone", "embedding=bm25", data,
                                    f"run.max_tokens={finish.group(1)}"), tmp_path / "root", tmp_path / "job")
        assert len(again.remaining()) == len(plan.tasks) - done  # the ledger kept what finished
        executor = InProcessExecutor()
        second = run_plan(again, executor=executor, resources=Resources())
        asked_second = len(fake.chat_requests()) - asked_first
    assert executor.spend_cap.reached() == {}  # the cap the closing line named finished the run
    assert load_experiment("test", store).incomplete == ()
    assert len(second.records) == len(plan.tasks) and not any(r.error for r in second.records)
    new = [r for r in second.records if r.task_id not in {f.task_id for f in first.records}]
    assert asked_second == sum(u.calls - u.cached_calls for r in new for u in r.usage.values())  # nothing repaid
    assert {r.task_id: r.usage for r in first.records} == {r.task_id: r.usage for r in second.records
                                                             if r.task_id in {f.task_id for f in first.records}}


def test_a_dollar_cap_without_prices_stops_before_the_first_task(tmp_path):
    with FakeOpenAI() as fake:
        plan = plan_config(compose(tmp_path, fake.base_url, "system=backbone", "embedding=bm25", "run.max_usd=5"),
                           tmp_path / "root", tmp_path / "job")
        executor = InProcessExecutor()
        result = run_plan(plan, executor=executor, resources=Resources())
        assert result.records == [] and fake.chat_requests() == []
    assert "has no price in llm.prices" in executor.spend_cap.reached()[plan.name]


def test_the_session_exits_4_from_its_executors_cap_record():
    """The exit code reads the cap record of the launch's executor (``Resources``), not a module global: a fresh
    launch starts clean, one whose executor stopped a plan exits 4 with the closing line."""
    import io

    class Stopped:
        def __init__(self):
            from inmind_exp.display.spend_cap import CapRecord
            self.spend_cap = CapRecord()

    clean = Session()
    assert clean.exit_code(io.StringIO()) == 0
    capped = Session()
    capped.resources._executor = Stopped()
    capped.resources._executor.spend_cap.add("backbone/bm25", "stopped")
    out = io.StringIO()
    assert capped.exit_code(out) == Exit.SPEND_CAP
    assert "stopped at the spend cap" in out.getvalue() and "backbone/bm25" in out.getvalue()
    assert Session().exit_code(io.StringIO()) == 0  # nothing carried over from the other launch


@pytest.mark.parametrize("override, message", [("run.max_usd=0", "run.max_usd=0(.0)?: must be"),
                                               ("run.max_tokens=-3", "run.max_tokens=-3: must be"),
                                               ("run.progress=loud", "run.progress=loud: expected one of")])
def test_bad_caps_and_modes_are_plan_errors(tmp_path, override, message):
    with pytest.raises(PlanError, match=message):
        plan_config(compose(tmp_path, "http://127.0.0.1:9/v1", "system=backbone", "embedding=bm25", override),
                    tmp_path / "root", tmp_path / "job")


@pytest.mark.slow
def test_a_capped_sweep_exits_4_and_resumes_with_a_higher_cap(tmp_path):
    write_small_data(tmp_path / "data")
    with FakeOpenAI() as fake:
        p = run(launch_cmd(tmp_path, fake.base_url, "system=backbone,naive_rag", "embedding=bm25",
                           "run.max_tokens=6000"), timeout=600)
        assert p.returncode == Exit.SPEND_CAP, p.stderr[-3000:]
        assert "stopped at the spend cap" in p.stderr and "to finish them" in p.stderr
        assert "stopped dispatching at the spend cap" in p.stdout
        # never 'finished' (#44 item 1): the lines say the cap stopped them, the headline's n is done/planned
        assert "sweep stopped at the spend cap" in p.stdout and "sweep finished" not in p.stdout
        assert re.search(r"\| \d/4 capped +\|", p.stdout), p.stdout[-3000:]
        asked = len(fake.chat_requests())
        done = [int(n) for n in re.findall(r"(\d+)/4 tasks, \d+ errors", p.stdout)]
        assert asked > 0 and 0 < sum(done) < 8, p.stdout[-3000:]
        finish = re.search(r"launch\.py .*run\.max_tokens=(\d+)$", p.stderr.strip())
        assert finish and "run.max_tokens=6000" not in finish.group(0), p.stderr[-2000:]
        assert (tmp_path / "sweep" / ".sweep.lock").read_text() == ""  # exit 4 released the lock (#44 item 7)
        q = run(launch_cmd(tmp_path, fake.base_url, "system=backbone,naive_rag", "embedding=bm25",
                           f"run.max_tokens={finish.group(1)}", "--quiet"), timeout=600)
        assert q.returncode == 0, q.stderr[-3000:]
        assert "lock" not in q.stdout + q.stderr  # no "taking over" warning after a clean exit 4
        resumed = len(fake.chat_requests()) - asked
    # the end screen (#25 item 3): real paths, the saved view's address, no library chatter
    everything = q.stdout + q.stderr
    assert "<job>" not in everything and "Downloading artifacts" not in everything
    assert "fontManager" not in everything and "[progress]" not in q.stdout
    assert re.search(r"MLflow view: http://127\.0\.0\.1:5000/#/experiments/\d+/runs\?viewStateShareKey=", q.stdout)
    assert re.search(r"records: \S+/records\.jsonl and 1 more job directory", q.stdout)
    assert "analysis report: " in q.stdout
    kept = [int(n) for n in re.findall(r"4 tasks \((\d+) already done\)", q.stdout)]
    assert sorted(kept) == sorted(done) and "8/8 tasks, 0 errors" in q.stdout
    # the spend line counts every request the rerun sent, and the rerun sent only the tasks the cap had not started
    assert re.search(rf"sweep finished: .*this run: {resumed} paid calls", q.stdout), q.stdout[-2000:]


# -- pricing any model (#44 item 2) -------------------------------------------------------------------------------


@pytest.mark.parametrize("override", ["+llm.prices.fake-model={prompt_per_1m: 1.5, completion_per_1m: 3}",
                                      "llm.prices={fake-model: {prompt_per_1m: 1.5, completion_per_1m: 3}}",
                                      "+llm.prices.mine={model: fake-model, prompt_per_1m: 1.5, completion_per_1m: 3}"])
def test_any_model_is_priced_from_the_command_line(tmp_path, override):
    plan = plan_config(compose(tmp_path, "http://127.0.0.1:9/v1", "system=backbone", "embedding=bm25", override),
                       tmp_path / "root", tmp_path / "job")
    assert plan.prices["fake-model"] == (1.5, 3.0, 1.5)  # cached input at the prompt price unless given
    assert task_estimate(plan).usd is not None and task_estimate(plan).usd > 0


def test_a_shipped_price_table_takes_a_new_model_beside_its_own(tmp_path):
    plan = plan_config(compose(tmp_path, "http://127.0.0.1:9/v1", "system=backbone", "embedding=bm25", "llm=openai",
                               "llm.base_url=http://127.0.0.1:9/v1", "llm.model=gpt-5-nano",
                               "+llm.prices.gpt-5-nano={prompt_per_1m: 0.05, completion_per_1m: 0.4}"),
                       tmp_path / "root", tmp_path / "job")
    assert plan.prices["gpt-5-nano"] == (0.05, 0.4, 0.05) and plan.prices["gpt-5-mini"][:2] == (0.25, 2.0)


@pytest.mark.parametrize("override, message", [
    ("+llm.prices.m={prompt_per_1m: 1}", r"llm\.prices\.m: missing completion_per_1m"),
    ("+llm.prices.m={prompt_per_1m: 1, completion_per_1m: 2, prompt: 3}", r"llm\.prices\.m: unknown field\(s\) prompt"),
    ("+llm.prices.m={prompt_per_1m: -1, completion_per_1m: 2}", r"llm\.prices\.m\.prompt_per_1m=-1: must be"),
    ("+llm.prices.m={prompt_per_1m: cheap, completion_per_1m: 2}", r"llm\.prices\.m\.prompt_per_1m='cheap'"),
    ("+llm.prices.m=0.5", r"llm\.prices\.m=0\.5: expected \{prompt_per_1m"),
    ("llm.prices=[1]", r"llm\.prices=\[1\]: expected a mapping"),
])
def test_a_bad_price_entry_is_a_plan_error_naming_its_key(tmp_path, override, message):
    with pytest.raises(PlanError, match=message):
        plan_config(compose(tmp_path, "http://127.0.0.1:9/v1", "system=backbone", "embedding=bm25", override),
                    tmp_path / "root", tmp_path / "job")


def test_prompt_tokens_the_provider_cached_are_billed_at_the_cached_input_price(tmp_path):
    """A provider's cached input (``usage.prompt_tokens_details.cached_tokens``) is counted per role and priced at
    ``cached_prompt_per_1m``; our own call cache still costs nothing."""
    from inmind_exp.protocol.metrics import cost_usd

    with FakeOpenAI() as fake:
        fake.cached_prompt_share = 0.5
        plan = plan_config(compose(tmp_path, fake.base_url, "system=backbone", "embedding=bm25",
                                   "+llm.prices.fake-model={prompt_per_1m: 2, completion_per_1m: 0, "
                                   "cached_prompt_per_1m: 0.5}"), tmp_path / "root", tmp_path / "job")
        assert plan.prices["fake-model"] == (2.0, 0.0, 0.5)
        records = run_plan(plan, executor=InProcessExecutor(), resources=Resources()).records
    usage = records[0].usage
    models = {r: e.model for r, e in plan.endpoints.items()}
    prompt = sum(u.paid_prompt_tokens for u in usage.values())
    cached = sum(u.provider_cached_prompt_tokens for u in usage.values())
    assert 0 < cached <= prompt / 2
    assert cost_usd(usage, plan.prices, models) == pytest.approx(((prompt - cached) * 2 + cached * 0.5) / 1e6)
    assert cost_usd(usage, {"fake-model": (2.0, 0.0)}, models) == pytest.approx(prompt * 2 / 1e6)  # no cached price


def test_reasoning_tokens_are_counted_apart_within_the_completion_tokens(tmp_path):
    """A reasoning model's hidden tokens (``usage.completion_tokens_details.reasoning_tokens``) are counted per role,
    within the paid completion tokens and priced with them, and logged only when a provider reports them."""
    from inmind_exp.protocol.metrics import compute

    with FakeOpenAI() as fake:
        fake.reasoning_share = 0.5
        plan = plan_config(compose(tmp_path, fake.base_url, "system=backbone", "embedding=bm25"),
                           tmp_path / "root", tmp_path / "job")
        records = run_plan(plan, executor=InProcessExecutor(), resources=Resources()).records
    usage = records[0].usage
    reasoning = sum(u.reasoning_tokens for u in usage.values())
    completion = sum(u.paid_completion_tokens for u in usage.values())
    assert 0 < reasoning <= completion / 2
    flat = compute(list(records)).flat()
    assert flat["total_reasoning_tokens"] == sum(r.usage[k].reasoning_tokens for r in records for k in r.usage)
    assert "total_reasoning_tokens" not in compute([replace(r, usage={}) for r in records]).flat()


def test_the_price_hint_names_an_override_that_works(tmp_path):
    from inmind_exp.config.checks import price_override

    hint = price_override("qwen2.5:7b", "0.1", "0.2")
    assert hint == "\"+llm.prices.qwen2_5_7b={model: 'qwen2.5:7b', prompt_per_1m: 0.1, completion_per_1m: 0.2}\""
    plan = plan_config(compose(tmp_path, "http://127.0.0.1:9/v1", "system=backbone", "embedding=bm25",
                               "llm.model=qwen2.5:7b", hint.strip('"')), tmp_path / "root", tmp_path / "job")
    assert plan.prices == {"qwen2.5:7b": (0.1, 0.2, 0.1)}


# -- a cap that finishes (#44 item 3) -----------------------------------------------------------------------------

PRICED = "+llm.prices.fake-model={prompt_per_1m: 1, completion_per_1m: 1}"


def test_once_a_task_is_paid_the_cap_reserves_the_largest_task_seen_not_the_bound(tmp_path, caplog):
    import dataclasses

    from inmind_exp.display.progress import PlanProgress
    from inmind_exp.display.spend_cap import CapRecord, SpendCap

    with FakeOpenAI() as fake:
        plan = plan_config(compose(tmp_path, fake.base_url, "system=naive_rag", "embedding=bm25", PRICED),
                           tmp_path / "root", tmp_path / "job")
        records = run_plan(plan, executor=InProcessExecutor(), resources=Resources()).records
    bound = task_estimate(plan).usd
    one = records[0]
    progress = PlanProgress(plan, {one.task_id: one})
    progress.add(one)
    cost = progress.spend().cost_usd
    assert 0 < cost * 3 < bound  # the dry run's bound is several times what a task costs
    capped = dataclasses.replace(plan, run=dataclasses.replace(plan.run, max_usd=cost * 4.5))
    cap = SpendCap(CapRecord())
    assert cap.allows(capped, [progress], [capped, capped])  # 1 spent + 3 at the largest task seen: under 4.5
    assert not cap.allows(capped, [progress], [capped, capped, capped, capped])
    said = [r.getMessage() for r in caplog.records if "stopped dispatching" in r.getMessage()]
    assert len(said) == 1 and "at the largest task so far" in said[0]
    fresh = PlanProgress(plan, {})  # nothing paid yet: the bound holds the first task back
    assert not SpendCap(CapRecord()).allows(capped, [fresh], [])


def test_a_cap_above_one_bound_runs_every_task_and_a_stopped_one_prints_the_cap_that_finishes(tmp_path):
    import io

    with FakeOpenAI() as fake:
        plan = plan_config(compose(tmp_path, fake.base_url, "system=naive_rag", "embedding=bm25", PRICED),
                           tmp_path / "root", tmp_path / "job")
        bound = task_estimate(plan).usd
        # reserving the bound for every task, this cap ran one task; at the observed cost it runs all four
        full = plan_config(compose(tmp_path, fake.base_url, "system=naive_rag", "embedding=bm25", PRICED,
                                   f"run.max_usd={bound * 1.1:.6f}"), tmp_path / "root", tmp_path / "job")
        executor = InProcessExecutor()
        assert len(run_plan(full, executor=executor, resources=Resources()).records) == 4
        assert executor.spend_cap.reached() == {}

        # below one bound, nothing starts; the closing lines name the tasks left and a cap that finishes them
        def launch(cap: str):
            p = plan_config(compose(tmp_path, fake.base_url, "system=naive_rag", "embedding=bm25", PRICED,
                                    f"run.max_usd={cap}", f"run.cache_dir={tmp_path / 'cache2'}"),
                            tmp_path / "root2", tmp_path / "job2")
            session = Session()
            session.resources._executor = InProcessExecutor()
            result = run_plan(p, executor=session.resources._executor, resources=session.resources)
            out = io.StringIO()
            return p, result, session.exit_code(out), out.getvalue()

        stopped, result, code, said = launch(f"{bound / 2:.6f}")
        assert code == Exit.SPEND_CAP and result.records == []
        assert f"{stopped.name} (4 of 4 tasks left)" in said and "4 tasks left" in said
        assert "at the dry run's upper bound" in said
        finish = re.search(r"run\.max_usd=(\d+\.\d\d)$", said.strip())
        assert finish and float(finish.group(1)) >= 4 * bound, said
        _, result, code, said = launch(finish.group(1))
        assert code == 0 and len(result.records) == 4, said


# -- an incomplete run never looks finished (#44 item 1) --------------------------------------------------------------


def test_a_capped_run_says_so_in_its_lines_its_headline_and_its_mlflow_run(tmp_path, caplog):
    import io
    import logging

    from mlflow.tracking import MlflowClient

    from inmind_exp import tags as T

    caplog.set_level(logging.INFO, logger="inmind_exp")
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    data = many_tasks(tmp_path, 8)
    with FakeOpenAI() as fake:
        bound = task_estimate(plan_config(compose(tmp_path, fake.base_url, "system=backbone", "embedding=bm25", data,
                                                  PRICED), tmp_path / "root", tmp_path / "job")).usd

        def launch(cap: float):
            plan = plan_config(compose(tmp_path, fake.base_url, "system=backbone", "embedding=bm25", data, PRICED,
                                       f"run.max_usd={cap:.6f}"), tmp_path / "root", tmp_path / "job")
            session = Session()
            session.resources._executor = InProcessExecutor()
            result = run_plan(plan, executor=session.resources._executor, resources=session.resources)
            session.add(result)
            out = io.StringIO()
            return plan, result, session, session.exit_code(out), out.getvalue()

        plan, result, session, code, closing = launch(bound / 2)  # not even one task fits
        assert code == Exit.SPEND_CAP and result.incomplete == T.CAPPED
        row = next(line for line in session.table("x").splitlines() if line.startswith(f"| {plan.name}"))
        assert "| 0/8 capped |" in row.replace("  ", " ")
        lines = [r.getMessage() for r in caplog.records]
        assert any(f"{plan.name} stopped at the spend cap: 0/8 tasks" in m for m in lines)
        assert not any(f"{plan.name} finished" in m for m in lines)
        run = client.get_run(result.run_id)
        assert run.data.tags[T.INCOMPLETE] == T.CAPPED
        assert run.data.metrics["n_planned"] == 8 and run.data.metrics["n_tasks"] == 0

        finish = float(re.search(r"run\.max_usd=(\d+\.\d\d)$", closing.strip()).group(1))
        _, done, session, code, _ = launch(finish)
    assert code == 0 and done.incomplete is None and len(done.records) == 8
    run = client.get_run(done.run_id)
    assert done.run_id == result.run_id and T.INCOMPLETE not in run.data.tags  # the rerun completed the same run
    assert run.data.metrics["n_planned"] == 8 and run.data.metrics["n_tasks"] == 8
    row = next(line for line in session.table("x").splitlines() if line.startswith(f"| {plan.name}"))
    assert "capped" not in row and "| 8 " in row
