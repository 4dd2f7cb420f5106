"""The per-task viewer: one static, self-contained HTML file (inline CSS and JS, no network) showing, for every
task, the fact, both queries and the explanation, and side by side per configuration the exact context the answerer
saw (the fact's own items highlighted, with their rank or position), both answers, every verdict with its reason,
the judge-free bounds and the memory faults. Filters: "A applied it, B did not", "judge disagrees with provenance",
"fact-write fault", failed tasks, and domain; the filter state lives in the URL (``viewer.html?a=0&b=1&task=t003``)
so a filtered view can be linked.

Every text from a task, a model or a record is HTML-escaped here; the page's script only shows and hides elements
the HTML already holds (it never builds markup from data), so model output cannot inject into the page.
Task texts are not in the records: they are read from the dataset each configuration ran (``dataset.path``) or a
task file given with ``--tasks``.
"""

from __future__ import annotations

import datetime as dt
import html
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from inmind_exp.protocol.judges import JUDGES
from inmind_exp.protocol.metrics import JUDGE_FREE, valid
from inmind_exp.records import FACT_REPLY_TURN_ID, FACT_TURN_ID, Answer, ContextItem, Task, TaskRecord

from analysis.load import Run, RunSet

VIEWER_FILE = "viewer.html"
#: Contexts up to this many characters, lists up to this many items, open unfolded (long ones stay one click away).
OPEN_CONTEXT_CHARS = 2500
OPEN_ITEMS = 8
#: the viewer's style and script, inlined into the one self-contained HTML file it writes
_ASSETS = Path(__file__).parent / "assets"
_CSS = (_ASSETS / "viewer.css").read_text(encoding="utf-8")
_JS = (_ASSETS / "viewer.js").read_text(encoding="utf-8")


def esc(text: object) -> str:
    """HTML-escape any value (quotes too, so it is safe inside attributes); None is empty."""
    return "" if text is None else html.escape(str(text), quote=True)


# -- task texts -----------------------------------------------------------------------------------------------------

def load_task_texts(runs: Sequence[Run], tasks_path: Path | str | None = None) -> tuple[dict[str, Task], list[str]]:
    """Task texts by id, from ``tasks_path`` or else from each run's ``dataset.path`` (none: the bundled set);
    and a warning for each source that could not be read (its tasks are shown by id only)."""
    from inmind_exp.data import load_tasks
    from inmind_exp.config.sources import logged_tasks

    tasks: dict[str, Task] = {}
    problems: list[str] = []
    keys = ("dataset.name", "dataset.path", "dataset.release_dir")
    sources: dict[tuple, dict] = {("--tasks", str(tasks_path)): {}} if tasks_path is not None else {
        tuple(r.params.get(k) for k in keys): dict(r.params) for r in runs}
    for _key, params in sorted(sources.items(), key=lambda kv: [str(x) for x in kv[0]]):
        try:
            for t in (load_tasks(tasks_path) if tasks_path is not None else logged_tasks(params)):
                tasks.setdefault(t.id, t)
        except Exception as e:  # noqa: BLE001  (a missing or moved dataset: show the records without task text)
            where = tasks_path or _none(params.get("dataset.path")) or (
                "the official release" if params.get("dataset.name") == "official" else "the bundled set")
            problems.append(f"task texts not read from {where}: {type(e).__name__}: "
                            f"{str(e).splitlines()[0] if str(e) else ''}; give --tasks FILE")
    missing = sorted({r.task_id for run in runs for r in run.records} - set(tasks))
    if missing:
        problems.append(f"{len(missing)} task(s) without text in the task file(s): {', '.join(missing[:10])}"
                        + (" ..." if len(missing) > 10 else ""))
    return tasks, problems


def _none(v: str | None) -> str | None:
    return None if v in (None, "None", "null", "") else v


# -- per-task facts the filters and badges use -------------------------------------------------------------------

