"""The import graph of ``inmind_exp``, read from the source with ``ast`` (every import: module level, inside
functions and under ``TYPE_CHECKING``): no circle between two modules, the core never imports ``systems/`` or
``analysis/``, mlflow is imported only by the tracking modules and Ray only by ``exec/``, and no arrow between
packages runs back up. A package's ``__init__`` importing its own
submodules (and they it) is not counted as a circle: that is how a package re-exports."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = "inmind_exp"

#: circles waiting on another lane's change, with the reason (remove the entry once it lands)
KNOWN_CIRCLES: dict[frozenset[str], str] = {
}


def modules(root: Path = REPO, package: str = PACKAGE) -> dict[str, Path]:
    out = {}
    for f in sorted((root / package).rglob("*.py")):
        rel = f.relative_to(root).with_suffix("")
        out[".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)] = f
    return out


def imported_names(name: str, path: Path) -> set[str]:
    """Every dotted name ``path`` imports (``from a.b import c`` gives ``a.b`` and ``a.b.c``), relative ones resolved."""
    out: set[str] = set()
    base = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            if node.level:
                mod = ".".join(base[: len(base) - node.level + 1] + ([mod] if mod else []))
            out.add(mod)
            out.update(f"{mod}.{a.name}" for a in node.names)
    return out


def import_graph(mods: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the modules of the package it imports (a name resolved to its longest module prefix)."""
    def resolve(n: str) -> str | None:
        while n and n not in mods:
            n = n.rpartition(".")[0]
        return n or None

    graph: dict[str, set[str]] = {}
    for m, f in mods.items():
        targets = {resolve(n) for n in imported_names(m, f) if n.split(".")[0] == PACKAGE}
        graph[m] = {t for t in targets if t and t != m and not m.startswith(t + ".") and not t.startswith(m + ".")}
    return graph


def circles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[frozenset[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = set()
                while True:
                    x = stack.pop()
                    on.discard(x)
                    comp.add(x)
                    if x == v:
                        break
                if len(comp) > 1:
                    out.append(frozenset(comp))
    return out


def test_the_checker_finds_a_circle(tmp_path):
    pkg = tmp_path / PACKAGE
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from . import b  # a package re-exporting is no circle\n")
    (pkg / "a.py").write_text("def f():\n    from inmind_exp.sub.b import g\n")
    (pkg / "sub" / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..a import f\n")
    (pkg / "c.py").write_text("import inmind_exp.a\n")
    found = circles(import_graph(modules(tmp_path)))
    assert found == [frozenset({"inmind_exp.a", "inmind_exp.sub.b"})]


def test_no_import_circle_between_modules():
    found = [c for c in circles(import_graph(modules())) if c not in KNOWN_CIRCLES]
    assert not found, "import circles: " + "; ".join(" <-> ".join(sorted(c)) for c in found)


def test_the_core_never_imports_systems_or_analysis():
    bad = {m: sorted(n for n in imported_names(m, f) if n.split(".")[0] in ("systems", "analysis"))
           for m, f in modules().items()}
    assert not {m: n for m, n in bad.items() if n}


def test_only_tracking_imports_mlflow():
    users = sorted(m for m, f in modules().items() if any(n.split(".")[0] == "mlflow" for n in imported_names(m, f)))
    assert users and all(m == "inmind_exp.tracking" or m.startswith("inmind_exp.tracking.")
                         for m in users), users


def test_only_exec_imports_ray():
    """Ray stays in one room: the executor, the schedule, the worker actor and the cluster services."""
    users = sorted(m for m, f in modules().items() if any(n.split(".")[0] == "ray" for n in imported_names(m, f)))
    assert users and all(m.startswith("inmind_exp.exec.") for m in users), users


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The import graph between the core's packages (a top-level module is a package of its own)."""
    def pkg(m: str) -> str:
        return ".".join(m.split(".")[:2])

    out: dict[str, set[str]] = {}
    for m, targets in graph.items():
        out.setdefault(pkg(m), set()).update(pkg(t) for t in targets if pkg(t) != pkg(m))
    return out


def test_the_packages_are_floors_with_no_arrow_back_up():
    """Between packages every import points down: no two packages import each other, directly or round a loop
    (the arrows that ran back up, ``run -> tracking -> run``, ``console -> run``, were the cost of a helper filed high)."""
    found = circles(package_graph(import_graph(modules())))
    assert not found, "packages importing each other: " + "; ".join(" <-> ".join(sorted(c)) for c in found)


def test_the_package_check_finds_an_arrow_back_up(tmp_path):
    pkg = tmp_path / PACKAGE
    for sub in ("low", "high"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "high" / "a.py").write_text("from inmind_exp.low.b import g\n")
    (pkg / "low" / "b.py").write_text("def g():\n    from inmind_exp.high.c import h\n")
    (pkg / "high" / "c.py").write_text("def h(): ...\n")
    graph = import_graph(modules(tmp_path))
    assert not circles(graph)  # no circle between modules ...
    assert circles(package_graph(graph)) == [frozenset({"inmind_exp.high", "inmind_exp.low"})]  # ... but between floors


#: the launch's Hydra glue: the ``inmind_exp.launch`` room (callbacks, override names), the launch session and the
#: sweep's driver side
HYDRA_GLUE = ("inmind_exp.launch", "inmind_exp.run.session", "inmind_exp.run.sweep")


@pytest.mark.slow
def test_workers_never_import_the_hydra_glue():
    """What a worker process loads when it imports its module (a fresh interpreter, as a Ray actor starts)."""
    import subprocess
    import sys

    code = ("import sys, inmind_exp.exec.worker; print(' '.join(sorted(m for m in sys.modules "
            "if m.startswith(('inmind_exp', 'analysis', 'systems', 'hydra_plugins')))))")
    loaded = set(subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                                check=True).stdout.split())
    assert "inmind_exp.protocol.task" in loaded  # the check sees what a worker runs
    glue = sorted(m for m in loaded if m in HYDRA_GLUE or m.startswith(tuple(g + "." for g in HYDRA_GLUE)))
    assert not glue, glue
    assert not {m for m in loaded if m.split(".")[0] in ("analysis", "systems", "hydra_plugins")}
