"""What of the *code* makes a result: the prompt texts a configuration uses and the implementation version of its
memory system. Part of the result identity (``inmind_exp.result_identity.result_identity``, key ``code``) and of the prefix
snapshot's, so that editing a prompt or bumping a system's ``version`` gives new config hashes: nothing is reused
from a ledger or a snapshot made by other code.

Prompts are found where they live, whatever the source: the shared answer prompt (``inmind_exp.answering``), each
judge's system and template text (``inmind_exp.judges.JUDGES``) and every module-level constant of the system's
module (``ANSWER_PROMPT``, ``_CRITERIA``, ``PROBE_MESSAGES``, regexes, thresholds...), hashed in canonical form. A
change elsewhere in a system's code is caught by ``tests/systems/test_system_versions.py``, which records each
system module's source hash: it fails until the system's ``version`` is bumped (results change) or the recorded hash
is updated (they do not). Provenance that is *not* identity (package version, git revision, dirty flag) is logged
as MLflow tags by ``inmind_exp.tracking.provenance_tags``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import sys
from typing import Any

_CONSTANT = re.compile(r"^_?[A-Z][A-Z0-9_]*$")
_SKIP = object()


def _canon(value: Any, depth: int = 0) -> Any:
    """A JSON-able, order-stable form of a constant, or ``_SKIP`` for what is no constant (locks, classes...)."""
    if depth > 8:
        return _SKIP
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, re.Pattern):
        return {"re": value.pattern, "flags": value.flags}
    if isinstance(value, (list, tuple)):
        items = [_canon(v, depth + 1) for v in value]
        return _SKIP if any(i is _SKIP for i in items) else items
    if isinstance(value, (set, frozenset)):
        items = [_canon(v, depth + 1) for v in value]
        return _SKIP if any(i is _SKIP for i in items) else sorted(items, key=lambda i: json.dumps(i, sort_keys=True))
    if isinstance(value, dict):
        items = {str(k): _canon(v, depth + 1) for k, v in value.items()}
        return _SKIP if any(i is _SKIP for i in items.values()) else items
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _canon({f.name: getattr(value, f.name) for f in dataclasses.fields(value)}, depth + 1)
    return _SKIP


def digest(value: Any) -> str:
    """sha256 (16 hex digits) of a value's canonical JSON."""
    return hashlib.sha256(json.dumps(value, sort_keys=True, ensure_ascii=False).encode()).hexdigest()[:16]


def module_constants(module_name: str) -> dict[str, Any]:
    """Every upper-case module-level constant of a loaded module, in canonical form (its prompts among them)."""
    module = sys.modules[module_name]
    out = {}
    for name, value in vars(module).items():
        if name.startswith("_") and isinstance(value, (dict, list, set)):
            continue  # a private mutable module global is run-time state (a cache), not a constant
        if _CONSTANT.match(name):
            c = _canon(value)
            if c is not _SKIP:
                out[name] = c
    return out


def system_identity(system_cls: type) -> dict[str, str]:
    """A memory system's implementation ``version`` and the hash of its module's constants (its prompts)."""
    return {"version": str(getattr(system_cls, "version", "1")),
            "prompts": digest(module_constants(system_cls.__module__))}


def answer_identity() -> dict[str, str]:
    """The shared answer prompt's version and text hash (used by ``answer=shared``; the native answer prompts are
    the systems' own constants, in ``system_identity``)."""
    from inmind_exp import answering

    return {"version": answering.SHARED_ANSWER_VERSION, "prompts": digest(module_constants(answering.__name__))}


def judges_identity() -> dict[str, str]:
    """Each judge's prompt text hash (its version is in the identity's ``judges``)."""
    from inmind_exp.judges import JUDGES

    return {name: digest([j.version, j.system, j.template, j.reads]) for name, j in sorted(JUDGES.items())}


def code_identity(system_cls: type) -> dict[str, Any]:
    """The code-made part of a configuration's result identity: every prompt it uses and its system's version."""
    return {"system": system_identity(system_cls), "answer": answer_identity(), "judges": judges_identity()}
