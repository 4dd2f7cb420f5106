"""Package names imported on first use (PEP 562): a package's ``__getattr__`` that imports each listed name from
its submodule when first asked for and keeps it, so that importing one light submodule (a Ray service actor's, a
Hydra callback's) does not import everything the package re-exports."""

from __future__ import annotations

import importlib
from typing import Any, Callable, Mapping


def lazy_names(package: dict[str, Any], names: Mapping[str, str]) -> Callable[[str], Any]:
    """The ``__getattr__`` of the package whose ``globals()`` is ``package``, for ``names`` ({name: submodule})."""

    def __getattr__(name: str) -> Any:
        if name not in names:
            raise AttributeError(f"module {package['__name__']!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(names[name]), name)
        package[name] = value
        return value

    return __getattr__
