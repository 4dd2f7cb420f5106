"""Benchmark data: task and trace loaders with validation, the bundled set, and construction checks."""

from inmind_exp.data.errors import DataError, Problem
from inmind_exp.data.tasks import BUNDLED_TASKS, load_tasks
from inmind_exp.data.trace import BUNDLED_TRACE, load_trace

__all__ = ["DataError", "Problem", "BUNDLED_TASKS", "BUNDLED_TRACE", "load_tasks", "load_trace"]