@dataclass(frozen=True)
class Cell:
    """One configuration on one task, reduced to what the filters and the summary badges need."""

    applied: int | None
    disagrees: bool
    fact_write_fault: bool
    failed: bool

    @classmethod
    def of(cls, rec: TaskRecord | None) -> "Cell":
        if rec is None:
            return cls(None, False, False, False)
        v = rec.verdicts.get("application")
        applied = int(v.score) if v is not None and v.ok and valid(rec) else None  # type: ignore[arg-type]
        return cls(applied, disagrees(rec), rec.fact_write_fault, not valid(rec))


def disagrees(rec: TaskRecord) -> bool:
    """The target-recall judge says otherwise than provenance (did an item from the fact reach the answerer)."""
    v = rec.verdicts.get("target_recall")
    prov = rec.target_recall_provenance
    return v is not None and v.ok and prov is not None and int(v.score) != prov  # type: ignore[arg-type]


def fact_ranks(answer: Answer | None) -> list[int] | None:
    """1-based ranks of every item derived from the fact turn; None when the system reports no items."""
    if answer is None or answer.items is None:
        return None
    return [i for i, it in enumerate(answer.items, 1) if FACT_TURN_ID in it.sources]


def _from_fact(it: ContextItem) -> bool:
    """The item's origin includes the fact turn (what provenance recall and the fact's rank count)."""
    return FACT_TURN_ID in it.sources


def _from_reply(it: ContextItem) -> bool:
    """The item comes from the assistant's reply to the fact and not from the fact turn itself."""
    return FACT_REPLY_TURN_ID in it.sources and FACT_TURN_ID not in it.sources


def _reply_note(answer: Answer) -> str:
    """" (1 from the assistant's reply: item 3)" when items came from the reply only, else ""."""
    at = [i for i, it in enumerate(answer.items or (), 1) if _from_reply(it)]
    return f" ({len(at)} from the assistant's reply: item {', '.join(map(str, at))})" if at else ""


def position_text(answer: Answer | None, rank: int | None, retrieval: bool) -> str:
    """Where the fact sat among the items: "rank 2 of 10" (retrieval) or "position 41 of 80" (controls); items from
    the assistant's reply alone are counted apart, in the same words as the item list's summary (``items_text``)."""
    if answer is None:
        return "no answer"
    ranks = fact_ranks(answer)
    if ranks is None:
        return "not measured (the system reports no items)"
    n = len(answer.items or ())
    if not ranks:
        return f"no item from the fact turn among {n} item(s){_reply_note(answer)}"
    word = "rank" if retrieval else "position"
    first = rank if rank is not None else ranks[0]
    more = f" (also {', '.join(map(str, ranks[1:]))})" if len(ranks) > 1 else ""
    return f"{word} {first} of {n}{more}{_reply_note(answer)}"


def items_text(answer: Answer) -> str:
    """The item list's summary: "5 item(s) in the context, 1 from the fact turn" (and the reply's, apart)."""
    items = answer.items or ()
    n_fact = sum(1 for it in items if _from_fact(it))
    return (f"{len(items)} item(s) in the context, {n_fact or 'none'} from the fact turn"
            + _reply_note(answer).replace(" (", ", ").replace(")", ""))


# -- rendering --------------------------------------------------------------------------------------------------

def highlight(text: str, needles: Iterable[str]) -> str:
    """``text`` escaped, with every occurrence of a needle wrapped in ``<mark>`` (overlaps merged)."""
    spans: list[tuple[int, int]] = []
    for n in {n for n in needles if n and len(n.strip()) >= 4}:
        start = text.find(n)
        while start >= 0:
            spans.append((start, start + len(n)))
            start = text.find(n, start + 1)
    spans.sort()
    merged: list[list[int]] = []
    for a, b in spans:
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    out, pos = [], 0
    for a, b in merged:
        out += [esc(text[pos:a]), "<mark>", esc(text[a:b]), "</mark>"]
        pos = b
    out.append(esc(text[pos:]))
    return "".join(out)


