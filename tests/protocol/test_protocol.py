"""Injection positions, the naive/indirect isolation, exact target recall and judge errors."""

from __future__ import annotations

import pytest

from inmind_exp.llm.embed import MiniLMEncoder
from inmind_exp.protocol.bounds import exact_target_recall
from inmind_exp.protocol.task import InjectionSpec, inject, injection_session_index, run_task
from inmind_exp.records import Answer, Message, Session, Task, Trace, Turn
from inmind_exp.memory import SYSTEMS
from tests.conftest import make_trace

TASK = Task(id="t1", domain="health_wellness", user_message="I have a tree nut allergy.",
            assistant_message="Noted, thanks for telling me.", naive_query="What allergy do I have?",
            query="Any good macaron recipes for this weekend?", explanation="Macarons are made with almond flour.")


def uneven_trace() -> Trace:
    # user turns per session: 3, 1, 4, 2  -> cumulative 3, 4, 8, 10
    sizes = [3, 1, 4, 2]
    sessions = []
    for i, n in enumerate(sizes):
        turns = []
        for j in range(n):
            turns += [Turn("user", f"s{i} u{j}"), Turn("assistant", f"s{i} a{j}")]
        sessions.append(Session(f"s{i}", f"2024/01/0{i + 1} (Mon) 10:00", tuple(turns)))
    return Trace("uneven", tuple(sessions))


@pytest.mark.parametrize("user_turn,expected", [(1, 0), (3, 0), (4, 1), (5, 2), (8, 2), (9, 3), (10, 3)])
def test_session_holding_nth_user_turn(user_turn, expected):
    assert injection_session_index(uneven_trace(), InjectionSpec("position", user_turn=user_turn)) == expected


def test_fraction_positions_and_out_of_range():
    t = uneven_trace()
    assert injection_session_index(t, InjectionSpec("early", fraction=0.05)) == 0
    assert injection_session_index(t, InjectionSpec("late", fraction=0.9)) == 3
    with pytest.raises(ValueError, match="injection.user_turn=11"):
        injection_session_index(t, InjectionSpec("position", user_turn=11))


def test_paper_middle_on_a_47_session_trace():
    # 47 sessions of 5 user turns: the 40th user turn is the last one of session 8 (0-based 7)
    t = make_trace(n_sessions=47, user_turns_per_session=5)
    assert injection_session_index(t, InjectionSpec("middle", user_turn=40)) == 7
    assert injection_session_index(t, InjectionSpec("middle", user_turn=41)) == 8


def test_inject_appends_pair_at_end_of_session_and_keeps_order():
    t = uneven_trace()
    sessions = inject(t, TASK, 2)
    assert [s.id for s in sessions] == ["s0", "s1", "s2", "s3"]
    s2 = sessions[2]
    plain = lambda turns: [(x.role, x.content) for x in turns]  # noqa: E731
    assert plain(s2.turns[:-2]) == plain(t.sessions[2].turns)
    assert [x.id for x in s2.turns] == [f"s2#{i}" for i in range(8)] + ["inmind:fact", "inmind:fact-reply"]
    assert (s2.turns[-2].role, s2.turns[-2].content, s2.turns[-2].injected) == ("user", TASK.user_message, True)
    assert (s2.turns[-1].role, s2.turns[-1].content) == ("assistant", TASK.assistant_message)
    assert plain(sessions[1].turns) == plain(t.sessions[1].turns) and plain(sessions[3].turns) == plain(t.sessions[3].turns)
    assert t.sessions[2].turns[-1].content == "s2 a3"  # the original trace is untouched


def test_exact_target_recall_folds_case_and_space():
    ctx = (Message("system", "Memories:\n- [2024/01/01] user: I have a  TREE nut\nallergy."),)
    assert exact_target_recall(TASK, Answer("x", ctx)) == 1
    assert exact_target_recall(TASK, Answer("x", (Message("system", "I have a nut allergy"),))) == 0


