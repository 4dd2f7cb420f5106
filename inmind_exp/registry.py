"""A typed name → class registry filled by a decorator, with close-match suggestions for unknown names."""

from __future__ import annotations

import difflib
import importlib
import pkgutil
import threading
from typing import Callable, Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    """Maps stable config names to subclasses of ``base``; ``discover`` names a package whose modules register."""

    def __init__(self, kind: str, base: type[T], discover: str | None = None):
        self.kind = kind
        self.base = base
        self._discover = discover
        self._discovered = False
        self._items: dict[str, type[T]] = {}
        self._lock = threading.Lock()

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

    def _ensure(self) -> None:
        if self._discover and not self._discovered:
            pkg = importlib.import_module(self._discover)
            for mod in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda m: m.name):
                if not mod.name.startswith("_"):
                    importlib.import_module(f"{self._discover}.{mod.name}")
            self._discovered = True

    def get(self, name: str) -> type[T]:
        self._ensure()
        try:
            return self._items[name]
        except KeyError:
            close = difflib.get_close_matches(name, self._items, n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise KeyError(f"unknown {self.kind} {name!r}{hint} (known: {', '.join(self.names())})") from None

    def names(self) -> list[str]:
        self._ensure()
        return sorted(self._items)
