"""Shared fixtures: the fake OpenAI-compatible server, role clients on it, a small trace, and one Ray session."""

from __future__ import annotations

from inmind_exp import env

env.apply(env.DRIVER)  # before anything imports what reads the environment

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

from inmind_exp.llm import CallCache, Models  # noqa: E402
from inmind_exp.records import Trace  # noqa: E402
from inmind_exp.testing.check_system import fake_endpoints, make_trace  # noqa: E402
from tests.fake_openai import FakeOpenAI  # noqa: E402


@pytest.fixture
def fake():
    with FakeOpenAI() as server:
        yield server


@pytest.fixture
def models(fake, tmp_path) -> Models:
    """Role clients talking to the fake server, with a fresh call cache."""
    return Models.build(fake_endpoints(fake.base_url), CallCache(tmp_path / "cache"))


@pytest.fixture
def tiny_trace() -> Trace:
    return make_trace()


@pytest.fixture(scope="session")
def ray_session():
    """One local Ray for the whole test session (ray.init costs ~5 s)."""
    import ray

    ray.init(address="local", num_cpus=2, include_dashboard=False, object_store_memory=100_000_000,
             log_to_driver=False, ignore_reinit_error=True)
    yield ray
    ray.shutdown()


@pytest.fixture
def repo_root() -> Path:
    return Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def release():
    """The official InMind release (``$INMIND_RELEASE``, else a fetched copy), every file hash-checked. Missing: the
    test fails under CI (``CI=true``; ``.ci/run`` sets ``INMIND_RELEASE``) and is skipped elsewhere."""
    return require_release()


def require_release():
    import os

    from inmind_exp.data.release import FETCH_COMMAND, RELEASE_ENV, ReleaseError, find_release

    try:
        rel = find_release(where="tests")
        rel.verify()
    except ReleaseError as e:
        msg = f"the official InMind release is needed: set {RELEASE_ENV} or run `{FETCH_COMMAND}` ({e})"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(msg)
        pytest.skip(msg)
    return rel
