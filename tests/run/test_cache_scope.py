"""``run.cache_scope``: by default a configuration's later tasks reuse the background replies its first task cached
(tagged ``inmind.cache_coupling=shared_background``); ``task`` gives every task its own samples, so each pays its own
memory calls. Against the fake server, through the in-process executor and the real client."""

from __future__ import annotations

import pytest

from inmind_exp import tags as T
from inmind_exp.config.checks import check_run
from inmind_exp.config.schema import RunConf
from inmind_exp.errors import PlanError
from tests.fake_openai import FakeOpenAI
from tests.plan.test_judge_only_sweep import JUDGE_SYSTEMS, _plan


def _memory_requests(requests) -> int:
    posts = [r["body"] for r in requests if r["method"] == "POST" and "messages" in r["body"]]
    return sum(1 for b in posts if b["messages"][0]["content"] not in JUDGE_SYSTEMS)


def _run(tmp_path, scope: str) -> tuple[int, dict[str, str], str]:
    from inmind_exp.exec.executor import InProcessExecutor
    from inmind_exp.run.driver import run_plan
    from inmind_exp.run.recorders import Finished, Recorder
    from inmind_exp.run.resources import Resources

    seen: dict[str, str] = {}

    class Tags(Recorder):
        def finish(self, run: Finished) -> None:
            seen.update(run.tags)

    with FakeOpenAI() as fake:
        plan = _plan(tmp_path, fake.base_url, f"run.cache_scope={scope}", "dataset.limit=2")
        result = run_plan(plan, executor=InProcessExecutor(), resources=Resources(), extra=[Tags()])
        assert all(r.error is None for r in result.records)
        return _memory_requests(fake.requests), seen, plan.config_hash


@pytest.mark.slow
def test_task_scope_gives_each_task_its_own_memory_samples(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "fake")
    shared, shared_tags, shared_hash = _run(tmp_path / "shared", "shared")
    own, own_tags, own_hash = _run(tmp_path / "task", "task")
    assert own > shared  # the second task's background replies are its own, not the first task's
    assert shared_hash != own_hash  # a different sampling is a different result
    assert shared_tags[T.CACHE_COUPLING] == "shared_background" and own_tags[T.CACHE_COUPLING] == "per_task"


def test_an_unknown_cache_scope_is_refused_before_anything_runs():
    with pytest.raises(PlanError, match="run.cache_scope=node"):
        check_run(RunConf(cache_scope="node"))
