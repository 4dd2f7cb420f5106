"""The report on the official benchmark: fidelity and task set per run, the release's aggregate beside ours, and the
paper's own figures (checked against the paper's text) beside the measured ones of runs of the official tasks."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from inmind_exp.records import Answer, Message, TaskRecord, Verdict

from analysis.load import RunConfig, RunSet, flatten, make_runs
from analysis.official import paper_table, protocol_cell, protocol_table
from analysis.paper import PAPER_FIGURES
from analysis.tables import table1

import os

#: the paper's text beside the release copy (../shared/reference next to ../shared/inmind-official)
_CANDIDATES = [Path(os.environ["INMIND_RELEASE"]).resolve().parent / "reference" / "inmind-paper.md"] if os.environ.get(
    "INMIND_RELEASE") else []
_CANDIDATES.append(Path(__file__).resolve().parents[3] / "shared" / "reference" / "inmind-paper.md")
PAPER = next((p for p in _CANDIDATES if p.is_file()), _CANDIDATES[-1])


def official_params(system: str, embedding: str = "minilm", **over: object) -> dict[str, str]:
    cfg = {"system": {"name": system, "params": {}}, "embedding": {"name": embedding},
           "injection": {"name": "middle", "user_turn": 40, "fraction": None}, "answer": {"mode": "paper"},
           "judges": {"prompts": "paper"}, "dataset": {"name": "official", "path": None, "limit": None},
           "trace": {"name": "official", "path": None},
           "llm": {"name": "openai", "model": "gpt-5-mini", "max_tokens": 16384, "reasoning": True,
                   "roles": {"judge": {"max_tokens": 4096}}}}
    flat = flatten(cfg)
    flat.update({k: str(v) for k, v in over.items()})
    return flat


def records(system: str, app: int, tr: int = 0, naive: int = 0, n: int = 125, errors: int = 0) -> tuple:
    """``n`` official-like records (integer ids): the first ``app`` apply the fact, the first ``tr`` recall it; the
    last ``errors`` failed."""
    a = Answer("x", (Message("user", "q"),))
    out = []
    for i in range(n):
        v = {"application": Verdict("application", int(i < app)), "target_recall": Verdict("target_recall", int(i < tr)),
             "naive": Verdict("naive", int(i < naive))}
        err = "boom" if i >= n - errors else None
        out.append(TaskRecord("h" + system, str(i), "other", system, 8, a, None if err else a, v, 0, {}, 0.0,
                              error=err))
    return tuple(out)


def build(items):
    return make_runs([dict(config=RunConfig.from_params(p, "h" + p["system.name"]), params=p, records=recs,
                           source="test") for p, recs in items])


def test_protocol_cells_say_official_demo_or_how_many_deviations(runs):
    official = build([(official_params("backbone"), records("backbone", 105))])[0]
    assert protocol_cell(official) == "official"
    partial = build([(official_params("backbone"), records("backbone", 2, n=3))])[0]
    assert protocol_cell(partial) == "official tasks, 1 deviation"
    demo = runs[0]  # the fixture: bundled tasks, shared answer, strict judges
    assert protocol_cell(demo).startswith("demo tasks, ")
    t = table1([official, demo])
    assert list(t.display["protocol"]) == ["official", protocol_cell(demo)]
    data = t.data.set_index("configuration")
    assert data.loc[official.label, "application_official"] == pytest.approx(84.0)
    assert data.loc[official.label, "fidelity"] == "official" and data.loc[demo.label, "task_set"].startswith("demo")


def test_a_run_without_a_logged_config_is_unknown_not_demo():
    from analysis.load import Run

    run = Run(label="x/led", config=RunConfig.from_params({}, "h", "mem0"), records=records("mem0", 1, n=3))
    assert protocol_cell(run) == "unknown (no config logged)"
    assert protocol_table([run]).display.iloc[0]["fidelity"] == "configuration unknown (no config logged)"


def test_the_protocol_table_names_the_official_aggregate_apart_from_the_paired_rate():
    run = build([(official_params("mem0"), records("mem0", 10, tr=5, errors=5))])[0]
    row = protocol_table([run]).display.iloc[0]
    # paired: the 5 errored tasks are left out (10/120); official: they count as not 1 (10/125)
    assert row["application (paired)"].startswith("8.3 [")
    assert row["application_official (/125)"] == "8.0 (10/125)"
    assert row["fidelity"] == "official" and row["tasks"] == "official"


def test_no_paper_table_without_a_run_of_the_official_tasks(runs):
    assert paper_table(list(runs)) is None


def test_the_paper_figures_sit_beside_the_measured_ones_with_the_fidelity():
    items = [
        (official_params("backbone"), records("backbone", 105)),
        (official_params("naive_rag"), records("naive_rag", 20, tr=30)),
        (official_params("mem0", "minilm"), records("mem0", 18, tr=1)),
        (official_params("a_mem", "minilm"), records("a_mem", 8, tr=7)),
        (official_params("a_mem", "emb3", **{"llm.roles.judge.model": "gpt-4o"}), records("a_mem", 12, tr=15)),
        (official_params("always_in_state"), records("always_in_state", 86, naive=123)),
    ]
    t = paper_table(build(items))
    rows = t.display.set_index("Figure")
    backbone = rows.loc["Backbone (in context): application"]
    assert backbone["Paper"] == "84.0% (105/125, Wilson [76.6, 89.4])"
    assert backbone["Measured"].endswith("84.0% (105/125, Wilson [76.6, 89.4]); application_official 105/125 = 84.0%")
    assert backbone["Fidelity of the measured run(s)"] == "official"
    best = rows.loc["Best query-time (retrieval) configuration: application"]
    assert best["Measured"].startswith("highest: naive_rag/") and "16.0% (20/125" in best["Measured"]
    mem = rows.loc["Six memory systems: application, at most"]
    assert mem["Measured"].startswith("highest: mem0/") and "14.4%" in mem["Measured"]
    minilm = rows.loc["Memory systems: target recall under MiniLM"]
    assert minilm["Measured"].startswith("0.8–5.6% over 2 run(s)")  # mem0 1/125, a_mem 7/125
    emb3 = rows.loc["Memory systems: target recall under emb3-large"]
    assert emb3["Measured"].startswith("12.0–12.0% over 1 run(s)")
    assert emb3["Fidelity of the measured run(s)"] == "judge model=gpt-4o"  # its deviation shown beside it
    state = rows.loc["Always-in-state: naive (direct recall)"]
    assert "98.4% (123/125" in state["Measured"] and state["Paper"] == "98.4%"


def test_the_report_carries_the_protocol_and_paper_sections(tmp_path):
    from analysis.report import build as build_report

    runs = build([(official_params("backbone"), records("backbone", 105)),
                  (official_params("always_in_state", **{"answer.mode": "shared"}),
                   records("always_in_state", 80, naive=120))])
    rep = build_report(RunSet(runs=runs, origin="test"), tmp_path)
    md = rep.markdown.read_text()
    assert "## Protocol fidelity and the official aggregate" in md and "## The paper's reported figures beside ours" in md
    assert "84.0% (105/125, Wilson [76.6, 89.4])" in md and "answer=shared" in md
    assert (tmp_path / "tables" / "paper_figures.csv").is_file() and "paper_figures" in rep.tables
    assert not any(w.startswith("Demo tasks") for w in rep.warnings)


@pytest.mark.skipif(not PAPER.is_file(), reason=f"the paper's text is not at {PAPER}")
def test_every_paper_figure_is_printed_in_the_section_it_names():
    text = PAPER.read_text(encoding="utf-8")
    sections = {m.group(1): m.start() for m in re.finditer(r"^#+ (\d+(?:\.\d+)?) ", text, re.M)}
    starts = sorted(sections.values()) + [len(text)]

    def body(num: str) -> str:
        start = sections[num]
        return text[start:starts[starts.index(start) + 1]]

    for fig in PAPER_FIGURES:
        first = re.match(r"§(\d+(?:\.\d+)?)", fig.section).group(1)
        numbers = [f"{fig.low:.1f}"] + ([f"{fig.high:.1f}"] if fig.high != fig.low else [])
        for n in numbers:
            assert n in body(first), f"{fig.key}: {n} not in §{first}"
    assert "105/125" in body("4.3") and "[76.6,89.4]" in body("4.3") and "[10.6,23.4]" in body("4.3")
