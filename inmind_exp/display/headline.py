"""The one narrow headline table of a set of configurations: configuration, n, Application and Target recall with
their Wilson 95% intervals, Naive, and memory / fact-write faults. The terminal, the sweep parent's ``results.md``
on MLflow and the analysis report all print this table from the same metric names (``RunMetrics.flat()``, which is
also what MLflow stores), so the three never disagree; the full table (every metric, the Δ columns, the judge
audit) is one file or link away.

The in-context control (the backbone) shows Naive as "–" (``IN_CONTEXT_NOTE``): on the official tasks it answers
the naive query with the fact in its context, so the release's submission has both turns, which measures no recall;
the paper's cell is "–" too. The rate stays in the metrics (and the release's aggregate); only the table hides it.

A configuration whose fact-write fault rate is above ``FACT_WRITE_FAULT_LIMIT`` is flagged (``FAULT_FLAG``) on its
row and explained under the table: its memory mostly never stored the fact, so its rates say little about recall.
"""

from __future__ import annotations

import math
from typing import Callable, Collection, Mapping, Sequence

from inmind_exp.protocol.rates import CONTROL_LABELS
from inmind_exp.protocol.metrics import LABELS, METRICS, Rate, RunMetrics, fmt_ran

#: Percent of tasks with a fault while writing the injected exchange above which a configuration is flagged.
FACT_WRITE_FAULT_LIMIT = 20.0
FAULT_FLAG = "!"
HEADERS: tuple[str, ...] = ("configuration", "n", "Application", "Target recall", "Naive", "faults")
#: The note printed once under the table.
NOTE = ("Rates in % with Wilson 95% intervals, over the n tasks with a valid verdict (failed tasks left out, "
        "a failed verdict from its own rate only; n/N when some were or when not every planned task ran). "
        "Target recall: the answer-blind judge. faults: % of tasks with a memory-system "
        "fallback / with one while writing the injected fact.")
#: Under the table when an in-context control's measured Naive is shown "–".
IN_CONTEXT_NOTE = ("Naive of the in-context control (the backbone) is shown '–': it answers the naive query with the "
                   "fact in its context (asked only so the release's submission has both turns), which measures no "
                   "recall; the paper's cell is '–' too.")
#: ``inmind_exp.memory.traits.Traits.control`` of the in-context control
IN_CONTEXT = "in_context"

Flat = Mapping[str, float]
#: Optional marker of a rate's interval (``lo``, ``hi`` in points, ``n``), e.g. the analysis' uninformative-interval
#: flag; "" for none.
Mark = Callable[[float, float, int], str]


def fact_write_flagged(m: Flat) -> bool:
    """True when the configuration's fact-write fault rate is above ``FACT_WRITE_FAULT_LIMIT``."""
    v = m.get("fact_write_fault_rate")
    return v is not None and not math.isnan(v) and v > FACT_WRITE_FAULT_LIMIT


def flag_note(names: Sequence[str]) -> str:
    return (f"{FAULT_FLAG} fact-write fault rate above {FACT_WRITE_FAULT_LIMIT:.0f}% ({', '.join(names)}): on those "
            "tasks the memory system fell back while writing the fact, so its rates partly measure a memory that "
            "never stored it; such a configuration is never the best one nor part of a tie.")


def _rate(m: Flat, key: str, mark: Mark | None = None) -> str:
    pct, lo, hi, n = m.get(key), m.get(f"{key}_ci_low"), m.get(f"{key}_ci_high"), m.get(f"{key}_n")
    if pct is None or math.isnan(pct) or not n:
        return "–"
    if lo is None or hi is None:
        return f"{pct:.1f}"
    return f"{pct:.1f} [{lo:.0f}–{hi:.0f}]" + (mark(lo, hi, int(n)) if mark else "")


def _n(m: Flat, state: str = "") -> str:
    """n, n/N when tasks were left out, n/planned when not every planned task ran, with why (``capped``)."""
    total = int(m.get("n_tasks", 0))
    n = int(m.get("application_n", total - m.get("n_excluded", 0)))
    planned = int(m.get("n_planned", total))
    if planned > total:  # not every planned task ran: n of the planned, and why (the errors show in n/N already)
        return f"{n}/{planned} {state}".rstrip()
    return str(n) if n == total else f"{n}/{total}"


def _faults(m: Flat) -> str:
    mem, fact = m.get("memory_fault_rate"), m.get("fact_write_fault_rate")
    if mem is None or fact is None or math.isnan(mem) or math.isnan(fact):
        return "–"
    return f"{mem:.0f}/{fact:.0f}%" + (f" {FAULT_FLAG}" if fact_write_flagged(m) else "")


def naive_hidden(m: Flat, in_context: bool) -> bool:
    """True when a measured Naive is shown "–" because the configuration is the in-context control."""
    naive = m.get("naive")
    return in_context and naive is not None and not math.isnan(naive) and bool(m.get("naive_n"))


def cells(name: str, m: Flat, mark: Mark | None = None, in_context: bool = False, state: str = "") -> list[str]:
    """One row's display cells, in ``HEADERS`` order (``in_context``: the in-context control, Naive "–"; ``state``
    says why a run is incomplete, ``capped``)."""
    naive = m.get("naive")
    return [name, _n(m, state), _rate(m, "application", mark), _rate(m, "target_recall", mark),
            "–" if in_context or naive is None or math.isnan(naive) or not m.get("naive_n") else f"{naive:.1f}",
            _faults(m)]


