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
def test_launch_exits_2_with_did_you_mean():
    import sys

    p = run([sys.executable, str(REPO / "launch.py"), "embeding=minilm"], timeout=120)
    assert p.returncode == 2, p.stderr[-2000:]
    assert "did you mean embedding?" in p.stderr and "+embeding" not in p.stderr


def test_an_unwritable_job_directory_on_the_command_line_exits_2_before_hydra(tmp_path, capsys):
    """``hydra.run.dir`` under /proc (or read-only) ended in Hydra's traceback and exit 1: probed first, exit 2
    naming the key; with ``-m`` the sweep directory is the one probed."""
    from inmind_exp.launch.cli import check_output_dir

    for argv in (["hydra.run.dir=/proc/inmind-run"], ["-m", "hydra.sweep.dir=/proc/inmind-sweep"]):
        with pytest.raises(SystemExit) as e:
            check_output_dir([f"hydra.run.dir={tmp_path / 'ok'}", *argv])
        assert e.value.code == 2
        assert f"{argv[-1]}: cannot write in /proc" in capsys.readouterr().err
    check_output_dir(["-m", "hydra.run.dir=/proc/not-used-by-a-sweep", f"hydra.sweep.dir={tmp_path / 'new' / 'dir'}"])
    assert not (tmp_path / "new").exists()  # probed in its nearest existing ancestor, not made
