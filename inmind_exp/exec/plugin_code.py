"""Where the code of the plug-in memory systems a driver resolved lives, for ``cluster.ship_code``: the directory of
each plug-in's top-level package, which Ray ships to the nodes as a ``py_modules`` entry beside the project's own."""

from __future__ import annotations

import sys
from pathlib import Path

from inmind_exp.errors import PlanError
from inmind_exp.memory import SYSTEMS

#: top-level packages the executor ships anyway (``run.executor.SHIPPED_PACKAGES``) or every node has
NOT_PLUGIN_CODE = frozenset({"inmind_exp", "systems", "analysis"})


def plugin_code_paths() -> list[str]:
    """The package directory of every plug-in system resolved so far in this process (the sweep's plans resolved
    theirs), sorted; a plug-in that is a top-level single-file module cannot be shipped (Ray ships directories) and
    is a ``PlanError`` naming it."""
    paths: set[str] = set()
    for cls in SYSTEMS.plugins():
        top = cls.__module__.split(".")[0]
        if top in NOT_PLUGIN_CODE:
            continue
        module = sys.modules[top]
        if not hasattr(module, "__path__"):
            raise PlanError(f"cluster.ship_code: system {cls.name!r} is in the single-file module {top!r} "
                            f"({getattr(module, '__file__', '?')}); Ray ships packages: move it into a package "
                            f"(a directory with __init__.py)")
        paths.update(str(Path(p).resolve()) for p in module.__path__)
    return sorted(paths)
