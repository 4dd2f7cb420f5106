"""Keep secrets out of Hydra's own output: the ``.hydra/*.yaml`` files, ``multirun.yaml``, job directory names and
log lines. Kept apart from ``inmind_exp.safety.redact`` (pure redaction, no Hydra import) so that workers never import Hydra.

Enable in ``conf/config.yaml``::

    hydra:
      callbacks:
        redact_secrets:
          _target_: inmind_exp.launch.redact_output.RedactSecrets
      sweep:
        subdir: ${inmind.job_dirname:${hydra:overrides.task},${hydra:job.config.override_dirname.exclude_keys}}

``hydra.job.config.override_dirname.exclude_keys`` takes exact keys only, so a secret passed under any new key
(``+cluster.runtime_env.env_vars.OPENAI_API_KEY=...``) would name the job directory; the ``inmind.job_dirname``
resolver builds the same name as ``${hydra:job.override_dirname}`` but drops every override whose key looks secret
and redacts secret values elsewhere. It is registered when this module is imported, which Hydra does when it
instantiates the callback, before any job directory is resolved.
"""

from __future__ import annotations

import functools
import logging
from pathlib import Path
from typing import Any, Iterable

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, ListConfig, OmegaConf

from inmind_exp.safety.redact import (install_log_redaction, is_secret_key, redact, redact_overrides, redact_text,
                                     secret_values)

log = logging.getLogger(__name__)
RESOLVER = "inmind.job_dirname"


@functools.lru_cache(maxsize=4096)
def override_key(line: str) -> str:
    """The key (or config group) an override sets, as Hydra's grammar parses it; the text before ``=`` for one it
    does not take. Cached: every job of a sweep repeats most of the sweep's overrides, and Hydra's parser takes
    ~1 ms per override (its job directory names were a tenth of a sweep's planning)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        return OverridesParser.create().parse_override(line).key_or_group
    except Exception:  # noqa: BLE001 - an override Hydra accepted but we cannot re-parse: fall back to its text
        return line.partition("=")[0].lstrip("+~")


def job_dirname(overrides: Iterable[str], exclude_keys: Iterable[str] = (), item_sep: str = ",",
                kv_sep: str = "=") -> str:
    """Hydra's ``override_dirname`` (sorted ``key=value`` of the job's overrides minus ``exclude_keys``) without any
    override whose key looks secret, and with secret values from the environment redacted."""
    excluded = set(exclude_keys)
    secrets = secret_values()
    lines = []
    for line in overrides:
        key = override_key(line)
        if key in excluded or is_secret_key(key):
            continue
        lines.append(redact_text(line, secrets))
    return item_sep.join(sorted(lines)).replace("=", kv_sep)


def _resolve_job_dirname(overrides: Any, exclude_keys: Any = None) -> str:
    as_list = lambda v: list(OmegaConf.to_container(v) if isinstance(v, ListConfig) else (v or []))  # noqa: E731
    return job_dirname([str(o) for o in as_list(overrides)], [str(k) for k in as_list(exclude_keys)])


def register_resolver() -> None:
    if not OmegaConf.has_resolver(RESOLVER):
        OmegaConf.register_new_resolver(RESOLVER, _resolve_job_dirname)


register_resolver()


def config_secrets(config: DictConfig) -> set[str]:
    """Every secret value in a full Hydra config: under secret-looking keys of the task config, in secret-keyed
    overrides, and in the key variables of the environment."""
    task = {k: v for k, v in config.items() if k != "hydra"} if isinstance(config, DictConfig) else {}
    container = OmegaConf.to_container(DictConfig(task), resolve=False)
    found = set(secret_values(container))
    overrides = OmegaConf.select(config, "hydra.overrides.task", default=[]) or []
    for o in overrides:
        key, eq, value = str(o).partition("=")
        if eq and is_secret_key(key) and value:
            found.update({value, *value.split(",")})
    return found


#: each file's text as last redacted, with the secrets it was redacted of: a job's files and the sweep's
#: ``multirun.yaml`` are checked at every job's start and end, and re-parsing unchanged text is most of planning
_CLEAN: dict[Path, tuple[str, frozenset[str]]] = {}


def _parse_yaml(text: str, path: Path) -> Any:
    """The plain structure of a YAML file Hydra wrote: libyaml's safe loader (~20x faster than ``OmegaConf.load``,
    which was most of the time a sweep took to set up its jobs: every job's three files are read at its start and
    end); OmegaConf's own loader for anything it does not take."""
    import yaml

    try:
        return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506 - a safe loader
    except yaml.YAMLError:
        return OmegaConf.to_container(OmegaConf.load(path), resolve=False)


