"""The contract every registered memory system keeps, against the fake server with its default replies:
ingest → answer → snapshot → restore into a fresh instance → the same answer from the same context."""

from __future__ import annotations

import re
import sys

import pytest

from inmind_exp.embed import MiniLMEncoder
from inmind_exp.records import Answer, Message
from inmind_exp.memory import SYSTEMS
from tests.conftest import make_trace

ALL = SYSTEMS.names()


def encoder_for(cls):
    return None if "minilm" not in cls.embeddings else MiniLMEncoder()


@pytest.mark.parametrize("name", ALL)
def test_snapshot_restore_answers_identically(name, models, tmp_path):
    cls = SYSTEMS.get(name)
    enc = encoder_for(cls)
    a = cls(models, enc, tmp_path / "a")
    for s in make_trace(n_sessions=3, user_turns_per_session=2).sessions:
        a.ingest_session(s)
    a.snapshot(tmp_path / "snap")
    first = a.answer("What should I plant next week?")
    assert isinstance(first, Answer) and isinstance(first.text, str)
    assert first.context and all(isinstance(m, Message) for m in first.context)
    assert "What should I plant next week?" in first.context_text()  # the query reached the answerer
    b = cls(models, enc, tmp_path / "b")
    b.restore(tmp_path / "snap")
    second = b.answer("What should I plant next week?")
    assert second.context == first.context
    assert second.text == first.text


@pytest.mark.parametrize("name", ALL)
def test_registered_under_its_config_name(name, repo_root):
    cls = SYSTEMS.get(name)
    assert cls.name == name
    if SYSTEMS.builtin(cls):  # an installed plug-in's yaml is in its own config package (README: Adding a memory system)
        assert (repo_root / "conf" / "system" / f"{name}.yaml").is_file()
    doc = sys.modules[cls.__module__].__doc__ or ""
    assert len(doc) > 100 and re.search(r"et al\.|paper", doc, re.I), "the module docstring must name its paper"


def test_unknown_system_suggests_close_match():
    with pytest.raises(KeyError, match="did you mean naive_rag"):
        SYSTEMS.get("naive_rga")
