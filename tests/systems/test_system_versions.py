"""Each built-in memory system's implementation ``version`` (part of every result identity, ``inmind_exp.identity``)
and the sha256 of its module's source, recorded here. A change to a system's code fails this test until whoever
made it decides: if results can change, bump the class's ``version`` (new config hashes: nothing stale is reused
from ledgers or prefix snapshots) and record the new hash; if they cannot (a comment, a refactor), record the hash
only. Prompt constants are hashed into the identity on their own, whatever is decided here."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import pytest

from inmind_exp.memory import SYSTEMS

#: {system: (version, sha256 of its module's source)}
RECORDED = {
    "a_mem": ("2", "0560689656115d6298d20ff1f27b2ccd339a8292768868e9a0c2305295a1ce8b"),
    "a_rag": ("2", "4a9c96bb2b263daad9af2c5bdb289de382fd9ae69f37c1c6b96af2df93ff7539"),
    "always_in_state": ("1", "9259ec9881d98ab3b3d05197483a2c66a00db521882b69c2f981fc9421f8ca53"),
    "backbone": ("1", "137b4583315edcb172dc3a23979e78ae988a4d53b3de77a821a7e0ba03204ab6"),
    "hipporag2": ("2", "26d9b7ae168f5dcc9255362848b9a2d8c54d8a022d38a60e5771ca1d3e622e56"),
    "mem0": ("2", "e9d58f3375073736bca615bfd00215844041d372f564ebbc5961e02638258046"),
    "memoryos": ("2", "3dc15f8cf8b7e1e0016c4065fcedfb722f88d5d0fb397035bdf789cb2619699c"),
    "naive_rag": ("1", "c01dd92a3ead0c9cfb5debd56baa575864ae2f7deaaa8bdafb0aa578e9c26f8c"),
    "xmemory": ("2", "df04beb669ba3b52f72910e9e67e76b079662dd0c85ee702734995823ede4f40"),
}
BUILT_IN = Path(__file__).resolve().parents[2] / "systems"


def _built_in() -> list[str]:
    names = []
    for name in SYSTEMS.names() if hasattr(SYSTEMS, "names") else list(SYSTEMS):
        cls = SYSTEMS.get(name)
        if Path(sys.modules[cls.__module__].__file__).resolve().parent == BUILT_IN and cls.name == name:
            names.append(name)
    return sorted(set(names))


def test_every_built_in_system_is_recorded():
    assert _built_in() == sorted(RECORDED), "add the new system to RECORDED (its version and source sha256)"


@pytest.mark.parametrize("name", sorted(RECORDED))
def test_system_code_unchanged_or_version_decided(name):
    cls = SYSTEMS.get(name)
    source = Path(sys.modules[cls.__module__].__file__)
    actual = (cls.version, hashlib.sha256(source.read_bytes()).hexdigest())
    version, sha = RECORDED[name]
    assert actual == (version, sha), (
        f"{source.name} changed (version {cls.version!r}, sha256 {actual[1]}; recorded {version!r}, {sha}): "
        f"if results can change, bump the version (class attribute `version` of {cls.__name__}) and update the "
        f"hash in tests/systems/test_system_versions.py; if not, update the hash only")
