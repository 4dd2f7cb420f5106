"""The checks planning makes before any work starts, each a ``PlanError`` naming its key: every base URL is a
plain URL (no query string), every output path is writable (a probe file), every numeric setting and system
parameter is in range, the system accepts its parameters, and the spend cap and display mode are valid."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from inmind_exp.config import RunConf
from inmind_exp.errors import PlanError
from inmind_exp.memory import MemorySystem


def check_base_urls(cfg: DictConfig) -> None:
    """Each configured base URL (``llm``, each role's, ``embedding``'s) without a query string or fragment: a token
    there (``http://host/v1?token=...``) would reach MLflow params, the saved config and the request log, and the
    client joins each request's path after it. One ``PlanError`` naming the keys; the value is not repeated."""
    from urllib.parse import urlsplit

    from inmind_exp.llm import ROLES

    keys = ["llm.base_url", *(f"llm.roles.{r}.base_url" for r in ROLES), "embedding.base_url"]
    bad = []
    for key in keys:
        url = OmegaConf.select(cfg, key, default=None)
        if isinstance(url, str) and ("?" in url or "#" in url):
            parts = urlsplit(url)
            host = parts.hostname or ""
            bad.append(f"{key}={parts.scheme}://{host}{f':{parts.port}' if parts.port else ''}{parts.path}?***")
    if bad:
        raise PlanError(f"{', '.join(bad)}: a base URL takes no query string or fragment; a key goes in the "
                        f"environment variable named by llm.api_key_env")


def check_writable(key: str, path: Path) -> None:
    """``path`` (of ``key``, named in the error) is a directory this process can write into, or can be made one: a
    probe file is created (and removed) in it or in its nearest existing ancestor. ``os.access`` is not enough: root
    passes it on ``/proc`` and on a read-only mount, and the run failed after its tasks were paid."""
    import os

    p = Path(path).expanduser()
    while not p.exists() and p != p.parent:
        p = p.parent
    if not p.is_dir():
        raise PlanError(f"{key}: {p} is not a directory")
    try:
        fd, probe = tempfile.mkstemp(dir=p, prefix=".inmind-probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise PlanError(f"{key}: cannot write in {p} ({e.strerror or e})") from None


def check_tracking_uri(uri: str) -> None:
    """A local MLflow store (``sqlite:///path``, ``file:`` or a plain path) must be writable (``check_writable``: the
    database's directory, or the store's): else a ``PlanError`` naming the path now, not a traceback after the tasks
    ran. Remote stores are the server's business."""
    if uri.startswith("sqlite:///"):
        path = Path(uri[len("sqlite:///"):]).expanduser()
        if path.is_dir():
            raise PlanError(f"tracking.uri={uri}: {path} is a directory, not a database file")
        check_writable(f"tracking.uri={uri}", path.parent)
    elif uri.startswith("file:") or "://" not in uri:
        rest = uri[len("file:"):] if uri.startswith("file:") else uri
        path = Path("/" + rest.lstrip("/") if uri.startswith("file:") else rest).expanduser()
        check_writable(f"tracking.uri={uri}", path)


def check_ranges(cfg: DictConfig, system_cls: type[MemorySystem], params: dict[str, Any]) -> None:
    """Every numeric setting and system parameter in its range (``inmind_exp.ranges``), or one ``PlanError``
    listing each key out of range."""
    from inmind_exp.llm import ROLES
    from inmind_exp.ranges import check_settings

    missing = object()

    def get(key: str) -> Any:
        value = OmegaConf.select(cfg, key, default=missing)
        if value is missing:
            raise KeyError(key)
        return value

    problems = check_settings(get, ROLES) + system_cls.check_params(params)
    if problems:
        raise PlanError("; ".join(problems))


def check_params(system_cls: type[MemorySystem], name: str, params: dict[str, Any]) -> None:
    """Fail on unknown or ill-typed system parameters now, not inside a worker: build one throwaway instance."""
    with tempfile.TemporaryDirectory(prefix="inmind-check-") as d:
        try:
            system_cls(None, None, Path(d), **params)  # type: ignore[arg-type]
        except TypeError as e:
            raise PlanError(f"system.params for {name}: {e}") from None
        except Exception:
            pass  # constructors that need a live client or encoder are checked by their first task


#: ``run.progress``: in place on a terminal and plain lines otherwise, always in place, always plain, or none
PROGRESS_MODES = ("auto", "live", "plain", "off")


def check_latency(run: Any) -> None:
    """``run.latency_s`` (the dry run's seconds per call) > 0; a saved config without it has the default."""
    latency = run.get("latency_s", RunConf.latency_s)
    if isinstance(latency, bool) or not isinstance(latency, (int, float)) or not latency > 0:
        raise PlanError(f"run.latency_s={latency}: must be a number of seconds > 0")


def check_run_extras(run: Any) -> None:
    """``run.max_usd`` > 0, ``run.max_tokens`` >= 1 (or null) and a known ``run.progress``, before anything starts."""
    usd, tokens, mode = run.get("max_usd"), run.get("max_tokens"), run.get("progress", RunConf.progress)
    if usd is not None and (isinstance(usd, bool) or not isinstance(usd, (int, float)) or not usd > 0):
        raise PlanError(f"run.max_usd={usd}: must be a number of dollars > 0, or null for no cap")
    if tokens is not None and (isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1):
        raise PlanError(f"run.max_tokens={tokens}: must be a whole number of tokens >= 1, or null for no cap")
    if str(mode) not in PROGRESS_MODES:
        raise PlanError(f"run.progress={mode}: expected one of {', '.join(PROGRESS_MODES)}")
