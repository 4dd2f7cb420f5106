"""Code shipping (``cluster.ship_code``): the Ray runtime env that carries the project's packages to nodes that do
not have them installed, so workers import the driver's code."""

from __future__ import annotations

from pathlib import Path
from typing import Any

#: the project's packages shipped to nodes that do not have them installed (``cluster.ship_code``)
SHIPPED_PACKAGES = ("inmind_exp", "systems", "analysis")
#: never shipped: byte code, caches and run outputs (the .gitignore's large paths), should any sit inside a package
SHIP_EXCLUDES = ["__pycache__", "*.pyc", "*.egg-info", ".inmind_cache", "mlruns", "mlflow.db", "runs", "multirun",
                 "outputs", "reports", ".pytest_cache"]


def code_runtime_env(base: dict[str, Any] | None = None) -> dict[str, Any]:
    """``base`` plus Ray ``py_modules`` for the project's packages (from wherever this driver imports them), so
    workers import the driver's code even on nodes where it is not installed."""
    import importlib

    from inmind_exp.exec.plugin_code import plugin_code_paths

    env_ = dict(base or {})
    mods = [str(Path(importlib.import_module(m).__file__).parent) for m in SHIPPED_PACKAGES]  # type: ignore[arg-type]
    mods += plugin_code_paths()  # the plug-in systems' packages too (inmind_exp.exec.plugin_code)
    env_["py_modules"] = [*mods, *list(env_.get("py_modules") or [])]
    env_["excludes"] = [*SHIP_EXCLUDES, *list(env_.get("excludes") or [])]
    return env_
