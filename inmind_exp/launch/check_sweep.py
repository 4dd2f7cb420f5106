"""Every job of a sweep composed and checked before the first one runs: a bad value in job 7 stops the launch
before job 0 has created an MLflow run or spent a call.

``expand_overrides`` expands sweep overrides exactly as Hydra's ``BasicSweeper`` does (sweeper ``params`` first, then
the command line; the cartesian product in the same order); ``expand_sweep`` composes each job's config with Hydra's
compose API, inside a running Hydra app (a callback) or outside one. The ``CheckSweep`` callback does both in
``on_multirun_start`` and exits with code 2 listing every bad job.
"""

from __future__ import annotations

import importlib
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from inmind_exp.config.settings import local_cpu_problems

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"
EXIT_BAD_INPUT = 2
#: the project's launcher, which plans every job of a sweep before any runs
INMIND_LAUNCHER = "hydra_plugins.inmind_launcher.launcher.InmindLauncher"


def expand_overrides(overrides: Sequence[str], params: Mapping[str, Any] | None = None) -> list[list[str]]:
    """The override list of every job of a sweep, in Hydra's launch order."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    lines = [f"{k}={v}" for k, v in (params or {}).items()] + list(overrides)
    parsed = OverridesParser.create().parse_overrides(lines)
    return [job for batch in BasicSweeper.split_arguments(parsed, None) for job in batch]


def expand_sweep(overrides: Sequence[str], config_dir: str | Path = CONF_DIR, config_name: str = "config",
                 params: Mapping[str, Any] | None = None) -> list[DictConfig]:
    """Each job's composed config (without the ``hydra`` node), in launch order."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from inmind_exp.config.schema import register_configs

    register_configs()
    jobs = expand_overrides(overrides, params)
    if GlobalHydra.instance().is_initialized():  # inside a running app: compose with its search path
        return [compose(config_name, overrides=job) for job in jobs]
    with initialize_config_dir(str(Path(config_dir).resolve()), version_base="1.3"):
        return [compose(config_name, overrides=job) for job in jobs]


@lru_cache(maxsize=16)
def _tasks(name: str | None, path: str | None, limit: int | None, sample: int | None, sample_seed: int | None,
           release_dir: str | None) -> int:
    from inmind_exp.data.sources import load_dataset

    return len(load_dataset(OmegaConf.create({"name": name, "path": path, "limit": limit, "sample": sample,
                                              "sample_seed": sample_seed, "release_dir": release_dir})).tasks)


@lru_cache(maxsize=16)
def _trace(name: str | None, path: str | None, index: int, release_dir: str | None) -> Any:
    from inmind_exp.data.sources import load_background

    return load_background(OmegaConf.create({"name": name, "path": path, "index": index,
                                             "release_dir": release_dir})).trace


def check_job(cfg: DictConfig) -> list[str]:
    """Problems of one composed job that need no endpoint: base URLs, worker count, data files, injection point."""
    from inmind_exp.config.settings import injection_spec
    from inmind_exp.data import DataError
    from inmind_exp.data.release import ReleaseError
    from inmind_exp.protocol.task import injection_session_index

    from inmind_exp.errors import PlanError
    from inmind_exp.config.checks import check_base_urls

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


def check_sweep(configs: Sequence[DictConfig], jobs: Sequence[Sequence[str]],
                extra: Callable[[DictConfig], Any] | None = None) -> list[str]:
    """Every problem of every job, each line naming the job (``#n`` and its overrides)."""
    out = []
    for n, (cfg, job) in enumerate(zip(configs, jobs)):
        problems = check_job(cfg)
        if extra is not None and not problems:
            try:
                extra(cfg)
            except Exception as e:  # noqa: BLE001 - the extra check reports by raising; its message is the problem
                problems.append(f"{type(e).__name__}: {e}")
        out += [f"job #{n} ({' '.join(job)}): {p}" for p in problems]
    return out


def stop_on_problems(configs: Sequence[DictConfig], jobs: Sequence[Sequence[str]],
                     extra: Callable[[DictConfig], Any] | None = None) -> None:
    """``check_sweep`` of every job (named by its redacted, swept overrides); on any problem print them all and
    exit 2 (``SystemExit``, which passes through Hydra's callback wrapper where an ``Exception`` would not)."""
    from inmind_exp.console import printable
    from inmind_exp.safety.redact import redact_overrides

    problems = check_sweep(configs, [redact_overrides(j) for j in swept(jobs)], extra)
    if problems:
        print(f"error: {len(problems)} problem(s) in {len(jobs)} job(s) of the sweep; nothing was run:\n"
              + "\n".join(f"  - {printable(p)}" for p in problems), file=sys.stderr, flush=True)
        raise SystemExit(EXIT_BAD_INPUT)


def swept(jobs: Sequence[Sequence[str]]) -> list[list[str]]:
    """Each job's overrides reduced to those that differ between jobs (what names a job in a message)."""
    varying = {i for i in range(len(jobs[0]) if jobs else 0) if len({tuple(j)[i] for j in jobs}) > 1}
    return [[o for i, o in enumerate(j) if i in varying] for j in jobs]


def _load(dotted: str) -> Callable[[DictConfig], Any]:
    module, _, name = dotted.partition(":")
    return getattr(importlib.import_module(module), name)


class CheckSweep(Callback):
    """Hydra callback: compose and check every job in ``on_multirun_start``; on any problem print them all and exit
    with code 2 before the first job starts. ``check`` names an extra ``module:function`` run on each job's config
    that raises on a problem (e.g. the runner's planning step). Under the inmind launcher it does nothing: the
    launcher makes the same checks (``InmindLauncher._check_jobs``), then plans every job, before any runs."""

    def __init__(self, check: str | None = None) -> None:
        self.check = check

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        if OmegaConf.select(config, "hydra.launcher._target_") == INMIND_LAUNCHER:
            return  # the launcher makes these checks itself, on the configs it plans from (each job composed once)
        overrides = [str(o) for o in OmegaConf.select(config, "hydra.overrides.task", default=[]) or []]
        params = OmegaConf.select(config, "hydra.sweeper.params", default=None)
        params = OmegaConf.to_container(params) if params is not None else None
        jobs = expand_overrides(overrides, params)
        search = [str(p) for p in OmegaConf.select(config, "hydra.searchpath", default=[]) or []]
        composed = overrides + ([f"hydra.searchpath=[{','.join(repr(p) for p in search)}]"] if search else [])
        configs = expand_sweep(composed, config_name=kwargs.get("config_name") or "config", params=params)  # a
        # plug-in's config on a hydra.searchpath of the command line (README: Adding a memory system) composes too
        stop_on_problems(configs, jobs, _load(self.check) if self.check else None)
