"""Runner pieces on a real (local) Ray: the cluster-wide limiter caps concurrent requests across actors, and a
task whose worker is killed is retried on a fresh worker without losing or duplicating its result."""

from __future__ import annotations

import time
import os
from pathlib import Path

import pytest

from inmind_exp.llm import CallCache, LLMClient
from inmind_exp.records import msgs
from inmind_exp.exec.services import RayLimiterClient
from inmind_exp.exec.executor import RayExecutor
from inmind_exp.exec.worker import TaskWorker
from tests.conftest import fake_endpoints
from tests.fake_openai import FakeOpenAI

#: every test here uses the Ray session or starts a subprocess
pytestmark = pytest.mark.slow


class Caller:
    def __init__(self, base_url: str, limiter, cache_dir: str) -> None:
        ep = fake_endpoints(base_url, max_concurrency=2)["answerer"]
        self.client = LLMClient(ep, cache=CallCache(cache_dir), limiter=RayLimiterClient(limiter))

    def ready(self) -> bool:
        return True

    def call(self, i: int) -> str:
        return self.client.chat(msgs(("user", f"question {i}"))).text


def services(ray):
    """The cluster services' actor, as ``RayExecutor`` starts it."""
    from inmind_exp.exec.cluster_services import CONCURRENCY_GROUPS, ClusterServices

    return ray.remote(concurrency_groups=CONCURRENCY_GROUPS)(ClusterServices).options(num_cpus=0).remote()


def test_limit_holds_across_actors(ray_session, tmp_path):
    ray = ray_session
    with FakeOpenAI(delay_s=0.5) as fake:
        limiter = services(ray)  # the limiter as a pool deploys it: beside the cache and the board
        RemoteCaller = ray.remote(num_cpus=0)(Caller)
        actors = [RemoteCaller.remote(fake.base_url, limiter, str(tmp_path / "cache")) for _ in range(4)]
        # every actor started before the calls go out: on a loaded machine one actor could otherwise finish its
        # calls before the next one exists, and the endpoint would never see two at once
        assert ray.get([a.ready.remote() for a in actors], timeout=120) == [True] * 4
        refs = [a.call.remote(i * 10 + j) for i, a in enumerate(actors) for j in range(3)]
        assert ray.get(refs, timeout=120) == ["fake answer"] * 12
        assert len(fake.chat_requests()) == 12
        assert fake.max_in_flight == 2  # 4 actors, 12 requests, never more than the endpoint's limit


def wait_for_free_cpus(ray, cpus: float = 2, timeout_s: float = 60) -> None:
    """ray.kill is asynchronous: wait until a finished executor's actors have given their CPUs back."""
    deadline = time.monotonic() + timeout_s
    while ray.available_resources().get("CPU", 0) < cpus and time.monotonic() < deadline:
        time.sleep(0.5)
    assert ray.available_resources().get("CPU", 0) >= cpus, "a finished executor still holds the session's CPUs"


def compose(tmp_path, base_url: str, *overrides: str):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    from inmind_exp.config.schema import register_configs
    from tests.launch_helpers import REPO, write_small_data

    tasks, trace = write_small_data(tmp_path / "data")
    register_configs()
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        return hydra_compose("config", overrides=[
            "llm=vllm", f"llm.base_url={base_url}", "llm.model=fake-model", f"dataset.path={tasks}",
            "dataset.limit=null", f"trace.path={trace}", "injection.user_turn=5", f"run.cache_dir={tmp_path / 'cache'}",
            f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}", "tracking.experiment=test", "cluster.workers=2",
            "run.progress_every_s=0", *overrides])


class CrashOnce(TaskWorker):
    """A worker whose process dies the first time it is given task t2."""

    def run_task(self, spec, task, *args, **kwargs):
        marker = Path(spec.cache_dir).parent / f"crashed-{task.id}"
        if task.id == "t2" and not marker.exists():
            marker.write_text("crashed")
            os._exit(1)
        return super().run_task(spec, task, *args, **kwargs)


