"""``answer=paper`` and ``judges=paper``: the release's answer prompt and four judge prompts, read from the release at
run time. The judge requests this project sends (captured by the fake server) are compared, message by message and
byte for byte, with what the release's own ``build_judge_payloads.py`` builds from a submission made of the same
records; the judge-free bounds and the judge self-audit hold under both prompt sets; a missing release stops the plan.

Needs the release (``$INMIND_RELEASE``): skipped without it, failed when ``CI=true``. Nothing of the release is in
this file: tasks and prompts are read from the release directory.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from inmind_exp.memory.answering import Answerer, load_paper_prompt
from inmind_exp.data.release import BACKGROUND, TASKS, Release, find_release
from inmind_exp.errors import PlanError
from inmind_exp.protocol.judges import JUDGES, paper_judges
from inmind_exp.llm import CallCache, Models
from inmind_exp.memory import SYSTEMS
from inmind_exp.protocol.metrics import judge_audit
from inmind_exp.protocol.task import FACT_TURN_ID, run_task
from inmind_exp.records import Session, Task, Trace, Turn
from inmind_exp.official.submission import submission_row
from tests.conftest import fake_endpoints, make_trace
from tests.fake_openai import FakeOpenAI

#: the release script's metric names for this project's judge names
SCRIPT_METRIC = {"naive": "naive", "application": "application", "target_recall": "target-recall",
                 "answer_only": "answer-only"}


def official_release() -> Release:
    where = os.environ.get("INMIND_RELEASE")
    if not where or not Path(where).is_dir():
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true but $INMIND_RELEASE does not name the official release directory")
        pytest.skip("the official release is not available ($INMIND_RELEASE)")
    return find_release(where)


def official_tasks(release: Release, n: int) -> list[Task]:
    """The first ``n`` release tasks as official ``Task``s (id = the integer task_id as text), read at run time."""
    out = []
    for line in release.text(TASKS).splitlines():
        if line.strip() and len(out) < n:
            d = json.loads(line)
            out.append(Task(id=str(d["task_id"]), domain=d["domain"], user_message=d["user_message"],
                            assistant_message=d["assistant_message"], naive_query=d["naive_query"], query=d["query"],
                            explanation=d["explanation"], extra={"task_id": int(d["task_id"])}))
    return out


def official_trace(release: Release) -> Trace:
    """The release's background as a ``Trace``, read at run time: contiguous turns of one ``<session>-turn-<k>`` id
    prefix form a session, dated by its first turn's ``timestamp_mapping`` (a stand-in for ``trace=official``)."""
    sessions: list[tuple[str, str, list[Turn]]] = []
    for line in release.text(BACKGROUND).splitlines():
        d = json.loads(line)
        sid = d["id"].rsplit("-turn-", 1)[0]
        if not sessions or sessions[-1][0] != sid:
            sessions.append((sid, next(iter(d["timestamp_mapping"].values())), []))
        sessions[-1][2].append(Turn(d["role"], d["content"]))
    return Trace("lme_s_background", tuple(Session(sid, date, tuple(turns)) for sid, date, turns in sessions))


#: the injection session of the release's protocol (its manifest's ``injection_session_index``)
OFFICIAL_SESSION = 8


def is_judge(body) -> bool:
    """A judge request: the strict set's asks for JSON mode; the paper set's sends the release's messages only, whose
    user message starts with the release's first field."""
    return ((body.get("response_format") or {}).get("type") == "json_object"
            or body["messages"][-1]["content"].startswith("user_message: "))


def replies(body):
    """Answers with braces, quotes and non-ASCII text (so byte-exactness is tested); verdicts that say 1 exactly
    when the context line holds the fact (the judge self-audit then finds nothing)."""
    msgs = body["messages"]
    if is_judge(body):
        user = msgs[-1]["content"]
        fact = user.split("\n", 1)[0].removeprefix("user_message: ")
        context = next((ln for ln in user.split("\ncontext: ", 1)[1:]), "")
        return {"score": int(fact in context.split("\nquery: ")[0]) if "\ncontext: " in user else 1, "reason": "ok"}
    return f"Réponse {{x}} “{msgs[-1]['content'][:30]}” ✓\nline two"


