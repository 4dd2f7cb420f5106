"""Similarity filter (paper Section 3.3 (i), Appendix 9): does a task's fact read as an obvious match to its query?

For every task, the fact (its ``user_message``) competes with every background user turn of the trace for the
task's naive query and for its indirect query, scored by BM25 (bm25s, through ``TextIndex``, exactly as the BM25
system retrieves) and by dense cosine (all-MiniLM-L6-v2 by default). The fact's *rank* is 1 + the number of
background user turns scoring at least as high (ties count against the fact, so a fact with BM25 score 0 ranks last).

A task is an **obvious match**, an error, when for its indirect query

* BM25 ranks the fact 1st among all background user turns, or
* the dense encoder ranks the fact 1st, or
* the dense cosine of fact and query exceeds the ``DENSE_PERCENTILE``-th percentile of all background-turn/query
  cosines pooled over the file's indirect queries: the fact is closer to its query than 99.5 % of the pairs a
  retriever must sort through, i.e. a similarity retriever would surface it on score alone.

The fact landing in the top ``NEAR_RANK`` by either scorer is a warning (a candidate for expert review), not an
error. The naive query is expected to find its fact; its ranks are reported, never flagged.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Sequence

import numpy as np

from inmind_exp.llm.embed import Encoder, TextIndex
from inmind_exp.records import Task, Trace

QUERY_KINDS: tuple[str, ...] = ("naive", "indirect")
RECALL_KS: tuple[int, ...] = (1, 5, 10)
DENSE_PERCENTILE = 99.5
NEAR_RANK = 5


@dataclass(frozen=True)
class BackgroundTurn:
    """One user turn of the trace, with where it sits (session id and index, turn index within the session)."""

    session_index: int
    session_id: str
    date: str
    turn_index: int
    text: str


def background_user_turns(trace: Trace) -> list[BackgroundTurn]:
    """Every non-injected user turn of the trace, in trace order."""
    return [
        BackgroundTurn(si, s.id, s.date, ti, t.content)
        for si, s in enumerate(trace.sessions)
        for ti, t in enumerate(s.turns)
        if t.role == "user" and not t.injected
    ]


def rank_among(target: float, background: np.ndarray) -> int:
    """1 + the number of background scores at least as high as the target (ties count against the target)."""
    return 1 + int(np.count_nonzero(np.asarray(background) >= target))


@dataclass(frozen=True)
class Placement:
    """Where the fact lands for one query under one scorer."""

    rank: int
    score: float
    best_background: float


@dataclass(frozen=True)
class TaskSimilarity:
    """One task's placements (scorer -> query kind -> placement) and what they imply."""

    task_id: str
    placements: dict[str, dict[str, Placement]]
    obvious: tuple[str, ...]
    near: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "placements": {s: {q: asdict(p) for q, p in qs.items()} for s, qs in self.placements.items()},
            "obvious": list(self.obvious),
            "near": list(self.near),
        }


@dataclass(frozen=True)
class SimilarityReport:
    """The filter's verdicts for a task file against one trace, and the figures it rests on."""

    encoder: str
    n_background: int
    dense_threshold: float
    background_cosine: dict[str, float]
    tasks: tuple[TaskSimilarity, ...]

    def ranks(self, scorer: str, kind: str) -> list[int]:
        return [t.placements[scorer][kind].rank for t in self.tasks]

    def summary(self) -> dict[str, dict[str, dict[str, float]]]:
        """scorer -> query kind -> recall@k, median rank, mean reciprocal rank."""
        return {s: {q: rank_summary(self.ranks(s, q)) for q in QUERY_KINDS} for s in self.scorers}

    @property
    def scorers(self) -> tuple[str, str]:
        return ("bm25", self.encoder)

    @property
    def flagged(self) -> list[TaskSimilarity]:
        return [t for t in self.tasks if t.obvious]

    def to_dict(self) -> dict[str, Any]:
        return {
            "encoder": self.encoder,
            "n_background_user_turns": self.n_background,
            "rule": {
                "obvious_match": f"indirect query ranks the fact 1st by BM25 or by {self.encoder}, or {self.encoder} "
                                 f"cosine(fact, query) > p{DENSE_PERCENTILE:g} of background-turn/query cosines",
                "near_match_warning": f"fact within the top {NEAR_RANK} for the indirect query by either scorer",
                "rank": "1 + number of background user turns scoring >= the fact",
            },
            "dense_threshold": self.dense_threshold,
            "background_cosine_indirect": self.background_cosine,
            "summary": self.summary(),
            "tasks": [t.to_dict() for t in self.tasks],
        }


