"""Judge audit: human labels (agreement, false positives/negatives, κ) and agreement between two judge models."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from inmind_exp.records import Answer, TaskRecord, Verdict

from analysis.audit import LabelError, audit_human, judge_agreement, judge_pairs, read_labels
from analysis.compare import outcome
from analysis.load import Run
from analysis.agreement import cohen_kappa
from tests.analysis.conftest import build_runs
from tests.analysis.fixtures import SPECS, fixture_records


def write_labels(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_human_audit_counts_fp_fn_and_kappa(runs, tmp_path):
    run = runs[3]  # always_in_state: plenty of positive and negative application verdicts
    model = {t: outcome(r, "application") for t, r in sorted(run.by_task.items())}
    pos = [t for t, v in model.items() if v == 1][:6]
    neg = [t for t, v in model.items() if v == 0][:6]
    rows, human = [], {}
    for t in pos + neg:
        human[t] = model[t]
    human[pos[0]] = human[pos[1]] = 0  # two false positives
    human[neg[0]] = 1  # one false negative
    rows = [{"run": run.label, "task_id": t, "judge": "application", "label": v, "annotator": "x"} for t, v in human.items()]
    rows.append({"config_hash": run.config.config_hash, "task_id": "t999", "judge": "application", "label": 1,
                 "annotator": "x"})  # names no record
    rows.append({"run": runs[1].label, "task_id": "t003", "judge": "application", "label": 0,
                 "annotator": "x"})  # the judge errored on this one
    t = audit_human(read_labels(write_labels(tmp_path / "labels.jsonl", rows)), runs)
    row = t.data.set_index("judge").loc["application"]
    assert (row["n"], row["agree"], row["false_positives"], row["false_negatives"]) == (12, 9, 2, 1)
    assert (row["unmatched"], row["judge_errors"]) == (1, 1)
    expected = cohen_kappa([human[k] for k in human], [model[k] for k in human])
    assert row["kappa"] == pytest.approx(expected)
    assert row["accuracy"] == pytest.approx(75.0)
    assert "| Application | 12 | 75.0 [" in t.markdown() and "κ" in t.markdown()


@pytest.mark.parametrize("line, message", [
    ({"run": "x", "task_id": "1", "judge": "vibes", "label": 1}, "judge 'vibes'"),
    ({"run": "x", "task_id": "1", "judge": "naive", "label": 2}, "label must be 0 or 1"),
    ({"task_id": "1", "judge": "naive", "label": 1}, "needs 'run'"),
])
def test_label_file_errors_name_the_line(tmp_path, line, message):
    path = write_labels(tmp_path / "l.jsonl", [{"run": "x", "task_id": "0", "judge": "naive", "label": 1}, line])
    with pytest.raises(LabelError, match=rf"l.jsonl:2: .*{message}"):
        read_labels(path)


def test_duplicate_labels_are_rejected(tmp_path):
    row = {"run": "x", "task_id": "0", "judge": "naive", "label": 1}
    with pytest.raises(LabelError, match="duplicate"):
        read_labels(write_labels(tmp_path / "l.jsonl", [row, row]))


def _rejudged(run: Run, flips: set[str], changed_answer: str) -> list[dict]:
    """The same records judged by another model: some application verdicts flipped, one answer different."""
    out = []
    for r in run.records:
        v = dict(r.verdicts)
        if r.task_id in flips and v["application"].ok:
            v["application"] = Verdict("application", 1 - int(v["application"].score))
        ind = Answer("a different answer", r.indirect.context) if r.task_id == changed_answer else r.indirect
        out.append(dataclasses.replace(r, verdicts=v, indirect=ind, config_hash="c" * 16).to_dict())
    return out


def test_two_judge_models_over_the_same_records(runs):
    base = runs[3]
    other = dataclasses.replace(SPECS[3], config_hash="c" * 16, judge_model="gpt-4o")
    both = build_runs({**fixture_records(SPECS), other: _rejudged(base, {"t001", "t002", "t005"}, "t010")})
    pairs = judge_pairs(both)
    assert len(pairs) == 1 and {pairs[0][0].config.judge_model, pairs[0][1].config.judge_model} == {"gpt-5-mini", "gpt-4o"}
    assert all("[judge " in r.label for r in both if r.config.system == "always_in_state")
    t = judge_agreement(pairs)
    app = t.data.set_index("judge").loc["application"]
    assert (app["n"], app["agree"], app["a_only"] + app["b_only"]) == (39, 36, 3)
    assert app["excluded_inputs_differ"] == 1
    tr = t.data.set_index("judge").loc["target_recall"]
    assert (tr["n"], tr["agree"], tr["kappa"]) == (39, 39, pytest.approx(1.0))
    naive = t.data.set_index("judge").loc["naive"]  # every naive verdict is 1 in both: κ is undefined, not 1
    assert (naive["n"], naive["agree"]) == (40, 40) and math.isnan(naive["kappa"])
    assert t.display.set_index("Judge").loc["Naive", "κ"] == "–"
    assert isinstance(both[0].records[0], TaskRecord)


def test_corrected_rates_carry_the_audit_into_each_run(runs, tmp_path):
    """``audit --labels`` gains the Rogan–Gladen corrected rate per run: Se/Sp from the pooled labels of a judge,
    the run's observed rate, and the interval of ``agreement.rogan_gladen`` (checked by hand in test_stats)."""
    from analysis.audit import corrected_rates
    from analysis.agreement import rogan_gladen

    run = runs[3]
    model = {t: outcome(r, "application") for t, r in sorted(run.by_task.items())}
    pos = [t for t, v in model.items() if v == 1][:6]
    neg = [t for t, v in model.items() if v == 0][:6]
    human = {**{t: 1 for t in pos}, **{t: 0 for t in neg}}
    human[pos[0]] = 0  # one false positive: Se 5/5, Sp 6/7
    rows = [{"run": run.label, "task_id": t, "judge": "application", "label": v} for t, v in human.items()]
    t = corrected_rates(read_labels(write_labels(tmp_path / "labels.jsonl", rows)), runs)
    got = t.data.set_index(["configuration", "judge"]).loc[(run.label, "application")]
    assert (got["audit_positive"], got["audit_negative"]) == (5, 7)
    assert got["sensitivity"] == pytest.approx(100.0) and got["specificity"] == pytest.approx(600 / 7)
    r = run.metrics.rates["application"]
    est, lo, hi = rogan_gladen(r.successes, r.n, 5, 0, 6, 1)
    assert (got["corrected"], got["ci_low"], got["ci_high"]) == pytest.approx((100 * est, 100 * lo, 100 * hi))
    assert got["corrected"] < got["observed"]  # a judge with false positives only over-counts
    assert set(t.data["configuration"]) == {x.label for x in runs if x.metrics.rates["application"].n}
