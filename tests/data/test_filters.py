"""Construction filters and ``python -m inmind_exp.data check``: similarity ranks and flags, the conflict judge, exit codes."""

from __future__ import annotations

import json

import numpy as np
import pytest

from inmind_exp.data.__main__ import main
from inmind_exp.data.conflicts import PersonaExcerpts, PersonaSettings, conflict_filter, spread_sample
from inmind_exp.data.filters import rank_among, rank_summary, recall_at_k, similarity_filter
from inmind_exp.llm.embed import Encoder, MiniLMEncoder
from inmind_exp.llm import LLMClient
from inmind_exp.records import Session, Task, Trace, Turn
from tests.conftest import fake_endpoints
from tests.fake_openai import Fault

USER_TURNS = [
    "I love baking French pastries like macarons and eclairs on weekends.",
    "My tomato plants keep getting yellow leaves; should I water them less?",
    "We have no pets at home, not even a cat, because my partner is allergic.",
    "I work night shifts as an ICU nurse at the county hospital.",
    "Can you plan a 10K training schedule around my night shifts?",
    "What's a good budget spreadsheet layout for a two-person household?",
    "Recommend some mystery novels for a long flight to Lisbon.",
    "How do I get my sourdough starter more active in a cold kitchen?",
    "Which houseplants survive in a north-facing apartment?",
    "Help me write a polite email declining a wedding invitation.",
]


def trace_of(user_turns: list[str], per_session: int = 2) -> Trace:
    sessions = []
    for s in range(0, len(user_turns), per_session):
        turns = []
        for u in user_turns[s : s + per_session]:
            turns += [Turn("user", u), Turn("assistant", "Happy to help with that.")]
        sessions.append(Session(f"s{s // per_session}", f"2024/02/{s // per_session + 1:02d} (Thu) 09:00", tuple(turns)))
    return Trace("test", tuple(sessions))


def task(tid: str, fact: str, query: str, naive: str = "What did I tell you about myself?") -> Task:
    return Task(id=tid, domain="health_wellness", user_message=fact, assistant_message="Noted.", naive_query=naive,
                query=query, explanation="x", source="https://example.org")


ALLERGY = task("allergy", "I have a tree nut allergy.", "Any good macaron recipes for a party?",
               naive="What food allergy did I mention?")
COPY = task("copy", "Can you give me a vegetarian lasagna recipe for eight people?",
            "Can you give me a vegetarian lasagna recipe for eight people?")
CAT = task("cat", "My cat Miso needs a vet visit next week.", "How should I schedule next week?")


@pytest.fixture(scope="module")
def minilm() -> MiniLMEncoder:
    return MiniLMEncoder()


class TableEncoder(Encoder):
    """Fixed vectors per text, so dense ranks are known exactly."""

    name = "table"
    dim = 2

    def __init__(self, table: dict[str, tuple[float, float]]):
        self.table = table

    def encode(self, texts):
        v = np.array([self.table[t] for t in texts], dtype=np.float32).reshape(-1, 2)
        return v / np.linalg.norm(v, axis=1, keepdims=True)


# -- similarity filter -----------------------------------------------------------------------------------------------

def test_copy_of_query_is_flagged_and_unrelated_fact_is_not(minilm):
    rep = similarity_filter([COPY, ALLERGY], trace_of(USER_TURNS), minilm)
    copy, allergy = rep.tasks
    assert copy.placements["bm25"]["indirect"].rank == 1 and copy.placements["minilm"]["indirect"].rank == 1
    assert any("BM25 ranks the fact 1st" in r for r in copy.obvious)
    assert allergy.obvious == () and allergy.near == ()
    assert allergy.placements["minilm"]["indirect"].rank > 1  # the macaron-baking turn is closer
    assert allergy.placements["bm25"]["naive"].rank == 1  # "allergy" only occurs in the fact
    assert [t.task_id for t in rep.flagged] == ["copy"]


def test_ranks_on_tiny_trace_are_exact():
    bg = ["apples apples apples", "bananas ripen", "cherries and plums"]
    t = task("bees", "I keep bees in my garden.", "any tips for planting apples", naive="do I keep bees?")
    enc = TableEncoder({bg[0]: (1, 0), bg[1]: (0.8, 0.6), bg[2]: (0, 1), t.user_message: (0.6, 0.8),
                        t.query: (1, 0.05), t.naive_query: (0.6, 0.8)})
    rep = similarity_filter([t], trace_of(bg, per_session=1), enc)
    (r,) = rep.tasks
    p = r.placements
    assert p["bm25"]["naive"].rank == 1 and p["bm25"]["naive"].score > 0
    assert p["bm25"]["indirect"].rank == 4 and p["bm25"]["indirect"].score == 0  # zero ties with every turn: last
    assert p["table"]["naive"].rank == 1
    assert p["table"]["indirect"].rank == 3  # behind (1, 0) and (0.8, 0.6), ahead of (0, 1)
    assert rep.summary()["table"]["indirect"]["recall@1"] == 0.0


def test_rank_and_recall_helpers():
    assert rank_among(0.5, np.array([0.9, 0.5, 0.1])) == 3
    assert rank_among(0.95, np.array([0.9, 0.5, 0.1])) == 1
    assert recall_at_k([1, 3, 7, 12]) == {1: 0.25, 5: 0.5, 10: 0.75}
    assert rank_summary([1, 2])["mrr"] == 0.75


