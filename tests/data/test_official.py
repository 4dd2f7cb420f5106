"""``dataset=official`` and ``trace=official``: the release's tasks and background read through a ``Release`` (hashes
checked), the task contract other modules rely on, the release's session grouping, the manifest's injection
constants under ``injection=middle``, and the timeline the protocol feeds a system compared turn by turn with the
output of the release's own ``build_timeline.py``.

Everything about the release is read from it at test time; the loader-error cases use small synthetic files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from inmind_exp.data import DataError
from inmind_exp.data.official import load_official_tasks, load_official_trace
from inmind_exp.data.release import BACKGROUND, PINNED_SHA256, TASKS, Release
from inmind_exp.data.tasks import load_tasks
from inmind_exp.memory import MemorySystem, Recall
from inmind_exp.protocol.task import build_prefix, ingest_task
from inmind_exp.records import ACCEPTED_DOMAINS, FACT_TURN_ID, OFFICIAL_DOMAINS, Session
from tests.launch_helpers import REPO


def plan_for(tmp_path: Path, *overrides: str):
    from hydra import compose, initialize_config_dir

    from inmind_exp.config.schema import register_configs
    from inmind_exp.plan.plan import plan_config

    register_configs()
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=["llm=openai", "dataset.limit=null", f"run.cache_dir={tmp_path / 'cache'}",
                                           *overrides])
    return plan_config(cfg, tmp_path / "root", tmp_path / "job")


def raw_tasks(release: Release) -> list[dict]:
    return [json.loads(line) for line in release.text(TASKS).splitlines() if line.strip()]


def test_tasks_keep_the_official_ids_domains_and_fields(release):
    raw = raw_tasks(release)
    tasks = load_official_tasks(release)
    assert len(tasks) == len(raw) == 125
    for t, r in zip(tasks, raw):
        assert t.id == str(r["task_id"]) and t.extra["task_id"] == r["task_id"] and t.domain == r["domain"]
        assert (t.user_message, t.assistant_message, t.naive_query, t.query, t.explanation) == (
            r["user_message"], r["assistant_message"], r["naive_query"], r["query"], r["explanation"])
        assert {k: t.extra[k] for k in ("entity_1", "entity_2", "relation", "provenance")} == {
            k: r[k] for k in ("entity_1", "entity_2", "relation", "provenance")}
    assert {t.domain for t in tasks} == set(OFFICIAL_DOMAINS)
    assert [t.id for t in load_official_tasks(release, limit=3)] == [str(r["task_id"]) for r in raw[:3]]


def test_background_is_grouped_and_replayed_as_the_release_has_it(release):
    manifest = release.manifest()
    lines = [json.loads(line) for line in release.text(BACKGROUND).splitlines() if line.strip()]
    trace = load_official_trace(release)
    turns = [t for s in trace.sessions for t in s.turns]
    assert len(trace.sessions) == manifest["sessions"] and len(turns) == manifest["turns"]
    assert trace.n_user_turns == manifest["user_turns"]
    assert [(t.id, t.role, t.content) for t in turns] == [(r["id"], r["role"], r["content"]) for r in lines]
    assert all(t.content.rsplit("\n", 1)[-1].startswith("---TIMESTAMP: ") for t in turns)
    by_id = {r["id"]: r for r in lines}
    for s in trace.sessions:
        assert all(t.id.rsplit("-turn-", 1)[0] == s.id for t in s.turns)
        assert s.date == next(iter(by_id[s.turns[0].id]["timestamp_mapping"].values()))
        assert s.with_turn_ids() == s  # the release's turn ids are kept, never replaced by '<session>#<i>'


class Unpinned(Release):
    """A release directory of synthetic files: no hash check, to reach the loaders' own validation."""

    def path(self, rel: str) -> Path:
        return self.root / rel


def write(root: Path, rel: str, rows: list) -> Path:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
    return p


def turn(tid: str, role: str = "user", date: str = "2022/10/03 (Mon) 01:36") -> dict:
    return {"id": tid, "role": role, "content": f"text of {tid}\n---TIMESTAMP: {date}",
            "timestamp_mapping": {"question:q": date}}