def _fit(name: str, width: int) -> str:
    """``name`` cut in the middle with "…" to ``width`` characters (the system and the LLM stay readable)."""
    if len(name) <= width:
        return name
    keep = max(width - 1, 2)
    return name[: (keep + 1) // 2] + "…" + name[len(name) - keep // 2:]


def table(rows: Sequence[tuple[str, Flat]], width: int | None = None, mark: Mark | None = None,
          mark_note: str = "", in_context: Collection[str] = (), states: Mapping[str, str] | None = None) -> str:
    """The headline as an aligned Markdown table (a valid one, readable in a terminal), its note and, when a
    configuration is flagged, why. With ``width`` the configuration column is shortened so every table line fits;
    ``mark`` annotates intervals (explained by ``mark_note`` when some cell carries a mark); ``in_context`` names
    the in-context controls (Naive "–"); ``states`` names why a configuration is incomplete (``capped``), beside
    its n."""
    body = [cells(name, m, mark, name in in_context, (states or {}).get(name, "")) for name, m in rows]
    widths = [max(len(h), *(len(r[i]) for r in body)) if body else len(h) for i, h in enumerate(HEADERS)]
    if width is not None:
        others = sum(widths[1:]) + 3 * len(HEADERS) + 1
        widths[0] = max(len(HEADERS[0]), min(widths[0], width - others))
        body = [[_fit(r[0], widths[0]), *r[1:]] for r in body]

    def line(values: Sequence[str]) -> str:
        return "| " + " | ".join(v.ljust(w) for v, w in zip(values, widths)) + " |"

    lines = [line(HEADERS), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(line, body)]
    flagged = [name for name, m in rows if fact_write_flagged(m)]
    marked = mark is not None and any(c != _rate(m, k) for (_, m), r in zip(rows, body)
                                      for k, c in (("application", r[2]), ("target_recall", r[3])))
    hidden = any(naive_hidden(m, name in in_context) for name, m in rows)
    notes = ([NOTE] + ([mark_note] if marked and mark_note else []) + ([IN_CONTEXT_NOTE] if hidden else [])
             + ([flag_note(flagged)] if flagged else []))
    return "\n".join(lines) + "\n\n" + ("\n" if width is not None else "\n\n").join(_wrap(n, width) for n in notes)


def _wrap(text: str, width: int | None) -> str:
    if width is None:
        return text
    import textwrap

    return "\n".join(textwrap.wrap(text, width))


#: The terminal's table width: the headline always fits it (the configuration column is shortened if needed).
TERMINAL_WIDTH = 100


def terminal(rows: Sequence[tuple[str, "RunMetrics"]], full: str = "", in_context: Collection[str] = (),
             states: Mapping[str, str] | None = None) -> str:
    """The headline of the configurations run for the terminal, ``full`` naming where the full table is, ``states``
    why a configuration is incomplete."""
    text = table([(name, m.flat()) for name, m in rows], width=TERMINAL_WIDTH, in_context=in_context, states=states)
    return text + (f"\nFull table (every metric, the Δ columns, the judge audit):\n  {full}" if full else "")


def results_table(rows: list[tuple[str, RunMetrics]]) -> str:
    """Table 1 as Markdown: one row per configuration, rates with Wilson intervals and the Δ columns."""
    head = ("| configuration | n | err | " + " | ".join(LABELS[k] for k in METRICS)
            + " | Δ R−N | Δ A−R | Δ A−N | judge FP / FN | memory faults | fact-write faults | context tokens "
            + "| what ran |")
    lines = [head, "|" + "---|" * (len(METRICS) + 11)]

    def cell(r: Rate) -> str:
        if not r.n:
            return "–"
        lo, hi = r.ci
        return f"{r.pct:.1f} [{lo:.1f}, {hi:.1f}]"

    def d(v: float) -> str:
        return "–" if math.isnan(v) else f"{v:+.1f}"

    for name, m in rows:
        dl = m.deltas
        lines.append(
            f"| {name} | {m.n_tasks} | {m.n_errors} | " + " | ".join(cell(m.rates[k]) for k in METRICS)
            + f" | {d(dl['delta_recall_naive'])} | {d(dl['delta_application_recall'])} | {d(dl['delta_application_naive'])}"
            + f" | {len(m.audit.false_positives)} / {len(m.audit.false_negatives)}"
            + f" | {pct(m.memory_fault_rate)} | {pct(m.fact_write_fault_rate)}"
            + f" | {'–' if math.isnan(m.context_tokens) else f'{m.context_tokens:.0f}'} | {fmt_ran(m)} |"
        )
    notes = [f"{name}: negative controls: " + "; ".join(f"{CONTROL_LABELS[k]} {cell(r)} (n={r.n}, {r.errors} "
                                                      f"left out)" for k, r in m.controls.items())
             for name, m in rows if m.controls]
    notes += [f"{name}: left out of every rate (task failed): {', '.join(m.excluded)}" for name, m in rows if m.excluded]
    notes += [f"{name}: left out of the {LABELS[k]} rate only (its verdict failed): {', '.join(ids)}"
              for name, m in rows for k, ids in m.verdict_errors.items()]
    notes += [f"{name}: judge target-recall false positives (union provenance 0): {', '.join(m.audit.false_positives)}"
              for name, m in rows if m.audit.false_positives]
    notes += [f"{name}: judge application false positives (union provenance 0): "
              f"{', '.join(m.audit.application_false_positives)}" for name, m in rows if m.audit.application_false_positives]
    notes += [f"{name}: judge target-recall false negatives (verbatim 1): {', '.join(m.audit.false_negatives)}"
              for name, m in rows if m.audit.false_negatives]
    if notes:
        lines += [""] + [f"- {n}" for n in notes]
    return "\n".join(lines)


def pct(v: float) -> str:
    return "–" if math.isnan(v) else f"{v:.1f}%"