def _score(v: int | None) -> str:
    return {1: "<span class='s1'>1</span>", 0: "<span class='s0'>0</span>"}.get(v, "<span class='sn'>–</span>")  # type: ignore[arg-type]


def _answer_block(title: str, answer: Answer | None, task: Task | None, rank: int | None, retrieval: bool) -> str:
    if answer is None:
        return f"<div class='answer'><h4>{esc(title)}</h4><p class='muted'>not asked</p></div>"
    fact_items = [it.text for it in answer.items or () if _from_fact(it) or _from_reply(it)]
    needles = fact_items + ([task.user_message] if task else [])
    msgs = []
    for m in answer.context:
        body = highlight(m.content or "", needles)
        for tc in m.tool_calls or ():
            fn = tc.get("function", {})
            body += "\n" + esc(f"[tool call] {fn.get('name')}({fn.get('arguments')})")
        msgs.append(f"<div class='msg'><span class='role'>{esc(m.role)}</span><pre>{body}</pre></div>")
    items = ""
    if answer.items is not None:
        lis = "".join(
            f"<li class='{'fact' if _from_fact(it) else 'reply' if _from_reply(it) else ''}' value='{i}'>"
            f"<span class='kind'>{esc(it.kind)}</span> {esc(it.text)}<span class='src'>{esc(', '.join(it.sources))}"
            "</span></li>" for i, it in enumerate(answer.items, 1))
        items = (f"<details class='items'{' open' if len(answer.items) <= OPEN_ITEMS else ''}><summary>"
                 f"{esc(items_text(answer))}</summary><ol>{lis}</ol></details>")
    pos = position_text(answer, rank, retrieval)
    unfold = " open" if sum(len(m.content or "") for m in answer.context) <= OPEN_CONTEXT_CHARS else ""
    return (f"<div class='answer'><h4>{esc(title)}</h4><p class='pos'>Fact in context: <b>{esc(pos)}</b></p>"
            f"<pre class='reply'>{esc(answer.text)}</pre>{items}"
            f"<details class='context'{unfold}><summary>Exact context ({len(answer.context)} message(s))</summary>"
            f"{''.join(msgs)}</details></div>")


#: every configuration's block has these rows, in this order, each a child of its ``article`` (empty when it has
#: nothing to show): the columns' rows line up through CSS subgrid (``viewer.css``: ``grid-row: span 5``)
SLOTS = ("head", "status", "verdicts", "naive", "indirect")


