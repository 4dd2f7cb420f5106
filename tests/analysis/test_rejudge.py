"""``python -m analysis rejudge`` over a finished fake-server run: only judge calls, the original verdicts exactly
when given the original judge (from the cache with no request, or from the server again), a new request per extra
sample, one MLflow run per setting and sample linked to its source, and the report's judge-robustness panel."""

from __future__ import annotations

import pytest

from inmind_exp.protocol.judges import JUDGES, JUDGE_SETS
from inmind_exp.records import TaskRecord

from analysis.__main__ import main
from analysis.load import load_sweep_dir
from analysis.mlflow_runs import load_experiment
from analysis.judge_panel import panel
from analysis.rejudge import KIND, REJUDGE_OF, judge_set, RejudgeError
from analysis.rejudged import load_rejudged
from tests.fake_openai import FakeOpenAI

#: t2's explanation is in its application, target-recall and answer-only judge prompts: those verdicts are 0
ZERO_RULE = ("Lilies are toxic", {"score": 0, "reason": "fake: not applied"})
JUDGE_SYSTEMS = {j.system for j in JUDGES.values()}


def compose(tmp_path, base_url: str):
    """One naive_rag/bm25 configuration on one worker (``tests.exec.test_runner_ray.compose``'s small data)."""
    from tests.exec.test_runner_ray import compose as compose_run

    return compose_run(tmp_path, base_url, "cluster.workers=1", "system=naive_rag", "embedding=bm25")


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished in-process run of naive_rag on four tasks against the fake server, and the server still up."""
    from inmind_exp.plan.plan import plan_config
    from inmind_exp.run.driver import run_plan
    from inmind_exp.exec.executor import InProcessExecutor
    from inmind_exp.run.resources import Resources

    tmp = tmp_path_factory.mktemp("rejudge")
    fake = FakeOpenAI(rules=[ZERO_RULE]).start()
    cfg = compose(tmp, fake.base_url)
    plan = plan_config(cfg, tmp / "root", tmp / "root" / "job")
    result = run_plan(plan, executor=InProcessExecutor(), resources=Resources())
    assert all(r.error is None for r in result.records)
    yield tmp, fake, result
    fake.stop()


def _scores(records) -> dict[tuple[str, str], int | None]:
    return {(r.task_id, k): v.score for r in records for k, v in r.verdicts.items()}


def test_rejudge_with_the_original_judge_reproduces_every_verdict_from_the_cache(finished):
    tmp, fake, result = finished
    uri = f"sqlite:///{tmp / 'mlflow.db'}"
    assert {v.score for r in result.records for v in r.verdicts.values()} == {0, 1}  # something to reproduce
    fake.reset_log()
    assert main(["rejudge", "--experiment", "test", "--tracking-uri", uri, "--cache-dir", str(tmp / "cache")]) == 0
    assert fake.requests == []  # every judge call was a cache hit; nothing else was called
    runset = load_experiment("test", uri)
    rejudged = load_rejudged(runset)
    assert len(rejudged) == 1 and len(runset.runs) == 1  # the rejudge run is not taken for a configuration
    assert _scores(rejudged[0].records) == _scores(result.records)
    assert [r.indirect for r in rejudged[0].records] == [r.indirect for r in result.records]  # same answers

    from inmind_exp.tracking import writer as tracking

    client = tracking.MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name("test")
    runs = client.search_runs([exp.experiment_id], filter_string=f"tags.`inmind.kind` = '{KIND}'")
    source = runset.runs[0]
    assert [r.data.tags[REJUDGE_OF] for r in runs] == [source.run_id]
    assert runs[0].data.metrics["rejudge_http_requests"] == 0.0
    n_calls = sum(len(r.verdicts) for r in result.records)
    assert runs[0].data.metrics["rejudge_cached_calls"] == runs[0].data.metrics["rejudge_calls"] == n_calls


def test_rejudge_without_the_cache_makes_only_judge_calls_and_gets_the_same_verdicts(finished, tmp_path):
    tmp, fake, result = finished
    fake.reset_log()
    sweep = tmp / "root"
    assert main(["rejudge", "--sweep-dir", str(sweep), "--cache-dir", str(tmp_path / "fresh")]) == 0
    bodies = fake.chat_requests()
    assert len(fake.requests) == len(bodies) == sum(len(r.verdicts) for r in result.records)
    assert {b["messages"][0]["content"] for b in bodies} <= JUDGE_SYSTEMS  # judge prompts only, no embedding call
    rejudged = load_rejudged(load_sweep_dir(sweep))
    assert len(rejudged) == 1 and _scores(rejudged[0].records) == _scores(result.records)


def test_each_extra_sample_is_a_new_request_and_the_panel_reports_it(finished, capsys):
    tmp, fake, result = finished
    uri = f"sqlite:///{tmp / 'mlflow.db'}"
    fake.reset_log()
    args = ["rejudge", "--experiment", "test", "--tracking-uri", uri, "--cache-dir", str(tmp / "cache"),
            "--samples", "3"]
    assert main([*args, "--dry-run"]) == 0 and fake.requests == []
    per_sample = sum(len(r.verdicts) for r in result.records)
    assert f"total: {3 * per_sample} judge calls, {per_sample} cached" in capsys.readouterr().out
    assert main(args) == 0
    assert len(fake.chat_requests()) == 2 * per_sample  # sample 0 from the cache, samples 1 and 2 asked anew
    fake.reset_log()
    assert main(args) == 0 and fake.requests == []  # ... and each sample is cached under its own key
    runset = load_experiment("test", uri)
    rejudged = load_rejudged(runset)
    samples = sorted(int(r.params["rejudge.sample"]) for r in rejudged)
    assert samples == [0, 1, 2] and len({r.run_id for r in rejudged}) == 1  # one MLflow run for the setting
    from inmind_exp.tracking import writer as tracking

    client = tracking.MlflowClient(tracking_uri=uri)
    mr = client.get_run(rejudged[0].run_id)
    assert mr.data.metrics["rejudge_samples"] == 3 and mr.data.metrics["application_sd"] == 0.0
    assert mr.data.metrics["application_flip_rate"] == 0.0
    # three identical samples: the majority is the original rate, Fleiss' κ is 1 (or undefined if constant)
    orig = runset.runs[0].metrics.rates["application"]
    assert mr.data.metrics["application_majority"] == pytest.approx(orig.pct)
    assert mr.data.metrics["application_majority_n"] == orig.n and "application_majority_ci_low" in mr.data.metrics
    assert mr.data.metrics.get("application_fleiss_kappa", 1.0) == pytest.approx(1.0)
    assert mr.data.metrics["application_flip_rate_ci_high"] > 0.0  # 0 flips of n still has an upper bound
    steps = [m.step for m in client.get_metric_history(mr.info.run_id, "application")]
    assert sorted(set(steps)) == [0, 1, 2]  # each sample's metrics at its own step
    table = panel(runset.runs, rejudged)
    row = table.data.set_index("judge").loc["application"]
    assert row["samples"] == 3 and row["flips"] == 0 and row["rejudged_sd_pct"] == 0.0
    assert row["rejudged_mean_pct"] == pytest.approx(runset.runs[0].metrics.rates["application"].pct)
    tr = table.data.set_index("judge").loc["target_recall"]
    assert tr["rejudged_fp_mean"] == tr["original_fp"]  # the same judge makes the same certain errors


def test_report_gains_the_panel(finished, tmp_path):
    tmp, _, _ = finished
    uri = f"sqlite:///{tmp / 'mlflow.db'}"
    assert main(["report", "--experiment", "test", "--tracking-uri", uri, "--out", str(tmp_path / "rep"),
                 "--no-log"]) == 0
    for name in ("judge_robustness", "judge_settings_agreement", "judge_settings_self_audit"):
        assert (tmp_path / "rep" / "tables" / f"{name}.csv").is_file()
    assert "Judge robustness" in (tmp_path / "rep" / "report.html").read_text()


def test_flips_and_kappa_against_a_judge_that_disagrees(finished):
    _, _, result = finished
    from analysis.load import Run, RunConfig
    from analysis.agreement import agreement
    from analysis.rejudge import P_SAMPLE, P_SETTING, P_SOURCE
    import dataclasses

    cfg = RunConfig("naive_rag", "bm25", "turn5", "vllm", "m", "m", result.records[0].config_hash)
    source = Run("src", cfg, tuple(result.records), run_id="r1")
    flipped = tuple(dataclasses.replace(r, verdicts={**r.verdicts, "application": dataclasses.replace(
        r.verdicts["application"], score=1 - r.verdicts["application"].score)}) if r.task_id == "t1" else r
        for r in result.records)
    other = Run("other", cfg, flipped, params={P_SOURCE: "r1", P_SETTING: "strict/other", P_SAMPLE: "0"})
    a = agreement(source, other, "application")
    assert (a.n, a.flips) == (4, 1) and a.flip_rate == 25.0 and a.kappa < 1.0
    row = panel([source], [other]).data.set_index("judge").loc["application"]
    assert row["flips"] == 1 and row["setting"] == "strict/other"
    elsewhere = Run("elsewhere", cfg, tuple(result.records), params={
        P_SOURCE: "r1", P_SETTING: "strict/other", P_SAMPLE: "0", "rejudge.base_url": "http://other-server/v1"})
    rows = panel([source], [other, elsewhere]).data
    app = rows[rows["judge"] == "application"].set_index("setting")
    assert list(app["samples"]) == [1, 1]  # the same model name at another server is another setting, not a sample
    assert app.loc["strict/other @ http://other-server/v1", "flips"] == 0


def test_only_registered_prompt_sets_are_accepted(finished, capsys):
    tmp, fake, _ = finished
    assert set(JUDGE_SETS) >= {"strict"} and judge_set("strict") is JUDGES
    with pytest.raises(RejudgeError, match="registered: paper, strict"):
        judge_set("no-such-set")
    fake.reset_log()
    with pytest.raises(SystemExit) as e:
        main(["rejudge", "--sweep-dir", str(tmp / "root"), "--judges", "no-such-set"])
    assert e.value.code == 2 and fake.requests == []


def test_a_task_missing_from_the_task_file_stops_before_any_call(finished, tmp_path, capsys):
    tmp, fake, _ = finished
    other = tmp_path / "tasks.jsonl"
    lines = (tmp / "data" / "tasks.jsonl").read_text().splitlines()
    other.write_text("\n".join(lines[:2]) + "\n")
    fake.reset_log()
    assert main(["rejudge", "--sweep-dir", str(tmp / "root"), "--tasks", str(other),
                 "--cache-dir", str(tmp_path / "c")]) == 2
    assert "'t3' is not in the task file" in capsys.readouterr().err and fake.requests == []


def test_a_record_that_failed_before_judging_is_kept_as_it_is(finished):
    _, _, result = finished
    from analysis.rejudge import rejudge_record

    rec = result.records[0]
    failed = TaskRecord.from_dict({**rec.to_dict(), "indirect": None, "verdicts": {}, "error": "LLMCallError: x"})
    assert rejudge_record(None, failed, None, JUDGES, 0) is failed  # no client is needed: nothing is called
    bad = {**rec.to_dict()["verdicts"]["application"], "score": None, "error": "timeout"}
    old = {**rec.to_dict(), "error": "judge failed: application: timeout",
           "verdicts": {**rec.to_dict()["verdicts"], "application": bad}}
    judged_late = TaskRecord.from_dict(old)  # an older record: a verdict's failure was the task's error
    assert judged_late.error is None and judged_late.failed_verdicts == ("application",)


def test_temperature_is_refused_on_a_reasoning_endpoint_and_never_in_its_name():
    """Issue #41 item 6: a reasoning endpoint sends no temperature, so ``--temperature`` there is refused before any
    call and the setting's name never claims one."""
    from analysis.load import Run, RunConfig
    from analysis.rejudge import setting_for

    cfg = RunConfig(system="s", embedding="e", injection="middle", llm="x", answerer_model="m", judge_model="j",
                    config_hash="c" * 16)
    params = {"llm.model": "j", "llm.base_url": "http://127.0.0.1:9/v1", "llm.temperature": "0.7"}
    plain = Run(label="plain", config=cfg, records=(), params=params)
    assert setting_for(plain, "strict", 1, temperature=0.7).name == "strict/j/t0.7"
    reasoning = Run(label="r", config=cfg, records=(), params={**params, "llm.reasoning": "True"})
    with pytest.raises(RejudgeError, match="reasoning endpoint, which sends no temperature"):
        setting_for(reasoning, "strict", 3, temperature=0.7)
    assert setting_for(reasoning, "strict", 3).name == "strict/j"  # its recorded 0.7 was never sent


def test_rejudged_records_carry_no_controls(finished):
    """The run's judge scored the controls, not the rejudge's: they are dropped, so no control metric is logged
    under the new judge's name."""
    _, _, result = finished
    from analysis.rejudge import Rejudged, rejudge_record
    from analysis.rejudged import _metrics
    from inmind_exp.records import Answer, ControlResult, Verdict

    rec = result.records[0]
    ctl = ControlResult("no_fact", "q", Answer("a", ()), Verdict("answer_only", 1))
    with_controls = TaskRecord.from_dict({**rec.to_dict(), "error": "boom", "controls": {"no_fact": ctl.to_dict()}})
    out = rejudge_record(None, with_controls, None, JUDGES, 0)
    assert out.controls == {} and out.error == "boom"
    assert not any(k.startswith("no_fact") for k in _metrics(Rejudged(None, None, 0, (out,), 0, 0, 0)))
