"""The composed Hydra config as a typed ``Config`` (``inmind_exp.config.schema``), made once, at the edge
(``OmegaConf.to_object``): planning and everything after it read typed fields, never a ``DictConfig``, and derive a
new value (``dataclasses.replace``) instead of writing into the config."""

from __future__ import annotations

import dataclasses
from typing import Any

from omegaconf import Container, OmegaConf
from omegaconf.errors import MissingMandatoryValue

from inmind_exp.config.schema import Config
from inmind_exp.errors import PlanError


def as_config(cfg: Config | Container) -> Config:
    """``cfg`` as a ``Config`` (itself when it is one). The composed config's ``hydra`` node, present when Hydra
    hands over its own, is not the experiment's and is left out; a required value left unset is a ``PlanError``
    naming its key."""
    if isinstance(cfg, Config):
        return cfg
    values: dict[str, Any] = {}
    for f in dataclasses.fields(Config):
        if f.name not in cfg:
            continue
        try:
            node = cfg[f.name]
            values[f.name] = OmegaConf.to_object(node) if isinstance(node, Container) else node
        except MissingMandatoryValue as e:
            raise PlanError(f"{e.full_key or f.name}: required but not set") from None
    return Config(**values)


def select(config: Any, key: str) -> Any:
    """The value at a dotted ``key`` of a ``Config`` (or any part of one): a field, or a key of a mapping field
    (``system.params.top_k``). ``KeyError`` naming ``key`` when there is none."""
    node = config
    for part in key.split("."):
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif dataclasses.is_dataclass(node) and part in {f.name for f in dataclasses.fields(node)}:
            node = getattr(node, part)
        else:
            raise KeyError(key)
    return node


def as_dict(config: Config) -> dict[str, Any]:
    """The config as plain data, in the schema's field order (what ``config.yaml`` and the MLflow params show)."""
    return dataclasses.asdict(config)
