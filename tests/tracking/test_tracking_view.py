"""The saved MLflow views: configuration runs grouped under their sweep (each sweep of the experiment expanded), the
headline rates with their CI bounds first, full run names, and an ungrouped twin for MLflow's per-task view (which
refuses a grouped table). Checked against a real SQLite store."""

from __future__ import annotations

import json

from inmind_exp import tags as T
from inmind_exp.tracking import TASKS_VIEW_KEY, VIEW_KEY, VIEW_TAG_PREFIX, runs_view_state
from inmind_exp.tracking.writer import Tracker


def test_the_view_groups_by_sweep_and_puts_the_headline_first():
    view = runs_view_state(["sweep a"])
    assert view["groupBy"]["groupByKeys"] == [{"mode": "tag", "groupByData": T.SWEEP_NAME}]
    assert view["groupsExpanded"][f"tag.{T.SWEEP_NAME}.sweep a"] is True
    assert view["searchFilter"] == f"tags.`{T.KIND}` = '{T.CONFIG}'"  # the parent is no sibling row
    metrics = [c for c in view["columnOrder"] if c.startswith("metrics.")]
    assert metrics[:6] == ["metrics.`application`", "metrics.`application_ci_low`", "metrics.`application_ci_high`",
                           "metrics.`target_recall`", "metrics.`target_recall_ci_low`", "metrics.`target_recall_ci_high`"]
    assert view["columnWidths"]["attributes.`Run Name`"] >= 300
    flat = runs_view_state(["sweep a"], grouped=False)
    assert flat["groupBy"] is None and flat["selectedColumns"] == view["selectedColumns"]


def test_a_sweeps_runs_carry_its_name_and_the_stored_view_expands_it(tmp_path):
    tracker = Tracker(f"sqlite:///{tmp_path / 'mlflow.db'}", "inmind")
    parent = tracker.open_sweep_run("sweep:x", tmp_path)
    child, _ = tracker.get_or_create_run("k1", "naive_rag/bm25", {T.KIND: T.CONFIG}, parent_id=parent)
    name = tracker.client.get_run(parent).info.run_name
    assert tracker.client.get_run(child).data.tags[T.SWEEP_NAME] == name
    tags = tracker.client.get_experiment(tracker.experiment_id).tags
    grouped, flat = (json.loads(tags[VIEW_TAG_PREFIX + k]) for k in (VIEW_KEY, TASKS_VIEW_KEY))
    assert grouped["groupsExpanded"][f"tag.{T.SWEEP_NAME}.{name}"] is True and flat["groupBy"] is None