def run_records(tmp_path, fake, release, system: str, params: dict, tasks: list[Task], answer_mode: str = "paper",
                judges=None, trace: Trace | None = None, cache: bool = True):
    """Each task through the protocol in-process against the fake server (its own call cache per system), on a
    small trace or (``trace``) the release's background at its injection session."""
    models = Models.build(fake_endpoints(fake.base_url), CallCache(tmp_path / f"cache-{system}") if cache else None)
    cls = SYSTEMS.get(system)
    answerer = Answerer(answer_mode, load_paper_prompt(release) if answer_mode == "paper" else None)
    make = lambda wd: cls(models, None, wd, **params)  # noqa: E731
    index = 1 if trace is None else OFFICIAL_SESSION
    trace = trace or make_trace(n_sessions=3)
    return [run_task(t, trace, index, make, models, tmp_path / f"w-{system}" / f"t{t.id}", config_hash="h",
                     system_name=system, evaluates_naive=cls.asks_naive(params), judges=judges, answerer=answerer)
            for t in tasks]


@pytest.mark.slow
def test_judge_requests_match_the_release_script_byte_for_byte(tmp_path):
    release = official_release()
    every = official_tasks(release, 125)
    trace = official_trace(release)
    assert (len(trace.sessions), sum(len(s.turns) for s in trace.sessions)) == (47, 486)
    judges = paper_judges(release)
    by_system = {judge.system: name for name, judge in judges.items()}
    # every task's text through the backbone (no memory), 25 through single-shot naive RAG over the release's 486
    # background turns, four through the always-in-state file
    configs = [("backbone", {"answer_naive": True}, every), ("naive_rag", {"chunking": "single_shot"}, every[:25]),
               ("always_in_state", {}, every[:4])]
    compared = 0
    with FakeOpenAI(rules=[("", replies)]) as fake:
        for system, params, tasks in configs:
            fake.reset_log()
            # no call cache: tasks sharing a fact and a naive query send identical requests, each one counted
            records = run_records(tmp_path, fake, release, system, params, tasks, judges=judges, trace=trace,
                                  cache=False)
            assert all(r.error is None for r in records), [r.error for r in records]
            assert all(set(r.verdicts) == set(JUDGES) for r in records)
            sent: dict[str, list] = {name: [] for name in SCRIPT_METRIC}  # in the order sent: task by task
            for body in fake.chat_requests():
                if is_judge(body):
                    sent[by_system[body["messages"][0]["content"]]].append(body["messages"])
            results = tmp_path / f"{system}.jsonl"
            results.write_text("".join(json.dumps(submission_row(r, {"system": system}), ensure_ascii=False) + "\n"
                                       for r in records), encoding="utf-8")
            for name, metric in SCRIPT_METRIC.items():
                out = subprocess.run(
                    [sys.executable, str(release.root / "evaluation/scripts/build_judge_payloads.py"),
                     "--metric", metric, "--results", str(results), "--tasks", str(release.path(TASKS))],
                    capture_output=True, text=True, encoding="utf-8", check=True).stdout
                built = [json.loads(line) for line in out.splitlines()]
                assert [row["task_id"] for row in built] == [t.extra["task_id"] for t in tasks]
                assert len(sent[name]) == len(built) == len(tasks), (system, name)
                for task, ours, row in zip(tasks, sent[name], built):
                    assert len(ours) == len(row["messages"]) == 2
                    for mine, theirs in zip(ours, row["messages"]):
                        assert mine["role"] == theirs["role"]
                        assert mine["content"].encode() == theirs["content"].encode(), (system, name, task.id)
                    compared += 1
    assert len(every) == 125 and compared == 4 * (125 + 25 + 4)


def test_paper_answer_shows_the_memory_block_and_records_it(tmp_path):
    """The answer call's system message is the release prompt with ``{context}`` replaced by the memory block the
    shared answerer shows; that block is the record's context; the backbone's is the fact pair."""
    release = official_release()
    prompt = load_paper_prompt(release)
    tasks = official_tasks(release, 1)
    with FakeOpenAI(rules=[("", replies)]) as fake:
        paper = run_records(tmp_path / "p", fake, release, "always_in_state", {}, tasks)[0]
        shared = run_records(tmp_path / "s", fake, release, "always_in_state", {}, tasks, answer_mode="shared")[0]
        back = run_records(tmp_path / "b", fake, release, "backbone", {}, tasks)[0]
    block = shared.indirect.context[0].content.split("<memory>\n", 1)[1].rsplit("\n</memory>", 1)[0]
    assert paper.indirect.context_text() == block
    assert paper.indirect.context[0].content == prompt.text.replace("{context}", block)
    assert [m.role for m in paper.indirect.context] == ["system", "user"]
    assert paper.indirect.context[1].content == tasks[0].query
    assert paper.indirect.meta["answer_prompt"] == prompt.version
    assert back.naive is None and "naive" not in back.verdicts  # answer_naive defaults to the paper's control
    pair = f"User: {tasks[0].user_message}\nAssistant: {tasks[0].assistant_message}"
    assert back.indirect.context_text() == pair and back.target_recall_exact == 1


