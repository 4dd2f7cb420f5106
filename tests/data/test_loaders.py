"""The task and trace loaders report every problem with file, line and key, before any work starts."""

from __future__ import annotations

import json

import pytest

from inmind_exp.data import DataError, load_tasks, load_trace

GOOD = {
    "id": "t1", "domain": "health_wellness", "user_message": "I have a tree nut allergy.",
    "assistant_message": "Thanks, noted.", "naive_query": "What allergy do I have?",
    "query": "Any good macaron recipes?", "explanation": "Macarons use almond flour.",
    "source": "https://www.fda.gov/food/food-labeling-nutrition/food-allergies", "origin": "source",
}


def write_lines(path, lines):
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def task(**kw):
    d = dict(GOOD)
    d.update(kw)
    return json.dumps({k: v for k, v in d.items() if v is not ...})


def problems_of(path):
    with pytest.raises(DataError) as err:
        load_tasks(path)
    return err.value.problems


def test_good_file_loads_and_keeps_extra_fields(tmp_path):
    p = write_lines(tmp_path / "t.jsonl", [task(), task(id="t2", note="kept")])
    tasks = load_tasks(p)
    assert [t.id for t in tasks] == ["t1", "t2"]
    assert tasks[1].extra == {"note": "kept"}
    assert load_tasks(p, limit=1)[0].id == "t1"


def test_invalid_json_reports_line(tmp_path):
    p = write_lines(tmp_path / "t.jsonl", [task(), "{not json"])
    (pr,) = problems_of(p)
    assert pr.line == 2 and "invalid JSON" in pr.message and str(p) in str(pr)


def test_missing_field_reports_line_and_key(tmp_path):
    p = write_lines(tmp_path / "t.jsonl", [task(query=...)])
    (pr,) = problems_of(p)
    assert (pr.line, pr.key, pr.message) == (1, "query", "missing field")


def test_unknown_domain(tmp_path):
    p = write_lines(tmp_path / "t.jsonl", [task(domain="cooking")])
    (pr,) = problems_of(p)
    assert pr.key == "domain" and "unknown domain 'cooking'" in pr.message


def test_duplicate_id_names_first_line(tmp_path):
    p = write_lines(tmp_path / "t.jsonl", [task(), task(), task(id="t3")])
    (pr,) = problems_of(p)
    assert pr.line == 2 and pr.key == "id" and "first on line 1" in pr.message


def test_empty_text(tmp_path):
    p = write_lines(tmp_path / "t.jsonl", [task(explanation="   ")])
    (pr,) = problems_of(p)
    assert pr.key == "explanation" and pr.message == "empty text"


def test_wrong_types_and_origin(tmp_path):
    p = write_lines(tmp_path / "t.jsonl", [task(user_message=5, origin="llm", source="")])
    keys = sorted(pr.key for pr in problems_of(p))
    assert keys == ["origin", "source", "user_message"]


def test_every_problem_reported_at_once(tmp_path):
    p = write_lines(tmp_path / "t.jsonl", ["[1, 2]", task(domain="x"), task(id="t9", naive_query="")])
    probs = problems_of(p)
    assert [pr.line for pr in probs] == [1, 2, 3]
    assert "3 problem(s)" in str(DataError(probs))


def test_missing_file_and_bad_limit(tmp_path):
    assert "not found" in problems_of(tmp_path / "nope.jsonl")[0].message
    p = write_lines(tmp_path / "t.jsonl", [task()])
    with pytest.raises(DataError, match="dataset.limit"):
        load_tasks(p, limit=0)


def lme(n_sessions=2, **overrides):
    inst = {
        "question_id": "q1",
        "haystack_session_ids": [f"s{i}" for i in range(n_sessions)],
        "haystack_dates": [f"2023/05/{20 + i} (Sat) 02:21" for i in range(n_sessions)],
        "haystack_sessions": [[{"role": "user", "content": f"hi {i}"}, {"role": "assistant", "content": "hello",
                                "has_answer": False}] for i in range(n_sessions)],
    }
    inst.update(overrides)
    return inst


def test_trace_reads_longmemeval_list_and_index(tmp_path):
    p = tmp_path / "longmemeval_s.json"
    p.write_text(json.dumps([lme(2), lme(3, question_id="q2")]))
    t0, t1 = load_trace(p), load_trace(p, index=1)
    assert len(t0.sessions) == 2 and len(t1.sessions) == 3 and t1.id == "q2"
    assert t1.sessions[2].date == "2023/05/22 (Sat) 02:21" and t1.sessions[0].turns[0].content == "hi 0"
    with pytest.raises(DataError, match="trace.index"):
        load_trace(p, index=5)


def test_trace_malformed_reports_where(tmp_path):
    p = tmp_path / "bad.json"
    p.write_text(json.dumps([lme(2, haystack_dates=["x"])]))
    with pytest.raises(DataError, match="lengths differ"):
        load_trace(p)
    p.write_text(json.dumps([lme(1, haystack_sessions=[[{"role": "robot", "content": "x"}]])]))
    with pytest.raises(DataError, match=r"haystack_sessions\[0\]\[0\]"):
        load_trace(p)
    p.write_text("{broken")
    with pytest.raises(DataError, match="invalid JSON"):
        load_trace(p)
