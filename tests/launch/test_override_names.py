"""A near-miss config group or key on the command line is an exit-2 "did you mean" before Hydra runs (#25 item 4)."""

from __future__ import annotations

import pytest

from inmind_exp.launch.override_names import check_overrides
from tests.launch_helpers import REPO, run


def test_near_miss_group_and_key_get_a_suggestion():
    conf = REPO / "conf"
    assert "did you mean embedding?" in check_overrides(["embeding=minilm"], conf)
    assert "did you mean progress_every_s" in check_overrides(["-m", "run.progres_every_s=1"], conf)
    assert check_overrides(["-m", "embedding=minilm,bm25", "system.params.top_k=3", "+x=1", "hydra.verbose=true",
                            "run.max_usd=2", "dry_run=true", "hydra/launcher=basic"], conf) is None


@pytest.mark.slow
@pytest.mark.parametrize("override, said", [("embeding=minilm", "did you mean embedding?"),
                                            ("system=naiverag", "did you mean naive_rag")])
def test_launch_exits_2_with_did_you_mean(override, said):
    import sys

    p = run([sys.executable, str(REPO / "launch.py"), override], timeout=120)
    assert p.returncode == 2, p.stderr[-2000:]
    assert said in p.stderr and "+embeding" not in p.stderr and "provider=" not in p.stderr


def test_near_miss_values_and_system_params_get_a_suggestion():
    """#44 item 9: a value typo of any config group (a sweep's list included) and an unknown ``system.params`` key
    got Hydra's list of search paths or "Key 'topk' is not in struct", with no close match."""
    conf = REPO / "conf"
    assert "unknown system 'naiverag'" in check_overrides(["system=naiverag"], conf)
    assert "did you mean naive_rag" in check_overrides(["system=naiverag"], conf)
    assert "did you mean minilm?" in check_overrides(["-m", "embedding=bm25,minlm"], conf)
    assert "did you mean openai?" in check_overrides(["llm=opnai"], conf)
    assert "did you mean limit?" in check_overrides(["dataset.limt=3"], conf)  # every section, not three
    topk = check_overrides(["system.params.topk=3"], conf)
    assert "system.params.topk" in topk and "did you mean top_k?" in topk
    # the parameters are the chosen systems': top_k is naive_rag's, not backbone's
    assert check_overrides(["system=backbone", "system.params.top_k=3"], conf) is not None
    assert check_overrides(["+system.params.topk=3", "injection=late", "embedding=choice(bm25,minilm)",
                            "dataset.limit=null", "llm=openai"], conf) is None


def test_a_plug_in_s_own_config_options_are_known(monkeypatch):
    """``system=profile_rag`` of an installed plug-in (its conf package on Hydra's search path) is no typo."""
    import importlib.metadata
    import sys

    conf = REPO / "conf"
    assert check_overrides(["system=profile_rag"], conf) is not None  # not installed here
    monkeypatch.syspath_prepend(str(REPO / "examples" / "plugin_memory"))
    ep = importlib.metadata.EntryPoint("profile_memory", "profile_memory.conf", "inmind_exp.conf")
    real = importlib.metadata.entry_points
    monkeypatch.setattr(importlib.metadata, "entry_points",
                        lambda **kw: [ep] if kw.get("group") == "inmind_exp.conf" else real(**kw))
    assert check_overrides(["system=naive_rag,profile_rag"], conf) is None
    sys.modules.pop("profile_memory.conf", None)
