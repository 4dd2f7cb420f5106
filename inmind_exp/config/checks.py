"""The checks planning makes before any work starts, each a ``PlanError`` naming its key: every base URL is a
plain URL (no query string), every output path is writable (a probe file), the tracking store is writable, every
numeric setting and system parameter is in range, the system accepts its parameters, and the spend cap, the prices
and the display mode are valid."""

from __future__ import annotations

import tempfile
from functools import lru_cache
from pathlib import Path
from typing import Any

from omegaconf import Container, DictConfig, OmegaConf

from inmind_exp.config.resolve import as_config, select
from inmind_exp.config.schema import Config, DatasetConf, RunConf, TraceConf
from inmind_exp.errors import PlanError
from inmind_exp.llm.endpoint import ROLES
from inmind_exp.memory import MemorySystem


def check_base_urls(cfg: Config | Container) -> None:
    """Each configured base URL (``llm``, each role's, ``embedding``'s) without a query string or fragment: a token
    there (``http://host/v1?token=...``) would reach MLflow params, the saved config and the request log, and the
    client joins each request's path after it. One ``PlanError`` naming the keys; the value is not repeated (a
    composed config is typed first: ``as_config``)."""
    from urllib.parse import urlsplit

    config = as_config(cfg)
    keys = ["llm.base_url", *(f"llm.roles.{r}.base_url" for r in ROLES), "embedding.base_url"]
    bad = []
    for key in keys:
        try:
            url = select(config, key)
        except KeyError:  # a role not set: it takes llm.base_url
            continue
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


def check_ranges(config: Config, system_cls: type[MemorySystem], params: dict[str, Any]) -> None:
    """Every numeric setting and system parameter in its range (``inmind_exp.memory.ranges``), or one ``PlanError``
    listing each key out of range."""
    from inmind_exp.memory.ranges import check_settings

    problems = check_settings(lambda key: select(config, key), ROLES) + system_cls.check_params(params)
    if problems:
        raise PlanError("; ".join(problems))


def check_params(system_cls: type[MemorySystem], name: str, params: dict[str, Any]) -> None:
    """Fail on unknown or ill-typed system parameters now, not inside a worker: build one throwaway instance."""
    with tempfile.TemporaryDirectory(prefix="inmind-check-") as d:
        try:
            system_cls(None, None, Path(d), **params)  # type: ignore[arg-type]
        except TypeError as e:
            raise PlanError(f"system.params for {name}: {e}") from None
        except Exception:  # noqa: BLE001 - constructors that need a live client or encoder: their first task checks
            pass


#: ``run.progress``: in place on a terminal and plain lines otherwise, always in place, always plain, or none
PROGRESS_MODES = ("auto", "live", "plain", "off")
#: ``run.cache_scope``: tasks share the call cache's memory replies, or each task samples its own
CACHE_SCOPES = ("shared", "task")


def check_run(run: RunConf) -> None:
    """``run.latency_s`` (the dry run's seconds per call) > 0, ``run.max_usd`` > 0, ``run.max_tokens`` >= 1 (each
    cap or null), a known ``run.progress`` and ``run.cache_scope``, before anything starts."""
    latency, usd, tokens, mode = run.latency_s, run.max_usd, run.max_tokens, run.progress
    if not latency > 0:
        raise PlanError(f"run.latency_s={latency}: must be a number of seconds > 0")
    if usd is not None and not usd > 0:
        raise PlanError(f"run.max_usd={usd}: must be a number of dollars > 0, or null for no cap")
    if tokens is not None and tokens < 1:
        raise PlanError(f"run.max_tokens={tokens}: must be a whole number of tokens >= 1, or null for no cap")
    if mode not in PROGRESS_MODES:
        raise PlanError(f"run.progress={mode}: expected one of {', '.join(PROGRESS_MODES)}")
    if run.cache_scope not in CACHE_SCOPES:
        raise PlanError(f"run.cache_scope={run.cache_scope}: expected one of {', '.join(CACHE_SCOPES)}")


PRICE_FIELDS = ("prompt_per_1m", "completion_per_1m")
#: the price of prompt tokens the provider served from its own prompt cache (OpenAI's "cached input"); the prompt
#: price when not given
CACHED_PRICE = "cached_prompt_per_1m"


