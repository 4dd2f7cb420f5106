"""A key an endpoint echoes in its error bodies ("Incorrect API key provided: sk-...") and a password in a base URL
never land on disk or in the output: real ``launch.py`` runs against a fake endpoint that echoes the planted key in
its 401 and 500 replies, then every file under the run's directories (sweep, MLflow store and artifacts, cache, the
Ray session) and the captured stdout/stderr are searched for it."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

from inmind_exp.safety.redact import REDACTED
from tests.fake_openai import FakeOpenAI, Fault
from tests.launch_helpers import env, launch_cmd, write_small_data

import subprocess

KEY = "sk-plantedEchoKey0123456789abcdefXYZ"
PASSWORD = "PlantedUrlPassw0rd42"
KEY_VAR = "INMIND_ECHO_TEST_KEY"


def _echo(status: int) -> Fault:
    return Fault(status=status, body={"error": {"message": f"Incorrect API key provided: {KEY}. You can find your "
                                                f"API key at https://platform.example/account/api-keys.",
                                                "type": "invalid_request_error", "code": "invalid_api_key"}})


def test_scrub_redacts_url_userinfo_echoed_keys_and_known_values():
    from inmind_exp.safety.redact import scrub, scrub_obj, strip_userinfo

    assert strip_userinfo(f"http://user:{PASSWORD}@host:8000/v1") == "http://***@host:8000/v1"
    assert strip_userinfo("see https://github.com/a/b@c and a@b.c") == "see https://github.com/a/b@c and a@b.c"
    assert KEY not in scrub(f"Error code: 401 - Incorrect API key provided: {KEY}")
    assert scrub("Authorization: Bearer abcdefghijklmnop1234") == f"Authorization: Bearer {REDACTED}"
    assert scrub_obj({"error": [f"x {KEY}"], "n": 1}) == {"error": [f"x {REDACTED}"], "n": 1}
    assert scrub("GET http://h/v1/models?token=abc123&model=m&X-Amz-Signature=ff") == \
        f"GET http://h/v1/models?token={REDACTED}&model=m&X-Amz-Signature={REDACTED}"
    assert scrub("a=1&max_tokens=5") == "a=1&max_tokens=5"
    plain = "task-0001: the user's allergy, 5 sessions, risk-averse"
    assert scrub(plain) == plain


def _run(cmd: list[str], ray_tmp: Path) -> subprocess.CompletedProcess:
    e = env()
    e[KEY_VAR] = KEY
    e["RAY_TMPDIR"] = str(ray_tmp)  # this launch's own Ray session directory, searched below
    return subprocess.run(cmd, cwd=Path(__file__).resolve().parents[2], env=e, capture_output=True, text=True,
                          timeout=600)


def _leaks(roots: list[Path], text: str) -> list[str]:
    out = []
    for secret in (KEY, PASSWORD):
        if secret in text:
            out.append(f"output holds {secret[:10]}...")
        for root in roots:
            for p in root.rglob("*"):
                try:
                    if secret in p.name or (p.is_file() and not p.is_symlink() and secret.encode() in p.read_bytes()):
                        out.append(f"{p} holds {secret[:10]}...")
                except OSError:
                    pass
    return out


@pytest.fixture
def ray_tmp():
    d = Path(tempfile.mkdtemp(prefix="rk", dir="/tmp"))  # short: Ray's socket paths must stay under 107 bytes
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _cmd(tmp: Path, base_url: str, *extra: str) -> list[str]:
    url = base_url.replace("http://", f"http://echo-user:{PASSWORD}@")
    return launch_cmd(tmp, url, "system=naive_rag", "embedding=bm25", "cluster.workers=1",
                      f"llm.api_key_env={KEY_VAR}", *extra)


def test_preflight_401_echoing_the_key_exits_2_and_leaves_it_nowhere(tmp_path, ray_tmp):
    write_small_data(tmp_path / "data", n_tasks=2, n_sessions=3)
    with FakeOpenAI() as fake:
        fake.models_fault = _echo(401)
        p = _run(_cmd(tmp_path, fake.base_url), ray_tmp)
    assert p.returncode == 2, p.stdout[-2000:] + p.stderr[-3000:]
    assert "rejected the key" in p.stderr and REDACTED in p.stderr
    leaks = _leaks([tmp_path, ray_tmp], p.stdout + p.stderr)
    assert leaks == [], "\n".join(leaks)


def test_task_errors_echoing_the_key_leave_it_nowhere(tmp_path, ray_tmp):
    """Every chat call fails, alternately with a 500 (retried) and a 401, each echoing the key: the tasks end in
    error (exit 3) and their records, the ledger, MLflow and the logs say why without the key."""
    write_small_data(tmp_path / "data", n_tasks=2, n_sessions=3)
    calls = []

    def refuse(body):
        calls.append(1)
        return _echo(500 if len(calls) % 3 else 401)

    with FakeOpenAI(validator=refuse) as fake:
        p = _run(_cmd(tmp_path, fake.base_url, "run.max_task_attempts=1"), ray_tmp)
    assert p.returncode == 3, p.stdout[-2000:] + p.stderr[-3000:]
    assert calls, "the endpoint was never called"
    ledgers = list((tmp_path / "sweep" / "ledger").glob("*.jsonl"))
    assert ledgers and "HTTP" in ledgers[0].read_text() and REDACTED in ledgers[0].read_text()
    assert (tmp_path / "mlflow.db").is_file() and any((tmp_path / "mlruns").rglob("records.jsonl"))
    assert any(ray_tmp.rglob("session_*/logs")), "the launch's Ray session directory was not where searched"
    leaks = _leaks([tmp_path, ray_tmp], p.stdout + p.stderr)
    assert leaks == [], "\n".join(leaks)


def test_key_echoed_in_a_200_reply_never_reaches_the_call_cache(tmp_path, monkeypatch):
    """An endpoint that echoes the key inside a normal answer: the cached completion holds ``***`` instead (the
    key is known to the process that read it; the cache used to store the reply as received)."""
    from inmind_exp.llm import CallCache, LLMClient
    from inmind_exp.records import msgs
    from tests.conftest import fake_endpoints

    key = "plantedKeyNotShapedLikeOne0123456789"  # redacted because this process read it, not by its shape
    monkeypatch.setenv(KEY_VAR, key)
    with FakeOpenAI(rules=[("echo", f"your key is {key}, thanks"), ("json", {"key": key})]) as fake:
        ep = fake_endpoints(fake.base_url, api_key_env=KEY_VAR)["answerer"]
        cache = CallCache(tmp_path / "cache")
        c = LLMClient(ep, cache=cache)
        c.chat(msgs(("user", "please echo")))
        c.chat_json(msgs(("user", "json please")))
        assert cache.count("chat") == 2
        files = [p for p in (tmp_path / "cache").rglob("*.json")]
        assert files and not [p for p in files if key.encode() in p.read_bytes()]
        assert any(REDACTED.encode() in p.read_bytes() for p in files)