def recall_at_k(ranks: Sequence[int], ks: Sequence[int] = RECALL_KS) -> dict[int, float]:
    """Share of ranks at or above each k (rank 1 is the top)."""
    r = np.asarray(ranks)
    return {k: float(np.mean(r <= k)) if r.size else float("nan") for k in ks}


def rank_summary(ranks: Sequence[int]) -> dict[str, float]:
    r = np.asarray(ranks, dtype=float)
    out = {f"recall@{k}": v for k, v in recall_at_k(ranks).items()}
    out["median_rank"] = float(np.median(r)) if r.size else float("nan")
    out["mrr"] = float(np.mean(1.0 / r)) if r.size else float("nan")
    return out


def _bm25_scores(background: list[str], fact: str, queries: Sequence[str]) -> list[tuple[float, np.ndarray]]:
    """BM25 over background + fact (the fact's own IDF included, as a system indexing the trace would see it)."""
    index = TextIndex(None)
    n = len(background)
    index.add([str(i) for i in range(n + 1)], background + [fact])
    out = []
    for q in queries:
        scores = np.zeros(n + 1)
        for doc_id, s in index.search(q, n + 1):
            scores[int(doc_id)] = s
        out.append((float(scores[n]), scores[:n]))
    return out


def similarity_filter(
    tasks: Sequence[Task], trace: Trace, encoder: Encoder, percentile: float = DENSE_PERCENTILE
) -> SimilarityReport:
    """Score every task's fact against its naive and indirect query and against all background user turns."""
    bg = [b.text for b in background_user_turns(trace)]
    if not bg:
        raise ValueError(f"trace {trace.id!r} has no user turns to compare against")
    bg_vecs = encoder.encode(bg)
    facts = encoder.encode([t.user_message for t in tasks])
    q_vecs = {"naive": encoder.encode([t.naive_query for t in tasks]), "indirect": encoder.encode([t.query for t in tasks])}
    bg_cos = {k: v @ bg_vecs.T for k, v in q_vecs.items()}  # (tasks, background)
    fact_cos = {k: np.einsum("ij,ij->i", v, facts) for k, v in q_vecs.items()}
    pooled = bg_cos["indirect"].ravel()
    threshold = float(np.percentile(pooled, percentile))
    results = []
    for i, task in enumerate(tasks):
        bm25 = _bm25_scores(bg, task.user_message, [task.naive_query, task.query])
        placements: dict[str, dict[str, Placement]] = {"bm25": {}, encoder.name: {}}
        for kind, (target, scores) in zip(QUERY_KINDS, bm25):
            placements["bm25"][kind] = Placement(rank_among(target, scores), target, float(scores.max()))
        for kind in QUERY_KINDS:
            target, scores = float(fact_cos[kind][i]), bg_cos[kind][i]
            placements[encoder.name][kind] = Placement(rank_among(target, scores), target, float(scores.max()))
        ind_bm25, ind_dense = placements["bm25"]["indirect"], placements[encoder.name]["indirect"]
        obvious, near = [], []
        if ind_bm25.rank == 1:
            obvious.append(f"BM25 ranks the fact 1st of {len(bg) + 1} for the indirect query "
                           f"(score {ind_bm25.score:.2f} vs best background {ind_bm25.best_background:.2f})")
        if ind_dense.rank == 1:
            obvious.append(f"{encoder.name} ranks the fact 1st of {len(bg) + 1} for the indirect query "
                           f"(cosine {ind_dense.score:.3f} vs best background {ind_dense.best_background:.3f})")
        if ind_dense.score > threshold:
            obvious.append(f"{encoder.name} cosine(fact, indirect query) {ind_dense.score:.3f} exceeds "
                           f"p{percentile:g} of background cosines ({threshold:.3f})")
        for name, p in (("BM25", ind_bm25), (encoder.name, ind_dense)):
            if 1 < p.rank <= NEAR_RANK:
                near.append(f"{name} ranks the fact {p.rank} for the indirect query")
        results.append(TaskSimilarity(task.id, placements, tuple(obvious), tuple(near)))
    pct = {f"p{p:g}": float(np.percentile(pooled, p)) for p in (50, 90, 99, percentile)}
    return SimilarityReport(
        encoder=encoder.name,
        n_background=len(bg),
        dense_threshold=threshold,
        background_cosine={"mean": float(pooled.mean()), **pct, "max": float(pooled.max())},
        tasks=tuple(results),
    )
