"""Fixtures the memory-system tests share."""

from __future__ import annotations

import pytest

from inmind_exp.llm.embed import MiniLMEncoder


@pytest.fixture(scope="session")
def encoder() -> MiniLMEncoder:
    """The local MiniLM encoder, loaded once for every system test (a file may define its own)."""
    return MiniLMEncoder()
