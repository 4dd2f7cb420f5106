"""How a configuration is named in logs, MLflow and tables: ``system/embedding/injection/llm[/answer] [key=value ...]``.

The injection part names the *effective* injection point: the preset's name (``middle``) when the point is the
preset's own, else the point itself (``turn100``, ``frac0.5``), so ``injection=early injection.user_turn=100`` is
never labelled ``early``. The bracketed suffix shows every other key the sweep varies (``[top_k=5]``,
``[judge.model=gpt-4o]``), so no two configurations of a sweep share a name. Labels are display only: results are
found again by config hash, never by label.
"""

from __future__ import annotations

from dataclasses import is_dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

#: the config groups (values only): ``conf/`` of a checkout, reached through the ``inmind_exp/conf`` link, which an
#: installed package holds as package data
CONF_DIR = Path(__file__).resolve().parent / "conf"

#: Config groups (and their keys) the label already spells out: not repeated in the suffix.
LABEL_GROUPS = ("system", "embedding", "injection", "llm", "answer")
#: Overrides that never tell configurations apart in a name (Hydra's own settings).
NOT_LABELLED = ("hydra.",)
#: Prefixes dropped from a suffix key to keep names short (``llm.roles.judge.model`` -> ``judge.model``).
SHORTEN = ("llm.roles.", "system.params.")


def _point(user_turn: Any, fraction: Any) -> tuple[str, Any] | None:
    """The effective injection point: ``user_turn`` wins over ``fraction`` (as in ``protocol.injection_session_index``)."""
    if user_turn not in (None, "None", "null", ""):
        return ("turn", int(user_turn))
    if fraction not in (None, "None", "null", ""):
        return ("frac", float(fraction))
    return None


@lru_cache(maxsize=64)
def preset_point(name: str) -> tuple[str, Any] | None:
    """The injection point the preset ``injection=<name>`` sets by itself: read through the running Hydra app's
    config repository (its whole search path), else from ``conf/injection/<name>.yaml``; None when not found."""
    node: Any = None
    try:
        from hydra.core.global_hydra import GlobalHydra

        gh = GlobalHydra.instance()
        if gh.is_initialized():
            found = gh.config_loader().repository.load_config(f"injection/{name}")  # type: ignore[attr-defined]
            node = found.config if found is not None else None
    except Exception:  # noqa: BLE001  (an internal Hydra API: fall back to the file)
        node = None
    if node is None:
        f = CONF_DIR / "injection" / f"{name}.yaml"
        if not f.is_file():
            return None
        from omegaconf import OmegaConf

        node = OmegaConf.load(f)
    return _point(node.get("user_turn"), node.get("fraction"))


def injection_label(name: str, user_turn: Any = None, fraction: Any = None) -> str:
    """``turn100`` / ``frac0.5`` for the effective point, or the preset's name when the point is the preset's own
    (``injection=position`` is always named by its turn: the preset exists to set one)."""
    point = _point(user_turn, fraction)
    if point is None:
        return name
    if name != "position" and point == preset_point(name):
        return name
    kind, value = point
    return f"turn{value}" if kind == "turn" else f"frac{value:g}"


def run_label(system: str, embedding: str, injection: str, llm: str, answer_mode: str | None = "shared",
              extra: str = "") -> str:
    """``system/embedding/injection/llm[/answer mode]`` (``injection`` as ``injection_label`` gives it; the default
    ``shared`` answer mode left out), then ``extra`` (``label_suffix``) after a space."""
    answer = "" if answer_mode in (None, "shared") else f"/{answer_mode}"
    return f"{system}/{embedding}/{injection}/{llm}{answer}" + (f" {extra}" if extra else "")


def split_override(override: str) -> tuple[str, str]:
    """``+key=value`` -> (``key``, ``value``)."""
    key, _, value = str(override).partition("=")
    return key.lstrip("+~"), value


def labelled_elsewhere(key: str) -> bool:
    """Keys the label's path already shows (a group choice, its name or the injection point) or that name nothing."""
    return (key in LABEL_GROUPS or key.startswith(NOT_LABELLED)
            or any(key == f"{g}.name" for g in LABEL_GROUPS) or key.startswith("injection.")
            or key == "answer.mode")


def varying_keys(jobs: Sequence[Sequence[str]]) -> list[str]:
    """Keys whose value differs between the jobs of a sweep (each job a list of ``key=value`` overrides), in the
    order of the first job, without those the label's path already shows."""
    values: dict[str, set[str]] = {}
    order: list[str] = []
    for job in jobs:
        for k, v in map(split_override, job):
            if k not in values:
                values[k] = set()
                order.append(k)
            values[k].add(v)
    for k in values:  # a key missing from some job varies too (it takes its default there)
        if any(k not in {split_override(o)[0] for o in job} for job in jobs):
            values[k].add("\0default")
    return [k for k in order if len(values[k]) > 1 and not labelled_elsewhere(k)]


def swept_values(config: Any, keys: Iterable[str], overrides: Iterable[str] = ()) -> dict[str, Any]:
    """Each swept key's value in this job: the typed config's value when the key names a leaf, else the job's
    override (a config group choice such as ``trace=smoke``, a key that is no config path)."""
    given = dict(split_override(o) for o in overrides)
    out: dict[str, Any] = {}
    for k in keys:
        node = config
        for part in k.split("."):
            node = node.get(part) if isinstance(node, dict) else getattr(node, part, None)
        leaf = node is not None and not isinstance(node, (dict, list)) and not is_dataclass(node)
        out[k] = node if leaf else given.get(k)
    return out


def label_suffix(keys: Iterable[str], value_of: Mapping[str, Any]) -> str:
    """``[top_k=5 judge.model=gpt-4o]`` for the swept ``keys`` (values from ``value_of``), or "" for none."""
    parts = []
    for k in keys:
        v = value_of.get(k)
        short = next((k.removeprefix(p) for p in SHORTEN if k.startswith(p)), k)
        parts.append(f"{short}={'default' if v is None else v}")
    return f"[{' '.join(parts)}]" if parts else ""
