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
    "a_mem": ("1", "c2e4b413eae7d59ac580c912be21e2188989eddab2d4c4455b37c38363008c27"),
    "a_rag": ("1", "87188075052f2391838051401175fc09890373f00822983b0249633184dcd5fe"),
    "always_in_state": ("1", "85a97e6299f75ac6330523baf8b82ebb83a416d3722e00f92e9683d404300f00"),
    "backbone": ("1", "75664ee96941978f32260e258ad946af0b7bda546fb6e207a4c29837650a6a7e"),
    "hipporag2": ("1", "351c8f2cc31543561d686f5b3eff1cc18a5c12d20f2895c63bd350ee2449d1d8"),
    "mem0": ("1", "fb46a3ed028cbbe621ebfe5c1cde171b66e43946c4c3a0e0f4981dcf12910286"),
    "memoryos": ("1", "6273308e10e5119e40b165eeff655706dffbf4bdfdb2665990a8a2e9acb9092b"),
    "naive_rag": ("1", "23675a061473af00408700c9dc838ba631429c97c816a9761f70cf22d5d37630"),
    "xmemory": ("1", "8e7a609f1a97cf94d5fa8aae7be73ceb3316660ca7bd5f670f109a8713497a71"),
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
