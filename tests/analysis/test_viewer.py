"""The per-task viewer: its HTML (escaped model output, the fact's items highlighted with their rank, every verdict
and reason, the filters' data) without a browser, and the page's script in real headless Chromium (filters read
from the URL, the DOM dumped after the script ran). The browser test skips when Chromium is not installed: CI
installs only what the project's files install, and Chromium is a system package (``apt-get install chromium``)."""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from inmind_exp.records import FACT_REPLY_TURN_ID, FACT_TURN_ID, Answer, ContextItem, Message, Task, TaskRecord, Verdict

from analysis.__main__ import main
from analysis.load import RunSet
from analysis.viewer import VIEWER_FILE, highlight, render
from tests.analysis.conftest import build_runs
from tests.analysis.fixtures import Spec, make_records, write_sweep

EVIL = "<script>window.pwned=1</script><img src=x onerror=alert(1)>"
SPECS3 = (Spec("backbone", "minilm", "b" * 16, None, 1.0, 0.9),
          Spec("naive_rag", "minilm", "c" * 16, 0.9, 0.5, 0.4, fact_fault_every=4),
          Spec("mem0", "minilm", "1" * 16, 0.9, 0.2, 0.1))
N = 8


def tasks() -> dict[str, Task]:
    return {f"t{i:03d}": Task(f"t{i:03d}", "health_wellness" if i % 2 else "financial",
                              f"I am allergic to peanuts, fact number {i}.", "Noted.", f"What am I allergic to ({i})?",
                              f"Plan a snack for me ({i}).", f"No peanuts in the snack ({i}).") for i in range(N)}


def _with_contexts(spec: Spec, rows: list[dict]) -> list[dict]:
    """Give each record a context holding the fact as its second item (rank 2) and, for mem0, a hostile answer."""
    out = []
    for d in rows:
        t = tasks()[d["task_id"]]
        items = (ContextItem("chunk", "We talked about the weather.", ("s0#0",)),
                 ContextItem("chunk", t.user_message, (FACT_TURN_ID,)), ContextItem("chunk", "Noted.", (FACT_REPLY_TURN_ID,)))
        ctx = (Message("system", "Memory:\n" + "\n".join(f"- {it.text}" for it in items)), Message("user", t.query))
        rec = TaskRecord.from_dict(d)
        text = EVIL if spec.system == "mem0" else f"{spec.system} answer to {t.id}"
        ind = Answer(text, ctx, items=items)
        nai = Answer(f"{spec.system} naive {t.id}", ctx, items=items) if rec.naive else None
        verdicts = {k: Verdict(v.judge, v.score, reason=f"{spec.system} reason {k} {t.id} {EVIL}")
                    for k, v in rec.verdicts.items()}
        d = {**rec.to_dict(), "indirect": ind.to_dict(), "naive": nai.to_dict() if nai else None,
             "verdicts": {k: vars(v) for k, v in verdicts.items()}, "target_fact_rank": 2,
             "naive_fact_rank": 2 if nai else None}
        out.append(d)
    return out


def runset() -> RunSet:
    recs = {s: _with_contexts(s, make_records(s, n=N)) for s in SPECS3}
    return RunSet(runs=build_runs(recs), origin="test fixture")