def test_trace_errors_name_file_line_and_key(tmp_path):
    p = write(tmp_path, BACKGROUND, [turn("a-turn-0"), turn("a-turn-1", "assistant"), turn("b-turn-0"),
                                     turn("a-turn-2"), turn("nosuffix"), {**turn("c-turn-0"), "role": "system"},
                                     {**turn("d-turn-0"), "timestamp_mapping": {"question:q": "yesterday"}},
                                     turn("d-turn-1", date="2022/10/04 (Tue) 09:00"), "{bad json"])
    with pytest.raises(DataError) as err:
        load_official_trace(Unpinned(tmp_path))
    got = [str(pr) for pr in err.value.problems]
    assert got[0].startswith(f"{p}:4 [id]: session 'a' is not contiguous") and "end on line 2" in got[0]
    assert got[1].startswith(f"{p}:5 [id]: turn id must be a string '<session>-turn-<k>'")
    assert got[2].startswith(f"{p}:6 [role]: must be user or assistant")
    assert got[3].startswith(f"{p}:7 [timestamp_mapping]: date 'yesterday'")
    assert got[4].startswith(f"{p}:9: invalid JSON")
    assert len(got) == 5  # d-turn-1's date is compared only with a valid first date


def test_task_errors_name_file_line_and_key(tmp_path):
    good = {"task_id": 1, "domain": "health_and_wellness", "user_message": "I have asthma.",
            "assistant_message": "Noted.", "naive_query": "What do I have?", "query": "Should I get a cat?",
            "explanation": "Pets can trigger asthma.", "entity_1": None, "provenance": {"k": 1}}
    p = write(tmp_path, TASKS, [good, {**good, "task_id": "2"}, {**good, "task_id": 1}, {**good, "task_id": 3,
                                "domain": "health_wellness", "query": ""}, {**good, "task_id": 4, "domain": "cooking"}])
    with pytest.raises(DataError) as err:
        load_official_tasks(Unpinned(tmp_path))
    got = [str(pr) for pr in err.value.problems]
    assert got == [f"{p}:2 [task_id]: must be a non-negative integer, got '2'",
                   f"{p}:3 [task_id]: duplicate task_id 1 (first on line 1)",
                   f"{p}:4 [query]: empty text",
                   f"{p}:5 [domain]: unknown domain 'cooking'; expected one of {', '.join(ACCEPTED_DOMAINS)}"]


def test_the_generic_loader_and_data_check_accept_the_official_domain_names(tmp_path):
    from inmind_exp.data.__main__ import _counts

    rows = [{"id": f"t{i}", "domain": d, "user_message": "u", "assistant_message": "a", "naive_query": "n",
             "query": "q", "explanation": "e"} for i, d in enumerate(OFFICIAL_DOMAINS)]
    tasks = load_tasks(write(tmp_path, "t.jsonl", rows))
    assert [t.domain for t in tasks] == list(OFFICIAL_DOMAINS)
    assert _counts(tasks)["domain"] == {d: 1 for d in OFFICIAL_DOMAINS}


def test_middle_injection_gives_the_manifest_constants(release, tmp_path):
    """The paper's middle position (the 40th user turn) lands the fact pair at the end of the manifest's session,
    after its count of background user turns, with its count of sessions after it."""
    m = release.manifest()
    plan = plan_for(tmp_path, "dataset=official", "trace=official", "injection=middle")
    assert plan.session_index == m["injection_session_index"] == 8
    assert m["injection_user_turn_locator"] == 40
    trace = plan.trace
    assert sum(t.role == "user" for s in trace.sessions[:plan.session_index] for t in s.turns) == m["prefix_user_turns"]
    fed = FeedLog.replay(plan, plan.tasks[0], tmp_path)
    target = next(i for i, s in enumerate(fed) if any(t.id == FACT_TURN_ID for t in s.turns))
    assert target == m["injection_session_index"]
    assert [t.injected for t in fed[target].turns[-2:]] == [True, True]  # appended at the end of the session
    users_before = sum(t.role == "user" and not t.injected for s in fed[:target + 1] for t in s.turns)
    assert users_before == m["background_user_turns_before_target"] == 41
    assert len(fed) - target - 1 == m["post_injection_sessions"] == 38


def test_result_identity_names_the_release_files(release, tmp_path):
    official = plan_for(tmp_path / "a", "dataset=official", "trace=official")
    assert official.identity["dataset"] == PINNED_SHA256[TASKS]
    assert official.identity["trace"]["digest"] == PINNED_SHA256[BACKGROUND]
    assert official.dataset_path == release.path(TASKS)
    bundled = plan_for(tmp_path / "b")
    mixed = plan_for(tmp_path / "c", "trace=official")
    assert len({official.config_hash, bundled.config_hash, mixed.config_hash}) == 3
    assert mixed.identity["dataset"] == bundled.identity["dataset"]