def test_dead_worker_is_replaced_and_its_task_retried(ray_session, tmp_path):
    import cloudpickle

    import tests.exec.test_runner_ray as this_module
    from inmind_exp.plan.ledger import Ledger
    from inmind_exp.plan.plan import plan_config
    from inmind_exp.run.driver import run_plan
    from tests.display.test_progress import Lines

    cloudpickle.register_pickle_by_value(this_module)
    with FakeOpenAI() as fake, Lines() as lines:
        # one task per worker: a crash ends every task in flight on its worker, and this test counts attempts
        cfg = compose(tmp_path, fake.base_url, "system=backbone", "embedding=bm25", "cluster.tasks_per_worker=1")
        plan = plan_config(cfg, tmp_path / "root", tmp_path / "job")
        with RayExecutor(worker_cls=CrashOnce) as ex:
            result = run_plan(plan, executor=ex)
    wait_for_free_cpus(ray_session)
    assert (tmp_path / "crashed-t2").exists()
    by_id = {r.task_id: r for r in result.records}
    assert sorted(by_id) == ["t1", "t2", "t3", "t4"]
    assert all(r.error is None for r in result.records)
    assert by_id["t2"].attempts == 2 and by_id["t1"].attempts == 1
    assert any(" finished: 4/4 tasks, 0 errors, 1 retried; " in m for m in lines.messages), lines.messages
    ledger = Ledger(result.plan.ledger_path)
    lines = ledger.path.read_text().splitlines()
    assert len(lines) == 4  # one line per task: the crashed attempt wrote nothing


class NeverStarts(TaskWorker):
    """A worker whose actor never finishes starting (as on a node that cannot run it)."""

    def __init__(self, *args, **kwargs):
        time.sleep(3600)


def test_unplaceable_workers_end_the_run_with_a_clear_error(ray_session, tmp_path):
    import cloudpickle

    import tests.exec.test_runner_ray as this_module
    from inmind_exp.plan.plan import plan_config
    from inmind_exp.run.driver import run_plan
    from inmind_exp.exec.executor import ClusterError

    cloudpickle.register_pickle_by_value(this_module)
    with FakeOpenAI() as fake:
        cfg = compose(tmp_path, fake.base_url, "system=backbone", "embedding=bm25", "cluster.start_timeout_s=4")
        plan = plan_config(cfg, tmp_path / "root", tmp_path / "job")
        t0 = time.monotonic()
        with RayExecutor(worker_cls=NeverStarts) as ex:
            try:
                run_plan(plan, executor=ex)
            except ClusterError as e:
                assert "cannot make progress" in str(e) and "cluster.start_timeout_s=4s" in str(e)
            else:
                raise AssertionError("expected a ClusterError")
        assert time.monotonic() - t0 < 60  # it gives up; it does not hang
    wait_for_free_cpus(ray_session)


def test_pool_uses_what_the_cluster_has(ray_session, tmp_path, caplog):
    from inmind_exp.plan.plan import plan_config
    from inmind_exp.run.driver import run_plan

    with FakeOpenAI() as fake:
        cfg = compose(tmp_path, fake.base_url, "system=backbone", "embedding=bm25", "cluster.workers=8")
        plan = plan_config(cfg, tmp_path / "root", tmp_path / "job")
        with RayExecutor() as ex, caplog.at_level("INFO", logger="inmind_exp"):
            result = run_plan(plan, executor=ex)
            workers = len(ex.workers)
    wait_for_free_cpus(ray_session)
    assert all(r.error is None for r in result.records) and len(result.records) == 4
    assert workers <= 2  # the test session's Ray has 2 CPUs
    assert "fewer than cluster.workers=8" in caplog.text


class CachedCaller:
    """An LLM client whose cache is the cluster cache service, as a worker on a node without the shared path."""

    def __init__(self, base_url: str, cache_actor, cache_dir: str) -> None:
        from inmind_exp.exec.services import RayCacheClient

        ep = fake_endpoints(base_url)["answerer"]
        self.client = LLMClient(ep, cache=RayCacheClient(cache_actor, cache_dir))

    def call(self, text: str) -> str:
        return self.client.chat(msgs(("user", text))).text


def test_cluster_cache_pays_each_call_once_across_actors(ray_session, tmp_path):
    ray = ray_session
    cache_dir = str(tmp_path / "head-cache")
    with FakeOpenAI() as fake:
        service = services(ray)
        Remote = ray.remote(num_cpus=0)(CachedCaller)
        a, b = Remote.remote(fake.base_url, service, cache_dir), Remote.remote(fake.base_url, service, cache_dir)
        assert ray.get(a.call.remote("the same question"), timeout=120) == "fake answer"
        assert ray.get(b.call.remote("the same question"), timeout=120) == "fake answer"
        assert ray.get(b.call.remote("another question"), timeout=120) == "fake answer"
        assert len(fake.chat_requests()) == 2  # the second actor's first call was served by the cache service
    assert CallCache(cache_dir).count("chat") == 2  # entries live where the service runs (the driver's node)


