"""The negative controls in a real sweep: ``launch.py -m ... controls=all`` through Hydra, Ray and MLflow against the
fake server logs ``no_fact_warning`` and ``over_application`` with Wilson intervals per configuration, records the
pairing as a run artifact, replays the no-fact background once per configuration, and the end-of-sweep report shows
application beside over-application."""

from __future__ import annotations

import json
from collections import Counter

from mlflow.tracking import MlflowClient

import pytest

from tests.fake_openai import FakeOpenAI
from tests.launch_helpers import TASKS, every_metric, launch_cmd, mlflow_runs, run, write_small_data
from tests.protocol.test_controls_run import SESSION, UNRELATED, _echo_memory

#: every test here runs launch.py in a subprocess
pytestmark = pytest.mark.slow

FACTS = [t[2] for t in TASKS[:4]]


def test_a_sweep_with_both_controls_logs_them(tmp_path):
    write_small_data(tmp_path / "data")
    rules = [("Rewrite the complete memory file", _echo_memory),
             ("a request the fact does not bear on", {"score": 0, "reason": "served the request"}), UNRELATED]
    with FakeOpenAI(rules=rules) as fake:
        p = run(launch_cmd(tmp_path, fake.base_url, "system=always_in_state,naive_rag", "embedding=bm25",
                           "controls=all"))
        assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
        updates = [SESSION.search(b["messages"][-1]["content"]) for b in fake.chat_requests()]
        no_fact = Counter(m.group(1) for m, b in zip(updates, fake.chat_requests())
                          if m is not None and not any(f in b["messages"][-1]["content"] for f in FACTS))
    # always_in_state is the one system here whose memory LLM reads sessions: its background once without a fact
    assert no_fact == {f"2024/01/0{d}": 1 for d in range(1, 7)}
    children = [r for r in mlflow_runs(tmp_path) if r.data.tags.get("inmind.kind") == "config"]
    assert len(children) == 2
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    for c in children:
        m = every_metric(tmp_path, c)
        assert all(c.data.metrics[k] == m[k] for k in ("over_application", "no_fact_warning", "no_fact_application"))
        assert m["n_errors"] == 0 and m["over_application"] == 0.0 and m["over_application_n"] == 4
        assert m["no_fact_warning"] == 100.0 and m["no_fact_warning_ci_low"] < 100.0 and m["no_fact_warning_n"] == 4
        # the fake judge scores every no-fact answer 1 for application too: each a label-free judge false positive
        assert m["no_fact_application"] == 100.0 and m["no_fact_application_n"] == 4
        assert "no_fact_application_ci_low" in m
        assert json.loads(c.data.params["controls.names"]) == ["no_fact", "mismatched"]
        assert c.data.params["controls.seed"] == "0"
        arts = {a.path for a in client.list_artifacts(c.info.run_id)}
        assert "controls.json" in arts
        local = client.download_artifacts(c.info.run_id, "controls.json", str(tmp_path / c.info.run_id))
        pairing = json.loads(open(local).read())["pairings"]
        assert sorted(x["task_id"] for x in pairing) == ["t1", "t2", "t3", "t4"]
        assert all(x["partner_id"] != x["task_id"] and x["partner_domain"] != x["domain"] for x in pairing)
    report = (tmp_path / "sweep" / "analysis" / "report.md").read_text()
    assert "Negative controls: application beside over-application" in report
