"""Shared fixtures: the fake OpenAI-compatible server, role clients on it, a small trace, and one Ray session."""

from __future__ import annotations

from inmind_exp import env

env.apply(env.DRIVER)  # before anything imports what reads the environment

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

from inmind_exp.llm import CallCache, Endpoint, Models  # noqa: E402
from inmind_exp.records import Session, Trace, Turn  # noqa: E402
from tests.fake_openai import FakeOpenAI  # noqa: E402


@pytest.fixture
def fake():
    with FakeOpenAI() as server:
        yield server


def fake_endpoints(base_url: str, **overrides) -> dict[str, Endpoint]:
    kw = dict(base_url=base_url, model="fake-model", max_attempts=3, backoff_initial_s=0.01, backoff_max_s=0.05,
              timeout_s=10.0, temperature=0.0, max_tokens=256)
    kw.update(overrides)
    return {r: Endpoint(role=r, **kw) for r in ("answerer", "judge", "memory")}


@pytest.fixture
def models(fake, tmp_path) -> Models:
    """Role clients talking to the fake server, with a fresh call cache."""
    return Models.build(fake_endpoints(fake.base_url), CallCache(tmp_path / "cache"))


def make_trace(n_sessions: int = 4, user_turns_per_session: int = 2, prefix: str = "bg") -> Trace:
    """A small deterministic trace: session i has ``user_turns_per_session`` exchanges about topic i."""
    sessions = []
    for i in range(n_sessions):
        turns = []
        for j in range(user_turns_per_session):
            turns.append(Turn("user", f"Session {i} question {j}: how do I care for my tomato plants in week {i}?"))
            turns.append(Turn("assistant", f"Session {i} answer {j}: water them deeply and stake them, week {i}."))
        sessions.append(Session(id=f"{prefix}_{i:02d}", date=f"2024/01/{i + 1:02d} (Mon) 10:00", turns=tuple(turns)))
    return Trace(id="tiny", sessions=tuple(sessions))


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