SHIP_PROBE = """
import json, sys, ray
from inmind_exp.exec.shipping import code_runtime_env

rt = code_runtime_env()
shown = json.loads(json.dumps(rt))  # ray.init consumes the dict
ray.init(address="local", num_cpus=1, include_dashboard=False, object_store_memory=80_000_000, log_to_driver=False,
         runtime_env=rt)

@ray.remote(num_cpus=0)
def where():
    import os, inmind_exp, systems, analysis
    return [inmind_exp.__file__, systems.__file__, analysis.__file__]

print(json.dumps({"runtime_env": shown, "files": ray.get(where.remote(), timeout=300)}))
ray.shutdown()
"""


def test_shipped_code_is_what_workers_import():
    """cluster=ray ships the packages as runtime_env py_modules (given to ray.init, as the executor does): a task
    imports inmind_exp, systems and analysis from Ray's copy, not from the repository or an installed package."""
    import json
    import subprocess
    import sys

    from tests.launch_helpers import REPO, env

    p = subprocess.run([sys.executable, "-c", SHIP_PROBE], cwd="/", env=env(), capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert "__pycache__" in out["runtime_env"]["excludes"]
    for f in out["files"]:
        assert "runtime_resources" in f and not f.startswith(str(REPO)) and "site-packages" not in f, f
    assert Path(out["files"][0]).name == "__init__.py"


def test_background_work_waits_for_the_first_answered_call(ray_session, tmp_path):
    """``executor.working`` (what the end-of-sweep report's imports wait for) is set once a task's
    call has completed, not when the first task is handed out: the workers' start of their first tasks then has the
    CPU to itself."""
    import threading

    from inmind_exp.plan.plan import plan_config

    from inmind_exp.run.driver import run_plan

    with FakeOpenAI(delay_s=1.5) as fake:
        cfg = compose(tmp_path, fake.base_url, "system=backbone", "embedding=bm25")
        plan = plan_config(cfg, tmp_path / "root", tmp_path / "job")
        with RayExecutor() as ex:
            seen: dict[str, float] = {}
            threading.Thread(target=lambda: (ex.working.wait(), seen.setdefault("t", time.time())),
                             daemon=True).start()
            result = run_plan(plan, executor=ex)
        completions = sorted(r["t"] for r in fake.requests if r["path"].endswith("/chat/completions"))
    wait_for_free_cpus(ray_session)
    assert all(r.error is None for r in result.records)
    assert "t" in seen and completions
    # not before the first request reached the endpoint and was answered (1.5 s later)
    assert seen["t"] >= completions[0] + 1.4, (seen["t"] - completions[0])


class FlightCaller:
    """A worker's client over its own node's cache, with the cluster's single flight (as ``TaskWorker._cache``)."""

    def __init__(self, base_url: str, services_actor, cache_dir: str) -> None:
        from inmind_exp.exec.services import ClusterFlights

        cache = CallCache(cache_dir)
        cache.flights = ClusterFlights(services_actor, "the run's cache_dir")
        self.client = LLMClient(fake_endpoints(base_url)["answerer"], cache=cache)

    def call(self, text: str) -> str:
        return self.client.chat(msgs(("user", text))).text


def test_two_workers_sending_one_request_at_once_pay_once(ray_session, tmp_path):
    ray = ray_session
    with FakeOpenAI(delay_s=2.0) as fake:
        service = services(ray)
        Remote = ray.remote(num_cpus=0)(FlightCaller)
        a, b = (Remote.remote(fake.base_url, service, str(tmp_path / f"node{i}")) for i in range(2))
        ray.get([a.__ray_ready__.remote(), b.__ray_ready__.remote(), service.__ray_ready__.remote()], timeout=120)
        replies = ray.get([a.call.remote("the same question"), b.call.remote("the same question")], timeout=120)
        assert replies == ["fake answer", "fake answer"]
        assert len(fake.chat_requests()) == 1  # the second worker waited for the first one's reply
        ray.get([a.call.remote("another question")], timeout=120)  # a landed flight leaves nothing behind
        assert len(fake.chat_requests()) == 2
