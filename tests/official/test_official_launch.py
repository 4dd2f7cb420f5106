"""``launch.py`` with ``dataset=official`` / ``trace=official``: without a release it exits 2 before any work or MLflow
run, naming the fetch command and the variable; with ``dataset.release_dir`` it plans the official benchmark."""

from __future__ import annotations

import subprocess
import sys

import pytest

from inmind_exp.data.release import FETCH_COMMAND, RELEASE_ENV
from tests.launch_helpers import REPO, env


def launch(tmp, *overrides: str, extra_env: dict[str, str] | None = None, multirun: bool = False):
    e = {**env(), "HOME": str(tmp / "home"), "XDG_CACHE_HOME": str(tmp / "xdg")}
    e.pop(RELEASE_ENV, None)  # no release unless the test names one
    e.update(extra_env or {})
    (tmp / "home").mkdir(exist_ok=True)
    (tmp / "xdg").mkdir(exist_ok=True)
    cmd = [sys.executable, str(REPO / "launch.py"), *(["-m"] if multirun else []), "llm=vllm",
           "llm.base_url=http://127.0.0.1:9/v1", "llm.model=fake-model", f"tracking.uri=sqlite:///{tmp / 'mlflow.db'}",
           f"hydra.run.dir={tmp / 'run'}", f"hydra.sweep.dir={tmp / 'sweep'}", f"run.cache_dir={tmp / 'cache'}",
           *overrides]
    return subprocess.run(cmd, cwd=tmp, env=e, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("overrides, multirun", [
    (("dataset=official", "trace=official"), False),
    (("trace=official", "system=backbone"), False),
    (("dataset=official", "system=backbone,naive_rag"), True),
])
def test_missing_release_exits_2_before_any_work(tmp_path, overrides, multirun):
    p = launch(tmp_path, *overrides, extra_env={RELEASE_ENV: str(tmp_path / "no-such-release")}, multirun=multirun)
    assert p.returncode == 2, p.stderr[-2000:]
    assert FETCH_COMMAND in p.stderr and RELEASE_ENV in p.stderr and str(tmp_path / "no-such-release") in p.stderr
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "cache").exists()


def test_no_variable_and_an_empty_cache_names_the_fetch_command(tmp_path):
    p = launch(tmp_path, "dataset=official")
    assert p.returncode == 2, p.stderr[-2000:]
    assert f"run `{FETCH_COMMAND}`" in p.stderr and RELEASE_ENV in p.stderr and "dataset.release_dir" in p.stderr
    assert not (tmp_path / "mlflow.db").exists()


def test_release_dir_plans_the_official_benchmark(release, tmp_path):
    p = launch(tmp_path, "dataset=official", "trace=official", f"dataset.release_dir={release.root}",
               "system=backbone", "dataset.limit=null", "dry_run=true")
    assert p.returncode == 0, p.stderr[-2000:]
    assert "[dry run] backbone" in p.stdout and "125/125 tasks to run" in p.stdout
    assert not (tmp_path / "mlflow.db").exists()
