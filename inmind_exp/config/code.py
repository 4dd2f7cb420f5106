"""What of the *code* makes a result: the source of every module that produces one, the prompt texts a configuration
uses and the implementation version of its memory system. Part of the result identity
(``inmind_exp.config.identity.result_identity``, key ``code``) and of the prefix snapshot's, so that editing a
system's code or prompts, the protocol, the memory interface, the encoders, answering or the judges gives new config
hashes: nothing is reused from a ledger or a snapshot made by other code.

Source is hashed as code (``module_code``: the module's syntax tree without its docstrings, so a comment or a
docstring edit keeps the identity); a system's code is its class's module, its bases' and the modules of the same
package they import (its prompts module). Prompts are also hashed as values, where they live whatever the source:
the shared answer prompt (``inmind_exp.memory.answering``), each judge's system and template text
(``inmind_exp.protocol.judges.JUDGES``) and every module-level constant of the system's module, in canonical form; a system's
hand-kept ``version`` stays in the identity as its readable name. Provenance that is *not* identity (package
version, git revision, dirty flag) is logged as MLflow tags by ``inmind_exp.tracking.provenance_tags``.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import hashlib
import importlib
import importlib.util
import json
import os
import re
import sys
from typing import Any

#: core modules whose code builds a system's state (the prefix snapshot too): the protocol's ingest, the memory
#: interface every system calls, the encoders
INGEST_CODE = ("inmind_exp.protocol.task", "inmind_exp.memory.base", "inmind_exp.llm.embed")
#: core modules whose code makes the rest of a result: the shared answerer and the judges
RESULT_CODE = ("inmind_exp.memory.answering", "inmind_exp.protocol.judges")

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


@functools.lru_cache(maxsize=512)
def _file_code(path: str, mtime_ns: int, size: int) -> str:
    """sha256 (16 hex digits) of a Python file's syntax tree without docstrings (``mtime_ns`` and ``size`` key the
    cache: an edited file is read again)."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(getattr(first.value, "value", None), str):
                node.body = node.body[1:] or [ast.Pass()]
    return hashlib.sha256(ast.unparse(tree).encode()).hexdigest()[:16]


def _source(name: str) -> str | None:
    module = sys.modules.get(name) or importlib.import_module(name)
    path = getattr(module, "__file__", None)
    return path if path and path.endswith(".py") and os.path.isfile(path) else None


def module_code(name: str) -> str:
    """The hash of a module's code (``_file_code``); ``"no source"`` for one without a ``.py`` file."""
    path = _source(name)
    if path is None:
        return "no source"
    st = os.stat(path)
    return _file_code(path, st.st_mtime_ns, st.st_size)


def _imports(name: str, path: str) -> set[str]:
    """The modules ``path`` (module ``name``) imports, relative ones resolved; names that are no loaded module
    dropped."""
    st = os.stat(path)
    return {m for m in _imported_names(name, path, st.st_mtime_ns, st.st_size) if m in sys.modules}


@functools.lru_cache(maxsize=512)
def _imported_names(name: str, path: str, mtime_ns: int, size: int) -> frozenset[str]:
    package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = importlib.util.resolve_name("." * node.level + (node.module or ""), package) if node.level else (
                node.module or "")
            found.add(base)
            found.update(f"{base}.{a.name}" for a in node.names)
    return frozenset(found)


def system_modules(system_cls: type) -> list[str]:
    """The modules of a system's code: its class's and its bases' (the core's aside, ``INGEST_CODE`` has those),
    and, transitively, the modules of the same top-level package they import (its prompts, shared helpers)."""
    todo = [c.__module__ for c in system_cls.__mro__
            if c.__module__ not in ("builtins", "abc") and c.__module__.split(".")[0] != "inmind_exp"]
    out: set[str] = set()
    while todo:
        name = todo.pop()
        if name in out:
            continue
        out.add(name)
        path = _source(name)
        if path is not None:
            top = name.split(".")[0]
            todo += [m for m in _imports(name, path) if m.split(".")[0] == top and m not in out]
    return sorted(out)


def system_identity(system_cls: type) -> dict[str, Any]:
    """A memory system's implementation ``version`` (its readable name), the hash of its module's constants (its
    prompts) and the code of its modules and of the core's ingest side (``INGEST_CODE``): what its state is made
    by, so the prefix snapshot's identity too."""
    return {"version": str(getattr(system_cls, "version", "1")),
            "prompts": digest(module_constants(system_cls.__module__)),
            "code": digest({m: module_code(m) for m in (*system_modules(system_cls), *INGEST_CODE)})}


def answer_identity() -> dict[str, str]:
    """The shared answer prompt's version and text hash (used by ``answer=shared``; the native answer prompts are
    the systems' own constants, in ``system_identity``)."""
    from inmind_exp.memory import answering

    return {"version": answering.SHARED_ANSWER_VERSION, "prompts": digest(module_constants(answering.__name__))}


def judges_identity() -> dict[str, str]:
    """Each judge's prompt text hash (its version is in the identity's ``judges``)."""
    from inmind_exp.protocol.judges import JUDGES

    return {name: digest([j.version, j.system, j.template, j.reads]) for name, j in sorted(JUDGES.items())}


def code_identity(system_cls: type) -> dict[str, Any]:
    """The code-made part of a configuration's result identity: its system's (``system_identity``), every prompt it
    uses, and the code of answering and judging (``RESULT_CODE``)."""
    return {"system": system_identity(system_cls), "answer": answer_identity(), "judges": judges_identity(),
            "code": digest({m: module_code(m) for m in RESULT_CODE})}
