"""A near-miss name in a command-line override (``embeding=minilm``, ``run.max_usdd=5``) is an exit-2 error with a
"did you mean" before Hydra composes anything: Hydra's own message ("Key 'embeding' not in 'Config'", or its advice
to append ``+embeding``) names no close match. Only names under the project's own schema are checked: the config
groups (folders of ``conf/``), the top-level keys of ``config.Config`` and the keys of its closed sections; a
``+key`` / ``~key`` / ``hydra...`` override is left to Hydra."""

from __future__ import annotations

import dataclasses
import difflib
import re
from pathlib import Path
from typing import Sequence

#: sections whose schema is a closed dataclass: a key under them that is not a field is a mistake
CLOSED_SECTIONS = ("run", "cluster", "tracking")

_KEY = re.compile(r"^([A-Za-z_]\w*)(?:([./])([A-Za-z_]\w*))?")


def known_names(conf_dir: Path) -> tuple[set[str], dict[str, set[str]]]:
    """The top-level names an override may start with, and each closed section's keys."""
    from inmind_exp.config.schema import Config

    top = {f.name for f in dataclasses.fields(Config)} | {"hydra"}
    top |= {p.name for p in conf_dir.iterdir() if p.is_dir()} if conf_dir.is_dir() else set()
    sections: dict[str, set[str]] = {}
    for f in dataclasses.fields(Config):
        if f.name in CLOSED_SECTIONS and f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
            sections[f.name] = {g.name for g in dataclasses.fields(f.default_factory())}  # type: ignore[misc]
    return top, sections


def _suggest(name: str, names: set[str]) -> str:
    close = difflib.get_close_matches(name, sorted(names), n=3, cutoff=0.6)
    return f"; did you mean {' or '.join(close)}?" if close else f"; known: {', '.join(sorted(names))}"


def check_overrides(argv: Sequence[str], conf_dir: Path) -> str | None:
    """The error message for the first override whose name is not in the schema, else None."""
    top, sections = known_names(conf_dir)
    for arg in argv:
        if arg.startswith(("-", "+", "~")) or "=" not in arg:
            continue
        m = _KEY.match(arg.split("=", 1)[0])
        if not m:
            continue
        head, sub = m.group(1), m.group(3)
        if head not in top:
            return f"unknown config group or key {head!r} in override {arg!r}{_suggest(head, top)}"
        if sub is not None and head in sections and m.group(2) == "." and sub not in sections[head]:
            return f"unknown key {head}.{sub} in override {arg!r}{_suggest(sub, sections[head])}"
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
