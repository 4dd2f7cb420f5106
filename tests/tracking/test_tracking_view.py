"""The saved MLflow view: configuration runs ungrouped (a group row would average different systems), each with its
sweep's name as a column, the headline rates with their CI bounds first, full run names. Checked against a real
SQLite store."""

from __future__ import annotations

import json

from inmind_exp import tags as T
from inmind_exp.tracking import VIEW_KEY, VIEW_TAG_PREFIX, runs_view_state
from inmind_exp.tracking.writer import Tracker


def test_the_view_is_ungrouped_with_the_sweep_as_a_column_and_the_headline_first():
    view = runs_view_state()
    assert view["groupBy"] is None and not view["groupsExpanded"]  # no "average" row across systems
    assert f"tags.`{T.SWEEP_NAME}`" in view["selectedColumns"] and "tags.`inmind.system`" in view["selectedColumns"]
    assert view["searchFilter"] == f"tags.`{T.KIND}` = '{T.CONFIG}'"  # the parent is no sibling row
    metrics = [c for c in view["columnOrder"] if c.startswith("metrics.")]
    assert metrics[:6] == ["metrics.`application`", "metrics.`application_ci_low`", "metrics.`application_ci_high`",
                           "metrics.`target_recall`", "metrics.`target_recall_ci_low`", "metrics.`target_recall_ci_high`"]
    assert view["columnWidths"]["attributes.`Run Name`"] >= 300


def test_a_sweeps_runs_carry_its_name_and_the_stored_view_is_ungrouped(tmp_path):
    tracker = Tracker(f"sqlite:///{tmp_path / 'mlflow.db'}", "inmind")
    parent = tracker.open_sweep_run("sweep:x", tmp_path)
    child, _ = tracker.get_or_create_run("k1", "naive_rag/bm25", {T.KIND: T.CONFIG}, parent_id=parent)
    name = tracker.client.get_run(parent).info.run_name
    assert tracker.client.get_run(child).data.tags[T.SWEEP_NAME] == name
    tags = tracker.client.get_experiment(tracker.experiment_id).tags
    assert json.loads(tags[VIEW_TAG_PREFIX + VIEW_KEY]) == runs_view_state()
    # a store written by an older version (grouped view) is rewritten on the next open
    tracker.client.set_experiment_tag(tracker.experiment_id, VIEW_TAG_PREFIX + VIEW_KEY, '{"groupBy": {}}')
    Tracker(f"sqlite:///{tmp_path / 'mlflow.db'}", "inmind")
    tags = tracker.client.get_experiment(tracker.experiment_id).tags
    assert json.loads(tags[VIEW_TAG_PREFIX + VIEW_KEY])["groupBy"] is None
