"""report.html and report.md as a reader gets them: contents whose links reach every section, each shared legend
once (under Methods), no table note printed twice, and prose tables (the paper's figures) wrapping to the page.
The pages are parsed, not searched as text."""

from __future__ import annotations

import re
from html.parser import HTMLParser

from analysis.caveats import FLAG_NOTE
from analysis.compare import EXCLUSION_NOTE
from analysis.load import RunSet
from analysis.report import build
from analysis.report_html import LEGENDS, anchor, strip_legends
from analysis.table import CLUSTER_NOTE


class Page(HTMLParser):
    """The ids, the contents' links, the h2 headings, the notes under tables and the classes of each table."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: list[str] = []
        self.toc: list[str] = []
        self.h2: list[str] = []
        self.notes: list[str] = []
        self.tables: list[tuple[str, list[str]]] = []  # (classes, first row's cells)
        self.text: list[str] = []
        self._in: list[str] = []
        self._stack: list[tuple[str, dict]] = []
        self._note: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "id" in a:
            self.ids.append(a["id"])
        if tag == "a" and "toc" in self._in and a.get("href", "").startswith("#"):
            self.toc.append(a["href"][1:])
        if tag == "nav" and "toc" in (a.get("class") or ""):
            self._in.append("toc")
        if tag == "table":
            self.tables.append((a.get("class") or "", []))
        if tag == "p" and a.get("class") == "note":
            self._note = []
        self._stack.append((tag, a))

    def handle_endtag(self, tag):
        if tag == "nav" and "toc" in self._in:
            self._in.remove("toc")
        if tag == "p" and self._note is not None:
            note = "".join(self._note)
            if not note.startswith("Files:"):
                self.notes.append(note)
            self._note = None
        while self._stack and self._stack[-1][0] != tag:
            self._stack.pop()
        if self._stack:
            self._stack.pop()

    def handle_data(self, data):
        self.text.append(data)
        if self._note is not None:
            self._note.append(data)
        if not self._stack:
            return
        tag, a = self._stack[-1]
        if tag == "h2":
            self.h2.append(a.get("id", ""))
        if tag == "td" and self.tables:
            self.tables[-1][1].append(data)


def test_the_report_has_contents_anchors_and_each_legend_once(runs, tmp_path):
    rep = build(RunSet(runs=runs, origin="fixture"), tmp_path, formats=("png",))
    page = Page()
    page.feed(rep.html.read_text())
    text = "".join(page.text)
    # the contents link every section, in order, and each link reaches its heading
    assert page.toc == page.h2 and len(page.toc) >= 10 and page.toc[-1] == "methods"
    assert all(page.ids.count(a) == 1 for a in page.toc)
    # each shared legend once on the page, under Methods; the tables' own files keep theirs
    methods = text.split("Methods")[-1]
    for legend in LEGENDS:
        if legend in text:
            assert text.count(legend) == 1 and legend in methods, legend[:40]
    assert text.count(CLUSTER_NOTE) == 1 and text.count(EXCLUSION_NOTE) == 1
    assert CLUSTER_NOTE in (tmp_path / "tables" / "pairwise_application.md").read_text()
    # no note under a table is printed twice: the second table points to the first
    assert len(page.notes) == len(set(page.notes)), [n[:60] for n in page.notes if page.notes.count(n) > 1]
    assert any(n.startswith("Notes: as under") for n in page.notes)
    # the Markdown digest: the same contents, each pointing at a heading GitHub anchors the same way
    md = rep.markdown.read_text()
    links = re.findall(r"^\d+\. \[(.+)\]\(#(.+)\)$", md, re.M)
    headings = re.findall(r"^## (.+)$", md, re.M)
    assert [t for t, _ in links] == headings and all(a == anchor(t) for t, a in links)
    assert md.count(CLUSTER_NOTE) == 1 and md.count(EXCLUSION_NOTE) == 1
    # report.md repeated the pairwise note under all four pairwise tables: now once, the others point to it
    assert md.count("Holm controls the family-wise error") == 1 and md.count("Notes: as under **") >= 2


def test_the_papers_figures_wrap_to_the_page_and_number_tables_do_not():
    from tests.analysis.test_official import build as build_runs, official_params, records

    import tempfile
    from pathlib import Path

    rs = RunSet(runs=build_runs([(official_params("backbone"), records("backbone", 105)),
                                 (official_params("naive_rag"), records("naive_rag", 20, tr=60, naive=70))]),
                origin="official-like")
    with tempfile.TemporaryDirectory() as tmp:
        page = Page()
        page.feed(build(rs, Path(tmp), formats=("png",)).html.read_text())
    by_first = {cells[0] if cells else "": classes for classes, cells in page.tables}
    assert "wrap" in by_first["Backbone (in context): application"].split()  # the paper's figures
    assert any("wrap" not in c.split() for c, _ in page.tables)  # the headline keeps its numbers on one line


def test_a_legend_leaves_a_note_with_a_pointer_and_nothing_else_changes():
    note = f"12 pairs; Holm over all. {CLUSTER_NOTE} {EXCLUSION_NOTE} {FLAG_NOTE}"
    assert strip_legends(note) == "12 pairs; Holm over all. Shared legends: Methods."
    assert strip_legends("Columns by session.") == "Columns by session."
    assert strip_legends(f" {CLUSTER_NOTE}") == "Shared legends: Methods."