def _config_block(k: int, run: Run, rec: TaskRecord | None, task: Task | None) -> str:
    slots = dict.fromkeys(SLOTS, "")
    slots["head"] = (f"<h3>{esc(run.label)}</h3><p class='muted'>{esc(run.config.system)} · hash "
                     f"{esc(run.config.config_hash[:8])}</p>")
    if rec is None:
        slots["status"] = "<p class='muted'>not run on this task</p>"
        return _article(k, slots)
    status = []
    if rec.error:
        status.append(f"<pre class='err'>{esc(rec.error)}</pre>")
    elif rec.failed_verdicts:
        status.append(f"<p class='err'>{esc(', '.join(rec.failed_verdicts))} verdict failed: left out of that rate "
                      "only</p>")
    if rec.fact_write_fault:
        status.append("<p class='fwf'>fact-write fault: the system fell back while writing the injected exchange</p>")
    if rec.faults:
        lis = "".join(f"<li><b>{esc(f.kind)}</b> in {esc(f.where)} ({esc(f.phase or '?')}): {esc(f.detail)}"
                      + (f" <span class='src'>turns {esc(', '.join(f.turns))}</span>" if f.turns else "") + "</li>"
                      for f in rec.faults)
        n_diag = sum(1 for f in rec.faults if f.diagnostic)  # diagnostics are no faults (README: Comparing fairly)
        n_fault = len(rec.faults) - n_diag
        summary = ", ".join(x for x in (f"{n_fault} memory fault(s)" if n_fault else "",
                                        f"{n_diag} diagnostic(s)" if n_diag else "") if x)
        status.append(f"<details class='faults'{' open' if len(rec.faults) <= 3 else ''}><summary>{summary}</summary>"
                      f"<ul>{lis}</ul></details>")
    slots["status"] = "".join(status)
    rows = []
    for name, judge in JUDGES.items():  # every judge's row, asked or not: the columns' tables line up row by row
        v = rec.verdicts.get(name)
        if v is None:
            rows.append(f"<tr class='verdict' data-judge='{esc(name)}'><td>{esc(judge.label)}</td><td>{_score(None)}"
                        "</td><td class='muted'>not asked</td></tr>")
            continue
        reason = esc(v.reason) + (f"<br><span class='err'>error: {esc(v.error)}</span>" if v.error else "")
        rows.append(f"<tr class='verdict' data-judge='{esc(name)}'><td>{esc(judge.label)}</td><td>{_score(v.score)}"
                    f"</td><td class='reason'>{reason}</td></tr>")
    for name, m in JUDGE_FREE.items():
        rows.append(f"<tr class='bound'><td>{esc(m.label)}</td><td>{_score(getattr(rec, name))}</td>"
                    f"<td class='muted'>judge-free</td></tr>")
    if disagrees(rec):
        rows.append("<tr><td colspan='3' class='warnrow'>the target-recall judge disagrees with provenance</td></tr>")
    slots["verdicts"] = f"<table class='v'><tr><th>metric</th><th>score</th><th>reason</th></tr>{''.join(rows)}</table>"
    retrieval = run.config.is_retrieval
    slots["naive"] = _answer_block("Naive query", rec.naive, task, rec.naive_fact_rank, retrieval)
    slots["indirect"] = _answer_block("Indirect query", rec.indirect, task, rec.target_fact_rank, retrieval)
    return _article(k, slots)


def _article(k: int, slots: dict[str, str]) -> str:
    return (f"<article class='config' data-config='{k}'>"
            + "".join(f"<div class='slot {name}'>{slots[name]}</div>" for name in SLOTS) + "</article>")


def _task_section(i: int, tid: str, task: Task | None, runs: Sequence[Run], cells: list[Cell]) -> str:
    domain = task.domain if task else next((r.by_task[tid].domain for r in runs if tid in r.by_task), "")
    attrs = {"data-task": tid, "data-domain": domain,
             "data-app": json.dumps([c.applied for c in cells]),
             "data-disagree": json.dumps([k for k, c in enumerate(cells) if c.disagrees]),
             "data-fwf": json.dumps([k for k, c in enumerate(cells) if c.fact_write_fault]),
             "data-failed": json.dumps([k for k, c in enumerate(cells) if c.failed])}
    attr = " ".join(f"{k}='{esc(v)}'" for k, v in attrs.items())
    if task:
        fact = (f"<dl class='fact'><dt>Fact (user)</dt><dd class='fact-text'>{esc(task.user_message)}</dd>"
                f"<dt>Assistant's reply</dt><dd>{esc(task.assistant_message)}</dd>"
                f"<dt>Naive query</dt><dd class='q-naive'>{esc(task.naive_query)}</dd>"
                f"<dt>Indirect query</dt><dd class='q-indirect'>{esc(task.query)}</dd>"
                f"<dt>Explanation</dt><dd>{esc(task.explanation)}</dd></dl>")
    else:
        fact = "<p class='err'>task text not available (give --tasks FILE)</p>"
    configs = "".join(_config_block(k, r, r.by_task.get(tid), task) for k, r in enumerate(runs))
    return (f"<section class='task' id='task-{i}' {attr}><h2>Task {esc(tid)} <span class='dom'>{esc(domain)}</span>"
            f"</h2>{fact}<div class='configs'>{configs}</div></section>")


