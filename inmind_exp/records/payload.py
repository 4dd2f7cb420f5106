"""The one door ``Any`` has into the plug-in surface: JSON-shaped payloads, named. A record's ``to_dict`` and
``from_dict`` speak them, a system's diagnostics (``meta``) and its config ``params`` are them. mypy refuses any
other explicit ``Any`` in ``inmind_exp.memory`` and ``inmind_exp.records`` (``disallow_any_explicit`` in
pyproject.toml), so an untyped value crossing the surface is a visible choice, and tightening ``JsonValue`` to a real
JSON type later is one edit here."""

from typing import Any, TypeAlias

#: a value as JSON (or a Hydra config value) holds it: str, number, bool, None, a list or an object of these
JsonValue: TypeAlias = Any  # type: ignore[explicit-any]  # the named exception, see the module docstring
#: a JSON object: what a record's ``to_dict`` writes and ``from_dict`` reads
JsonDict: TypeAlias = dict[str, JsonValue]
