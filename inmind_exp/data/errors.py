"""Validation errors that say what is wrong and where (file, line, key)."""

from __future__ import annotations

from dataclasses import dataclass

from inmind_exp.errors import InmindError


@dataclass(frozen=True)
class Problem:
    """One problem found in an input file."""

    path: str
    line: int | None
    key: str | None
    message: str

    def __str__(self) -> str:
        where = self.path + (f":{self.line}" if self.line is not None else "")
        key = f" [{self.key}]" if self.key else ""
        return f"{where}{key}: {self.message}"


class DataError(InmindError, ValueError):
    """Raised with every problem of a file at once, before any work starts."""

    def __init__(self, problems: list[Problem]):
        self.problems = problems
        head = f"{len(problems)} problem(s) in input data:\n"
        super().__init__(head + "\n".join(f"  - {p}" for p in problems))
