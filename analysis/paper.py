"""The InMind paper's own reported figures, as published (Table 1 and 2 as stated in the text of "Keep It InMind:
Benchmarking the Implicit-Association Blind Spot in Agent Memory", arXiv 2607.24368), with the section each comes
from and the paper's configuration it was measured on (systems × embeddings). These are the paper's numbers, not
the release's data; the report sets runs of the official tasks of the same system × embedding beside them.
"""

from __future__ import annotations

from dataclasses import dataclass

#: The paper's six memory systems (§4.1), by this project's registry names, and how the paper writes them.
MEMORY_SYSTEMS: dict[str, str] = {"a_rag": "A-RAG", "xmemory": "xMemory", "mem0": "Mem0", "a_mem": "A-Mem",
                                  "hipporag2": "HippoRAG 2", "memoryos": "MemoryOS"}
#: The paper's embeddings for the memory systems (§4.1); Naive RAG also ran BM25.
EMBEDDINGS: dict[str, str] = {"minilm": "MiniLM", "emb3": "emb3-large"}


@dataclass(frozen=True)
class PaperFigure:
    """One reported figure: what it measures (``metric``), its value as printed, its range in percent (``low ==
    high`` for a single value), where the paper states it, and the paper's configuration: the ``systems`` (registry
    names) under the ``embeddings`` it was measured on (empty: the system uses none), described by ``configuration``.
    A figure over several system × embedding pairs is a range or a maximum over them."""

    key: str
    label: str
    metric: str
    reported: str
    low: float
    high: float
    section: str
    systems: tuple[str, ...]
    embeddings: tuple[str, ...]
    configuration: str

    @property
    def pairs(self) -> int:
        """How many system × embedding configurations the figure is over (1: one row of the paper's table)."""
        return len(self.systems) * max(1, len(self.embeddings))


_SIX = tuple(MEMORY_SYSTEMS)
_SIX_NAMES = ", ".join(MEMORY_SYSTEMS.values())

#: §4.5: each memory system's application under MiniLM and emb3-large (MiniLM → emb3-large, as printed)
_APPLICATION_45: dict[str, tuple[float, float]] = {
    "memoryos": (8.0, 14.4), "a_mem": (6.4, 9.6), "a_rag": (4.8, 7.2), "xmemory": (4.8, 6.4), "mem0": (3.2, 6.4),
    "hipporag2": (8.8, 5.6)}
#: §4.5: the target recall the paper prints per system (the rest "in step")
_TARGET_RECALL_45: dict[str, tuple[float, float]] = {"a_mem": (2.4, 12.0), "a_rag": (5.6, 11.2),
                                                     "memoryos": (2.4, 7.2)}


def _per_system(metric: str, title: str, values: dict[str, tuple[float, float]]) -> tuple[PaperFigure, ...]:
    return tuple(
        PaperFigure(f"{s}_{emb}_{metric}", f"{MEMORY_SYSTEMS[s]} × {EMBEDDINGS[emb]}: {title}", metric, f"{v:.1f}%",
                    v, v, "§4.5", (s,), (emb,), f"{MEMORY_SYSTEMS[s]} with {EMBEDDINGS[emb]}, middle injection")
        for s, pair in values.items() for emb, v in zip(EMBEDDINGS, pair))


PAPER_FIGURES: tuple[PaperFigure, ...] = (
    PaperFigure("backbone_application", "Backbone (in context): application", "application",
                "84.0% (105/125, Wilson [76.6, 89.4])", 84.0, 84.0, "§4.3 (also abstract, §1)", ("backbone",), (),
                "backbone: gpt-5-mini with the fact pair in context, no memory, no embedding"),
    PaperFigure("best_retrieval_application", "Best query-time configuration: application", "application",
                "16.0% (Wilson [10.6, 23.4])", 16.0, 16.0, "§4.2, §4.3", ("naive_rag",), ("emb3",),
                "Naive RAG, the single-shot control over raw turn chunks, dense emb3-large"),
    PaperFigure("memory_systems_application", "Six memory systems: application, at most", "application", "≤ 14.4%",
                14.4, 14.4, "§4.2 (also abstract)", _SIX, tuple(EMBEDDINGS),
                f"the six memory systems ({_SIX_NAMES}) × MiniLM, emb3-large; the highest is MemoryOS with "
                "emb3-large (§5.2)"),
    PaperFigure("target_recall_minilm", "Memory systems: target recall under MiniLM", "target_recall", "0.8–5.6%",
                0.8, 5.6, "§4.4", _SIX, ("minilm",), f"the six memory systems ({_SIX_NAMES}) with MiniLM"),
    PaperFigure("target_recall_emb3", "Memory systems: target recall under emb3-large", "target_recall",
                "2.4–12.0%", 2.4, 12.0, "§4.4", _SIX, ("emb3",),
                f"the six memory systems ({_SIX_NAMES}) with emb3-large"),
    *_per_system("application", "application", _APPLICATION_45),
    *_per_system("target_recall", "target recall", _TARGET_RECALL_45),
    PaperFigure("always_in_state_application", "Always-in-state: application", "application", "68.8%", 68.8, 68.8,
                "§5.2 (also §1)", ("always_in_state",), (),
                "always-in-state probe: one 200-line file rewritten after each session, whole in the prompt"),
    PaperFigure("always_in_state_naive", "Always-in-state: naive (direct recall)", "naive", "98.4%", 98.4, 98.4,
                "§5.2", ("always_in_state",), (),
                "always-in-state probe: one 200-line file rewritten after each session, whole in the prompt"),
)
