"""Puts every installed plug-in's Hydra config package on the search path, so ``system=<plug-in>`` composes its
``system/<name>.yaml`` like a built-in's ``conf/system/`` file.

A plug-in package declares the package holding its config in the entry-point group ``inmind_exp.conf``
(``my_memory = "my_memory.conf"``); it is appended as ``pkg://my_memory.conf`` (after ``conf/``, so a built-in's
config is never shadowed). Without an installed package, Hydra's own ``hydra.searchpath=[file:///path/to/conf]``
does the same. Only inmind-exp's app (its primary config ``conf/``) is touched.
"""

from __future__ import annotations

from importlib import metadata

from hydra.core.config_search_path import ConfigSearchPath
from hydra.plugins.search_path_plugin import SearchPathPlugin

GROUP = "inmind_exp.conf"


def plugin_config_packages() -> list[tuple[str, str]]:
    """``(entry-point name, package)`` of every installed plug-in config, sorted by name."""
    return sorted((ep.name, ep.value) for ep in metadata.entry_points(group=GROUP))


class InmindPluginSearchPath(SearchPathPlugin):
    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        ours = any(e.provider == "main" and str(e.path).rstrip("/").endswith("/conf") for e in search_path.get_path())
        if not ours:
            return
        for name, package in plugin_config_packages():
            search_path.append(provider=f"inmind-plugin-{name}", path=f"pkg://{package}")