def test_ingestion_order_and_naive_isolation(models, tmp_path):
    """Prefix, injected session, then the rest in order; the indirect query never sees the naive exchange."""
    seen: list[str] = []
    from inmind_exp.memory import MemorySystem, Recall

    class Recorder(MemorySystem):
        def __init__(self, llm, encoder, workdir, **p):
            super().__init__(llm, encoder, workdir, **p)
            self.log: list[str] = []

        def ingest_session(self, session):
            self.log.append(session.id + ("+fact" if any(t.injected for t in session.turns) else ""))

        def recall(self, query):
            self.log.append("Q:" + query)  # a system that writes every exchange to memory
            seen.append("|".join(self.log))
            return Recall("|".join(self.log), ())

        def snapshot(self, d):
            d.mkdir(parents=True, exist_ok=True)
            (d / "log.txt").write_text("\n".join(self.log))

        def restore(self, d):
            self.log = (d / "log.txt").read_text().splitlines()

    trace = uneven_trace()
    make = lambda wd: Recorder(models, None, wd)  # noqa: E731
    rec = run_task(TASK, trace, 2, make, models, tmp_path / "w", config_hash="h", system_name="recorder")
    assert rec.error is None
    assert seen[0] == "s0|s1|s2+fact|s3|Q:What allergy do I have?"
    assert seen[1] == "s0|s1|s2+fact|s3|Q:Any good macaron recipes for this weekend?"
    assert set(rec.verdicts) == {"naive", "application", "target_recall", "answer_only"}


def test_backbone_end_to_end_with_judges(models, tmp_path, fake):
    fake.add_rule("[user_message] (the target fact)", {"score": 1, "reason": "fact present"})
    fake.add_rule("[explanation] (what a correct answer must do)", {"score": 0, "reason": "not applied"})
    backbone = SYSTEMS.get("backbone")
    make = lambda wd: backbone(models, None, wd)  # noqa: E731
    rec = run_task(TASK, make_trace(), 1, make, models, tmp_path / "w", config_hash="h", system_name="backbone",
                   evaluates_naive=False)
    assert rec.error is None and rec.naive is None
    ctx = rec.indirect.context
    assert [m.role for m in ctx] == ["system", "user", "assistant", "user"]
    assert ctx[1].content == TASK.user_message and ctx[-1].content == TASK.query
    assert rec.target_recall_exact == 1
    assert rec.verdicts["target_recall"].score == 1 and rec.verdicts["application"].score == 0
    assert "naive" not in rec.verdicts
    assert rec.usage["judge"].calls == 3 and rec.usage["answerer"].calls == 1
    judge_prompts = [r for r in fake.chat_requests() if r.get("response_format")]
    tr = next(r for r in judge_prompts if "(the target fact)" in r["messages"][1]["content"])
    assert "[answer]" not in tr["messages"][1]["content"]  # the target-recall judge never sees the answer


def test_unparseable_judge_is_an_error_of_its_verdict_not_a_score(models, tmp_path, fake):
    fake.add_rule("[user_message] (the target fact)", "I think yes")
    backbone = SYSTEMS.get("backbone")
    rec = run_task(TASK, make_trace(), 1, lambda wd: backbone(models, None, wd), models, tmp_path / "w",
                   config_hash="h", system_name="backbone", evaluates_naive=False, judge_attempts=2)
    v = rec.verdicts["target_recall"]
    assert v.score is None and v.error and v.raw == "I think yes"
    # the error is the verdict's: the task, its answers and its other verdicts stand
    assert rec.error is None and rec.indirect is not None
    assert rec.failed_verdicts == ("target_recall",) and rec.verdicts["application"].ok


def test_endpoint_failure_is_recorded_as_task_error(models, tmp_path, fake):
    from tests.fake_openai import Fault

    fake.fail_next(*[Fault(status=500)] * 10)
    backbone = SYSTEMS.get("backbone")
    rec = run_task(TASK, make_trace(), 1, lambda wd: backbone(models, None, wd), models, tmp_path / "w",
                   config_hash="h", system_name="backbone", evaluates_naive=False)
    assert rec.error and "HTTP 500" in rec.error and rec.verdicts == {}