def test_release_dir_setting_points_a_run_at_a_copy(release, tmp_path, monkeypatch):
    monkeypatch.delenv("INMIND_RELEASE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "empty"))
    plan = plan_for(tmp_path, "dataset=official", "trace=official", f"dataset.release_dir={release.root}")
    assert len(plan.tasks) == 125 and len(plan.trace.sessions) == 47
    from inmind_exp.errors import PlanError

    with pytest.raises(PlanError, match="dataset.path"):
        plan_for(tmp_path, "dataset=official", f"dataset.path={tmp_path}", f"dataset.release_dir={release.root}")


class FeedLog(MemorySystem):
    """Records every session the protocol hands to ``ingest_session``; its snapshot is that list."""

    name = "feed_log"

    def __init__(self, llm, encoder, workdir, **params):
        super().__init__(llm, encoder, workdir, **params)
        self.sessions: list[Session] = []

    def ingest_session(self, session: Session) -> None:
        self.sessions.append(session)

    def recall(self, query: str) -> Recall:
        return Recall("", ())

    def snapshot(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "fed.json").write_text(json.dumps([s.to_dict() for s in self.sessions]))

    def restore(self, directory: Path) -> None:
        self.sessions = [Session.from_dict(d) for d in json.loads((directory / "fed.json").read_text())]

    @classmethod
    def replay(cls, plan, task, tmp: Path) -> list[Session]:
        """What the protocol feeds a system for ``task``: the shared prefix (``build_prefix``), restored, then the
        injection session and every later one (``ingest_task``), exactly as a worker runs them."""
        def make(workdir: Path) -> "FeedLog":
            return cls(None, None, workdir)

        prefix = tmp / f"prefix-{task.id}"
        build_prefix(make, plan.trace, plan.session_index, tmp / f"p-{task.id}", prefix)
        post = ingest_task(make, plan.trace, task, plan.session_index, tmp / f"t-{task.id}", prefix)
        state = make(tmp / f"r-{task.id}")
        state.restore(post)
        return state.sessions


@pytest.mark.slow
def test_replayed_timeline_equals_the_release_build_timeline(release, tmp_path):
    """Three tasks (the first, 155 and the last in the file): every session and every turn's role and text the
    protocol feeds the system equal what ``evaluation/scripts/build_timeline.py`` builds for the same task."""
    plan = plan_for(tmp_path, "dataset=official", "trace=official", "injection=middle")
    by_id = {t.id: t for t in plan.tasks}
    chosen = [plan.tasks[0].id, "155", plan.tasks[-1].id]
    compared = 0
    for tid in chosen:
        out = subprocess.run([sys.executable, str(release.script("build_timeline")), "--tasks",
                              str(release.path(TASKS)), "--task-id", tid, "--compact"], cwd=release.root,
                             capture_output=True, text=True, timeout=120, check=True)
        theirs = json.loads(out.stdout)
        fed = FeedLog.replay(plan, by_id[tid], tmp_path)
        assert [s.id for s in fed] == [s["session_id"] for s in theirs["sessions"]]
        for ours, their in zip(fed, theirs["sessions"]):
            assert [(t.role, t.content) for t in ours.turns] == [(t["role"], t["content"]) for t in their["turns"]], \
                f"task {tid}, session {ours.id}"
            compared += len(ours.turns)
        assert theirs["protocol"]["injection_session_index"] == plan.session_index
        # background turn ids are the release's; only the fact pair is named by this project's provenance ids
        ours_ids = [t.id for s in fed for t in s.turns if not t.injected]
        assert ours_ids == [t["id"] for s in theirs["sessions"] for t in s["turns"] if t["source"] != "inmind_target"]
    assert compared == 3 * (486 + 2)


class HashEncoder:
    """Deterministic pseudo-random unit vectors per text (no model): enough to run ``check``'s filters end to end."""

    name, dim = "hash", 16

    def encode(self, texts):
        import hashlib

        import numpy as np

        v = np.array([np.frombuffer(hashlib.sha256(t.encode()).digest()[:16], dtype=np.uint8) for t in texts],
                     dtype=np.float32).reshape(-1, 16) - 127.5
        return v / np.linalg.norm(v, axis=1, keepdims=True)

    passage = query = encode


def test_data_check_on_the_release(release, tmp_path, capsys):
    from inmind_exp.data import __main__ as cli

    args = cli._parser().parse_args(["check", "--release", str(release.root), "--out", str(tmp_path / "out")])
    assert cli.check(args, encoder=HashEncoder(), heldout_encoder=HashEncoder()) in (0, 1)  # 1: flagged tasks
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["tasks_file"] == str(release.path(TASKS)) and report["n_tasks"] == 125
    assert set(report["counts"]["domain"]) == set(OFFICIAL_DOMAINS) and sum(report["counts"]["domain"].values()) == 125
    m = release.manifest()
    assert (report["trace"]["sessions"], report["trace"]["turns"], report["trace"]["user_turns"]) == (
        m["sessions"], m["turns"], m["user_turns"])
    with pytest.raises(SystemExit):
        cli.main(["check", "tasks.jsonl", "--release"])
    assert "drop FILE and --trace" in capsys.readouterr().err
