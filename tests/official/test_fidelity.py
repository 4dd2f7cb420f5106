"""Protocol fidelity: ``leaderboard`` and ``paper`` only in the release's setting as served, each deviation named
on its own, the injection compared as the timeline it gives, and a successor model labelled as one (issue #38)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from inmind_exp.official.fidelity import DEMO_TASKS, LEADERBOARD, PAPER, Fidelity, deviations, fidelity

from inmind_exp.official.setting import RoleSetting, Setting, setting_of_params
from inmind_exp.records import TaskRecord

GPT5 = RoleSetting("gpt-5-mini", 16384, reasoning=True, host="api.openai.com")
OFFICIAL_SETTING = Setting(
    dataset="official", trace="official", injection="middle", user_turn=40, fraction=None, answer="paper",
    judges="paper", answerer=GPT5, judge=replace(GPT5, max_tokens=4096), n_tasks=125, session_index=8,
    memory=replace(GPT5, max_tokens=8192))

#: the flattened config of a leaderboard run (as a plan's params or a composed config hold it)
OFFICIAL_PARAMS = {
    "dataset.name": "official", "dataset.limit": "None", "trace.name": "official", "injection.name": "middle",
    "injection.user_turn": "40", "injection.fraction": "None", "answer.mode": "paper", "judges.prompts": "paper",
    "llm.model": "gpt-5-mini", "llm.max_tokens": "16384", "llm.temperature": "None", "llm.reasoning": "True",
    "llm.base_url": "https://api.openai.com/v1", "llm.roles.judge.max_tokens": "4096",
    "llm.roles.answerer.model": "None", "system.name": "backbone", "system.params.answer_naive": "True",
    "embedding.name": "minilm",
}


def test_the_release_setting_as_served_is_a_paper_row():
    f = fidelity(OFFICIAL_SETTING)
    assert f.official and f.level == PAPER and f.tag == PAPER and f.deviations == () and f.paper_gaps == ()
    assert f.official_data and not f.demo and f.line().startswith("Protocol fidelity: paper")


def test_another_memory_model_is_leaderboard_comparable_not_a_paper_row():
    f = fidelity(replace(OFFICIAL_SETTING, memory=RoleSetting("qwen3-32b", 8192, host="gpu-box:8000")))
    assert f.official and f.level == LEADERBOARD and f.tag == LEADERBOARD
    assert f.paper_gaps == ("memory model=qwen3-32b", "memory host=gpu-box:8000 (release: api.openai.com)")
    assert "not a paper row: memory model=qwen3-32b" in f.line()


@pytest.mark.parametrize("change, expected", [
    (dict(dataset="bundled"), "dataset=bundled (demo tasks)"),
    (dict(dataset="file"), "dataset=file"),
    (dict(n_tasks=2), "tasks=2 of 125"),
    (dict(trace="bundled", session_index=None), "trace=bundled"),
    (dict(session_index=7), "injection session=8 (release: 9)"),
    (dict(answer="shared"), "answer=shared"),
    (dict(judges="strict"), "judges=strict"),
    (dict(judge_json_mode=True), "judge JSON mode (response_format and a repair turn; release: the messages only)"),
    (dict(answerer=replace(GPT5, model="qwen2.5-coder")), "answerer model=qwen2.5-coder"),
    (dict(judge=replace(GPT5, model="gpt-4o", max_tokens=4096)), "judge model=gpt-4o"),
    (dict(answerer=replace(GPT5, max_tokens=512)), "answerer max_tokens=512 (release: 16384)"),
    (dict(judge=replace(GPT5, max_tokens=16384)), "judge max_tokens=16384 (release: 4096)"),
    (dict(judge=replace(GPT5, max_tokens=4096, reasoning=False, temperature=0.0)),
     "judge temperature=0.0 (release: provider default)"),
    (dict(answerer=replace(GPT5, reasoning=False, top_p=0.9)), "answerer top_p=0.9 (release: provider default)"),
    (dict(answerer=replace(GPT5, seed=7)), "answerer seed=7 (release: none sent)"),
    (dict(answerer=replace(GPT5, host="127.0.0.1:8000")), "answerer host=127.0.0.1:8000 (release: api.openai.com)"),
    (dict(judge=replace(GPT5, max_tokens=4096, served=("qwen3-8b",))),
     "judge served model=qwen3-8b (asked for gpt-5-mini)"),
])
def test_each_deviation_is_named_alone(change, expected):
    f = fidelity(replace(OFFICIAL_SETTING, **change))
    assert not f.official and f.level == ""
    assert f.deviations == (expected,)
    assert f.tag == expected and expected in f.line()


def test_the_injection_is_compared_as_the_timeline_it_gives_not_as_the_knob():
    # user turn 36 lies in the same session as the 40th: the pair is appended to the same session, the same timeline
    assert fidelity(replace(OFFICIAL_SETTING, user_turn=36)).level == PAPER
    assert fidelity(replace(OFFICIAL_SETTING, user_turn=None, fraction=0.5)).level == PAPER
    # without the session (a flattened config) only the knob is known
    assert deviations(replace(OFFICIAL_SETTING, user_turn=36, session_index=None)) == ("injection=turn36",)


def test_a_dated_snapshot_is_the_model_asked_for():
    served = replace(GPT5, served=("gpt-5-mini-2025-08-07",))
    assert fidelity(replace(OFFICIAL_SETTING, answerer=served)).level == PAPER


def test_one_other_model_of_the_openai_api_answering_and_judging_is_a_successor_run():
    new = replace(GPT5, model="gpt-6-mini", served=("gpt-6-mini-2027-01-01",))
    f = fidelity(replace(OFFICIAL_SETTING, answerer=new, judge=replace(new, max_tokens=4096),
                         memory=replace(new, max_tokens=8192)))
    assert f.tag == "successor model gpt-6-mini: not comparable with the paper's rows or earlier entries"
    assert not f.official and f.deviations == (f.tag,)
    # a successor that serves something else still says so
    off = replace(new, served=("llama-3",))
    assert "answerer served model=llama-3 (asked for gpt-6-mini)" in fidelity(
        replace(OFFICIAL_SETTING, answerer=off, judge=replace(new, max_tokens=4096))).deviations


def test_what_ran_comes_from_the_records():
    rec = TaskRecord("h", "155", "other", "backbone", 8, None, None, {}, None, {}, 0.0, served={
        "answerer": ("qwen3-8b @ 127.0.0.1:5000",), "judge": ("gpt-5-mini-2025-08-07 @ api.openai.com",)})
    f = fidelity(OFFICIAL_SETTING, [rec] * 125)
    assert f.deviations == ("answerer served model=qwen3-8b (asked for gpt-5-mini)",
                            "answerer host=127.0.0.1:5000 (release: api.openai.com)")
    assert f.served["judge"] == ("gpt-5-mini-2025-08-07 @ api.openai.com",)
    assert Fidelity.from_dict(f.to_dict()) == f  # the stored record reads back as it was


def test_the_default_run_lists_every_deviation_and_is_demo_tasks():
    params = {"dataset.path": "None", "dataset.limit": "2", "trace.path": "None", "injection.name": "middle",
              "injection.user_turn": "40", "injection.fraction": "None", "answer.mode": "shared",
              "llm.model": "qwen2.5-coder-1.5b-instruct-q4_k_m", "llm.max_tokens": "200", "llm.temperature": "0.0",
              "llm.reasoning": "False", "llm.roles.judge.max_tokens": "96"}
    f = fidelity(params)
    assert f.demo and not f.official_data and f.task_set == DEMO_TASKS
    assert f.deviations == (
        "dataset=bundled (demo tasks)", "trace=bundled", "answer=shared", "judges=strict",
        "answerer model=qwen2.5-coder-1.5b-instruct-q4_k_m", "answerer max_tokens=200 (release: 16384)",
        "answerer temperature=0.0 (release: provider default)", "judge model=qwen2.5-coder-1.5b-instruct-q4_k_m",
        "judge max_tokens=96 (release: 4096)", "judge temperature=0.0 (release: provider default)")


def test_flattened_params_resolve_roles_over_llm():
    assert fidelity(OFFICIAL_PARAMS).level == PAPER
    assert fidelity({**OFFICIAL_PARAMS, "llm.roles.judge.model": "gpt-4o"}).deviations == ("judge model=gpt-4o",)
    assert fidelity({**OFFICIAL_PARAMS, "llm.seed": "1"}).deviations == (
        "answerer seed=1 (release: none sent)", "judge seed=1 (release: none sent)")
    # the records a run holds win over dataset.limit (a run of 3 tasks)
    assert deviations(setting_of_params(OFFICIAL_PARAMS, n_tasks=3)) == ("tasks=3 of 125",)


def test_the_systems_paper_settings_decide_the_paper_level():
    naive = {**OFFICIAL_PARAMS, "system.name": "naive_rag", "system.params.top_k": "5",
             "system.params.answer_naive": "None"}
    assert fidelity({**naive, "system.params.chunking": "single_shot"}).level == PAPER
    turn = fidelity({**naive, "system.params.chunking": "turn"})
    assert turn.level == LEADERBOARD and turn.paper_gaps == ("system.params.chunking=turn (paper: single_shot)",)
    assert fidelity({**naive, "system.params.chunking": "single_shot", "embedding.name": "bm25"}).paper_gaps == (
        "embedding=bm25 (paper: minilm, emb3)",)
    mine = fidelity({**OFFICIAL_PARAMS, "system.name": "profile_rag"})
    assert mine.level == LEADERBOARD and mine.paper_gaps == ("system=profile_rag (not one of the paper's rows)",)


def test_a_task_file_of_ones_own_under_the_default_name_is_a_file_not_demo_tasks():
    params = {**OFFICIAL_PARAMS, "dataset.name": "bundled", "dataset.path": "/data/mine.jsonl"}
    f = fidelity(params)
    assert f.deviations == ("dataset=file",) and not f.demo and f.task_set == "custom task file"
    assert fidelity({**params, "dataset.path": "None"}).deviations == ("dataset=bundled (demo tasks)",)


def test_the_judge_prompt_set_defaults_to_strict():
    params = {k: v for k, v in OFFICIAL_PARAMS.items() if k != "judges.prompts"}
    assert fidelity(params).deviations == ("judges=strict",)
    assert fidelity({**params, "judges.prompts": "paper"}).official  # the key conf/judges/*.yaml set


def test_a_plan_of_the_default_config_is_demo_tasks(tmp_path):
    from hydra import compose, initialize_config_dir

    from inmind_exp.config.schema import register_configs
    from inmind_exp.labels import CONF_DIR
    from inmind_exp.config.resolve import as_config
    from inmind_exp.plan.plan import plan_config

    register_configs()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        cfg = compose(config_name="config", overrides=["llm=vllm", "llm.base_url=http://127.0.0.1:9/v1",
                                                       "llm.model=m", "system=backbone", "dataset.limit=3"])
    plan = plan_config(cfg, tmp_path, tmp_path)
    f = fidelity(plan)
    assert f.demo and not f.official
    assert f.deviations[:2] == ("dataset=bundled (demo tasks)", "trace=bundled")
    assert f.deviations[2:4] == ("answer=shared", "judges=strict")
    assert "answerer model=m" in f.deviations and "judge model=m" in f.deviations  # not the OpenAI API: no successor
    assert "answerer host=127.0.0.1:9 (release: api.openai.com)" in f.deviations
    assert fidelity(as_config(cfg)).deviations[:2] == f.deviations[:2]


def test_records_that_do_not_say_what_served_them_are_a_deviation():
    from inmind_exp.records import Answer, Message, Verdict

    a = Answer("x", (Message("user", "q"),))
    old = TaskRecord("h", "155", "other", "backbone", 8, a, a, {"application": Verdict("application", 1)}, None, {},
                     0.0)
    assert fidelity(OFFICIAL_SETTING, [old] * 125).deviations == (
        "answerer served model not recorded (125 tasks)", "judge served model not recorded (125 tasks)")
    failed = TaskRecord("h", "155", "other", "backbone", 8, None, None, {}, None, {}, 0.0, error="boom")
    assert fidelity(OFFICIAL_SETTING, [failed] * 125).level == PAPER  # nothing was answered: nothing to name
