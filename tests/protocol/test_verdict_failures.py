"""A failed verdict is an error of its metric only, and every retry of it asks the endpoint again (issue #38,
items 1, 2 and 5), through the real openai client against the fake server."""

from __future__ import annotations

from dataclasses import replace

import pytest

from inmind_exp.protocol.judges import JUDGES, parse_verdict_json
from inmind_exp.memory import SYSTEMS
from inmind_exp.protocol.metrics import compute
from inmind_exp.display.headline import results_table
from inmind_exp.official.aggregate import official_rates
from inmind_exp.protocol.task import run_task
from inmind_exp.records import Task, TaskRecord
from inmind_exp.official.submission import build_submission
from tests.conftest import make_trace

TASK = Task(id="155", domain="health_wellness", user_message="I have a tree nut allergy.",
            assistant_message="Noted, thanks for telling me.", naive_query="What allergy do I have?",
            query="Any good macaron recipes for this weekend?", explanation="Macarons are made with almond flour.")
#: only the naive judge's request holds the naive query right before the answer
NAIVE_JUDGE = "What allergy do I have?\n\n[answer]"
#: the release's way: the messages only, no JSON mode, no repair turn, a binary integer score
RELEASE_WAY = {k: replace(j, json_mode=False, lenient=False, version=j.version + "-test") for k, j in JUDGES.items()}


def judge_replies(fake, naive: str | None) -> None:
    """The naive judge replies ``naive`` (None: a verdict); every other judge request gets a valid verdict."""
    fake.rules.clear()
    if naive is not None:
        fake.add_rule(NAIVE_JUDGE, naive)
    fake.add_rule("[user_message]", {"score": 1, "reason": "ok"})


def naive_judge_requests(fake) -> list[dict]:
    return [r for r in fake.chat_requests() if any(NAIVE_JUDGE in str(m.get("content")) for m in r["messages"])]


def run(models, tmp_path, judges=None, previous=None, attempts=3) -> TaskRecord:
    backbone = SYSTEMS.get("backbone")
    return run_task(TASK, make_trace(), 1, lambda wd: backbone(models, None, wd), models, tmp_path / "w",
                    config_hash="h", system_name="backbone", evaluates_naive=True, judge_attempts=attempts,
                    judges=judges, previous=previous)


def test_a_failed_verdict_leaves_only_its_metric(models, tmp_path, fake):
    judge_replies(fake, "Score: 1 (the answer states the allergy)")  # prose: the release parses JSON only
    rec = run(models, tmp_path, judges=RELEASE_WAY)
    assert rec.error is None and rec.naive is not None and rec.indirect is not None
    assert rec.failed_verdicts == ("naive",) and rec.rejudgeable
    assert rec.verdicts["naive"].score is None and rec.verdicts["naive"].raw.startswith("Score: 1")
    assert all(rec.verdicts[k].score == 1 for k in ("application", "target_recall", "answer_only"))

    m = compute([rec])
    assert (m.rates["naive"].n, m.rates["naive"].errors) == (0, 1)
    assert (m.rates["application"].successes, m.rates["application"].n, m.rates["application"].errors) == (1, 1, 0)
    assert m.excluded == () and m.verdict_errors == {"naive": ("155",)}
    assert "left out of the Naive rate only (its verdict failed): 155" in results_table([("cfg", m)])

    official = official_rates([rec])  # the release: a failed verdict is "not 1" for its own metric only
    assert (official["application"].successes, official["naive"].successes) == (1, 0)
    sub = build_submission([rec])
    assert [r["task_id"] for r in sub.rows] == [155] and sub.skipped == ()


def test_every_attempt_and_every_rerun_asks_the_endpoint(models, tmp_path, fake):
    judge_replies(fake, "Score: 1")
    rec = run(models, tmp_path, judges=RELEASE_WAY, attempts=3)
    first = naive_judge_requests(fake)
    assert len(first) == 3  # the same messages three times: none answered by the call cache
    assert all("response_format" not in r for r in first)  # the release sends the messages only
    assert all(len(r["messages"]) == 2 for r in first)  # no repair turn

    fake.reset_log()
    again = run(models, tmp_path, judges=RELEASE_WAY, previous=rec, attempts=3)
    assert len(naive_judge_requests(fake)) == 3  # a failed parse is never served from the cache
    assert len(fake.chat_requests()) == 3  # and nothing but the failed verdict is asked: judge calls only
    assert again.failed_verdicts == ("naive",)

    judge_replies(fake, None)  # the judge now replies with a verdict
    fake.reset_log()
    fixed = run(models, tmp_path, judges=RELEASE_WAY, previous=again)
    assert len(fake.chat_requests()) == 1 and fixed.failed_verdicts == ()
    assert fixed.verdicts["naive"].score == 1
    assert {k: v for k, v in fixed.verdicts.items() if k != "naive"} == {
        k: v for k, v in rec.verdicts.items() if k != "naive"}  # the others are kept as they were
    assert fixed.naive == rec.naive and fixed.indirect == rec.indirect
    assert fixed.usage["judge"].calls == rec.usage["judge"].calls + 3 + 1


