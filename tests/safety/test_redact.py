"""Secrets never reach disk or stdout: key-name and value redaction, override lists, Hydra's job directory name
and files, and a real ``launch.py`` run (dry and full) grepped for a planted key."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from inmind_exp.launch.redact_output import job_dirname, override_key, redact_yaml_file
from inmind_exp.safety.redact import REDACTED, is_secret_key, redact, redact_overrides
from tests.fake_openai import FakeOpenAI
from tests.launch_helpers import launch_cmd, run, write_small_data

PLANTED = "sk-planted-123abc"


@pytest.mark.parametrize("name", ["api_key", "OPENAI_API_KEY", "apiKey", "access_token", "HF_TOKEN", "password",
                                  "client_secret", "key", "authToken", "+cluster.runtime_env.env_vars.OPENAI_API_KEY"])
def test_secret_key_names(name):
    assert is_secret_key(name)


@pytest.mark.parametrize("name", ["api_key_env", "judge_api_key_env", "max_tokens", "max_completion_tokens",
                                  "max_tokens_param", "prompt_tokens", "exclude_keys", "keep_workdirs", "monkey", "author"])
def test_not_secret_key_names(name):
    assert not is_secret_key(name)


def test_redact_by_key_and_by_value_of_named_variables():
    environ = {"MY_KEY_VAR": "value-of-my-key-1234", "OPENAI_API_KEY": "sk-from-the-env-999", "HOME": "/home/x"}
    cfg = {
        "llm": {"api_key_env": "MY_KEY_VAR", "max_tokens": 512, "base_url": "http://h/v1?k=value-of-my-key-1234"},
        "cluster": {"runtime_env": {"env_vars": {"OPENAI_API_KEY": "sk-x", "OTHER": "sk-from-the-env-999"}}},
        "extra": ["value-of-my-key-1234", "/home/x"], "password": None, "n_tokens": 3, "pin_password": 1234,
    }
    out = redact(cfg, environ=environ)
    assert out["llm"] == {"api_key_env": "MY_KEY_VAR", "max_tokens": 512, "base_url": "http://h/v1?k=***"}
    assert out["cluster"]["runtime_env"]["env_vars"] == {"OPENAI_API_KEY": REDACTED, "OTHER": REDACTED}
    assert out["extra"] == [REDACTED, "/home/x"] and out["password"] is None and out["n_tokens"] == 3
    assert out["pin_password"] == REDACTED
    assert cfg["cluster"]["runtime_env"]["env_vars"]["OPENAI_API_KEY"] == "sk-x"  # a copy; the input is untouched


@pytest.mark.slow
def test_redact_overrides_and_argv():
    argv = ["launch.py", "-m", f"+cluster.runtime_env.env_vars.OPENAI_API_KEY={PLANTED}", "llm.api_key=abc",
            "system=a_mem,mem0", f"run.note=uses-{PLANTED}-inline", "llm.api_key_env=OPENAI_API_KEY"]
    out = redact_overrides(argv, environ={})
    assert out == ["launch.py", "-m", "+cluster.runtime_env.env_vars.OPENAI_API_KEY=***", "llm.api_key=***",
                   "system=a_mem,mem0", "run.note=uses-***-inline", "llm.api_key_env=OPENAI_API_KEY"]


def test_job_dirname_drops_secret_overrides_whatever_their_key():
    overrides = [f"+cluster.runtime_env.env_vars.OPENAI_API_KEY={PLANTED}", "system=mem0", "dataset.limit=3",
                 f"++llm.roles.judge.api_key={PLANTED}x", "embedding=bm25"]
    assert job_dirname(overrides, ["dataset.limit"]) == "embedding=bm25,system=mem0"


def test_override_keys_are_hydras_and_a_cached_key_never_keeps_a_value_unredacted(monkeypatch):
    """The key each override sets, as Hydra's grammar reads it (cached per override: a sweep's jobs repeat them);
    only the key is cached, so a secret that enters the environment between two jobs is still redacted."""
    assert override_key("+cluster.runtime_env.env_vars.X=1") == "cluster.runtime_env.env_vars.X"
    assert override_key("~llm.seed") == "llm.seed"
    assert override_key("hydra/launcher=basic") == "hydra/launcher"
    assert override_key("system=a_mem") == "system"
    assert override_key("not an override") == "not an override"  # Hydra's parser refuses it: the text stays
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    secret = "plainword42"  # not shaped like a key: a secret only once a key variable holds it
    overrides = [f"run.note=uses-{secret}", "system=mem0"]
    assert job_dirname(overrides) == f"run.note=uses-{secret},system=mem0"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    assert job_dirname(overrides) == f"run.note=uses-{REDACTED},system=mem0"


def test_redact_yaml_file_rewrites_hydra_files(tmp_path):
    f = tmp_path / "hydra.yaml"
    f.write_text(OmegaConf.to_yaml(OmegaConf.create({"hydra": {
        "overrides": {"task": [f"+x.OPENAI_API_KEY={PLANTED}", "system=mem0"]},
        "job": {"override_dirname": f"+x.OPENAI_API_KEY={PLANTED},system=mem0"}, "run": {"dir": "${a.b}"}}})))
    assert redact_yaml_file(f, {PLANTED})
    text = f.read_text()
    assert PLANTED not in text and "system=mem0" in text and "${a.b}" in text
    assert OmegaConf.load(f).hydra.overrides.task == ["+x.OPENAI_API_KEY=***", "system=mem0"]
    assert not redact_yaml_file(f, {PLANTED})  # nothing left to change


def files_holding(root, secret):
    hits = [p for p in root.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]
    named = [p for p in root.rglob("*") if secret in p.name]
    return hits, named


@pytest.mark.slow
def test_dry_run_sweep_leaves_no_planted_key_anywhere(tmp_path):
    """Hydra's files, job directory names and stdout of a real ``launch.py -m dry_run=true`` (wired in conf/config.yaml)."""
    write_small_data(tmp_path / "data")
    cmd = launch_cmd(tmp_path, "http://127.0.0.1:9/v1", "dry_run=true", "system=backbone,naive_rag",
                     f"+cluster.runtime_env.env_vars.OPENAI_API_KEY={PLANTED}")
    p = run(cmd)
    assert p.returncode == 0, p.stderr[-3000:]
    job_dirs = [d for d in (tmp_path / "sweep").iterdir() if d.is_dir()]
    assert len(job_dirs) == 2 and all((d / ".hydra" / "config.yaml").is_file() for d in job_dirs)
    assert OmegaConf.load(job_dirs[0] / ".hydra" / "config.yaml").cluster.runtime_env.env_vars.OPENAI_API_KEY == REDACTED
    assert files_holding(tmp_path, PLANTED) == ([], [])
    assert PLANTED not in p.stdout + p.stderr


