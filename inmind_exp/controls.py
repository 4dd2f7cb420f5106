"""Negative controls built from the benchmark itself (issue #22, item 1): the mismatched-fact pairing.

The mismatched-fact control asks, from a task's own post-injection state, the indirect query of *another* task
whose fact does not bear on it; an answer that still brings the remembered fact to bear is over-application
(judged by ``judges.OVER_APPLICATION_JUDGE``). This module chooses the pairs: a fixed, seeded pairing across domains
by low similarity between the two tasks' facts and bridges, so a partner's request is as unrelated to the fact as
the task set allows. It is deterministic (the tasks are sorted by id, every random choice comes from one seeded
generator), never pairs a task with itself or with a task of its own domain, and spreads partners (a task is taken
as a partner as rarely as the candidates allow). Wiring the extra query into the protocol is not done yet.
"""

from __future__ import annotations

import math
import random
import re
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any, Callable, Sequence

import numpy as np

from inmind_exp.records import Answer, Task

#: How many of the least similar candidates a partner is drawn from (the seed picks among them).
DEFAULT_POOL = 5

Similarity = Callable[[Sequence[str]], np.ndarray]


@dataclass(frozen=True)
class Pairing:
    """Task ``task_id`` is asked ``partner_id``'s indirect query; ``similarity`` is that of their fact + bridge texts
    (cosine, 0 = nothing shared). Written to the run's records as a plain dict."""

    task_id: str
    domain: str
    partner_id: str
    partner_domain: str
    similarity: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def pair_text(task: Task) -> str:
    """What the pairing compares: the task's fact and its bridge (the explanation)."""
    return f"{task.user_message}\n{task.explanation}"


_WORD = re.compile(r"[a-z0-9]+")


def tfidf_similarity(texts: Sequence[str]) -> np.ndarray:
    """Cosine similarity of TF-IDF vectors of lower-cased word tokens: needs no model, so the pairing is the same on
    every machine. Pass an embedding-based function instead for a semantic notion of "unrelated"."""
    docs = [Counter(_WORD.findall(t.casefold())) for t in texts]
    vocab = sorted({w for d in docs for w in d})
    index = {w: i for i, w in enumerate(vocab)}
    df = Counter(w for d in docs for w in d)
    n = len(docs)
    m = np.zeros((n, len(vocab)))
    for i, d in enumerate(docs):
        for w, c in d.items():
            m[i, index[w]] = (1.0 + math.log(c)) * math.log((1 + n) / (1 + df[w]) + 1.0)
    norms = np.linalg.norm(m, axis=1, keepdims=True)
    m = np.divide(m, norms, out=np.zeros_like(m), where=norms > 0)
    return m @ m.T


def mismatched_pairs(tasks: Sequence[Task], seed: int = 0, pool: int = DEFAULT_POOL,
                     similarity: Similarity = tfidf_similarity) -> tuple[Pairing, ...]:
    """One partner per task, from another domain, among the ``pool`` least similar candidates (fewest uses first,
    then the seeded draw). Raises ValueError for duplicate ids or a task with no task of another domain."""
    ordered = sorted(tasks, key=lambda t: t.id)
    ids = [t.id for t in ordered]
    dup = sorted(i for i, c in Counter(ids).items() if c > 1)
    if dup:
        raise ValueError(f"mismatched pairing: duplicate task id(s) {', '.join(dup)}")
    if pool < 1:
        raise ValueError(f"mismatched pairing: pool must be at least 1, got {pool}")
    sim = np.asarray(similarity([pair_text(t) for t in ordered]), dtype=float)
    if sim.shape != (len(ordered), len(ordered)):
        raise ValueError(f"mismatched pairing: similarity returned shape {sim.shape} for {len(ordered)} tasks")
    rng = random.Random(f"inmind-mismatched-{seed}")
    visit = list(range(len(ordered)))
    rng.shuffle(visit)  # who chooses first is seeded too, so no task systematically gets the best partners
    used: Counter[int] = Counter()
    out: dict[str, Pairing] = {}
    for i in visit:
        t = ordered[i]
        candidates = [j for j in range(len(ordered)) if j != i and ordered[j].domain != t.domain]
        if not candidates:
            raise ValueError(f"mismatched pairing: task {t.id!r} (domain {t.domain!r}) has no task of another domain")
        lowest = sorted(candidates, key=lambda j: (round(float(sim[i, j]), 12), ordered[j].id))[:pool]
        fewest = min(used[j] for j in lowest)
        j = rng.choice([j for j in lowest if used[j] == fewest])
        used[j] += 1
        p = ordered[j]
        out[t.id] = Pairing(t.id, t.domain, p.id, p.domain, round(float(sim[i, j]), 6))
    return tuple(out[tid] for tid in ids)


def mismatched_fields(task: Task, partner: Task, answer: Answer) -> dict[str, str]:
    """The over-application judge's fields: ``task``'s remembered fact and bridge, ``partner``'s request, and the
    answer given to that request from ``task``'s state."""
    return {"user_message": task.user_message, "explanation": task.explanation, "query": partner.query,
            "context": answer.context_text(), "answer": answer.text}
