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
    "a_mem": ("1", "29b7cf9802725ea9cd93db656bf4925470a4fe481cf35d85b7014fca2cea7d49"),
    "a_rag": ("1", "65ed9a5426def6486bdcc7b8f470b8afbf5a040762b732161278558bec39c1fe"),
    "always_in_state": ("1", "3239c98657a2ef28581d45217b2dd1be445b67762726647ac0b6e8d8e4668aa2"),
    "backbone": ("1", "137b4583315edcb172dc3a23979e78ae988a4d53b3de77a821a7e0ba03204ab6"),
    "hipporag2": ("2", "4340353f02190778b37959010bbdc8c6a78e89353c62f992ec7cdcbe6072c19c"),
    "mem0": ("2", "414cd9d0199025e745039b986a5423ff59ab84cf15d3d14c0bbabafde1226b9c"),
    "memoryos": ("1", "899da7c6f964b0e9d263f9dd3a9c52e9f6010b5211a38a4edf2b85c7d0cbb311"),
    "naive_rag": ("1", "c01dd92a3ead0c9cfb5debd56baa575864ae2f7deaaa8bdafb0aa578e9c26f8c"),
    "xmemory": ("2", "46edd3c0af3ae5145d67723a134dc4d6275fdfbc2ca9cb489e28f9b326a485e5"),
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