def test_single_shot_naive_rag_is_one_chunk_per_turn_plus_the_pair(tmp_path):
    release = official_release()
    task = official_tasks(release, 1)[0]
    with FakeOpenAI(rules=[("", replies)]) as fake:
        models = Models.build(fake_endpoints(fake.base_url), CallCache(tmp_path / "cache"))
        cls = SYSTEMS.get("naive_rag")
        from inmind_exp.protocol.task import ingest_task

        trace = official_trace(release)
        for chunking, extra in (("single_shot", 1), ("turn", 2)):
            make = lambda wd: cls(models, None, wd, chunking=chunking, top_k=3)  # noqa: E731
            state = ingest_task(make, trace, task, OFFICIAL_SESSION, tmp_path / chunking, None)
            system = make(tmp_path / f"{chunking}-read")
            system.restore(state)
            n_turns = sum(len(s.turns) for s in trace.sessions)
            assert len(system.index) == n_turns + extra == 486 + extra  # single_shot: the release's 487 chunks
            recall = system.recall(task.user_message)
            top = recall.items[0]
            if chunking == "single_shot":
                # the pair chunk in the background chunks' format: each turn one "- [date] role: text" line
                date = trace.sessions[OFFICIAL_SESSION].date
                pair = f"- [{date}] user: {task.user_message}\n- [{date}] assistant: {task.assistant_message}"
                assert "- " + top.text == pair and recall.text.startswith(pair + "\n- [")
                for item in recall.items[1:]:  # background chunks: the same shape, each its own turn's date
                    assert re.match(r"\[\d{4}/\d\d/\d\d \(\w{3}\) \d\d:\d\d\] (user|assistant): ", item.text)
                    assert f"\n- {item.text}" in recall.text
                assert top.sources == (FACT_TURN_ID, "inmind:fact-reply") and recall.meta["control"] == "single-shot"
            else:
                assert "control" not in recall.meta


def test_bounds_and_self_audit_apply_under_both_prompt_sets(tmp_path):
    """Exact and provenance recall and the judge audit read the same records whichever set judged them."""
    release = official_release()
    tasks = official_tasks(release, 3)
    with FakeOpenAI(rules=[("", replies)]) as fake:
        for name, judges in (("paper", paper_judges(release)), ("strict", None)):
            records = run_records(tmp_path / name, fake, release, "naive_rag", {"chunking": "single_shot", "top_k": 1},
                                  tasks, judges=judges)
            assert all(r.error is None for r in records)
            assert all(r.target_recall_exact in (0, 1) and r.target_recall_provenance in (0, 1) for r in records)
            versions = {r.verdicts["target_recall"].prompt_version for r in records}
            assert versions == {(judges or JUDGES)["target_recall"].version}
            audit = judge_audit(records)
            assert audit.checked == len(tasks)
            if name == "paper":  # the fake paper judge says 1 exactly when the fact is in the context line
                assert audit.false_positives == () and audit.false_negatives == ()
                assert [r.verdicts["target_recall"].score for r in records] == [r.target_recall_exact for r in records]


