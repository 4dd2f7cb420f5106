"""The example plug-in (examples/plugin_memory) installed the way docs/plugins.md says, in a fresh virtual
environment: its entry point is found, it runs in a sweep beside a built-in against the fake server, its traits
reach MLflow and the records, and the page's commands work as written (``check_system`` by the entry point's name
among them: the contract, run as a plug-in's author runs it).

The fresh environment is ``python -m venv --without-pip`` plus one ``.pth`` line naming this interpreter's
site-packages (a venv made from a venv gets the base interpreter's packages with ``--system-site-packages``, not ray
or mlflow), so its pip, setuptools and everything else are this environment's. The example is
installed from a copy (an editable install writes ``*.egg-info`` beside its sources) with ``--no-build-isolation
--no-index``: setuptools comes from the environment, nothing from the network.
"""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fake_openai import FakeOpenAI
from tests.launch_helpers import REPO, env, launch_cmd, mlflow_runs, write_small_data
from tests.test_readme_commands import Workspace, extract, prepare

EXAMPLE = REPO / "examples" / "plugin_memory"
GUIDE = REPO / "docs" / "plugins.md"
PIP_OFFLINE = ["--no-build-isolation", "--no-index"]


def make_venv(root: Path) -> Path:
    """A fresh virtual environment that sees this interpreter's installed packages; its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True, capture_output=True,
                   timeout=300)
    python = root / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    (Path(purelib) / "inmind_outer.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    return python


def venv_env(python: Path) -> dict[str, str]:
    e = env()
    e["PATH"] = f"{python.parent}{os.pathsep}{e.get('PATH', '')}"
    e["VIRTUAL_ENV"] = str(python.parent.parent)
    return e


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    """A fresh environment with the example installed (``pip install -e`` of a copy)."""
    root = tmp_path_factory.mktemp("plugin_venv")
    python = make_venv(root / "venv")
    src = root / "examples" / "plugin_memory"
    shutil.copytree(EXAMPLE, src, ignore=shutil.ignore_patterns("*.egg-info", "build", "__pycache__"))
    p = subprocess.run([str(python), "-m", "pip", "install", "-q", *PIP_OFFLINE, "-e", str(src)],
                       env=venv_env(python), capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return python


def in_venv(python: Path, code: str) -> str:
    p = subprocess.run([str(python), "-c", code], cwd=REPO, env=venv_env(python), capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    return p.stdout


def test_the_installed_example_is_found_by_its_entry_point_and_shows_its_profile(venv):
    """The entry point lists it among the built-ins; against the fake server its profile is the visible part of the
    context and every item is attributed (the contract itself: ``check_system``, in the page's commands)."""
    out = in_venv(venv, """
import json, re, sys, tempfile
from pathlib import Path
from inmind_exp.memory import SYSTEMS
from inmind_exp.llm import CallCache, Models
from inmind_exp.memory.traits import Traits
from tests.conftest import fake_endpoints, make_trace
from tests.fake_openai import FakeOpenAI

names = SYSTEMS.names()
cls = SYSTEMS.get("profile_rag")
with FakeOpenAI() as fake, tempfile.TemporaryDirectory() as tmp:
    tmp = Path(tmp)
    fake.add_rule("Rewrite the complete profile.", "- Grows tomatoes in week 2\\n- Stakes the plants")
    models = Models.build(fake_endpoints(fake.base_url), CallCache(tmp / "cache"))
    a = cls(models, None, tmp / "a")
    for s in make_trace(n_sessions=3, user_turns_per_session=2).sessions:
        a.ingest_session(s)
    first = a.answer("What should I plant next week?")
print(json.dumps({"names": names, "name": cls.name, "module": cls.__module__, "traits": Traits.of(cls).to_dict(),
                  "visible": [i.text for i in first.items if i.visible],
                  "retrieved": sum(1 for i in first.items if not i.visible),
                  # every item is attributed (origin, or derived for a line that states no input: the one rule)
                  "sources_ok": all(i.sources or i.derived for i in first.items)}))
""")
    got = json.loads(out.strip().splitlines()[-1])
    assert "profile_rag" in got["names"] and "naive_rag" in got["names"]
    assert got["name"] == "profile_rag" and got["module"] == "profile_memory.hybrid"
    assert got["traits"] == {"control": "", "retrieval": True, "uses_embedding": True, "asks_naive": True, "routing": False}
    assert got["visible"] == ["Grows tomatoes in week 2", "Stakes the plants"]
    assert got["retrieved"] == 5 and got["sources_ok"]


@pytest.mark.slow
def test_the_example_runs_in_a_sweep_beside_a_built_in(venv, tmp_path):
    """``system=naive_rag,profile_rag`` through launch.py on Ray workers: both finish, each logs its traits as MLflow
    params and in every record, the plug-in's profile is the visible part of its context, and the analysis
    groups the built-in control and the plug-in by what they logged."""
    write_small_data(tmp_path / "data", n_tasks=2)
    with FakeOpenAI() as fake:
        fake.add_rule("Rewrite the complete profile.", "- Has a tree nut allergy\n- Adopted a cat named Miso")
        cmd = launch_cmd(tmp_path, fake.base_url, "system=naive_rag,profile_rag", "embedding=bm25")
        cmd[0] = str(venv)
        p = subprocess.run(cmd, cwd=REPO, env=venv_env(venv), capture_output=True, text=True, timeout=900)
        assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
        profile_calls = [r for r in fake.chat_requests() if "Rewrite the complete profile." in json.dumps(r)]
    assert "| profile_rag/bm25/turn5/vllm " in p.stdout and "| naive_rag/bm25/turn5/vllm " in p.stdout
    assert profile_calls  # the plug-in's own memory calls reached the endpoint
    runs = {r.data.params["system.name"]: r for r in mlflow_runs(tmp_path) if r.data.tags.get("inmind.kind") == "config"}
    assert set(runs) == {"naive_rag", "profile_rag"}
    assert all(r.info.status == "FINISHED" for r in runs.values())
    assert runs["naive_rag"].data.params["inmind.traits.control"] == "naive_retrieval"
    assert runs["profile_rag"].data.params["inmind.traits.control"] == "none"
    assert runs["profile_rag"].data.params["inmind.traits.retrieval"] == "True"

    from analysis.load import load_sweep_dir
    from analysis.mlflow_runs import load_experiment

    loaded = load_experiment("test", f"sqlite:///{tmp_path / 'mlflow.db'}")
    by_system = {r.config.system: r for r in loaded.runs}
    assert by_system["naive_rag"].config.control == "naive_retrieval"
    assert by_system["profile_rag"].config.control == "" and by_system["profile_rag"].config.is_retrieval
    assert [r.config.system for r in loaded.runs] == ["naive_rag", "profile_rag"]  # controls first, by trait
    plugin = by_system["profile_rag"]
    assert len(plugin.records) == 2 and all(r.ok for r in plugin.records), [r.error for r in plugin.records]
    assert all(r.traits == {"control": "", "retrieval": True, "uses_embedding": True, "asks_naive": True, "routing": False}
               for r in plugin.records)
    visible = [i.text for i in plugin.records[0].indirect.items if i.visible]
    assert visible == ["Has a tree nut allergy", "Adopted a cat named Miso"]
    # the records on disk carry the traits too (a sweep directory read without MLflow)
    on_disk = {r.config.system: r.config for r in load_sweep_dir(tmp_path / "sweep").runs}
    assert on_disk["naive_rag"].traits is not None and on_disk["naive_rag"].control == "naive_retrieval"


@pytest.mark.slow
def test_the_guide_commands_work_as_written(venv, tmp_path):
    """docs/plugins.md's commands, in order, in a fresh workspace holding a copy of the example: ``pip install`` with
    the fresh environment's pip, ``check_system`` on that environment's python (it must pass), the rest as
    tests/test_readme_commands.py runs README commands (fake endpoint and tiny data appended)."""
    commands = extract(GUIDE)
    assert any(c.text.startswith("pip install") and "examples/plugin_memory" in c.text for c in commands)
    assert any("launch.py" in c.text and "profile_rag" in c.text for c in commands)
    assert any("-m inmind_exp.testing.check_system profile_rag" in c.text for c in commands)
    with FakeOpenAI() as fake:
        ws = Workspace(tmp_path, fake)
        shutil.copytree(EXAMPLE, tmp_path / "examples" / "plugin_memory",
                        ignore=shutil.ignore_patterns("*.egg-info", "build", "__pycache__"))
        ws.env.update(PATH=venv_env(venv)["PATH"], VIRTUAL_ENV=str(venv.parent.parent))
        for cmd in commands:
            argv = cmd.text.split()
            if argv[0] == "pip":
                argv, ok = [str(venv), "-m", *argv, *PIP_OFFLINE], {0}
            elif argv[1:3] == ["-m", "inmind_exp.testing.check_system"]:
                argv, ok = [str(venv), *argv[1:]], {0}
            else:
                argv, ok = prepare(cmd, ws)
                argv[0] = str(venv)
            p = subprocess.run(argv, cwd=tmp_path, env=ws.env, capture_output=True, text=True, timeout=900)
            assert p.returncode in ok, (f"{cmd.id}: `{cmd.text}` exited {p.returncode}\n"
                                        f"stdout:\n{p.stdout[-3000:]}\nstderr:\n{p.stderr[-3000:]}")
        systems = {r.data.params.get("system.name") for r in ws.config_runs()}
    assert {"profile_rag", "naive_rag"} <= systems


@pytest.mark.slow
def test_without_installing_a_yaml_naming_module_class_on_the_search_path(tmp_path):
    """The other documented path: the package on ``PYTHONPATH``, a system yaml naming ``module:Class`` in a folder
    given as ``hydra.searchpath``; the sweep check composes it too (no callback warning), and the plan resolves
    the class by its reference (a dry run plans every configuration, so a bad name would exit 2)."""
    write_small_data(tmp_path / "data", n_tasks=2)
    (tmp_path / "my_conf" / "system").mkdir(parents=True)
    (tmp_path / "my_conf" / "system" / "my_profile.yaml").write_text(
        "name: profile_memory.hybrid:ProfileRAG\nparams:\n  top_k: 3\n")
    e = {**env(), "PYTHONPATH": f"{REPO}{os.pathsep}{EXAMPLE}"}
    cmd = launch_cmd(tmp_path, "http://127.0.0.1:9/v1", "system=naive_rag,my_profile",
                     f"hydra.searchpath=[file://{tmp_path / 'my_conf'}]", "embedding=bm25", "dry_run=true")
    p = subprocess.run(cmd, cwd=REPO, env=e, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "[dry run] profile_memory.hybrid:ProfileRAG/bm25/turn5/vllm" in p.stdout
    assert "[dry run] naive_rag/bm25/turn5/vllm" in p.stdout
    bad = launch_cmd(tmp_path, "http://127.0.0.1:9/v1", "system=naive_rag", "system.name=profile_memory.hybrid:Nope",
                     "embedding=bm25", "dry_run=true")
    p = subprocess.run(bad, cwd=REPO, env=e, capture_output=True, text=True, timeout=600)
    assert p.returncode == 2 and "module 'profile_memory.hybrid' has no attribute 'Nope'" in p.stdout + p.stderr, \
        p.stdout[-2000:] + p.stderr[-2000:]
