"""The result identity covers the code and settings that make a result (``inmind_exp.config.code``,
``inmind_exp.config.identity.result_identity``): a changed answer, judge or system prompt, a bumped system ``version``,
``run.judge_attempts`` or ``llm.max_tokens_param`` gives a new config hash, so nothing stale is reused from a ledger
(the issue's probe: a replaced shared answer prompt rerun as "2 already done"); the system's prompts and version
also key the prefix snapshot. Credentials in a base URL are no part of it."""

from __future__ import annotations

from pathlib import Path

import pytest

from inmind_exp.memory import answering

from inmind_exp.protocol import judges
from inmind_exp.memory import SYSTEMS
from tests.launch_helpers import REPO


def _plan(tmp_path: Path, *overrides: str):
    """A plan of ``tests.exec.test_runner_ray.compose``'s small data with "system=naive_rag", "embedding=bm25" and ``overrides``."""
    from inmind_exp.plan.plan import plan_config
    from tests.exec.test_runner_ray import compose

    return plan_config(compose(tmp_path, "http://127.0.0.1:9/v1", "system=naive_rag", "embedding=bm25", *overrides), tmp_path / "root",
                       tmp_path / "job")


def test_settings_that_change_results_change_the_hash(tmp_path):
    base = _plan(tmp_path)
    assert _plan(tmp_path, "run.judge_attempts=1").config_hash != base.config_hash
    assert _plan(tmp_path, "llm.max_tokens_param=max_completion_tokens").config_hash != base.config_hash
    # not result-changing: limits, retries, the deadline, credentials in the URL
    same = ["llm.max_concurrency=1", "llm.max_attempts=2", "llm.deadline_s=30", "run.max_task_attempts=5",
            "llm.base_url=http://u:secret-password@127.0.0.1:9/v1"]
    assert all(_plan(tmp_path, o).config_hash == base.config_hash for o in same)


def test_a_changed_shared_answer_prompt_is_a_new_identity(tmp_path, monkeypatch):
    base = _plan(tmp_path)
    monkeypatch.setattr(answering, "SHARED_ANSWER_SYSTEM", answering.SHARED_ANSWER_SYSTEM + " Be brief.")
    changed = _plan(tmp_path)
    assert changed.config_hash != base.config_hash
    assert changed.prefix_hash == base.prefix_hash  # the prefix never calls the answerer


def test_a_changed_judge_prompt_is_a_new_identity(tmp_path, monkeypatch):
    base = _plan(tmp_path)
    j = judges.JUDGES["application"]
    monkeypatch.setitem(judges.JUDGES, "application", type(j)(**{**j.__dict__, "template": j.template + " Strictly."}))
    assert _plan(tmp_path).config_hash != base.config_hash


@pytest.mark.parametrize("system", ["naive_rag", "mem0"])
def test_a_changed_system_prompt_or_version_is_a_new_identity_and_prefix(tmp_path, monkeypatch, system):
    import sys

    extra = [f"system={system}", "embedding=minilm"]
    base = _plan(tmp_path, *extra)
    module = sys.modules[SYSTEMS.get(system).__module__]
    name = next(n for n in sorted(vars(module)) if n.endswith("PROMPT") and isinstance(getattr(module, n), str))
    monkeypatch.setattr(module, name, getattr(module, name) + "\nAlso mind the weather.")
    prompt = _plan(tmp_path, *extra)
    assert prompt.config_hash != base.config_hash and prompt.prefix_hash != base.prefix_hash
    monkeypatch.undo()
    monkeypatch.setattr(SYSTEMS.get(system), "version", "99")
    bumped = _plan(tmp_path, *extra)
    assert bumped.config_hash != base.config_hash and bumped.prefix_hash != base.prefix_hash


