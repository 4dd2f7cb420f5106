"""Protocol fidelity: ``official`` only in the release's full setting, each deviation named on its own."""

from __future__ import annotations

from dataclasses import replace

import pytest

from inmind_exp.fidelity import (DEMO_TASKS, OFFICIAL, RoleSetting, Setting, deviations, fidelity,
                                 setting_of_params)

OFFICIAL_SETTING = Setting(
    dataset="official", trace="official", injection="middle", user_turn=40, fraction=None, answer="paper",
    judges="paper", answerer=RoleSetting("gpt-5-mini", 16384, reasoning=True),
    judge=RoleSetting("gpt-5-mini", 4096, reasoning=True), n_tasks=125, session_index=8)

#: the flattened config of a leaderboard run (as a plan's params or MLflow params hold it)
OFFICIAL_PARAMS = {
    "dataset.name": "official", "dataset.limit": "None", "trace.name": "official", "injection.name": "middle",
    "injection.user_turn": "40", "injection.fraction": "None", "answer.mode": "paper", "judges.prompts": "paper",
    "llm.model": "gpt-5-mini", "llm.max_tokens": "16384", "llm.temperature": "None", "llm.reasoning": "True",
    "llm.roles.judge.max_tokens": "4096", "llm.roles.answerer.model": "None",
}


def test_the_release_setting_is_official():
    f = fidelity(OFFICIAL_SETTING)
    assert f.official and f.deviations == () and f.tag == OFFICIAL and f.official_data and not f.demo
    assert f.line().startswith("Protocol fidelity: official")


@pytest.mark.parametrize("change, expected", [
    (dict(dataset="bundled"), "dataset=bundled (demo tasks)"),
    (dict(dataset="file"), "dataset=file"),
    (dict(n_tasks=2), "tasks=2 of 125"),
    (dict(trace="bundled"), "trace=bundled"),
    (dict(injection="late", user_turn=None, fraction=0.9), "injection=late"),
    (dict(injection="middle", user_turn=5), "injection=turn5"),
    (dict(session_index=7), "injection session=8 (release: 9)"),
    (dict(answer="shared"), "answer=shared"),
    (dict(answer="native"), "answer=native"),
    (dict(judges="strict"), "judges=strict"),
    (dict(answerer=RoleSetting("qwen2.5-coder", 16384)), "answerer model=qwen2.5-coder"),
    (dict(judge=RoleSetting("gpt-4o", 4096, reasoning=True)), "judge model=gpt-4o"),
    (dict(answerer=RoleSetting("gpt-5-mini", 512, reasoning=True)), "answerer max_tokens=512 (release: 16384)"),
    (dict(judge=RoleSetting("gpt-5-mini", 16384, reasoning=True)), "judge max_tokens=16384 (release: 4096)"),
    (dict(judge=RoleSetting("gpt-5-mini", 4096, temperature=0.0)),
     "judge temperature=0.0 (release: provider default)"),
    (dict(answerer=RoleSetting("gpt-5-mini", 16384, top_p=0.9)), "answerer top_p=0.9 (release: provider default)"),
])
def test_each_deviation_is_named_alone(change, expected):
    f = fidelity(replace(OFFICIAL_SETTING, **change))
    assert not f.official
    assert f.deviations == (expected,)
    assert f.tag == expected and expected in f.line()


def test_a_reasoning_endpoint_sends_no_temperature_so_none_is_an_override():
    # conf/llm/openai.yaml: reasoning models get no temperature or top_p whatever the config says
    s = replace(OFFICIAL_SETTING, answerer=RoleSetting("gpt-5-mini", 16384, temperature=0.0, reasoning=True))
    assert fidelity(s).official


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
    assert fidelity(OFFICIAL_PARAMS).official
    judged_by_4o = {**OFFICIAL_PARAMS, "llm.roles.judge.model": "gpt-4o"}
    assert fidelity(judged_by_4o).deviations == ("judge model=gpt-4o",)
    # the records a run holds win over dataset.limit (an MLflow run of 3 tasks)
    assert deviations(setting_of_params(OFFICIAL_PARAMS, n_tasks=3)) == ("tasks=3 of 125",)


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

    from inmind_exp.config import register_configs
    from inmind_exp.run.labels import CONF_DIR
    from inmind_exp.run.plan import plan_config

    register_configs()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        cfg = compose(config_name="config", overrides=["llm=vllm", "llm.base_url=http://127.0.0.1:9/v1",
                                                       "llm.model=m", "system=backbone", "dataset.limit=3"])
    plan = plan_config(cfg, tmp_path, tmp_path)
    f = fidelity(plan)
    assert f.demo and not f.official
    assert f.deviations[:2] == ("dataset=bundled (demo tasks)", "trace=bundled")
    assert "answerer model=m" in f.deviations and "judge model=m" in f.deviations
    assert fidelity(cfg).deviations[:2] == f.deviations[:2]
