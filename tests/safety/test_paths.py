"""Task ids never become filesystem paths: hostile ids are refused at load time with file:line [id], workdirs are
named by a hash, and removal is refused outside the parent directory."""

from __future__ import annotations

import json

import pytest

from inmind_exp.data import DataError, load_tasks
from inmind_exp.safety.paths import UnsafePathError, child_dir, hashed_name, inside, remove_tree

GOOD = {
    "domain": "health_wellness", "user_message": "I have a tree nut allergy.", "assistant_message": "Noted.",
    "naive_query": "What allergy do I have?", "query": "Any macaron recipes?", "explanation": "Almond flour.",
}


@pytest.mark.parametrize("bad_id", ["../../../../some/dir", "a/b", "/abs", "..", ".hidden", "a b", "x" * 129,
                                    "tab\tid", "nul\x00id", "ünicode"])
def test_hostile_task_ids_are_refused_with_file_line_and_key(tmp_path, bad_id):
    p = tmp_path / "tasks.jsonl"
    p.write_text(json.dumps({"id": "ok-1", **GOOD}) + "\n" + json.dumps({"id": bad_id, **GOOD}) + "\n", encoding="utf-8")
    with pytest.raises(DataError) as err:
        load_tasks(p)
    [problem] = err.value.problems
    assert (problem.line, problem.key) == (2, "id")
    assert f"{p}:2 [id]" in str(err.value)


def test_ordinary_ids_load(tmp_path):
    p = tmp_path / "tasks.jsonl"
    ids = ["health_wellness-01", "155", "T.2", "a" * 128]
    p.write_text("".join(json.dumps({"id": i, **GOOD}) + "\n" for i in ids), encoding="utf-8")
    assert [t.id for t in load_tasks(p)] == ids


def test_workdir_is_a_hash_of_the_id_and_stays_inside(tmp_path):
    d = child_dir(tmp_path, "task", "../../../../etc")
    assert d.parent == tmp_path.resolve()
    assert d.name == hashed_name("task", "../../../../etc") and "/" not in d.name and ".." not in d.name
    assert child_dir(tmp_path, "task", "a") != child_dir(tmp_path, "task", "b")


def test_remove_tree_refuses_paths_outside_parent(tmp_path):
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("precious")
    root = tmp_path / "work"
    root.mkdir()
    with pytest.raises(UnsafePathError):
        remove_tree(root, root / ".." / "victim")
    with pytest.raises(UnsafePathError):
        inside(root, root)
    assert (victim / "keep.txt").read_text() == "precious"
    inner = root / "task-x"
    inner.mkdir()
    remove_tree(root, inner)
    assert not inner.exists()


def test_run_task_refuses_a_traversing_workdir(tmp_path):
    """Even a caller that builds a workdir from raw input cannot make the protocol delete outside it."""
    from inmind_exp.protocol.task import run_task

    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("precious")
    with pytest.raises(ValueError, match=r"'\.\.'"):
        run_task(None, None, 0, None, None, tmp_path / "work" / "task-.." / ".." / ".." / "victim",  # type: ignore[arg-type]
                 config_hash="x", system_name="x")
    assert (victim / "keep.txt").read_text() == "precious"
