"""``hydra/launcher=inmind``: the class Hydra discovers in the ``hydra_plugins`` namespace (and only there). The launcher
itself is ``inmind_exp.launch.launcher``; this subclass adds the end-of-sweep analysis report, which the core
(``inmind_exp``) never imports."""

from dataclasses import dataclass
from typing import Any

from hydra.core.config_store import ConfigStore

from inmind_exp.launch import launcher as _launcher


@dataclass
class InmindLauncherConf:
    _target_: str = "hydra_plugins.inmind_launcher.launcher.InmindLauncher"


ConfigStore.instance().store(group="hydra/launcher", name="inmind", node=InmindLauncherConf, provider="inmind-exp")


class InmindLauncher(_launcher.InmindLauncher):
    def prepare(self, after: Any = None) -> None:
        from analysis.sweep_report import prefetch

        prefetch(self.config, after)

    def report(self) -> None:
        from analysis.sweep_report import report_at_end

        report_at_end(self.config)