def _list_entry(i: int, tid: str, domain: str, cells: list[Cell]) -> str:
    marks = "".join("<i class='a1' title='applied'></i>" if c.applied == 1 else
                    "<i class='a0' title='not applied'></i>" if c.applied == 0 else
                    "<i class='an' title='no valid verdict'></i>" for c in cells)
    return (f"<li data-index='{i}'><a href='#task-{i}'>{esc(tid)}</a> <span class='dom'>{esc(domain)}</span>"
            f"<span class='marks'>{marks}</span></li>")


def render(runset: RunSet, tasks: dict[str, Task], problems: Sequence[str] = ()) -> str:
    """The whole viewer page for ``runset`` (every task any configuration ran, in id order)."""
    runs = list(runset.runs)
    ids = sorted({r.task_id for run in runs for r in run.records})
    cells = {tid: [Cell.of(run.by_task.get(tid)) for run in runs] for tid in ids}
    domains = {tid: tasks[tid].domain if tid in tasks else
               next(r.by_task[tid].domain for r in runs if tid in r.by_task) for tid in ids}
    opts = "".join(f"<option value='{k}'>{esc(r.label)}</option>" for k, r in enumerate(runs))
    dom_opts = "".join(f"<option value='{esc(d)}'>{esc(d)}</option>" for d in sorted(set(domains.values())))
    legend = "".join(f"<li>{esc(r.label)}</li>" for r in runs)
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    warn = "".join(f"<div class='warn'>{esc(p)}</div>" for p in problems)
    side = (
        "<nav id='side'><form id='filters' onsubmit='return false'>"
        f"<label>Domain <select id='f-domain'><option value=''>all</option>{dom_opts}</select></label>"
        f"<label>A applied it <select id='f-a'><option value=''>–</option>{opts}</select></label>"
        f"<label>B did not <select id='f-b'><option value=''>–</option>{opts}</select></label>"
        "<label><input type='checkbox' id='f-disagree'> judge disagrees with provenance</label>"
        "<label><input type='checkbox' id='f-fwf'> fact-write fault</label>"
        "<label><input type='checkbox' id='f-failed'> failed or left out</label>"
        "<button type='button' id='f-reset'>reset</button></form>"
        f"<p id='count'>{len(ids)} of {len(ids)} tasks</p>"
        "<p class='muted'>Marks: application per configuration, in this order:</p>"
        f"<ol class='legend'>{legend}</ol>"
        f"<ol id='task-list'>{''.join(_list_entry(i, t, domains[t], cells[t]) for i, t in enumerate(ids))}</ol>"
        "</nav>")
    sections = "".join(_task_section(i, t, tasks.get(t), runs, cells[t]) for i, t in enumerate(ids))
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>InMind per-task viewer</title>"
        f"<style>{_CSS}</style></head><body>"
        f"<header><h1>InMind per-task viewer</h1><p class='muted'>{len(ids)} tasks × {len(runs)} configuration(s) "
        f"from {esc(runset.origin)}; generated {now}. Highlighted: the context's items from the fact turn (from the "
        f"assistant's reply alone, lighter) and the fact's own text.</p>{warn}</header>"
        f"<div id='layout'>{side}<main id='main'><p id='none' hidden>No task matches the filters.</p>"
        f"<div class='pager'><button type='button' id='prev'>← previous</button>"
        f"<button type='button' id='next'>next →</button></div>{sections}</main></div>"
        f"<script>{_JS}</script></body></html>")


def write_viewer(runset: RunSet, out: Path | str, tasks_path: Path | str | None = None) -> tuple[Path, list[str]]:
    """Write ``viewer.html`` into ``out``; the path and the warnings (task texts that could not be read)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tasks, problems = load_task_texts(runset.runs, tasks_path)
    path = out / VIEWER_FILE
    path.write_text(render(runset, tasks, problems), encoding="utf-8")
    return path, problems


# Shows and hides what the HTML holds; never builds markup from data. State in the URL query (a, b, domain,
# disagree, fwf, failed, task) so a filtered view can be linked and a headless browser can open it.
