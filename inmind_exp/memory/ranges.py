"""Ranges of numeric settings, checked when a configuration is planned: a value out of range (``top_k=-1``,
``llm.max_concurrency=0``, ``llm.rpm=-5``) is a ``PlanError`` naming its key, before Ray or MLflow start, never a
run that quietly retrieves nothing or hangs. Systems declare their parameters' ranges as ``param_ranges``
(``inmind_exp.memory.MemorySystem``); the run settings' ranges are ``SETTING_RANGES`` below."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping


@dataclass(frozen=True)
class Range:
    """An allowed interval for one number: ``low``/``high`` (None: unbounded), each end open or closed;
    ``integer`` refuses fractions; ``nullable`` lets null through (a limit that is off)."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    integer: bool = False
    nullable: bool = False

    def problem(self, value: object) -> str | None:
        """Why ``value`` is not allowed (None when it is)."""
        if value is None:
            return None if self.nullable else f"must be {self.describe()}, not null"
        if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
            return f"must be {self.describe()}, got {type(value).__name__} {value!r}"
        if self.integer and not float(value).is_integer():
            return f"must be {self.describe()}"
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return f"must be {self.describe()}"
        if self.high is not None and (value >= self.high if self.high_open else value > self.high):
            return f"must be {self.describe()}"
        return None

    def describe(self) -> str:
        kind = "an integer" if self.integer else "a number"
        parts = []
        if self.low is not None:
            parts.append(f"{'>' if self.low_open else '>='} {_num(self.low)}")
        if self.high is not None:
            parts.append(f"{'<' if self.high_open else '<='} {_num(self.high)}")
        text = f"{kind} {' and '.join(parts)}" if parts else kind
        return f"{text} (or null)" if self.nullable else text


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def at_least(n: int, nullable: bool = False) -> Range:
    """An integer >= ``n`` (counts, ``top_k``, capacities)."""
    return Range(low=n, integer=True, nullable=nullable)


def positive(nullable: bool = False) -> Range:
    """A number > 0 (seconds, rates)."""
    return Range(low=0, low_open=True, nullable=nullable)


def non_negative(nullable: bool = False) -> Range:
    return Range(low=0, nullable=nullable)


def unit(nullable: bool = False) -> Range:
    """A number in [0, 1] (similarity thresholds, weights, probabilities)."""
    return Range(low=0, high=1, nullable=nullable)


def similarity(nullable: bool = False) -> Range:
    """A cosine similarity threshold in [-1, 1]."""
    return Range(low=-1, high=1, nullable=nullable)


#: the run settings' ranges, by dotted key; ``roles.*`` apply to every role's override (null there means "as llm")
SETTING_RANGES: Mapping[str, Range] = {
    "llm.max_concurrency": at_least(1),
    "llm.rpm": positive(nullable=True),
    "llm.tpm": positive(nullable=True),
    "llm.timeout_s": positive(),
    "llm.deadline_s": positive(nullable=True),
    "llm.max_response_bytes": at_least(1),
    "llm.max_attempts": at_least(1),
    "llm.backoff_initial_s": non_negative(),
    "llm.backoff_max_s": non_negative(),
    "llm.max_tokens": at_least(1, nullable=True),
    "llm.temperature": Range(low=0, high=2, nullable=True),
    "llm.top_p": Range(low=0, high=1, low_open=True, nullable=True),
    "llm.roles.*.max_concurrency": at_least(1, nullable=True),
    "llm.roles.*.timeout_s": positive(nullable=True),
    "llm.roles.*.max_tokens": at_least(1, nullable=True),
    "llm.roles.*.temperature": Range(low=0, high=2, nullable=True),
    "llm.roles.*.top_p": Range(low=0, high=1, low_open=True, nullable=True),
    "embedding.max_concurrency": at_least(1),
    "embedding.timeout_s": positive(),
    "embedding.batch_size": at_least(1),
    "embedding.dim": at_least(1, nullable=True),
    "run.max_task_attempts": at_least(1),
    "run.judge_attempts": at_least(1),
    "run.progress_every_s": non_negative(),
    "run.lock_timeout_s": non_negative(nullable=True),
    "cluster.workers": at_least(1),
    "cluster.num_cpus": at_least(1, nullable=True),
    "cluster.start_timeout_s": positive(),
    "dataset.limit": at_least(0, nullable=True),
    "dataset.sample": at_least(1, nullable=True),
}


def check_settings(get: Callable[[str], object], roles: Iterable[str], ranges: Mapping[str, Range] = SETTING_RANGES) -> list[str]:
    """Every out-of-range setting as ``key=value: must be ...``. ``get(key)`` returns a dotted key's value, or
    raises ``KeyError`` when the config has no such key (then it is not checked)."""
    problems = []
    for key, rng in ranges.items():
        keys = [key.replace("*", r) for r in roles] if "*" in key else [key]
        for k in keys:
            try:
                value = get(k)
            except KeyError:
                continue
            why = rng.problem(value)
            if why:
                problems.append(f"{k}={value}: {why}")
    return problems


def check_params(system: str, params: Mapping[str, object], ranges: Mapping[str, Range]) -> list[str]:
    """Every system parameter of ``params`` outside its declared range, as ``system.params.key=value: ...``."""
    problems = []
    for key, rng in ranges.items():
        if key in params:
            why = rng.problem(params[key])
            if why:
                problems.append(f"system.params.{key}={params[key]} ({system}): {why}")
    return problems
