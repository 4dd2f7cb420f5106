"""Which loader a configuration's ``dataset`` and ``trace`` use, and the digest of the file each read: a task file or
LongMemEval-style trace (``dataset=bundled``, ``trace=bundled|smoke``, or ``*.path``), or the official release
(``dataset=official``, ``trace=official``, found by ``release_dir``, ``$INMIND_RELEASE`` or the fetch cache).

The digest is the SHA-256 of the file's bytes, so a result's identity names exactly the data it ran on wherever the
file lives; for the release it is the hash just checked against the pins.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inmind_exp.data.errors import DataError, Problem
from inmind_exp.data.release import BACKGROUND, TASKS, find_release, sha256_file
from inmind_exp.data.tasks import BUNDLED_TASKS, apply_limit, load_tasks, sample_tasks
from inmind_exp.data.trace import BUNDLED_TRACE, load_trace
from inmind_exp.config.schema import DatasetConf, TraceConf
from inmind_exp.records import Task, Trace

OFFICIAL = "official"


@dataclass(frozen=True)
class Tasks:
    tasks: tuple[Task, ...]
    path: Path
    digest: str
    #: every task of the file, before ``dataset.limit`` / ``dataset.sample``: what the mismatched pairing is fixed
    #: over, so a subset's pairs are the full set's (``protocol.controls.control_spec``)
    universe: tuple[Task, ...] = ()


@dataclass(frozen=True)
class Background:
    trace: Trace
    path: Path
    digest: str


def _official_only(conf: DatasetConf | TraceConf, group: str, keys: tuple[str, ...]) -> None:
    for key in keys:
        if getattr(conf, key):
            raise DataError([Problem("config", None, f"{group}.{key}", f"{group}={OFFICIAL} reads the release's file; "
                                     f"{group}.{key} is for a {group} file of your own (drop {group}={OFFICIAL})")])


def load_dataset(dataset: DatasetConf) -> Tasks:
    """The tasks of ``dataset.*`` and the file they came from: ``dataset.sample`` tasks drawn with
    ``dataset.sample_seed`` (stratified by domain, ``tasks.sample_tasks``) when set, which replaces the limit, else
    the first ``dataset.limit``."""
    limit = None if dataset.sample is not None else dataset.limit
    if dataset.name == OFFICIAL:
        from inmind_exp.data.official import load_official_tasks

        _official_only(dataset, "dataset", ("path",))
        release = find_release(dataset.release_dir, where="dataset=official")
        universe = load_official_tasks(release)
        path = release.path(TASKS)
    else:
        universe = load_tasks(dataset.path)
        path = Path(dataset.path) if dataset.path else BUNDLED_TASKS
    tasks = apply_limit(universe, limit, path)
    if dataset.sample is not None:
        tasks = sample_tasks(tasks, dataset.sample, dataset.sample_seed or 0, path)
    return Tasks(tuple(tasks), path, sha256_file(path), tuple(universe))


def load_background(trace: TraceConf) -> Background:
    """The trace of ``trace.*`` and the file it came from."""
    if trace.name == OFFICIAL:
        from inmind_exp.data.official import load_official_trace

        _official_only(trace, "trace", ("path", "index"))
        release = find_release(trace.release_dir, where="trace=official")
        path = release.path(BACKGROUND)
        return Background(load_official_trace(release), path, sha256_file(path))
    path = Path(trace.path) if trace.path else BUNDLED_TRACE
    return Background(load_trace(trace.path, index=trace.index), path, sha256_file(path))


def logged_tasks(params: Any) -> list[Task]:
    """The tasks a finished run read, from its flattened params (``dataset.name``, ``dataset.path``,
    ``dataset.release_dir``): the release's for ``dataset=official``, else the run's task file (none: the bundled
    set). For the analysis commands that show or re-judge stored answers."""
    def value(key: str) -> str | None:
        v = params.get(key)
        return None if v in (None, "None", "null", "") else str(v)

    if value("dataset.name") == OFFICIAL:
        from inmind_exp.data.official import load_official_tasks

        return load_official_tasks(find_release(value("dataset.release_dir"), where="the run's dataset=official"))
    return load_tasks(value("dataset.path"))
