"""Hostile input: invalid UTF-8, oversize lines and fields, empty sessions, null or malformed dates, duplicate
session ids and out-of-range trace indices each give a ``DataError`` naming file, line (where there is one) and key."""

from __future__ import annotations

import json

import pytest

from inmind_exp.data import DataError, load_tasks, load_trace
from inmind_exp.data.text import MAX_FIELD_BYTES, MAX_LINE_BYTES, parse_date
from tests.data.test_loaders import lme, task


def problems(fn, *args, **kw):
    with pytest.raises(DataError) as err:
        fn(*args, **kw)
    return err.value.problems


def test_task_invalid_utf8_names_line_and_key(tmp_path):
    p = tmp_path / "t.jsonl"
    good = task().encode()
    bad = task(id="t2", query="Any good QUERY recipes?").encode().replace(b"QUERY", b"caf\xe9")  # latin-1 byte
    p.write_bytes(good + b"\n" + bad + b"\n")
    (pr,) = problems(load_tasks, p)
    assert (pr.path, pr.line, pr.key) == (str(p), 2, "query")
    assert "not valid UTF-8 (byte 0xe9" in pr.message
    assert str(pr).startswith(f"{p}:2 [query]: not valid UTF-8")


def test_task_invalid_utf8_outside_a_string_names_the_line(tmp_path):
    p = tmp_path / "t.jsonl"
    p.write_bytes(task().encode() + b"\n\xff\xfe{}\n")
    (pr,) = problems(load_tasks, p)
    assert pr.line == 2 and pr.key is None and "not valid UTF-8 (byte 0xff" in pr.message


def test_task_oversize_line_and_field(tmp_path):
    p = tmp_path / "t.jsonl"
    huge_line = task(id="t2", explanation="x" * (MAX_LINE_BYTES + 10))
    big_field = task(id="t3", user_message="y" * (MAX_FIELD_BYTES + 1))
    p.write_text("\n".join([task(), huge_line, big_field, task(id="t4")]) + "\n")
    line_pr, field_pr = problems(load_tasks, p)
    assert line_pr.line == 2 and line_pr.key is None
    assert f"line is {len(huge_line.encode())} bytes; the limit is {MAX_LINE_BYTES}" == line_pr.message
    assert (field_pr.line, field_pr.key) == (3, "user_message")
    assert f"the limit is {MAX_FIELD_BYTES}" in field_pr.message


def test_task_5mb_line_without_newline_is_refused(tmp_path):
    p = tmp_path / "t.jsonl"
    p.write_text(task() + "\n" + task(id="t2", query="z" * 5_000_000))
    (pr,) = problems(load_tasks, p)
    assert pr.line == 2 and "line is 5000" in pr.message


def test_task_limits_leave_good_files_alone(tmp_path):
    p = tmp_path / "t.jsonl"
    p.write_text(task(explanation="é" * 1000) + "\n\n" + task(id="t2") + "\n")
    assert [t.id for t in load_tasks(p)] == ["t1", "t2"]
    assert len(load_tasks()) > 0  # the bundled set passes every check


def write_trace(tmp_path, *instances):
    p = tmp_path / "trace.json"
    p.write_text(json.dumps(list(instances)))
    return p


def test_trace_empty_session(tmp_path):
    inst = lme(3)
    inst["haystack_sessions"][1] = []
    (pr,) = problems(load_trace, write_trace(tmp_path, inst))
    assert pr.key == "instance 0.haystack_sessions[1]" and "empty session" in pr.message


@pytest.mark.parametrize("date", [None, "", "yesterday", "2023/13/45 (Sat) 02:21", "20/05/2023", 20230520])
def test_trace_null_or_malformed_date(tmp_path, date):
    inst = lme(2)
    inst["haystack_dates"][1] = date
    (pr,) = problems(load_trace, write_trace(tmp_path, inst))
    assert pr.path == str(tmp_path / "trace.json") and pr.key == "instance 0.haystack_dates[1]"
    assert repr(date) in pr.message


def test_trace_dates_in_longmemeval_and_iso_formats_load(tmp_path):
    inst = lme(3, haystack_dates=["2023/05/20 (Sat) 02:21", "2023-05-21T10:00:00", "2023-05-22 08:30:00+02:00"])
    trace = load_trace(write_trace(tmp_path, inst))
    assert [s.date for s in trace.sessions] == inst["haystack_dates"]
    assert parse_date("2023/05/20 (Sat) 02:21").isoformat() == "2023-05-20T02:21:00"
    assert len(load_trace().sessions) == 47  # the bundled trace passes every check


@pytest.mark.parametrize("index", [-1, -2, 2, 99])
def test_trace_negative_or_out_of_range_index(tmp_path, index):
    p = write_trace(tmp_path, lme(2), lme(2, question_id="q2"))
    (pr,) = problems(load_trace, p, index=index)
    assert pr.key == "trace.index" and f"index {index} out of range" in pr.message and "0 to 1" in pr.message


def test_trace_invalid_utf8_names_line_and_key(tmp_path):
    p = tmp_path / "trace.json"
    text = json.dumps([lme(2)], indent=1).replace('"hi 1"', '"hi BAD"')
    p.write_bytes(text.encode().replace(b"BAD", b"\xff"))
    line = text.splitlines().index(next(ln for ln in text.splitlines() if "hi BAD" in ln)) + 1
    (pr,) = problems(load_trace, p)
    assert (pr.line, pr.key) == (line, "instance 0.haystack_sessions[1][0].content")
    assert "not valid UTF-8 (byte 0xff" in pr.message


def test_trace_oversize_turn_and_duplicate_or_null_session_ids(tmp_path):
    inst = lme(3, haystack_session_ids=["s0", "s0", None])
    inst["haystack_sessions"][2][1]["content"] = "w" * (MAX_FIELD_BYTES + 1)
    (pr,) = problems(load_trace, write_trace(tmp_path, inst))
    assert pr.key == "instance 0.haystack_sessions[2][1].content" and "the limit is" in pr.message
    inst["haystack_sessions"][2][1]["content"] = "fine"
    keys = {pr.key: pr.message for pr in problems(load_trace, write_trace(tmp_path, inst))}
    assert "duplicate session id 's0'" in keys["instance 0.haystack_session_ids[1]"]
    assert "None" in keys["instance 0.haystack_session_ids[2]"]
