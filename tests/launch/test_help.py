"""``launch.py --help`` is the project's page (conf/hydra/help/inmind.yaml): the common commands, every config
group with its options, and where to read more; each command it shows composes (its groups and options exist)."""

from __future__ import annotations

import shlex
import sys

import pytest

from tests.launch_helpers import REPO, expand_sweep, run

#: every test here runs launch.py in a subprocess
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def help_text() -> str:
    p = run([sys.executable, str(REPO / "launch.py"), "--help"], timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    return p.stdout


def test_help_shows_commands_groups_and_where_to_read_more(help_text):
    assert "is powered by Hydra" not in help_text  # not Hydra's stock page
    assert "python launch.py -m system=a_mem,hipporag embedding=minilm,emb3" in help_text
    assert "python launch.py -m dry_run=true system=a_mem,mem0" in help_text  # -m before the overrides
    assert "llm=openai" in help_text and "cluster=ray" in help_text and "python -m analysis report" in help_text
    assert "Resume: run the same command again" in help_text and "tracking.report_at_end=false" in help_text
    groups = dict(line.split(": ", 1) for line in help_text.splitlines() if line.startswith(("system: ", "embedding: ")))
    assert "always_in_state" in groups["system"] and "hipporag2" in groups["system"]
    assert groups["embedding"] == "bm25, emb3, minilm"
    assert "README.md" in help_text and "docs/" in help_text and "analysis.md" in help_text


def test_every_help_command_composes(help_text):
    commands = [line.split("#")[0].strip() for line in help_text.splitlines() if "python launch.py" in line]
    assert len(commands) >= 6
    for c in commands:
        argv = shlex.split(c)
        overrides = [a for a in argv[argv.index("launch.py") + 1:] if a != "-m"]
        assert all("=" in o for o in overrides), c
        # placeholders (HEAD_IP, NAME, host) are values, not groups: composing checks every group and key exists
        assert expand_sweep(overrides), c
