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
    "a_mem": ("2", "65bcb2803e56d9847806e53e93e99a0b25e6f8fd36c105e0797f0bd68f1a7b6f"),
    "a_rag": ("3", "8053379601222e5c7b8ddb9dbb2691fed1aae893cc48b7880c63ca7da9832428"),
    "always_in_state": ("1", "35585bd60b42b640f3278d36c7675a9468db89a1b92407f3ae79135c89d1c5a9"),
    "backbone": ("1", "3ac78c46d4522ceb891c16dfb142868289cc689dff19c26dd4580cf475f79034"),
    "hipporag2": ("2", "7578b7cfcbf263f14575148c0b69a73f0c245fc8561f005c4207bf6828b8a014"),
    "mem0": ("2", "b2f5b58314b13d877f9a9b41484496ca9f136e2045966b88fc36cc01c35a02e0"),
    "memoryos": ("2", "3dc15f8cf8b7e1e0016c4065fcedfb722f88d5d0fb397035bdf789cb2619699c"),
    "naive_rag": ("2", "c4b3f580cc4fcb6fb72d89426be775e38fd47e1f7fd3fa09ac53f7c6ce9c62c1"),
    "xmemory": ("2", "9e412488c4c8491b8e63a381740dd2897c077d1c8b7defc4a1a81cfb6833485e"),
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
