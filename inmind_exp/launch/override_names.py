"""A near-miss name in a command-line override (``embeding=minilm``, ``run.max_usdd=5``, ``system=naiverag``,
``system.params.topk=3``) is an exit-2 error with a "did you mean" before Hydra composes anything: Hydra's own message
("Key 'embeding' not in 'Config'", a list of search paths, or its advice to append ``+embeding``) names no close match.
Checked: the config groups (folders of ``conf/``) and their options (YAML files, plug-ins' included), the top-level
keys of ``config.Config`` and the keys of its sections, and ``system.params`` keys against the chosen systems' YAML;
a ``+key`` / ``~key`` / ``hydra...`` override is left to Hydra."""

from __future__ import annotations

import dataclasses
import difflib
import re
from pathlib import Path
from typing import Sequence

_KEY = re.compile(r"^([A-Za-z_]\w*)(?:([./])([A-Za-z_]\w*))?(?:\.([A-Za-z_]\w*))?")


def known_names(conf_dir: Path) -> tuple[set[str], dict[str, set[str]]]:
    """The top-level names an override may start with, and the keys of each section whose schema is a dataclass."""
    import typing

    from inmind_exp.config.schema import Config

    top = {f.name for f in dataclasses.fields(Config)} | {"hydra"}
    top |= {p.name for p in conf_dir.iterdir() if p.is_dir()} if conf_dir.is_dir() else set()
    hints = typing.get_type_hints(Config)
    sections = {f.name: {g.name for g in dataclasses.fields(hints[f.name])} for f in dataclasses.fields(Config)
                if dataclasses.is_dataclass(hints.get(f.name))}
    return top, sections


def conf_dirs(conf_dir: Path) -> list[Path]:
    """``conf_dir`` and the config folder of every installed plug-in (``hydra_plugins/inmind_searchpath``)."""
    from importlib import import_module, metadata

    dirs = [conf_dir]
    for ep in metadata.entry_points(group="inmind_exp.conf"):
        try:
            dirs.append(Path(next(iter(import_module(ep.value).__path__))))
        except Exception:  # noqa: BLE001 - a broken plug-in is Hydra's to report, with its own message
            continue
    return dirs


def options(dirs: Sequence[Path], group: str) -> set[str]:
    """The options of a config group: the YAML files of its folder in ``dirs``, without the extension."""
    return {str(p.relative_to(d / group).with_suffix("")) for d in dirs if (d / group).is_dir()
            for p in (d / group).rglob("*.yaml")}


def _params(dirs: Sequence[Path], systems: set[str]) -> set[str] | None:
    """The ``params`` keys of the given systems' YAML files (``system.params.X`` must be one, unless ``+``); None
    when no YAML of them was found (Hydra reports that)."""
    import yaml

    keys: set[str] | None = None
    for path in (d / "system" / f"{name}.yaml" for d in dirs for name in systems):
        if path.is_file():
            keys = (keys or set()) | set((yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("params") or {})
    return keys


def _default(conf_dir: Path, group: str) -> set[str]:
    """The option ``conf/config.yaml``'s defaults list picks for ``group`` (empty if none)."""
    import yaml

    path = conf_dir / "config.yaml"
    defaults = (yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("defaults", []) if path.is_file() else []
    return {str(d[group]) for d in defaults if isinstance(d, dict) and group in d}


def _suggest(name: str, names: set[str]) -> str:
    close = difflib.get_close_matches(name, sorted(names), n=3, cutoff=0.6)
    return f"; did you mean {' or '.join(close)}?" if close else f"; known: {', '.join(sorted(names))}"


def _values(value: str) -> list[str]:
    """The plain values of an override (``a,b`` sweeps both); none for Hydra's functions (``choice(...)``) or
    interpolations, which are left to Hydra."""
    if any(c in value for c in "()[]{}$'\""):
        return []
    return [v.strip() for v in value.split(",") if v.strip() and v.strip() != "null"]


def check_overrides(argv: Sequence[str], conf_dir: Path) -> str | None:
    """The error message for the first override whose name (or group option) is not in the schema, else None."""
    top, sections = known_names(conf_dir)
    pairs = [a.split("=", 1) for a in argv if not a.startswith(("-", "+", "~")) and "=" in a]
    systems = {v for k, val in pairs if k == "system" for v in _values(val)} or _default(conf_dir, "system")
    searched = any(a.lstrip("+").startswith("hydra.searchpath") for a in argv)  # more options than we can see
    dirs = conf_dirs(conf_dir)
    for key, value in pairs:
        arg = f"{key}={value}"
        m = _KEY.match(key)
        if not m:
            continue
        head, sep, sub, leaf = m.group(1), m.group(2), m.group(3), m.group(4)
        if head not in top:
            return f"unknown config group or key {head!r} in override {arg!r}{_suggest(head, top)}"
        if sub is None and head != "hydra" and not searched and (known := options(dirs, head)):
            for v in _values(value):
                if v not in known:
                    return f"unknown {head} {v!r} in override {arg!r}{_suggest(v, known)}"
        if sub is not None and head in sections and sep == "." and sub not in sections[head]:
            return f"unknown key {head}.{sub} in override {arg!r}{_suggest(sub, sections[head])}"
        if (head, sub) == ("system", "params") and leaf is not None and not searched \
                and (params := _params(dirs, systems)) is not None:
            if leaf not in params:
                return (f"unknown parameter system.params.{leaf} of {', '.join(sorted(systems))} in override {arg!r}"
                        f"{_suggest(leaf, params) if params else '; it takes none'} (a new parameter: "
                        f"+system.params.{leaf}=...)")
    return None


def check_argv(conf_dir: Path) -> None:
    """``check_overrides`` on ``sys.argv``; a bad name exits 2 with the message (launch.py calls it first).
    ``--quiet`` / ``-q`` becomes ``run.progress=off`` here, before Hydra reads the command line."""
    import sys

    from inmind_exp.display.live import quiet_argv

    sys.argv[1:] = quiet_argv(sys.argv[1:])
    problem = check_overrides(sys.argv[1:], conf_dir)
    if problem:
        from inmind_exp.console import fail
        from inmind_exp.errors import Exit

        fail(Exit.BAD_INPUT, problem)