def test_negative_usage_is_a_bad_usage_diagnostic_on_the_record(models, tmp_path, fake):
    """An endpoint reporting negative token counts: the task still scores, each answerer and judge reply is noted
    as a ``bad_usage`` diagnostic (no memory fault) and the usage is counted as 0 tokens."""
    fake.usage = {"prompt_tokens": -5, "completion_tokens": -2, "total_tokens": -7}
    backbone = SYSTEMS.get("backbone")
    rec = run_task(TASK, make_trace(), 1, lambda wd: backbone(models, None, wd), models, tmp_path / "w",
                   config_hash="h", system_name="backbone", evaluates_naive=False)
    assert rec.error is None
    bad = [f for f in rec.faults if f.kind == "bad_usage"]
    assert bad and all(f.diagnostic for f in bad) and {f.where for f in bad} == {"answerer", "judge"}
    assert len(bad) == rec.usage["answerer"].calls + rec.usage["judge"].calls  # the judges' replies too
    assert rec.usage["answerer"].prompt_tokens == 0 and rec.usage["answerer"].calls >= 1


def test_naive_rag_retrieves_injected_turn_for_direct_query(models, tmp_path):
    rag = SYSTEMS.get("naive_rag")
    enc = MiniLMEncoder()
    rec = run_task(TASK, make_trace(), 1, lambda wd: rag(models, enc, wd, top_k=3), models, tmp_path / "w",
                   config_hash="h", system_name="naive_rag")
    assert rec.error is None
    assert "tree nut allergy" in rec.naive.context[0].content
    assert rec.naive.context[0].content.count("\n- ") == 3


def test_fact_rank_is_the_first_fact_items_place_among_the_items():
    from inmind_exp.protocol.bounds import fact_rank
    from inmind_exp.records import FACT_TURN_ID, ContextItem, TaskRecord

    items = (ContextItem("chunk", "a", ("s0#1",)), ContextItem("chunk", "b", ("s1#0", FACT_TURN_ID)),
             ContextItem("chunk", "c", (FACT_TURN_ID,)))
    assert fact_rank(Answer("x", (), items=items)) == 2
    assert fact_rank(Answer("x", (), items=items[:1])) is None  # not among the items
    assert fact_rank(Answer("x", (), items=None)) is None and fact_rank(None) is None  # not measured
    rec = TaskRecord("h", "t1", "other", "s", 0, None, None, {}, None, {}, 0.0, target_fact_rank=4)
    back = TaskRecord.from_dict(rec.to_dict())
    assert back.target_fact_rank == 4 and back.naive_fact_rank is None
    del_keys = {k: v for k, v in rec.to_dict().items() if not k.endswith("_fact_rank")}
    assert TaskRecord.from_dict(del_keys).target_fact_rank is None  # records written before the field


def test_fact_rank_on_the_task_record(models, tmp_path):
    backbone = SYSTEMS.get("backbone")
    rec = run_task(TASK, make_trace(), 1, lambda wd: backbone(models, None, wd), models, tmp_path / "w",
                   config_hash="h", system_name="backbone", evaluates_naive=False)
    # the backbone's items are the trace turns in order: the fact is where it was injected
    pos = next(i for i, it in enumerate(rec.indirect.items, 1) if it.text == TASK.user_message)
    assert rec.target_fact_rank == pos and rec.naive_fact_rank is None
    rag = SYSTEMS.get("naive_rag")
    rec = run_task(TASK, make_trace(), 1, lambda wd: rag(models, MiniLMEncoder(), wd, top_k=3), models,
                   tmp_path / "r", config_hash="h", system_name="naive_rag")
    ranks = [i for i, it in enumerate(rec.naive.items, 1) if "tree nut allergy" in it.text]
    assert rec.naive_fact_rank == ranks[0] and 1 <= rec.naive_fact_rank <= 3