def test_json_mode_retries_reach_the_endpoint(models, tmp_path, fake):
    """The strict set's envelope (JSON mode and a repair turn): its third attempt, byte-identical to the second
    when the model repeats itself, is asked, not answered from the cache."""
    fake.add_rule(NAIVE_JUDGE, "no verdict")
    rec = run(models, tmp_path, attempts=3)
    asked = naive_judge_requests(fake)
    assert len(asked) == 3 and all(r["response_format"] == {"type": "json_object"} for r in asked)
    assert asked[1] == asked[2]  # the repair turn repeats the same reply: same request, still sent
    assert rec.failed_verdicts == ("naive",) and rec.error is None


@pytest.mark.parametrize("text,score", [
    ('{"score": 1, "reason": "ok"}', 1),
    ('```json\n{"score": 0, "reason": "no"}\n```', 0),
    ('{"score": "1", "reason": "x"}', None),
    ('{"score": 1.0, "reason": "x"}', None),
    ('{"score": true, "reason": "x"}', None),
    ('Verdict: {"score": 1, "reason": "x"}', None),
    ("Score: 1", None),
])
def test_the_release_reads_only_json_verdicts_with_a_binary_score(models, text, score, fake):
    from inmind_exp.protocol.judges import judge

    fake.add_rule("[user_message]", text)
    v = judge(models.judge, RELEASE_WAY["application"],
              {"user_message": "[user_message] x", "context": "c", "query": "q", "explanation": "e", "answer": "a"},
              attempts=1)
    assert v.score == score and (v.error is None) == (score is not None)


def test_parse_verdict_json_refuses_prose():
    assert parse_verdict_json('  {"score": 0}  ') == {"score": 0}
    with pytest.raises(ValueError):
        parse_verdict_json('Here you go: {"score": 0}')


def test_an_older_record_whose_only_error_was_a_verdict_reads_as_a_verdict_error(models, tmp_path, fake):
    judge_replies(fake, "Score: 1")
    rec = run(models, tmp_path, judges=RELEASE_WAY, attempts=1)
    old = {**rec.to_dict(), "error": "judge failed: naive: no valid JSON object"}
    back = TaskRecord.from_dict(old)
    assert back.error is None and back.failed_verdicts == ("naive",)
    crashed = TaskRecord.from_dict({**old, "indirect": None, "error": "LLMCallError: HTTP 500"})
    assert crashed.error == "LLMCallError: HTTP 500"


def test_json_mode_under_the_paper_set_is_a_labelled_deviation():
    from inmind_exp.official.fidelity import deviations
    from inmind_exp.official.setting import setting_of_params

    base = {"dataset.name": "official", "trace.name": "official", "injection.name": "middle",
            "injection.user_turn": "40", "answer.mode": "paper", "judges.prompts": "paper", "llm.model": "gpt-5-mini",
            "llm.roles.answerer.max_tokens": "16384", "llm.roles.judge.max_tokens": "4096", "llm.reasoning": "true"}
    assert deviations(setting_of_params(base)) == ()
    devs = deviations(setting_of_params({**base, "judges.json_mode": "true"}))
    assert devs == ("judge JSON mode (response_format and a repair turn; release: the messages only)",)


def test_json_mode_is_part_of_the_judges_identity():
    from inmind_exp.protocol.judges import judge_set

    strict = judge_set("strict")
    plain = judge_set("strict", json_mode=False)
    assert all(not j.json_mode and j.version != strict[k].version for k, j in plain.items())


def test_a_reruns_spend_is_what_it_added_not_the_tasks_whole_usage(models, tmp_path, fake):
    """Rerunning a failed verdict adds its judge calls to the task's usage (the task's cost); the run's own spend
    line counts only those calls."""
    import types

    from inmind_exp.display.progress import PlanProgress

    judge_replies(fake, "Score: 1 (prose)")
    rec = run(models, tmp_path, judges=RELEASE_WAY, attempts=1)
    judge_replies(fake, None)
    fixed = run(models, tmp_path, judges=RELEASE_WAY, previous=rec, attempts=1)
    plan = types.SimpleNamespace(tasks=[TASK], endpoints={}, embedding=None, prices={}, name="p")
    progress = PlanProgress(plan, {rec.task_id: rec})
    progress.new.append(fixed)
    total = sum(u.calls - u.cached_calls for u in fixed.usage.values())
    assert total > 1 and progress.spend().paid_calls == 1  # one judge call re-asked, not the task's every call
