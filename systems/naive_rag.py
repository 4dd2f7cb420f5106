"""Naive RAG control, InMind paper Section 4.1 and Appendix 15.3.

A single-shot retriever over raw trace turns: every turn (the injected fact turn included) is one chunk, dated
with its session's trace timestamp; a query retrieves the top-k chunks by MiniLM or text-embedding-3-large cosine
similarity, or by BM25, and the answerer sees them above the query. No LLM call on write.

Answer modes: ``shared`` renders the chunks (most relevant first) into the shared prompt; ``native`` uses
``ANSWER_SYSTEM_PROMPT`` below (this project's own: the paper does not print its Naive RAG prompt).
Provenance: each chunk is one trace turn and carries that turn's id.
"""

from __future__ import annotations

from pathlib import Path

from inmind_exp.embed import TextIndex
from inmind_exp.memory import SYSTEMS, CallProfile, MemorySystem, Recall, read_json, write_json
from inmind_exp.records import Answer, ContextItem, Message, Session
from inmind_exp.ranges import at_least

ANSWER_SYSTEM_PROMPT = (  # naive_rag-v1
    "You are a helpful assistant with access to excerpts of your earlier conversations with this user. "
    "Use them when they are relevant to the user's request.\n\n"
    "Retrieved conversation excerpts (most relevant first):\n{chunks}"
)


@SYSTEMS.register("naive_rag")
class NaiveRAG(MemorySystem):
    embeddings = ("minilm", "emb3", "bm25")
    cost = CallProfile(answer_calls_per_query=1.0, prompt_tokens_per_answer_call=900)

    param_ranges = {"top_k": at_least(1)}

    def __init__(self, llm, encoder, workdir: Path, top_k: int = 5, **params) -> None:
        super().__init__(llm, encoder, workdir, **params)
        self.top_k = int(top_k)
        self.index = TextIndex(encoder)
        self.n_sessions = 0

    def ingest_session(self, session: Session) -> None:
        ids, texts = [], []
        for i, t in enumerate(session.with_turn_ids().turns):
            ids.append(t.id)  # the chunk id is the turn id: its provenance
            texts.append(f"[{session.date}] {t.role}: {t.content}")
        self.index.add(ids, texts)
        self.n_sessions += 1

    def retrieve(self, query: str) -> list[tuple[str, str]]:
        by_id = dict(zip(self.index.ids, self.index.texts))
        return [(i, by_id[i]) for i, _ in self.index.search(query, self.top_k)]

    def recall(self, query: str) -> Recall:
        hits = self.retrieve(query)
        items = tuple(ContextItem("chunk", text, (cid,)) for cid, text in hits)
        return Recall("\n".join(f"- {text}" for _, text in hits), items, {"retrieved": len(hits)})

    def native_answer(self, query: str, recall: Recall) -> Answer:
        context = (
            Message("system", ANSWER_SYSTEM_PROMPT.format(chunks=recall.text or "(none)")),
            Message("user", query),
        )
        comp = self.llm.answerer.chat(context)
        return Answer(comp.text, context, meta=recall.meta, items=recall.items)

    def snapshot(self, directory: Path) -> None:
        self.index.save(directory / "index")
        write_json(directory / "state.json", {"n_sessions": self.n_sessions})

    def restore(self, directory: Path) -> None:
        self.index.load(directory / "index")
        self.n_sessions = read_json(directory / "state.json")["n_sessions"]
