"""The one headline table (terminal, MLflow results.md, the report): its columns, that it fits 100 terminal columns
with long configuration names, and the flag on a configuration whose fact-write fault rate is above the limit."""

from __future__ import annotations

from inmind_exp.display import headline
from inmind_exp.protocol.metrics import compute
from inmind_exp.records import TaskRecord
from tests.analysis.fixtures import Spec, make_records


def metrics(spec: Spec, n: int = 40):
    return compute([TaskRecord.from_dict(d) for d in make_records(spec, n=n)])


CLEAN = Spec("naive_rag", "minilm", "c" * 16, 0.9, 0.5, 0.4)
FAULTY = Spec("mem0", "minilm", "1" * 16, 0.9, 0.2, 0.1, fault_every=2, fact_fault_every=1)  # every task


def test_columns_and_cells():
    m = metrics(CLEAN)
    text = headline.table([("naive_rag/minilm/middle/openai", m.flat())])
    head, rule, row = text.splitlines()[:3]
    assert [c.strip() for c in head.strip("|").split("|")] == list(headline.HEADERS)
    cells = [c.strip() for c in row.strip("|").split("|")]
    a = m.rates["application"]
    assert cells[0] == "naive_rag/minilm/middle/openai" and cells[1] == "40"
    assert cells[2] == f"{a.pct:.1f} [{a.ci[0]:.0f}–{a.ci[1]:.0f}]"
    assert cells[4] == f"{m.rates['naive'].pct:.1f}" and cells[5] == "0/0%"
    assert headline.NOTE in text and headline.FAULT_FLAG not in row


def test_fits_100_columns_with_long_names():
    long = "hipporag2/text-embedding-3-large-custom/late_fraction_0.9/openai_gpt-5-mini [judge.model=gpt-4o]"
    rows = [(long, metrics(CLEAN).flat()), ("mem0/minilm/middle/openai", metrics(FAULTY).flat())]
    text = headline.table(rows, width=headline.TERMINAL_WIDTH)
    assert all(len(line) <= 100 for line in text.splitlines()), max(map(len, text.splitlines()))
    table = [line for line in text.splitlines() if line.startswith("|")]
    assert len({len(line) for line in table}) == 1  # aligned
    assert "hipporag2/" in table[2] and "gpt-4o]" in table[2] and "…" in table[2]  # cut in the middle
    assert "| mem0/minilm/middle/openai " in table[3]


def test_fact_write_faults_above_the_limit_are_flagged():
    m = metrics(FAULTY)
    assert m.fact_write_fault_rate == 100.0 and headline.fact_write_flagged(m.flat())
    text = headline.terminal([("mem0/minilm/middle/openai", m), ("naive_rag/minilm/middle/openai", metrics(CLEAN))],
                             full="/tmp/x/results.md")
    mem0 = next(line for line in text.splitlines() if line.startswith("| mem0"))
    assert mem0.rstrip(" |").endswith(f"50/100% {headline.FAULT_FLAG}")
    assert f"above {headline.FACT_WRITE_FAULT_LIMIT:.0f}% (mem0/minilm/middle/openai)" in text.replace("\n", " ")
    assert "never the best one nor part of a tie" in text.replace("\n", " ") and text.endswith("\n  /tmp/x/results.md")
    below = Spec("mem0", "minilm", "2" * 16, 0.9, 0.2, 0.1, fact_fault_every=10)  # 10%: not flagged
    assert not headline.fact_write_flagged(metrics(below).flat())


def test_the_in_context_controls_naive_is_a_dash():
    """The backbone's Naive (answered with the fact in context) is "–", with the note saying why."""
    m = {"n_tasks": 2.0, "application": 50.0, "application_n": 2.0, "naive": 100.0, "naive_n": 2.0}
    assert headline.cells("b", m, in_context=True)[4] == "–" and headline.cells("b", m)[4] == "100.0"
    text = headline.table([("b", m), ("x", m)], in_context={"b"})
    assert "| b" in text and headline.IN_CONTEXT_NOTE in text
    assert headline.IN_CONTEXT_NOTE not in headline.table([("x", m)])