def redact_yaml_file(path: Path, secrets: set[str]) -> bool:
    """Rewrite a YAML file Hydra wrote with secrets redacted; lists of override strings are redacted as overrides.
    Returns whether anything changed."""
    if not path.is_file():
        return False
    before = path.read_text(encoding="utf-8")
    if _CLEAN.get(path) == (before, frozenset(secrets)):  # this very text was found clean of these secrets
        return False
    node = _parse_yaml(before, path)

    def walk(n: Any) -> Any:
        if isinstance(n, dict):
            return {k: walk(v) for k, v in n.items()}
        if isinstance(n, list):
            if n and all(isinstance(x, str) for x in n) and any("=" in x for x in n):
                return redact_overrides(n, extra=secrets)
            return [walk(v) for v in n]
        return n

    cleaned = redact(walk(node), extra=secrets)
    text = before if cleaned == node else OmegaConf.to_yaml(OmegaConf.create(cleaned))
    for s in sorted(secrets, key=len, reverse=True):  # last resort for anything the structure walk missed
        text = text.replace(s, "***") if len(s) >= 4 else text
    _CLEAN[path] = (text, frozenset(secrets))
    if text == before:
        return False
    tmp = path.with_name(f".{path.name}.redacting")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
    return True


class RedactSecrets(Callback):
    """Hydra callback: redact secrets from log records as soon as the run starts, and from the files Hydra wrote
    (``.hydra/config.yaml``, ``hydra.yaml``, ``overrides.yaml``, the sweep's ``multirun.yaml``) as soon as a job
    starts and again when it and the sweep end. A file that cannot be rewritten is deleted rather than left with a
    secret in it (Hydra turns a callback's exception into a mere warning)."""

    def __init__(self) -> None:
        self.secrets: set[str] = set()

    def _collect(self, config: DictConfig) -> None:
        self.secrets |= config_secrets(config)
        install_log_redaction(self.secrets)

    def _scrub(self, config: DictConfig) -> list[Path]:
        files = []
        out = OmegaConf.select(config, "hydra.runtime.output_dir", default=None)
        sub = OmegaConf.select(config, "hydra.output_subdir", default=".hydra")
        if out and sub:
            files += [Path(out) / sub / n for n in ("config.yaml", "hydra.yaml", "overrides.yaml")]
        try:
            sweep_dir = OmegaConf.select(config, "hydra.sweep.dir", default=None)
        except Exception:  # noqa: BLE001 - unresolvable in RUN mode
            sweep_dir = None
        if sweep_dir:
            files.append(Path(sweep_dir) / "multirun.yaml")
        changed = []
        for f in files:
            try:
                if redact_yaml_file(f, self.secrets):
                    changed.append(f)
            except Exception as e:  # noqa: BLE001 - never leave a secret behind because redaction failed
                log.error("could not redact %s (%s: %s); deleting it", f, type(e).__name__, e)
                f.unlink(missing_ok=True)
        return changed

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        self._collect(config)

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        self._collect(config)

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        self._collect(config)
        self._scrub(config)

    def on_job_end(self, config: DictConfig, job_return: Any = None, **kwargs: Any) -> None:
        self._scrub(config)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        try:
            sweep_dir = OmegaConf.select(config, "hydra.sweep.dir", default=None)
        except Exception:  # noqa: BLE001
            sweep_dir = None
        if sweep_dir:
            try:
                redact_yaml_file(Path(sweep_dir) / "multirun.yaml", self.secrets)
            except Exception as e:  # noqa: BLE001
                log.error("could not redact multirun.yaml (%s); deleting it", e)
                (Path(sweep_dir) / "multirun.yaml").unlink(missing_ok=True)
