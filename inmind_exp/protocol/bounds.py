"""The judge-free bounds, computed on every task beside the judges' verdicts (they audit the judge): provenance,
whether an item in the answerer's context has the injected fact turn among its origins (``provenance_recall``; on
the looser union of origins and inherited sources, ``provenance_recall_union``; by part, always visible or
retrieved), and verbatim, whether the fact's text is in that context (``exact_target_recall``)."""

from __future__ import annotations

import re

from inmind_exp.records import FACT_REPLY_TURN_ID, FACT_TURN_ID, Answer, Fault, Task


def provenance_recall(answer: Answer | None) -> int | None:
    """1 if some item in the answerer's context derives from the injected fact turn, 0 if none does; None when the
    system reports no items (then provenance is not measured for it)."""
    if answer is None or answer.items is None:
        return None
    return int(FACT_TURN_ID in answer.sources())


def provenance_recall_union(answer: Answer | None) -> int | None:
    """Like ``provenance_recall`` on the looser union: the fact turn is an origin or an inherited source of some item."""
    if answer is None or answer.items is None:
        return None
    return int(FACT_TURN_ID in answer.union_sources())


def part_recall(answer: Answer | None, visible: bool) -> int | None:
    """1 if the fact turn is the origin of some always-visible (``visible``) / retrieved item of the context."""
    if answer is None or answer.items is None:
        return None
    return int(FACT_TURN_ID in answer.visible_sources(visible))


def fact_rank(answer: Answer | None) -> int | None:
    """The 1-based rank of the first item in the answerer's context that derives from the injected fact turn (for a
    retrieval system its rank among the retrieved items, in the order the system put them in front of the answerer);
    None when no item does or the system reports no items (``provenance_recall`` tells the two apart)."""
    for i, it in enumerate(answer.items or () if answer is not None else (), 1):
        if FACT_TURN_ID in it.sources:
            return i
    return None


def fact_write_fault(faults: list[Fault]) -> bool:
    """A fault while writing the injected exchange: an ingest fault naming the fact turn or its reply (a diagnostic,
    such as an empty extraction from the acknowledgement, is none)."""
    return any(f.phase == "ingest" and not f.diagnostic and (FACT_TURN_ID in f.turns or FACT_REPLY_TURN_ID in f.turns)
               for f in faults)


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text.casefold()).strip()


def exact_target_recall(task: Task, answer: Answer) -> int:
    """1 if the injected fact turn's text appears verbatim (case and whitespace folded) in the answerer's context."""
    return int(_norm(task.user_message) in _norm(answer.context_text()))