@pytest.mark.slow
def test_dry_single_run_leaves_no_planted_key_anywhere(tmp_path):
    write_small_data(tmp_path / "data")
    cmd = launch_cmd(tmp_path, "http://127.0.0.1:9/v1", "dry_run=true",
                     f"+cluster.runtime_env.env_vars.OPENAI_API_KEY={PLANTED}", multirun=False)
    p = run(cmd)
    assert p.returncode == 0, p.stderr[-3000:]
    assert (tmp_path / "run" / ".hydra" / "overrides.yaml").is_file()
    assert files_holding(tmp_path, PLANTED) == ([], []) and PLANTED not in p.stdout + p.stderr


@pytest.mark.slow
def test_full_run_leaves_no_planted_key_anywhere(tmp_path):
    """Every file a real run writes (records, config artifact, MLflow db and artifacts, ledgers, Hydra files)."""
    write_small_data(tmp_path / "data", n_tasks=2, n_sessions=3)
    with FakeOpenAI() as fake:
        cmd = launch_cmd(tmp_path, fake.base_url, "system=backbone", "embedding=bm25", "cluster.workers=1",
                         f"+cluster.runtime_env.env_vars.OPENAI_API_KEY={PLANTED}")
        p = run(cmd)
    assert p.returncode == 0, p.stderr[-3000:]
    assert PLANTED not in p.stdout + p.stderr
    assert files_holding(tmp_path, PLANTED) == ([], [])
