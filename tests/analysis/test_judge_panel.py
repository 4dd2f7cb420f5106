"""The judge-robustness panel's per-system tables: flip rate and κ between every two judge settings (the run's own
judge one of them), and each setting's rates over repeated samples and its label-free self-audit, on constructed
verdicts whose flips and certain errors are known."""

from __future__ import annotations

import math

import pytest

from inmind_exp.records import Answer, Message, TaskRecord, Verdict

from analysis.judge_panel import ORIGINAL, between_settings, self_audit, settings
from analysis.load import Run, RunConfig
from analysis.rejudge import P_SAMPLE, P_SETTING, P_SOURCE, panel
from analysis.stats import cohen_kappa

N = 10
#: provenance 0 on t0, t1 (a target-recall verdict of 1 there is a certain FP); verbatim 1 on t8, t9 (a 0 a certain FN)
PROVENANCE = [0, 0] + [1] * 8
VERBATIM = [0] * 8 + [1, 1]


def _records(name: str, app: list[int], recall: list[int]) -> tuple[TaskRecord, ...]:
    ctx = (Message("user", "q"),)
    return tuple(TaskRecord(
        config_hash="c" * 16, task_id=f"t{i}", domain="food_drink", system=name, injection_session=3, naive=None,
        indirect=Answer("answer", ctx), verdicts={"target_recall": Verdict("target_recall", recall[i]),
                                                  "application": Verdict("application", app[i]),
                                                  "answer_only": Verdict("answer_only", app[i])},
        target_recall_exact=VERBATIM[i], usage={}, latency_s=0.0, target_recall_provenance=PROVENANCE[i])
        for i in range(N))


def _flip(xs: list[int], idx: list[int]) -> list[int]:
    return [1 - x if i in idx else x for i, x in enumerate(xs)]


CFG = RunConfig(system="mem0", embedding="minilm", injection="middle", llm="openai", answerer_model="m",
                judge_model="judge-0", config_hash="c" * 16)
APP = [1, 0] * 5
RECALL = [0, 0] + [1] * 6 + [1, 1]  # no certain error by the run's own judge


def _rejudged(source: Run, setting: str, sample: int, app: list[int], recall: list[int]) -> Run:
    return Run(label=f"mem0 ⟂ {setting} #{sample}", config=CFG, records=_records("mem0", app, recall),
               params={P_SOURCE: source.run_id, P_SETTING: setting, P_SAMPLE: str(sample),
                       "rejudge.base_url": "http://127.0.0.1:1/v1"})


@pytest.fixture
def panel_runs():
    source = Run(label="mem0", config=CFG, records=_records("mem0", APP, RECALL), run_id="src1",
                 params={"llm.roles.judge.model": "judge-0", "judges.prompts": "strict"})
    paper = [_rejudged(source, "paper/judge-0", 0, _flip(APP, [0, 1]), _flip(RECALL, [0])),  # 1 FP
             _rejudged(source, "paper/judge-0", 1, _flip(APP, [0, 1, 2]), _flip(RECALL, [0, 1, 8]))]  # 2 FP, 1 FN
    other = [_rejudged(source, "strict/judge-b", 0, _flip(APP, [5, 6, 7, 8, 9]), RECALL)]
    return source, paper + other


def test_every_two_settings_are_compared_with_flips_and_kappa(panel_runs):
    source, rejudged = panel_runs
    names = [s.name for s in settings(source, rejudged)]
    assert names == [f"{ORIGINAL} (strict/judge-0)", "paper/judge-0", "strict/judge-b"]
    t = between_settings([source], rejudged)
    app = t.data[t.data["judge"] == "application"].set_index(["setting_a", "setting_b"])
    assert len(app) == 3  # three settings: three pairs
    orig = names[0]
    assert app.loc[(orig, "paper/judge-0"), "flips"] == 2  # sample 0 of each setting
    assert app.loc[(orig, "strict/judge-b"), "flips"] == 5
    between = app.loc[("paper/judge-0", "strict/judge-b")]
    assert between["flips"] == 7 and between["flip_rate"] == pytest.approx(70.0)
    assert between["kappa"] == pytest.approx(cohen_kappa(_flip(APP, [0, 1]), _flip(APP, [5, 6, 7, 8, 9])))
    assert "70.0 (7/10)" in t.display["flip rate % (flips/n)"].tolist()


def test_each_setting_reports_its_spread_over_samples_and_its_certain_errors(panel_runs):
    source, rejudged = panel_runs
    t = self_audit([source], rejudged)
    rows = t.data[t.data["configuration"] == "mem0"].set_index("setting")
    paper = rows.loc["paper/judge-0"]
    assert paper["samples"] == 2 and paper["audited"] == N
    assert paper["false_positives_mean"] == pytest.approx(1.5)
    assert paper["false_positives_sd"] == pytest.approx(math.sqrt(0.5))
    assert paper["false_negatives_mean"] == pytest.approx(0.5)
    apps = [50.0, 40.0]  # flipping t0, t1 keeps 5 of 10; flipping t0, t1, t2 leaves 4
    assert paper["application_mean"] == pytest.approx(45.0)
    assert (paper["application_min"], paper["application_max"]) == (min(apps), max(apps))
    orig = rows.loc[f"{ORIGINAL} (strict/judge-0)"]
    assert orig["false_positives_mean"] == 0 and orig["samples"] == 1 and orig["application_sd"] == 0.0
    pooled = t.data[t.data["configuration"] == "(all configurations)"].set_index("setting")
    assert pooled.loc["paper/judge-0", "false_positives_total"] == 3
    assert pooled.loc["paper/judge-0", "false_negatives_total"] == 1
    assert pooled.loc["paper/judge-0", "audited"] == 2 * N
    shown = t.display.set_index("Judge setting").loc["paper/judge-0"]
    assert shown["Application %"].iloc[0] == "45.0 ± 7.1 [40.0–50.0]"


def test_the_panel_and_the_pairs_agree_on_the_flips_against_the_run(panel_runs):
    source, rejudged = panel_runs
    p = panel([source], rejudged).data.set_index(["setting", "judge"])
    pairs = between_settings([source], rejudged).data
    first = pairs[(pairs["setting_a"].str.startswith(ORIGINAL)) & (pairs["judge"] == "application")]
    for _, row in first.iterrows():
        assert p.loc[(row["setting_b"], "application"), "flips"] == row["flips"]


def test_no_rejudged_run_gives_empty_tables():
    source = Run(label="mem0", config=CFG, records=_records("mem0", APP, RECALL), run_id="src1")
    assert between_settings([source], []).data.empty
    assert len(self_audit([source], []).data) == 2  # the run's own judge, and its pooled row
