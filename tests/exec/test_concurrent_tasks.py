"""Several tasks in flight on one worker (``cluster.tasks_per_worker``): through ``launch.py`` on a real local Ray
with one worker running two tasks at once against the fake server, each task's record holds only its own fact, the
ledger has one line per task, and a rerun resumes from the ledger without one request to the endpoint."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.fake_openai import FakeOpenAI
from tests.launch_helpers import launch_cmd, run, write_small_data

FACT_1, FACT_2 = "tree nut allergy", "cat named Miso"  # t1's and t2's user messages (tests/launch_helpers.TASKS)


def ledger_records(sweep: Path) -> list[dict]:
    return [json.loads(line) for p in sorted((sweep / "ledger").glob("*.jsonl")) for line in p.read_text().splitlines()]


@pytest.mark.slow
def test_two_tasks_at_once_on_one_worker_keep_their_facts_apart_and_resume_free(tmp_path):
    write_small_data(tmp_path / "data", n_tasks=2)
    with FakeOpenAI(delay_s=0.5) as fake:
        cmd = launch_cmd(tmp_path, fake.base_url, "system=naive_rag", "embedding=bm25", "cluster.workers=1",
                         "cluster.num_cpus=1", "cluster.tasks_per_worker=2", "run.lead_task=false")
        p = run(cmd)
        assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
        assert fake.max_in_flight >= 2, "the two tasks never had requests in flight at the same time"
        records = {r["task_id"]: r for r in ledger_records(tmp_path / "sweep")}
        assert sorted(records) == ["t1", "t2"] and all(r["error"] is None for r in records.values())
        placements = [json.loads(line) for f in (tmp_path / "sweep").rglob("placement/*.jsonl")
                      for line in f.read_text().splitlines()]
        assert len({pl["pid"] for pl in placements}) == 1  # one worker process ran both
        for own, other, tid in ((FACT_1, FACT_2, "t1"), (FACT_2, FACT_1, "t2")):
            # the naive probe (a question about the fact) retrieves it; neither context may hold the other task's
            text = json.dumps([records[tid]["naive"], records[tid]["indirect"]])
            assert own in json.dumps(records[tid]["naive"]), f"{tid}'s naive context lacks its own fact"
            assert other not in text, f"{tid}'s contexts hold the other task's fact"
        # each answerer request at the endpoint carried one task's fact, never both
        for body in fake.chat_requests():
            seen = json.dumps(body.get("messages"))
            assert not (FACT_1 in seen and FACT_2 in seen)
        # usage is per task: the two tasks' records add up to every paid call but the prefix's
        assert all(sum(u["calls"] for u in r["usage"].values()) > 0 for r in records.values())

        fake.reset_log()
        p = run(cmd)
        assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
        assert [r for r in fake.requests if r["method"] == "POST"] == []  # resumed: 0 calls repaid
        assert len(ledger_records(tmp_path / "sweep")) == 2  # still one line per task


def test_tasks_per_worker_below_one_is_refused_before_any_work(tmp_path):
    import pytest

    from inmind_exp.errors import PlanError
    from tests.plan.test_estimate import plan_for

    with pytest.raises(PlanError, match=r"cluster.tasks_per_worker=0"):
        plan_for(tmp_path, "system=naive_rag", "embedding=bm25", "cluster.tasks_per_worker=0")
