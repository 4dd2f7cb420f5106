"""A typed name → class registry with close-match suggestions for unknown names, resolving names lazily from three
sources: built-in modules (a package whose modules register with a decorator), an entry-point group installed
packages declare, and a ``module:Class`` reference.

A name is looked up in that order and only what it needs is imported: ``get("naive_rag")`` imports
``systems.naive_rag``, ``get("my_hybrid")`` loads the one entry point of that name, ``get("pkg.mod:Cls")`` imports
``pkg.mod``. A plug-in class need not use the decorator: the entry point's name (or the reference) registers it.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import pkgutil
import threading
from importlib import metadata
from typing import Callable, Generic, TypeVar

T = TypeVar("T")


def is_reference(name: str) -> bool:
    """``pkg.mod:Class`` (a module path and an attribute path), as opposed to a registry name."""
    return ":" in name


class Registry(Generic[T]):
    """Maps stable config names to subclasses of ``base``; ``discover`` names a package whose modules register,
    ``entry_points`` an entry-point group whose entries (``name = "pkg.mod:Class"``) are plug-ins."""

    def __init__(self, kind: str, base: type[T], discover: str | None = None, entry_points: str | None = None):
        self.kind = kind
        self.base = base
        self._discover = discover
        self._group = entry_points
        self._discovered = False
        self._items: dict[str, type[T]] = {}
        #: ``module:Class`` references resolved so far (not listed by ``names``: the class's own name is)
        self._refs: dict[str, type[T]] = {}
        self._lock = threading.RLock()

    def register(self, name: str) -> Callable[[type[T]], type[T]]:
        def deco(cls: type[T]) -> type[T]:
            if not (isinstance(cls, type) and issubclass(cls, self.base)):
                raise TypeError(f"{self.kind} {name!r}: {cls!r} is not a subclass of {self.base.__name__}")
            with self._lock:
                if name in self._items and self._items[name] is not cls:
                    raise ValueError(f"{self.kind} {name!r} is already registered to {self._items[name].__qualname__}")
                self._items[name] = cls
            cls.name = name  # type: ignore[attr-defined]
            return cls

        return deco

    # -- the three sources ------------------------------------------------------------------------------------------

    def _ensure(self) -> None:
        """Import every built-in module (for ``names`` and for a name no module file is called after)."""
        with self._lock:
            if self._discover and not self._discovered:
                pkg = importlib.import_module(self._discover)
                for mod in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda m: m.name):
                    if not mod.name.startswith("_"):
                        importlib.import_module(f"{self._discover}.{mod.name}")
                self._discovered = True

    def _builtin(self, name: str) -> type[T] | None:
        """The built-in module named like ``name`` (the convention), else every built-in module."""
        if not self._discover:
            return None
        if name.isidentifier() and not name.startswith("_"):
            module = f"{self._discover}.{name}"
            if importlib.util.find_spec(module) is not None:
                importlib.import_module(module)
                if name in self._items:
                    return self._items[name]
        self._ensure()
        return self._items.get(name)

    def entry_points(self) -> dict[str, metadata.EntryPoint]:
        """The installed plug-ins of the group by name (read from package metadata; nothing is imported)."""
        if not self._group:
            return {}
        return {ep.name: ep for ep in sorted(metadata.entry_points(group=self._group), key=lambda e: e.name)}

    def _plugin(self, name: str) -> type[T] | None:
        ep = self.entry_points().get(name)
        if ep is None:
            return None
        where = f"entry point {name!r} = {ep.value!r} of group {self._group}"
        dist = getattr(ep, "dist", None)
        if dist is not None:
            where += f" (package {dist.metadata['Name']})"
        try:
            cls = ep.load()
        except Exception as e:  # noqa: BLE001  (an ImportError, a missing attribute, an error in the plug-in)
            raise KeyError(f"{self.kind} {name!r}: cannot load {where}: {type(e).__name__}: {e}") from None
        return self._adopt(name, cls, where)

    def _import(self, ref: str) -> object:
        """The object at ``package.module:attr.path``; a ``KeyError`` saying what is missing."""
        module, _, attr = ref.partition(":")
        if not module or not attr:
            raise KeyError(f"{self.kind} {ref!r}: a reference is 'package.module:Class'")
        try:
            obj: object = importlib.import_module(module)
        except Exception as e:  # noqa: BLE001
            raise KeyError(f"{self.kind} {ref!r}: cannot import module {module!r}: {type(e).__name__}: {e}") from None
        for part in attr.split("."):
            if not hasattr(obj, part):
                raise KeyError(f"{self.kind} {ref!r}: module {module!r} has no attribute {attr!r}") from None
            obj = getattr(obj, part)
        return obj

    def _reference(self, ref: str) -> type[T]:
        obj = self._import(ref)
        if getattr(obj, "name", "") and self._items.get(obj.name) is obj:  # type: ignore[attr-defined]
            return obj  # type: ignore[return-value]  # its module registered it under its own name
        return self._adopt(ref, obj, f"reference {ref!r}")

    def _adopt(self, name: str, cls: object, where: str) -> type[T]:
        """Register a plug-in class found under ``name`` (unless its module's decorator already did)."""
        if not (isinstance(cls, type) and issubclass(cls, self.base)):
            raise KeyError(f"{self.kind} {name!r}: {where} is {cls!r}, not a subclass of {self.base.__name__}")
        own = getattr(cls, "name", "")
        if own and own != name and self._items.get(own) is cls:
            raise KeyError(f"{self.kind} {name!r}: {where} is registered under another name, {own!r}; "
                           "use one name (the entry point's, or no decorator)")
        try:
            return self.register(name)(cls)
        except ValueError as e:
            raise KeyError(f"{e.args[0]}; {where} cannot take the name") from None

    # -- lookups ------------------------------------------------------------------------------------------------

    def get(self, name: str) -> type[T]:
        """The class of ``name``: a registered or built-in name, an installed entry point, or ``pkg.mod:Class``."""
        with self._lock:
            if name in self._items:
                return self._items[name]
            if is_reference(name):
                if name not in self._refs:
                    self._refs[name] = self._reference(name)
                return self._refs[name]
            found = self._builtin(name) or self._plugin(name)
            if found is not None:
                return found
        close = difflib.get_close_matches(name, self.names(), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise KeyError(f"unknown {self.kind} {name!r}{hint} (known: {', '.join(self.names())}; a plug-in is an "
                       f"entry point of group {self._group} or a 'package.module:Class' reference)") from None

    def names(self) -> list[str]:
        """Every built-in and installed plug-in name (plug-ins are listed without being imported)."""
        self._ensure()
        return sorted(n for n in {*self._items, *self.entry_points()} if not is_reference(n))

    def builtin(self, cls: type) -> bool:
        """Whether ``cls`` is one of the built-in modules' classes (not a plug-in)."""
        return bool(self._discover) and cls.__module__.split(".")[0] == self._discover

    def reference(self, name: str) -> str:
        """``module:qualname`` of ``name``'s class: what a worker without the plug-in's package metadata (code shipped
        by ``cluster.ship_code``, no entry points installed) imports to find it."""
        cls = self.get(name)
        return f"{cls.__module__}:{cls.__qualname__}"

    def resolve(self, name: str, reference: str = "") -> type[T]:
        """``get(name)``; if unknown here (a worker node where the plug-in is not installed), the class at
        ``reference`` registered under ``name``."""
        try:
            return self.get(name)
        except KeyError:
            if not reference or is_reference(name):
                raise
        with self._lock:
            cls = self._import(reference)
            return cls if self._items.get(name) is cls else self._adopt(name, cls, f"reference {reference!r}")  # type: ignore[return-value]

    def plugins(self) -> list[type[T]]:
        """The classes resolved so far that are not built-ins (what ``cluster.ship_code`` must ship too)."""
        with self._lock:
            classes = {*self._items.values(), *self._refs.values()}
        return sorted((c for c in classes if not self.builtin(c)), key=lambda c: (c.__module__, c.__qualname__))
