"""Memory systems as plug-ins: the registry's three sources (built-in module, entry point, ``module:Class``), the
traits analysis reads from what a run logged (control-ness among them), and the plug-in code ``cluster.ship_code``
ships. The installed example running in a sweep is tests/memory/test_plugin_example.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from inmind_exp.memory import SYSTEMS, MemorySystem
from inmind_exp.records import TaskRecord
from inmind_exp.registry import Registry
from inmind_exp.memory.traits import CONTROLS, LEGACY, Traits, logged
from tests.launch_helpers import REPO, env

PLUGIN_SOURCE = '''
"""A test plug-in (the InMind paper's protocol; no upstream code)."""
from inmind_exp.memory import MemorySystem, Recall


class {cls}(MemorySystem):
    control = {control!r}
    embeddings = ("bm25",)

    def ingest_session(self, session):
        pass

    def recall(self, query):
        return Recall("", ())

    def snapshot(self, directory):
        pass

    def restore(self, directory):
        pass
'''


def write_package(root: Path, package: str, cls: str = "Mine", control: str = "") -> Path:
    """A package ``package`` with module ``sysmod`` holding a ``MemorySystem`` subclass ``cls``."""
    pkg = root / package
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sysmod.py").write_text(PLUGIN_SOURCE.format(cls=cls, control=control))
    return pkg


def write_dist_info(root: Path, dist: str, group: str, entries: dict[str, str]) -> None:
    """Package metadata declaring ``entries`` in ``group``: what ``pip install`` writes for a pyproject's
    ``[project.entry-points]``."""
    info = root / f"{dist}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in entries.items()))


@pytest.fixture
def plugin_root(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in [m for m in sys.modules if m.startswith("plug_")]:
        del sys.modules[name]


def test_entry_point_plugin_is_listed_without_import_and_loaded_on_get(plugin_root):
    write_package(plugin_root, "plug_ep")
    write_dist_info(plugin_root, "plug_ep_dist", "test.inmind.systems", {"my_sys": "plug_ep.sysmod:Mine"})
    reg = Registry("memory system", MemorySystem, entry_points="test.inmind.systems")
    assert reg.names() == ["my_sys"]
    assert "plug_ep.sysmod" not in sys.modules  # listed from metadata only
    cls = reg.get("my_sys")
    assert cls.__name__ == "Mine" and cls.name == "my_sys" and "plug_ep.sysmod" in sys.modules
    assert reg.get("my_sys") is cls and reg.plugins() == [cls]
    assert reg.reference("my_sys") == "plug_ep.sysmod:Mine"


def test_module_class_reference_resolves_and_is_the_stable_name(plugin_root):
    write_package(plugin_root, "plug_ref")
    reg = Registry("memory system", MemorySystem)
    cls = reg.get("plug_ref.sysmod:Mine")
    assert cls.name == "plug_ref.sysmod:Mine" and reg.get("plug_ref.sysmod:Mine") is cls
    assert reg.names() == []  # a reference is no registry name


@pytest.mark.parametrize("ref, message", [
    ("plug_nosuch.mod:X", "cannot import module 'plug_nosuch.mod'"),
    ("plug_bad.sysmod:Nope", "has no attribute 'Nope'"),
    ("plug_bad.sysmod:PLUGIN", "not a subclass of MemorySystem"),
    ("plug_bad.sysmod:", "a reference is 'package.module:Class'"),
])
def test_bad_reference_says_what_is_wrong(plugin_root, ref, message):
    write_package(plugin_root, "plug_bad")
    (plugin_root / "plug_bad" / "sysmod.py").write_text((plugin_root / "plug_bad" / "sysmod.py").read_text()
                                                       + "\nPLUGIN = 3\n")
    with pytest.raises(KeyError, match=message):
        Registry("memory system", MemorySystem).get(ref)


def test_broken_entry_point_names_the_package(plugin_root):
    write_dist_info(plugin_root, "plug_broken_dist", "test.inmind.broken", {"broken": "plug_missing.mod:Cls"})
    reg = Registry("memory system", MemorySystem, entry_points="test.inmind.broken")
    with pytest.raises(KeyError, match=r"entry point 'broken'.*package plug_broken_dist.*No module named"):
        reg.get("broken")


def test_unknown_name_names_both_plug_in_forms():
    with pytest.raises(KeyError, match=r"did you mean naive_rag\?.*entry point of group inmind_exp.systems.*"
                                       r"'package.module:Class'"):
        SYSTEMS.get("naive_rga")


def test_worker_without_the_entry_point_resolves_by_reference(plugin_root):
    """A node where the plug-in's package was shipped (py_modules) but not installed: no entry point, the
    plan's ``system_ref`` finds the class, registered under the config's name."""
    write_package(plugin_root, "plug_node")
    reg = Registry("memory system", MemorySystem, entry_points="test.inmind.none")
    cls = reg.resolve("node_sys", "plug_node.sysmod:Mine")
    assert cls.name == "node_sys" and reg.get("node_sys") is cls
    with pytest.raises(KeyError, match="unknown memory system 'other'"):
        reg.resolve("other")


@pytest.mark.slow
def test_built_ins_resolve_lazily_one_module_each():
    code = ("import sys; from inmind_exp.memory import SYSTEMS; SYSTEMS.get('naive_rag'); "
            "print(sorted(m for m in sys.modules if m.startswith('systems.')))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env(), capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "['systems.naive_rag']"


def test_every_built_in_control_is_a_class_attribute_matching_the_legacy_names():
    """Runs logged before the traits fall back to ``LEGACY`` by name: it must say what the classes say."""
    for name in SYSTEMS.names():
        cls = SYSTEMS.get(name)
        assert cls.control in ("", *CONTROLS), name
        assert Traits.of(cls, {}) == LEGACY.get(name, Traits()), name
    assert {SYSTEMS.get(n).control for n in SYSTEMS.names()} == {"", *CONTROLS}


def test_traits_round_trip_params_and_records():
    t = Traits.of(SYSTEMS.get("backbone"), {"answer_naive": True})
    assert t == Traits(control="in_context", retrieval=False, uses_embedding=False, asks_naive=True)
    assert Traits.from_params({**t.params(), "system.name": "x"}) == t
    assert Traits.from_params({"system.name": "backbone"}) is None
    rec = TaskRecord(config_hash="h", task_id="t", domain="d", system="x", injection_session=0, naive=None,
                     indirect=None, verdicts={}, target_recall_exact=None, usage={}, latency_s=0.0,
                     traits=t.to_dict())
    again = TaskRecord.from_dict(rec.to_dict())
    assert again.traits == t.to_dict() and logged("x", {}, [again]) == t


def test_logged_traits_win_over_names_and_old_runs_fall_back_to_names():
    """A plug-in control is grouped by what it logged; a run without traits by the built-in name."""
    from analysis.load import RunConfig

    probe = Traits(control="always_in_state", retrieval=False, uses_embedding=False)
    cfg = RunConfig.from_params({"system.name": "my_probe", **probe.params()}, "h")
    assert cfg.control == "always_in_state" and not cfg.is_retrieval and not cfg.uses_embedding
    old = RunConfig.from_params({"system.name": "backbone"}, "h")
    assert old.control == "in_context" and not old.is_retrieval
    # a name that looks like a control but logged itself as a memory system is one
    renamed = RunConfig.from_params({"system.name": "backbone", **Traits().params()}, "h")
    assert renamed.control == "" and renamed.is_retrieval
    assert cfg.sort_key() > renamed.sort_key() > old.sort_key()


def test_an_unknown_control_is_refused_at_planning():
    cls = type("Odd", (SYSTEMS.get("naive_rag"),), {"control": "placebo"})
    with pytest.raises(ValueError, match="control='placebo' is not one of in_context"):
        Traits.of(cls, {})


def test_ship_code_ships_the_resolved_plug_ins_package(plugin_root):
    from inmind_exp.errors import PlanError
    from inmind_exp.exec.plugin_code import plugin_code_paths
    from inmind_exp.exec.shipping import code_runtime_env

    pkg = write_package(plugin_root, "plug_ship")
    (plugin_root / "plug_single.py").write_text(PLUGIN_SOURCE.format(cls="Single", control=""))
    try:
        SYSTEMS.get("plug_ship.sysmod:Mine")
        assert plugin_code_paths() == [str(pkg.resolve())]
        mods = code_runtime_env({})["py_modules"]
        assert str(pkg.resolve()) in mods and any(m.endswith("inmind_exp") for m in mods)
        SYSTEMS.get("plug_single:Single")
        with pytest.raises(PlanError, match="single-file module 'plug_single'"):
            plugin_code_paths()
    finally:
        for ref in ("plug_ship.sysmod:Mine", "plug_single:Single"):
            SYSTEMS._items.pop(ref, None)
            SYSTEMS._refs.pop(ref, None)


def test_hydra_search_path_plugin_adds_installed_config_packages(plugin_root, monkeypatch):
    from hydra.core.config_search_path import ConfigSearchPath  # noqa: F401
    from hydra._internal.config_search_path_impl import ConfigSearchPathImpl

    from hydra_plugins.inmind_searchpath.inmind_searchpath import InmindPluginSearchPath

    write_dist_info(plugin_root, "plug_conf_dist", "inmind_exp.conf", {"plug_conf": "plug_conf.conf"})
    ours = ConfigSearchPathImpl()
    ours.append("main", f"file://{REPO / 'conf'}")
    InmindPluginSearchPath().manipulate_search_path(ours)
    assert ("inmind-plugin-plug_conf", "pkg://plug_conf.conf") in [(e.provider, e.path) for e in ours.get_path()]
    other = ConfigSearchPathImpl()
    other.append("main", "file:///somewhere/else/configs")
    InmindPluginSearchPath().manipulate_search_path(other)
    assert [e.provider for e in other.get_path()] == ["main"]  # another Hydra app is left alone