@pytest.mark.slow
def test_the_identity_is_stable_across_processes(tmp_path):
    """No run-time state (a module-level cache) or set order leaks into the hash: a fresh interpreter agrees."""
    import json
    import subprocess
    import sys

    from inmind_exp.config.code import code_identity

    here = {n: code_identity(SYSTEMS.get(n)) for n in ("a_rag", "memoryos", "xmemory")}
    code = ("import json; from inmind_exp.memory import SYSTEMS; from inmind_exp.config.code import code_identity; "
            "print(json.dumps({n: code_identity(SYSTEMS.get(n)) for n in ('a_rag', 'memoryos', 'xmemory')}))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": str(REPO), "PYTHONHASHSEED": "123", "PATH": "/usr/bin:/bin"})
    assert json.loads(out.stdout) == here


def test_provenance_is_recorded_but_no_identity():
    from inmind_exp import tags as T
    from inmind_exp.tracking import provenance_tags

    tags = provenance_tags()
    assert tags[T.VERSION] and len(tags[T.GIT_COMMIT]) == 40 and tags[T.GIT_DIRTY] in ("true", "false")


def test_a_code_edit_to_a_system_module_is_a_new_identity_and_a_docstring_edit_is_not(tmp_path):
    """Changing naive_rag's search (not its prompts, nor its ``version``) kept the config hash and reused "2 already
    done". The identity now holds the code of the system's modules: a copy of ``systems/naive_rag.py`` is loaded,
    then edited on disk; a changed line of code gives a new identity, a changed docstring or comment does not."""
    import importlib.util
    import os
    import sys

    from inmind_exp.config.code import system_identity, system_modules

    source = (REPO / "systems" / "naive_rag.py").read_text(encoding="utf-8")
    search = "self.index.search(query, self.top_k)"
    assert search in source and '@SYSTEMS.register("naive_rag")' in source
    pkg = tmp_path / "edited_systems"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    module_file = pkg / "naive_rag_copy.py"
    module_file.write_text(source.replace('@SYSTEMS.register("naive_rag")', '@SYSTEMS.register("naive_rag_copy")'))
    spec = importlib.util.spec_from_file_location("edited_systems.naive_rag_copy", module_file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
        cls = module.NaiveRAG
        assert system_modules(cls) == ["edited_systems.naive_rag_copy"]
        before = system_identity(cls)

        def edit(old: str, new: str) -> dict:
            text = module_file.read_text(encoding="utf-8")
            module_file.write_text(text.replace(old, new, 1))
            st = os.stat(module_file)
            os.utime(module_file, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))  # a new mtime, whatever the clock
            return system_identity(cls)

        changed = edit(search, "self.index.search(query, self.top_k + 1)")
        assert changed["code"] != before["code"] and changed["version"] == before["version"]
        assert edit("self.index.search(query, self.top_k + 1)", search) == before  # back as it was
        assert edit('"""', '"""Edited docstring. ') == before  # the module docstring: no code
        assert edit("    def recall(", "    # a comment\n    def recall(") == before
    finally:
        sys.modules.pop(spec.name, None)
        from inmind_exp.memory import SYSTEMS

        SYSTEMS._items.pop("naive_rag_copy", None)


def test_the_core_code_that_makes_a_result_is_in_the_identity():
    """Inverting the judge's score in ``inmind_exp/protocol/judges.py`` kept the hash: the judges', answering's, the
    protocol's, the memory interface's and the encoders' code are in it (the last three in the prefix's too)."""
    from inmind_exp.config.code import INGEST_CODE, RESULT_CODE, code_identity, digest, module_code

    assert {"inmind_exp.protocol.judges", "inmind_exp.memory.answering"} <= set(RESULT_CODE)
    assert {"inmind_exp.protocol.task", "inmind_exp.memory.base", "inmind_exp.llm.embed"} <= set(INGEST_CODE)
    ident = code_identity(SYSTEMS.get("naive_rag"))
    assert ident["code"] == digest({m: module_code(m) for m in RESULT_CODE})
    assert ident["system"]["code"] == digest({m: module_code(m) for m in ("systems.naive_rag", *INGEST_CODE)})
