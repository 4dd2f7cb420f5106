"""The visible-state score and the context budget through the protocol against the fake server: which part of the
answer context the fact's origin reached, the always-visible part (a profile, a short-term history, the
always-in-state file) or the part retrieved for the query, and how big that context was."""

from __future__ import annotations

import math


from inmind_exp.protocol.budget import context_tokens, count_tokens, prompt_tokens
from inmind_exp.memory.answering import Answerer, PaperPrompt
from inmind_exp.memory import SYSTEMS
from inmind_exp.protocol.metrics import LABELS, compute
from inmind_exp.display.headline import results_table
from inmind_exp.protocol.task import run_task
from inmind_exp.records import FACT_TURN_ID, Task, TaskRecord
from tests.conftest import make_trace

FACT = "I started learning the cello last month with a teacher named Mira."
TASK = Task(id="vs1", domain="other", user_message=FACT, assistant_message="Nice, enjoy the lessons with Mira.",
            naive_query="Which instrument did I start learning?",
            query="Can you suggest a weekly practice routine for my cello lessons?", explanation="-")


def updater(body) -> str:
    """The always-in-state updater: the previous file plus one line per user turn of the session."""
    prompt = body["messages"][-1]["content"]
    old = prompt.split("<memory>\n", 1)[1].split("\n</memory>", 1)[0]
    session = prompt.split("<session>\n", 1)[1].split("\n</session>", 1)[0]
    lines = [] if old == "(empty)" else old.splitlines()
    return "\n".join(lines + [f"- {ln[len('user: '):]}" for ln in session.splitlines() if ln.startswith("user: ")])


def run(name, models, encoder, tmp_path, **params) -> TaskRecord:
    cls = SYSTEMS.get(name)
    enc = encoder if cls.uses_embedding else None
    trace = make_trace(n_sessions=3, user_turns_per_session=2)
    return run_task(TASK, trace, 2, lambda wd: cls(models, enc, wd, **params), models, tmp_path / name,
                    config_hash=name, system_name=name)


def test_visible_state_and_retrieved_recall_split_the_context(fake, models, encoder, tmp_path):
    fake.add_rule("Rewrite the complete memory file", updater)
    records = {name: run(name, models, encoder, tmp_path, **params) for name, params in (
        ("always_in_state", {}), ("memoryos", {"short_term_capacity": 10}), ("naive_rag", {"top_k": 2}))}
    for name, rec in records.items():
        assert rec.error is None, (name, rec.error)
        assert rec.target_recall_provenance == 1, name
        # context tokens: the memory block alone; prompt tokens: the whole prompt around it
        assert rec.context_tokens == -(-rec.indirect.meta["memory_chars"] // 4) and rec.context_tokens > 0
        assert rec.prompt_tokens == count_tokens(rec.indirect.context_text()) > rec.context_tokens
        assert rec.context_items == len(rec.indirect.items)
    ais, mos, rag = records["always_in_state"], records["memoryos"], records["naive_rag"]
    # the whole file is always visible: the fact's line is in the persistent slice, nothing is retrieved
    assert all(it.visible for it in ais.indirect.items)
    assert (ais.visible_state_recall_provenance, ais.retrieved_recall_provenance) == (1, 0)
    # MemoryOS keeps the fact pair in its short-term history (capacity 10, 7 pairs): visible, not retrieved
    fact_items = [it for it in mos.indirect.items if FACT_TURN_ID in it.sources]
    assert [(it.kind, it.visible) for it in fact_items] == [("short_term", True)]
    assert (mos.visible_state_recall_provenance, mos.retrieved_recall_provenance) == (1, 0)
    # naive RAG has no persistent slice: the fact reached the answerer only by retrieval
    assert not any(it.visible for it in rag.indirect.items)
    assert (rag.visible_state_recall_provenance, rag.retrieved_recall_provenance) == (0, 1)
    assert rag.context_items == 2 and rag.context_tokens < ais.context_tokens

    # per run: the rates (MLflow metrics) and the mean context budget, in the results table too
    flats = {name: compute([rec]).flat() for name, rec in records.items()}
    assert flats["naive_rag"]["visible_state_recall_provenance"] == 0.0
    assert flats["naive_rag"]["retrieved_recall_provenance"] == 100.0
    assert flats["always_in_state"]["visible_state_recall_provenance"] == 100.0
    assert flats["memoryos"]["target_recall_provenance_union"] == 100.0
    assert flats["naive_rag"]["context_tokens"] == float(rag.context_tokens)
    table = results_table([(name, compute([rec])) for name, rec in records.items()])
    for label in (LABELS["visible_state_recall_provenance"], LABELS["retrieved_recall_provenance"],
                  LABELS["target_recall_provenance_union"], "context tokens"):
        assert label in table.splitlines()[0]
    assert f"| {rag.context_tokens} |" in table.splitlines()[-1]


def test_records_round_trip_the_new_fields_and_old_records_load_without_them(fake, models, encoder, tmp_path):
    rec = run("naive_rag", models, encoder, tmp_path, top_k=2)
    again = TaskRecord.from_dict(rec.to_dict())
    assert again == rec and again.indirect.items == rec.indirect.items
    old = {k: v for k, v in rec.to_dict().items() if k not in (
        "target_recall_provenance_union", "naive_recall_provenance_union", "visible_state_recall_provenance",
        "retrieved_recall_provenance", "context_tokens", "context_items", "ran")}
    loaded = TaskRecord.from_dict(old)
    assert loaded.visible_state_recall_provenance is None and loaded.context_tokens is None
    m = compute([loaded])
    assert m.rates["visible_state_recall_provenance"].n == 0 and math.isnan(m.context_tokens)
    assert "context_tokens" not in m.flat()


def test_context_tokens_count_the_memory_block_in_every_answer_mode(fake, models, encoder, tmp_path):
    """``answer=paper`` shows only the memory block as its visible context, ``shared`` the whole prompt: the context
    budget is the same block in both, the whole prompt a second figure."""
    mem = SYSTEMS.get("naive_rag")(models, encoder, tmp_path / "m", top_k=2)
    for s in make_trace(n_sessions=2, user_turns_per_session=2).sessions:
        mem.ingest_session(s)
    paper = Answerer("paper", PaperPrompt("A long release prompt, " * 40 + "{context}", sha256="0" * 64))
    shared, native, by_paper = (mem.answer(TASK.query, a) for a in (Answerer("shared"), Answerer("native"), paper))
    assert context_tokens(shared) == context_tokens(native) == context_tokens(by_paper) > 0
    assert prompt_tokens(by_paper) > prompt_tokens(shared) > context_tokens(shared)
