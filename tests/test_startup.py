"""Start-up off the critical path: a local Ray started by the executor hands its workers the worker environment
defaults (inherited at ray.init, checked on MKL_NUM_THREADS, which Ray itself never sets; the driver's own
environment is left as it was), its workers start with Ray, and closing returns promptly."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from inmind_exp import env

PROBE = """
import json, os, time
import ray
from inmind_exp.run.executor import RayExecutor
from inmind_exp.run.settings import ClusterSettings

os.environ.pop("MKL_NUM_THREADS", None)
ex = RayExecutor()
ex.start(ClusterSettings(num_cpus=1, workers=1, object_store_memory=80_000_000))
spawned = len(ex.workers)

@ray.remote(num_cpus=0)
def worker_env():
    return os.environ.get("MKL_NUM_THREADS")

seen = ray.get(worker_env.remote(), timeout=120)
t = time.perf_counter()
ex.close()
closed = time.perf_counter() - t
print(json.dumps({"driver": os.environ.get("MKL_NUM_THREADS"), "worker": seen, "spawned": spawned,
                  "closed_s": closed}))
ex.shutdown()
ray.shutdown()
"""


def test_local_ray_workers_get_the_worker_env_and_start_with_ray():
    e = {**os.environ, **env.RAY, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    e.pop("MKL_NUM_THREADS", None)
    out = subprocess.run([sys.executable, "-c", PROBE], env=e, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["worker"] == env.THREADS["MKL_NUM_THREADS"]  # what a worker process sees
    assert got["driver"] is None  # the driver's environment is restored after ray.init
    assert got["spawned"] == 1  # the pool started with Ray, before any plan was handed to it
    assert got["closed_s"] < 30


def test_overriding_restores_the_environment(monkeypatch):
    monkeypatch.setenv("INMIND_PROBE_A", "kept")
    monkeypatch.delenv("INMIND_PROBE_B", raising=False)
    with env.overriding({"INMIND_PROBE_A": "1", "INMIND_PROBE_B": "2"}):
        assert os.environ["INMIND_PROBE_A"] == "1" and os.environ["INMIND_PROBE_B"] == "2"
    assert os.environ["INMIND_PROBE_A"] == "kept" and "INMIND_PROBE_B" not in os.environ
