"""Configurations of one sweep that would compute the same results: equal config hash over the same tasks. The
common case is a system that uses no embedding (backbone, always_in_state) in a sweep over embeddings: the
embedding is no part of its identity (``MemorySystem.uses_embedding``), so every embedding gives the same hash and
only the first job runs; each other one is skipped with one line naming the job that stands for it.
"""

from __future__ import annotations

from typing import Any, Hashable, Sequence


def same_results_key(plan: Any) -> Hashable:
    """Two plans with equal keys compute identical records (and share one ledger)."""
    return (plan.config_hash, tuple(t.id for t in plan.tasks))


def skip_message(plan: Any, kept: Any) -> str:
    """The one log line for a skipped duplicate."""
    why = (f"{plan.system_name} uses no embedding" if not plan.system_cls.uses_embedding
           and plan.embedding.name != kept.embedding.name else "equal result identity")
    return (f"[inmind] {plan.name}: not run, same results as {kept.name} ({why}; config {plan.config_hash}); "
            f"its results stand for both")


def split_duplicates(plans: Sequence[Any]) -> tuple[list[int], dict[int, int]]:
    """Indices of the plans to run (first of each key, in order) and, for each other plan, the index it repeats."""
    first: dict[Hashable, int] = {}
    keep: list[int] = []
    dup: dict[int, int] = {}
    for i, p in enumerate(plans):
        k = same_results_key(p)
        if k in first:
            dup[i] = first[k]
        else:
            first[k] = i
            keep.append(i)
    return keep, dup