def test_paper_configuration_plans_runs_and_estimates(tmp_path, monkeypatch):
    """Composed from conf/: the identity carries the prompts' versions and hashes (strict's is unchanged), the
    worker sends the release's prompts, the estimate sizes them; without a release the plan fails."""
    from inmind_exp.config import identity as RI
    from inmind_exp.config.resolve import as_config
    from inmind_exp.plan.estimate import estimate
    from inmind_exp.plan.plan import plan_config
    from inmind_exp.run.driver import run_plan
    from inmind_exp.exec.executor import InProcessExecutor
    from inmind_exp.run.resources import Resources
    from tests.exec.test_runner_ray import compose

    release = official_release()
    monkeypatch.setenv("INMIND_RELEASE", str(release.root))
    judges = paper_judges(release)
    with FakeOpenAI(rules=[("", replies)]) as fake:
        strict_cfg = compose(tmp_path / "s", fake.base_url, "system=backbone", "embedding=bm25")
        strict = plan_config(strict_cfg, tmp_path / "s" / "root", tmp_path / "s" / "job")
        old = RI.result_identity(as_config(strict_cfg), dict(strict.endpoints), strict.identity["dataset"],
                                strict.identity["trace"]["digest"], False)
        assert strict.config_hash == RI.identity_hash(old) and strict.identity["answer"] == "shared"
        cfg = compose(tmp_path / "p", fake.base_url, "system=backbone", "embedding=bm25", "answer=paper",
                      "judges=paper", "+system.params.answer_naive=true")
        plan = plan_config(cfg, tmp_path / "p" / "root", tmp_path / "p" / "job")
        assert plan.name.endswith("/paper") and plan.config_hash != strict.config_hash
        assert plan.identity["answer"] == load_paper_prompt(release).identity()
        assert plan.identity["judges"] == {k: v.version for k, v in sorted(judges.items())}
        est, base = estimate(plan), estimate(strict)
        assert est["judge_calls"] == 4 * len(plan.tasks) and base["judge_calls"] == 3 * len(strict.tasks)
        assert est["judge_prompt_tokens"] == len(plan.tasks) * sum(j.prompt_tokens for j in judges.values())
        assert est["answerer_prompt_tokens"] > 2 * base["answerer_prompt_tokens"]  # two queries, a longer prompt
        result = run_plan(plan, executor=InProcessExecutor(), resources=Resources())
        assert all(r.error is None and set(r.verdicts) == set(JUDGES) for r in result.records)
        systems = [b["messages"][0]["content"] for b in fake.chat_requests()]
        assert all(systems.count(j.system) == len(plan.tasks) for j in judges.values())
        head = load_paper_prompt(release).text.split("{context}")[0]
        assert sum(s.startswith(head) for s in systems) == 2 * len(plan.tasks)  # the naive query answered too

    monkeypatch.setenv("INMIND_RELEASE", str(tmp_path / "no-release"))
    with pytest.raises(PlanError, match="inmind_exp.data fetch"):
        plan_config(cfg, tmp_path / "p2" / "root", tmp_path / "p2" / "job")


def test_the_system_cannot_choose_the_answerer(tmp_path):
    """Every system answers ``paper`` over its shared memory block (check_system's ``answerers`` scenario, run for
    every built-in by ``tests/systems/test_contract.py``); a system takes no answer mode, and ``paper`` needs the
    release's prompt."""
    with pytest.raises(TypeError, match="answer_mode"):
        SYSTEMS.get("backbone")(None, None, tmp_path, answer_mode="paper")
    with pytest.raises(ValueError, match="answer=paper needs the release's answer prompt"):
        Answerer("paper")


@pytest.mark.parametrize("system,key,official_value", [("backbone", "answer_naive", True),
                                                        ("naive_rag", "chunking", "single_shot")])
def test_the_official_tasks_apply_the_release_protocol_for_a_system_unless_set(tmp_path, monkeypatch, system, key,
                                                                             official_value):
    """dataset=official: the backbone also answers the naive query and naive_rag is the single-shot control, in the
    params, the identity and the flattened config; a user's own value wins; the bundled tasks keep the defaults."""
    from inmind_exp.plan.plan import plan_config
    from tests.exec.test_runner_ray import compose

    release = official_release()
    monkeypatch.setenv("INMIND_RELEASE", str(release.root))
    base = (f"system={system}", "embedding=bm25", "dataset=official", "trace=official", "dataset.limit=2",
            "dataset.path=null", "trace.path=null")
    plan = plan_config(compose(tmp_path / "o", "http://127.0.0.1:9/v1", *base), tmp_path / "o" / "r", tmp_path / "o" / "j")
    assert plan.system_params[key] == official_value
    assert plan.identity["system"]["params"][key] == official_value
    assert plan.params[f"system.params.{key}"] == str(official_value)
    if system == "backbone":
        assert plan.asks_naive
    other = "turn" if system == "naive_rag" else False
    own = plan_config(compose(tmp_path / "u", "http://127.0.0.1:9/v1", *base, f"+system.params.{key}={str(other).lower()}"),
                      tmp_path / "u" / "r", tmp_path / "u" / "j")
    assert own.system_params[key] == other and own.config_hash != plan.config_hash
    bundled = plan_config(compose(tmp_path / "b", "http://127.0.0.1:9/v1", f"system={system}", "embedding=bm25"),
                          tmp_path / "b" / "r", tmp_path / "b" / "j")
    assert key not in bundled.system_params