class Collect(HTMLParser):
    """Tags, and the text inside <mark> and <script> elements."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.marks: list[str] = []
        self.scripts = 0
        self._in: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        self._in.append(tag)
        self.scripts += tag == "script"

    def handle_endtag(self, tag):
        if self._in and self._in[-1] == tag:
            self._in.pop()

    def handle_data(self, data):
        if self._in and self._in[-1] == "mark":
            self.marks.append(data)


def test_highlight_escapes_and_marks():
    assert highlight("a <b> peanut allergy & c", ["peanut allergy"]) == "a &lt;b&gt; <mark>peanut allergy</mark> &amp; c"
    assert highlight("xx abcdef yy", ["abcd", "cdef"]) == "xx <mark>abcdef</mark> yy"  # overlaps merged
    assert highlight("<i>", []) == "&lt;i&gt;"


def test_page_structure_without_a_browser():
    rs = runset()
    page = render(rs, tasks())
    p = Collect()
    p.feed(page)
    assert p.scripts == 1  # only the page's own script
    assert EVIL not in page and "&lt;script&gt;window.pwned=1&lt;/script&gt;" in page
    assert not any(t == "img" for t, _ in p.tags)
    assert "http://" not in page and "https://" not in page  # self-contained: no CDN, no network
    sections = [a for t, a in p.tags if t == "section"]
    assert [s["data-task"] for s in sections] == sorted(tasks())
    labels = [r.label for r in rs.runs]
    for s in sections:
        assert len(json.loads(s["data-app"])) == 3
    # the fact, both queries, the explanation; each configuration's answers, verdict reasons, bounds and rank
    assert "I am allergic to peanuts, fact number 3." in page and "Plan a snack for me (3)." in page
    assert "What am I allergic to (3)?" in page and "No peanuts in the snack (3)." in page
    for label in labels:
        assert page.count(f"<h3>{label}</h3>") == N
    assert "backbone answer to t003" in page and "naive_rag answer to t003" in page
    assert "naive_rag reason application t003" in page and "Target recall, provenance (origin)" in page
    assert "position 2 of 3" in page and "rank 2 of 3" in page  # the backbone is a control; naive_rag retrieves
    assert "I am allergic to peanuts, fact number 3." in p.marks  # the fact's item highlighted in the context
    assert "We talked about the weather." not in p.marks
    # the filters' data: fact-write faults (every 4th naive_rag task) and the per-configuration application
    fwf = {s["data-task"] for s in sections if json.loads(s["data-fwf"])}
    assert fwf == {"t000", "t004"}
    opts = [a.get("value") for t, a in p.tags if t == "option"]
    assert {"0", "1", "2", "financial", "health_wellness"} <= set(opts)


def test_view_command_writes_beside_the_report(tmp_path, capsys):
    root = write_sweep(tmp_path / "sweep", SPECS3)
    task_file = tmp_path / "tasks.jsonl"
    task_file.write_text("".join(json.dumps(t.to_dict()) + "\n" for t in tasks().values()))
    assert main(["view", "--sweep-dir", str(root), "--out", str(tmp_path / "rep"), "--tasks", str(task_file)]) == 0
    page = (tmp_path / "rep" / VIEWER_FILE).read_text()
    assert "viewer of 3 configurations" in capsys.readouterr().out
    assert "I am allergic to peanuts, fact number 0." in page and page.count("<section class='task'") == 40
    # without task texts the records are still shown, and the page says why the texts are missing
    assert main(["view", "--sweep-dir", str(root), "--out", str(tmp_path / "rep2")]) == 0
    assert "without text in the task file" in capsys.readouterr().err
    assert "task text not available" in (tmp_path / "rep2" / VIEWER_FILE).read_text()


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def dump_dom(page: Path, query: str, tmp_path: Path) -> str:
    from docs.screenshots import CHROME_FLAGS

    cmd = [_chromium(), *CHROME_FLAGS, f"--user-data-dir={tmp_path / 'chrome-profile'}", "--virtual-time-budget=5000",
           "--dump-dom", page.as_uri() + query]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


@pytest.mark.skipif(_chromium() is None, reason="Chromium not installed (apt-get install chromium); CI installs "
                                                "only the project's Python packages")
def test_viewer_in_headless_chromium(tmp_path):
    rs = runset()
    page = tmp_path / VIEWER_FILE
    page.write_text(render(rs, tasks()))
    dom = dump_dom(page, "?task=t003", tmp_path)
    assert "<body class=\"js\">" in dom  # the script ran
    shown = re.findall(r'<section class="task shown"[^>]*data-task="([^"]+)"', dom)
    assert shown == ["t003"]
    assert "I am allergic to peanuts, fact number 3." in dom
    for system in ("backbone", "naive_rag"):
        assert f"{system} answer to t003" in dom
    assert "&lt;script&gt;window.pwned=1" in dom and "<img src=\"x\"" not in dom  # mem0's hostile answer as text
    assert f"{len(tasks())} of {len(tasks())} tasks" in dom

    # a filter: A = naive_rag applied it, B = mem0 did not; the list and the shown task follow it
    labels = [r.label for r in rs.runs]
    a, b = labels.index("naive_rag/minilm/middle/openai"), labels.index("mem0/minilm/middle/openai")
    want = sorted(t for t in tasks() if rs.runs[a].by_task[t].verdicts["application"].score == 1
                  and rs.runs[b].by_task[t].verdicts["application"].score == 0)
    dom = dump_dom(page, f"?a={a}&b={b}", tmp_path)
    listed = re.findall(r'<li (data-index="[^>]*)><a href="#task-\d+">([^<]+)</a>', dom)
    assert len(listed) == len(tasks())
    visible = sorted(t for attrs, t in listed if "hidden" not in attrs)
    assert visible == want and f"{len(want)} of {len(tasks())} tasks" in dom
    if want:
        assert re.findall(r'<section class="task shown"[^>]*data-task="([^"]+)"', dom) == [want[0]]
    dom = dump_dom(page, "?fwf=1", tmp_path)
    assert "2 of 8 tasks" in dom
    from analysis.viewer import disagrees

    split = {t: any(disagrees(r.by_task[t]) for r in rs.runs) for t in tasks()}
    assert 0 < sum(split.values()) < len(tasks())
    assert f"{sum(split.values())} of {len(tasks())} tasks" in dump_dom(page, "?disagree=1", tmp_path)
    n_fin = sum(v for t, v in split.items() if tasks()[t].domain == "financial")
    assert f"{n_fin} of {len(tasks())} tasks" in dump_dom(page, "?disagree=1&domain=financial", tmp_path)


def test_the_viewer_reads_an_official_runs_task_texts_from_the_release(release):
    """A run of dataset=official logs no dataset.path: its task texts come from the release (hash-checked)."""
    from types import SimpleNamespace

    from analysis.viewer import load_task_texts

    run = SimpleNamespace(params={"dataset.name": "official", "dataset.path": "None"},
                          records=[SimpleNamespace(task_id="0"), SimpleNamespace(task_id="155")])
    tasks, problems = load_task_texts([run])
    assert problems == [] and tasks["155"].extra["task_id"] == 155 and tasks["0"].user_message


def test_the_fact_counts_agree_between_the_position_line_and_the_item_list():
    """A context whose only trace of the fact is the assistant's reply: the position line and the list's summary
    say the same ("none from the fact turn", the reply's item apart), never "no item from the fact" above "1 from
    the fact"."""
    from analysis.viewer import items_text, position_text

    others = tuple(ContextItem("chunk", f"other {i}", (f"s{i}#0",)) for i in range(4))
    reply_only = Answer("a", (), items=(*others, ContextItem("chunk", "Noted.", (FACT_REPLY_TURN_ID,))))
    assert position_text(reply_only, None, True) == ("no item from the fact turn among 5 item(s) (1 from the "
                                                     "assistant's reply: item 5)")
    assert items_text(reply_only) == "5 item(s) in the context, none from the fact turn, 1 from the assistant's reply: item 5"
    both = Answer("a", (), items=(others[0], ContextItem("chunk", "fact", (FACT_TURN_ID, FACT_REPLY_TURN_ID))))
    assert position_text(both, None, True) == "rank 2 of 2" and items_text(both).endswith(", 1 from the fact turn")

    page = render(runset(), tasks())
    p = Collect()
    p.feed(page)
    # in the page: the fixture's contexts hold the fact (rank 2) and the reply (item 3)
    assert page.count("3 item(s) in the context, 1 from the fact turn, 1 from the assistant&#x27;s reply: item 3") > 0
    assert "from the fact)" not in page  # the old, contradicting summary
    reply = [a for t, a in p.tags if t == "li" and a.get("class") == "reply"]
    fact = [a for t, a in p.tags if t == "li" and a.get("class") == "fact"]
    assert reply and all(a["value"] == "3" for a in reply) and all(a["value"] == "2" for a in fact)


def test_every_configuration_block_has_the_same_rows_in_the_same_order():
    """Each configuration's article holds the same slots (head, status, verdicts, both answers), so CSS subgrid
    lines the columns up; a configuration that did not run a task keeps the slots, empty."""
    from analysis.viewer import SLOTS

    recs = {s: _with_contexts(s, make_records(s, n=N)) for s in SPECS3}
    recs[SPECS3[2]] = recs[SPECS3[2]][:4]  # mem0 did not run the last four tasks
    p = Collect()
    page = render(RunSet(runs=build_runs(recs), origin="test"), tasks())
    assert page.count("not run on this task") == N - 4
    p.feed(page)
    slots: list[list[str]] = []
    for t, a in p.tags:
        if t == "article":
            slots.append([])
        elif t == "div" and "slot" in (a.get("class") or "").split() and slots:
            slots[-1].append(a["class"].split()[1])
    assert len(slots) == N * 3 and all(s == list(SLOTS) for s in slots)
    css = (Path(__file__).parents[2] / "analysis" / "assets" / "viewer.css").read_text()
    assert f"grid-row:span {len(SLOTS)}" in css and "grid-template-rows:subgrid" in css


@pytest.mark.skipif(_chromium() is None, reason="Chromium not installed")
def test_the_columns_rows_line_up_in_headless_chromium(tmp_path):
    """Laid out by a browser at 1400 px: in each task, the verdict tables and both answers of the configurations
    side by side start at the same height, though one configuration shows a failed verdict above its table."""
    page = tmp_path / VIEWER_FILE
    probe = ("<script>document.body.setAttribute('data-tops',JSON.stringify([].map.call(document.querySelectorAll("
             "'section.task.shown article.config'),function(a){return [].map.call(a.children,function(c){"
             "return Math.round(c.getBoundingClientRect().top);});})));</script></body>")
    page.write_text(render(runset(), tasks()).replace("</body>", probe))
    from docs.screenshots import CHROME_FLAGS

    cmd = [_chromium(), *CHROME_FLAGS, f"--user-data-dir={tmp_path / 'chrome-profile'}", "--window-size=1400,900",
           "--virtual-time-budget=5000", "--dump-dom", page.as_uri() + "?task=t003"]
    dom = subprocess.run(cmd, capture_output=True, text=True, timeout=120).stdout
    tops = json.loads(html.unescape(re.search(r'data-tops="([^"]+)"', dom).group(1)))
    assert len(tops) == 3 and all(len(t) == 5 for t in tops)  # three columns side by side at 1400 px
    for slot in range(1, 5):
        assert len({t[slot] for t in tops}) == 1, (slot, tops)
