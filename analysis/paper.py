"""The InMind paper's own reported figures, as published (Table 1 and 2 as stated in the text of "Keep It InMind:
Benchmarking the Implicit-Association Blind Spot in Agent Memory", arXiv 2607.24368), with the section each comes
from. These are the paper's numbers, not the release's data; the report sets runs of the official tasks beside them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PaperFigure:
    """One reported figure: what it measures (``metric`` of the runs ``group`` selects), its value as printed, its
    range in percent (``low == high`` for a single value), and where the paper states it."""

    key: str
    label: str
    group: str  # backbone | best_retrieval | memory_systems | always_in_state (see analysis.official.GROUPS)
    metric: str
    reported: str
    low: float
    high: float
    section: str
    embedding: str | None = None  # only runs of this embedding (target recall per embedding)


PAPER_FIGURES: tuple[PaperFigure, ...] = (
    PaperFigure("backbone_application", "Backbone (in context): application", "backbone", "application",
                "84.0% (105/125, Wilson [76.6, 89.4])", 84.0, 84.0, "§4.3 (also abstract, §1)"),
    PaperFigure("best_retrieval_application", "Best query-time (retrieval) configuration: application",
                "best_retrieval", "application", "16.0% (Wilson [10.6, 23.4])", 16.0, 16.0, "§4.2, §4.3"),
    PaperFigure("memory_systems_application", "Six memory systems: application, at most", "memory_systems",
                "application", "≤ 14.4%", 14.4, 14.4, "§4.2 (also abstract)"),
    PaperFigure("target_recall_minilm", "Memory systems: target recall under MiniLM", "memory_systems",
                "target_recall", "0.8–5.6%", 0.8, 5.6, "§4.4", embedding="minilm"),
    PaperFigure("target_recall_emb3", "Memory systems: target recall under emb3-large", "memory_systems",
                "target_recall", "2.4–12.0%", 2.4, 12.0, "§4.4", embedding="emb3"),
    PaperFigure("always_in_state_application", "Always-in-state: application", "always_in_state", "application",
                "68.8%", 68.8, 68.8, "§5.2 (also §1)"),
    PaperFigure("always_in_state_naive", "Always-in-state: naive (direct recall)", "always_in_state", "naive",
                "98.4%", 98.4, 98.4, "§5.2"),
)