def check_prices(prices: Any) -> dict[str, tuple[float, float, float]]:
    """``llm.prices`` as model -> (USD per 1M prompt tokens, per 1M completion tokens, per 1M cached prompt tokens):
    each entry a mapping with both prices (numbers >= 0), optionally ``cached_prompt_per_1m`` and a ``model`` naming
    the model priced when its name cannot be a key (a dot in it); anything else is a ``PlanError`` naming the
    entry."""
    node = prices
    if node is None:
        return {}
    if not isinstance(node, dict):
        raise PlanError(f"llm.prices={node!r}: expected a mapping of model -> {{prompt_per_1m: P, completion_per_1m: C}}")
    out: dict[str, tuple[float, float, float]] = {}
    for key, entry in node.items():
        where = f"llm.prices.{key}"
        example = f"'+{where}={{prompt_per_1m: 0.25, completion_per_1m: 2.0}}'"
        if not isinstance(entry, dict):
            raise PlanError(f"{where}={entry!r}: expected {{prompt_per_1m: P, completion_per_1m: C}} (USD per "
                            f"million tokens), e.g. {example}")
        unknown = sorted(set(entry) - {*PRICE_FIELDS, CACHED_PRICE, "model"})
        missing = [f for f in PRICE_FIELDS if f not in entry]
        if unknown or missing:
            what = "; ".join(x for x in (unknown and f"unknown field(s) {', '.join(map(str, unknown))}",
                                         missing and f"missing {', '.join(missing)}") if x)
            raise PlanError(f"{where}: {what} (expected prompt_per_1m, completion_per_1m and optionally "
                            f"{CACHED_PRICE} and model, e.g. {example})")
        values = []
        for f in (*PRICE_FIELDS, *([CACHED_PRICE] if CACHED_PRICE in entry else [])):
            v = entry[f]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v >= 0:
                raise PlanError(f"{where}.{f}={v!r}: must be a number of dollars per million tokens >= 0")
            values.append(float(v))
        model = entry.get("model", key)
        if not isinstance(model, str) or not model:
            raise PlanError(f"{where}.model={model!r}: must be the model's name as the endpoint knows it")
        if model in out:
            raise PlanError(f"{where}: model {model} is priced twice in llm.prices")
        out[model] = (values[0], values[1], values[2] if len(values) > 2 else values[0])
    return out


def price_override(model: str, prompt: str = "P", completion: str = "C") -> str:
    """The command-line override that prices ``model`` (a name that cannot be a key, with a dot or a colon, goes
    into ``model``), shell-quoted."""
    import re

    key = re.sub(r"[^A-Za-z0-9_-]", "_", model)
    key = key if re.match(r"[A-Za-z_]", key) else f"_{key}"
    named = "" if key == model else f"model: '{model}', "
    return f"\"+llm.prices.{key}={{{named}prompt_per_1m: {prompt}, completion_per_1m: {completion}}}\""


@lru_cache(maxsize=16)
def _tasks(name: str | None, path: str | None, limit: int | None, sample: int | None, sample_seed: int | None,
           release_dir: str | None) -> int:
    from inmind_exp.config.sources import load_dataset

    return len(load_dataset(DatasetConf(name=name or "bundled", path=path, limit=limit, sample=sample,
                                        sample_seed=sample_seed or 0, release_dir=release_dir)).tasks)


@lru_cache(maxsize=16)
def _trace(name: str | None, path: str | None, index: int, release_dir: str | None) -> Any:
    from inmind_exp.config.sources import load_background

    return load_background(TraceConf(name=name or "bundled", path=path, index=index, release_dir=release_dir)).trace


def check_job(cfg: DictConfig) -> list[str]:
    """Problems of one composed job that need no endpoint: base URLs, worker count, data files, injection point
    (every job of a launch is checked before any job directory exists: a bad job 7 stops job 0 from starting)."""
    from inmind_exp.config.settings import injection_spec, local_cpu_problems
    from inmind_exp.data import DataError
    from inmind_exp.data.release import ReleaseError
    from inmind_exp.protocol.task import injection_session_index

    problems = []
    try:
        check_base_urls(cfg)
    except PlanError as e:
        problems.append(str(e))
    workers = OmegaConf.select(cfg, "cluster.workers")
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        problems.append(f"cluster.workers={workers!r}: must be an integer >= 1")
    else:
        problems += local_cpu_problems(cfg)
    try:
        d, t = cfg.dataset, cfg.trace
        _tasks(d.get("name"), d.path, d.limit, d.get("sample"), d.get("sample_seed"), d.get("release_dir"))
        trace = _trace(t.get("name"), t.path, t.index, t.get("release_dir"))
    except DataError as e:
        return problems + [str(p) for p in e.problems]
    except ReleaseError as e:
        return problems + [str(e)]
    try:
        injection_session_index(trace, injection_spec(cfg.injection))
    except ValueError as e:
        problems.append(str(e))
    return problems
