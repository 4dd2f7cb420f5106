"""The quality gates, inside the README's test command: ruff over the code and tests, mypy over ``inmind_exp/``
(strict on the plug-in surface), each configured in pyproject.toml. ``.ci/run`` also runs both after the tests."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

#: every test here starts a checker in a subprocess
pytestmark = pytest.mark.slow


def _gate(tool: str, *args: str) -> None:
    if importlib.util.find_spec(tool) is None:
        msg = f"{tool} is not installed: pip install -e '.[test]' (pyproject.toml pins it)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(msg)
        pytest.skip(msg)
    done = subprocess.run([sys.executable, "-m", tool, *args], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{tool} {' '.join(args)} failed:\n{done.stdout[-6000:]}{done.stderr[-2000:]}"


def test_ruff_passes():
    _gate("ruff", "check", "--no-fix")


def test_mypy_passes():
    _gate("mypy")