# -- conflict filter ---------------------------------------------------------------------------------------------

def judge_client(fake) -> LLMClient:
    return LLMClient(fake_endpoints(fake.base_url, max_attempts=2)["judge"])


def test_persona_excerpts_show_similar_turn_and_spread_sample():
    assert spread_sample(10, 3) == [0, 4, 9] and spread_sample(2, 5) == [0, 1]
    ex = PersonaExcerpts(trace_of(USER_TURNS), None, PersonaSettings(k_similar=1, k_sample=2, max_chars=40))
    picked = ex.pick(CAT.user_message)
    assert 2 in picked and {0, 9} <= set(picked) and len(picked) == 3
    assert all(len(line) < 80 for line in ex.render(picked).splitlines())


def test_conflict_judge_flags_the_right_task(fake):
    fake.default_json = {"conflict": 0, "reason": "consistent"}
    fake.add_rule("My cat Miso", {"conflict": 1, "reason": "user has no pets", "evidence": "We have no pets"})
    res = conflict_filter(judge_client(fake), [ALLERGY, CAT], trace_of(USER_TURNS), None,
                          PersonaSettings(k_similar=2, k_sample=2))
    assert [r.conflict for r in res] == [False, True]
    assert all(r.verdict.ok for r in res) and res[1].evidence == "We have no pets"
    cat_prompt = next(b for b in fake.chat_requests() if "My cat Miso" in b["messages"][1]["content"])
    assert "no pets at home" in cat_prompt["messages"][1]["content"]


def test_conflict_judge_failure_is_an_error_not_a_pass(fake):
    fake.add_rule("tree nut", "I think it's fine")  # never JSON
    fake.add_rule("lasagna", {"conflict": 1, "evidence": "I said I am a pilot", "reason": "x"})  # not a shown turn
    fake.fail_next(Fault(500), Fault(500))  # the first task's two attempts
    res = conflict_filter(judge_client(fake), [CAT, ALLERGY, COPY], trace_of(USER_TURNS), None)
    for r in res:
        assert not r.conflict and r.verdict.score is None and r.verdict.error
    assert "HTTP 500" in res[0].verdict.error and "no valid JSON" in res[1].verdict.error
    assert "evidence" in str(fake.chat_requests()[-1]["messages"][-1]["content"])  # the model was asked again


# -- the CLI -----------------------------------------------------------------------------------------------------------

def write_tasks(path, tasks):
    path.write_text("".join(json.dumps(t.to_dict()) + "\n" for t in tasks), encoding="utf-8")
    return path


def write_trace(path, trace: Trace):
    inst = {"question_id": trace.id, "haystack_session_ids": [s.id for s in trace.sessions],
            "haystack_dates": [s.date for s in trace.sessions],
            "haystack_sessions": [[{"role": t.role, "content": t.content} for t in s.turns] for s in trace.sessions]}
    path.write_text(json.dumps([inst]), encoding="utf-8")
    return path


def test_cli_bad_file_exits_2_naming_file_and_line(tmp_path, capsys):
    bad = tmp_path / "tasks.jsonl"
    bad.write_text(json.dumps(ALLERGY.to_dict()) + "\n{oops\n", encoding="utf-8")
    assert main(["check", str(bad), "--trace", str(tmp_path / "none.json"), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert f"{bad}:2: invalid JSON" in err and "trace file not found" in err
    assert not (tmp_path / "o" / "report.json").exists()


def test_cli_exit_codes_and_report(tmp_path, fake, capsys, minilm):
    trace = write_trace(tmp_path / "trace.json", trace_of(USER_TURNS))
    clean = write_tasks(tmp_path / "clean.jsonl", [ALLERGY])
    out = tmp_path / "out"
    assert main(["check", str(clean), "--trace", str(trace), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "conflict filter: skipped: no endpoint" in text and "flagged: 0 of 1" in text
    report = json.loads((out / "report.json").read_text())
    assert report["trace"]["sessions"] == 5 and report["trace"]["user_turns"] == 10
    assert (out / "similarity_heldout.png").stat().st_size > 0 and (out / "similarity_heldout.svg").exists()

    both = write_tasks(tmp_path / "both.jsonl", [ALLERGY, COPY])
    assert main(["check", str(both), "--trace", str(trace), "--out", str(out)]) == 1
    assert "copy: similarity: BM25 ranks the fact 1st" in capsys.readouterr().out

    fake.default_json = {"conflict": 0, "reason": "consistent"}
    fake.add_rule("My cat Miso", {"conflict": 1, "reason": "user has no pets", "evidence": "no pets at home"})
    llm = ["--base-url", fake.base_url, "--model", "fake-model", "--out", str(out), "--trace", str(trace)]
    assert main(["check", str(clean), *llm]) == 0
    assert main(["check", str(write_tasks(tmp_path / "cat.jsonl", [ALLERGY, CAT])), *llm]) == 1
    text = capsys.readouterr().out
    assert "cat: conflict: user has no pets" in text and "allergy:" not in text.split("flagged:")[1]
    fake.rules.insert(0, ("tree nut", "not json at all"))
    assert main(["check", str(clean), *llm, "--out", str(tmp_path / "fresh")]) == 1  # no cached verdict there
    assert "conflict judge errors: 1" in capsys.readouterr().out
