"""``+preset=leaderboard``: gpt-5-mini answering and judging with the reasoning profile and the release's caps,
the official data, trace, injection, answer and judge prompts, so a run in it is tagged ``official``.

The preset names group options other branches add (``dataset=official``, ``trace=official``, ``answer=paper``,
``judges=paper``). The first test composes it with whichever of them exist here (each absent one must then show as
exactly its own deviation); the dry run through ``launch.py`` needs them all and the release.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import yaml

from inmind_exp.config import schema as C
from inmind_exp.config.resolve import as_config
from inmind_exp.official.fidelity import fidelity
from inmind_exp.labels import CONF_DIR
from inmind_exp.config.settings import role_endpoints

PRESET = CONF_DIR / "preset" / "leaderboard.yaml"
#: the options the preset selects, and the deviation a run shows when it runs the default instead
OPTIONS = {("dataset", "official"): "dataset=bundled (demo tasks)", ("trace", "official"): "trace=bundled",
           ("injection", "middle"): None, ("llm", "openai"): None, ("answer", "paper"): "answer=shared",
           ("judges", "paper"): "judges=strict"}


def missing() -> list[tuple[str, str]]:
    return [(g, o) for g, o in OPTIONS if not (CONF_DIR / g / f"{o}.yaml").is_file()]


def compose(tmp_path: Path, *overrides: str):
    """The typed config with the preset, its defaults cut to the options that exist on this checkout."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    doc = yaml.safe_load(PRESET.read_text())
    absent = {f"override /{g}" for g, _ in missing()}
    doc["defaults"] = [d for d in doc["defaults"] if not (set(d) & absent)]
    (tmp_path / "preset").mkdir(exist_ok=True)
    (tmp_path / "preset" / "leaderboard_here.yaml").write_text("# @package _global_\n" + yaml.safe_dump(doc))
    C.register_configs()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        return as_config(hydra_compose(config_name="config", overrides=[
            f"hydra.searchpath=[file://{tmp_path}]", "+preset=leaderboard_here", *overrides]))


def test_the_preset_sets_the_release_models_caps_and_reasoning_profile(tmp_path):
    assert sorted(map(str, yaml.safe_load(PRESET.read_text())["defaults"])) == sorted(
        str({f"override /{g}": o}) for g, o in OPTIONS)
    cfg = compose(tmp_path)
    eps = role_endpoints(cfg.llm)
    for role, cap in (("answerer", 16384), ("judge", 4096)):
        e = eps[role]
        assert (e.model, e.max_tokens, e.reasoning, e.temperature, e.top_p) == ("gpt-5-mini", cap, True, None, None)
        assert e.max_tokens_param == "max_completion_tokens"
    assert cfg.dataset.limit is None and cfg.injection.user_turn == 40 and cfg.injection.fraction is None
    # every option the preset could not select here is exactly its own deviation; nothing else deviates
    expected = tuple(OPTIONS[m] for m in missing() if OPTIONS[m])
    assert sorted(fidelity(cfg).deviations) == sorted(expected)
    # an override after the preset is named
    assert "judge model=gpt-4o" in fidelity(compose(tmp_path, "llm.roles.judge.model=gpt-4o")).deviations


@pytest.mark.slow
def test_the_preset_dry_runs_through_launch(tmp_path):
    absent = missing()
    if absent:
        pytest.skip("the preset's options are not all on this checkout yet: "
                    + ", ".join(f"conf/{g}/{o}.yaml" for g, o in absent))
    release = os.environ.get("INMIND_RELEASE")
    if not release:
        if os.environ.get("CI") == "true":
            pytest.fail("the official release is needed: set INMIND_RELEASE")
        pytest.skip("the official release is needed: set INMIND_RELEASE")
    from tests.fake_openai import FakeOpenAI
    from tests.launch_helpers import REPO, run

    with FakeOpenAI() as fake:
        p = run([sys.executable, str(REPO / "launch.py"), "+preset=leaderboard",
                 "system=backbone", "dry_run=true", f"llm.base_url={fake.base_url}",
                 f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}", f"hydra.run.dir={tmp_path / 'run'}",
                 f"run.cache_dir={tmp_path / 'cache'}"], timeout=300)
        assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
        assert fake.requests == []  # a dry run calls nothing
    assert "125/125 tasks to run" in p.stdout and "backbone/minilm/middle/openai" in p.stdout
