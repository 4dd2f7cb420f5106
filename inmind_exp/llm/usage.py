"""Thread-safe token and call accounting per role, with snapshots so a task's own usage can be taken as a difference."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict
from typing import Any

from inmind_exp.records import Usage


class UsageMeter:
    """Counts calls and tokens per role; cached calls are counted in both the totals and the ``cached_*`` fields."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_role: dict[str, Usage] = {}
        # per role, each reply cut at the token limit: its prompt's text and the trace turns its caller declared
        self._cut: dict[str, list[tuple[str, tuple[str, ...] | None]]] = {}
        #: per role, (kind, detail) of each call the wrapper noted: token counts it could not use (``bad_usage``),
        #: an unusable cache entry asked again (``invalid_cache_entry``); the protocol records them as diagnostics
        self._notes: dict[str, list[tuple[str, str]]] = {}
        self._about = threading.local()
        # per role, each chat reply's (model the endpoint reported, endpoint host), in call order
        self._served: dict[str, list[tuple[str, str]]] = {}
        #: called with (role, Usage of one call) after each call is counted: the live spend (``phases.PhaseReporter``)
        self.listener: Callable[[str, Usage], None] | None = None

    def add(self, role: str, prompt_tokens: int, completion_tokens: int, cached: bool, provider_cached: int = 0,
            reasoning: int = 0) -> None:
        """One call; ``provider_cached`` of a paid call's prompt tokens the provider billed as cached input,
        ``reasoning`` of its completion tokens the hidden reasoning (each kept within its total, never negative)."""
        u = Usage(
            calls=1,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            cached_calls=int(cached),
            cached_prompt_tokens=prompt_tokens if cached else 0,
            cached_completion_tokens=completion_tokens if cached else 0,
            provider_cached_prompt_tokens=0 if cached else max(0, min(provider_cached, prompt_tokens)),
            reasoning_tokens=0 if cached else max(0, min(reasoning, completion_tokens)),
        )
        with self._lock:
            self._by_role[role] = self._by_role.get(role, Usage()) + u
        if self.listener is not None:
            try:
                self.listener(role, u)
            except Exception:  # noqa: BLE001 - a live display never fails a call
                self.listener = None

    @contextmanager
    def about(self, turns: list[str] | tuple[str, ...]) -> Iterator[None]:
        """Calls made in this thread inside the block write these trace turns: a reply cut there is attributed to
        them (a system knows what a call is about better than a text search of its prompt can tell)."""
        outer = getattr(self._about, "turns", None)
        self._about.turns = tuple(turns)
        try:
            yield
        finally:
            self._about.turns = outer

    def finished(self, role: str, finish_reason: str | None, prompt: str = "") -> None:
        """Note how a chat reply ended: one cut at the token limit is kept with its prompt's text and the turns
        declared by ``about`` (None outside it), so the protocol can name the trace turns the cut call was writing."""
        if finish_reason == "length":
            with self._lock:
                self._cut.setdefault(role, []).append((prompt, getattr(self._about, "turns", None)))

    def note(self, role: str, kind: str, detail: str) -> None:
        """Note something about one of ``role``'s calls that its task record should show (a diagnostic kind)."""
        self._append(self._notes, role, (kind, detail))

    def notes(self, role: str, since: int = 0) -> list[tuple[str, str]]:
        """``role``'s notes (kind, detail), from the ``since``-th on."""
        return self._since(self._notes, role, since)

    def cut_calls(self, role: str, since: int = 0) -> list[tuple[str, tuple[str, ...] | None]]:
        """The cut replies of ``role`` from the ``since``-th on, each as (prompt text, declared turns or None)."""
        return self._since(self._cut, role, since)

    def cut_prompts(self, role: str, since: int = 0) -> list[str]:
        """The prompt texts of the cut replies of ``role``, from the ``since``-th on."""
        return [prompt for prompt, _ in self.cut_calls(role, since)]

    def served(self, role: str, model: str, host: str) -> None:
        """Note the model an endpoint reported for one chat reply of ``role`` (cached replies too), and its host."""
        self._append(self._served, role, (model, host))

    def served_calls(self, role: str, since: int = 0) -> list[tuple[str, str]]:
        """The (served model, host) of each chat reply of ``role`` from the ``since``-th on."""
        return self._since(self._served, role, since)

    def _append(self, log: dict[str, list[Any]], role: str, entry: Any) -> None:
        """One entry on ``role``'s list of a per-role log (the cut replies, the notes, the served models)."""
        with self._lock:
            log.setdefault(role, []).append(entry)

    def _since(self, log: dict[str, list[Any]], role: str, since: int) -> list[Any]:
        """``role``'s entries of a per-role log from the ``since``-th on (a copy, taken under the lock)."""
        with self._lock:
            return list(log.get(role, ())[since:])

    def snapshot(self) -> dict[str, Usage]:
        with self._lock:
            return dict(self._by_role)

    @staticmethod
    def diff(after: dict[str, Usage], before: dict[str, Usage]) -> dict[str, Usage]:
        out = {}
        for role, a in after.items():
            b = asdict(before.get(role, Usage()))
            d = Usage(**{k: v - b[k] for k, v in asdict(a).items()})
            if d.calls:
                out[role] = d
        return out


def served_of(calls: list[tuple[str, str]]) -> tuple[str, str]:
    """One (model, host) for a set of calls: each distinct value once, in call order, joined by ``, ``."""
    models = list(dict.fromkeys(m for m, _ in calls if m))
    hosts = list(dict.fromkeys(h for _, h in calls if h))
    return ", ".join(models), ", ".join(hosts)
