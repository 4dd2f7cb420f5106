"""Naive RAG control, InMind paper Section 4.1 and Appendix 15.3.

A single-shot retriever over raw trace turns: every turn (the injected fact turn included) is one chunk, dated
with its session's trace timestamp; a query retrieves the top-k chunks by MiniLM or text-embedding-3-large cosine
similarity, or by BM25, and the answerer sees them above the query. No LLM call on write.

Answer modes: ``shared`` renders the chunks (most relevant first) into the shared prompt; ``native`` uses
``ANSWER_SYSTEM_PROMPT`` below (this project's own: the paper does not print its Naive RAG prompt).
Provenance: each chunk is one trace turn and carries that turn's id.

``chunking=single_shot`` is the official release's single-shot retrieval control (its ``evaluation/README.md``,
"Single-shot retrieval controls"): the background turns one chunk each, and the task's injected fact pair as one
task-local chunk carrying both injected turns' ids, so on the release's trace 486 + 1 = 487 chunks. The pair chunk
is written in the background chunks' format, one ``[date] role: text`` line per turn, so in the answerer's context it
reads ``- [date] user: ...`` / ``- [date] assistant: ...`` like any two retrieved turns and does not stand out
(version 1 wrote it ``User: ...`` / ``Assistant: ...`` with no date). Every answer's meta says ``control:
single-shot``; report it as a single-shot control, not a stateful middle-injection run. ``chunking=turn`` (the
default) makes each injected turn its own chunk too.

``top_k`` 5 is this project's default; the release's example configuration retrieves 10 (``retrieval_top_k``, its
``evaluation/README.md``), which the fidelity note states beside every run (``inmind_exp.official.setting.top_k_note``).
"""

from __future__ import annotations

from pathlib import Path

from inmind_exp.memory import (SYSTEMS, Answer, CallProfile, ContextItem, MemorySystem, Message, Recall, Session,
                               TextIndex, Turn, at_least, read_json, write_json)

ANSWER_SYSTEM_PROMPT = (  # naive_rag-v1
    "You are a helpful assistant with access to excerpts of your earlier conversations with this user. "
    "Use them when they are relevant to the user's request.\n\n"
    "Retrieved conversation excerpts (most relevant first):\n{chunks}"
)


#: ``turn``: every trace turn one chunk; ``single_shot``: the release's control, the injected pair one chunk
CHUNKINGS = ("turn", "single_shot")
PAIR_SEP = "+"  # joins the injected pair's turn ids into the single-shot chunk's id (turn ids hold no "+")
#: between the turns of the single-shot pair chunk: with the "- " every chunk gets in the context, each turn reads as
#: one more retrieved line
PAIR_LINE_SEP = "\n- "


def _line(session: Session, turn: Turn) -> str:
    """One turn as a chunk line: ``[<session date>] <role>: <text>``."""
    return f"[{session.date}] {turn.role}: {turn.content}"


@SYSTEMS.register("naive_rag")
class NaiveRAG(MemorySystem):
    control = "naive_retrieval"
    embeddings = ("minilm", "emb3", "bm25")
    official_params = {"chunking": "single_shot"}  # the release's single-shot control on its own tasks
    version = "2"  # 2: the single-shot pair chunk in the background chunks' format ([date] role: text per turn)
    cost = CallProfile(answer_calls_per_query=1.0, prompt_tokens_per_answer_call=900)

    param_ranges = {"top_k": at_least(1)}

    def __init__(self, llm, encoder, workdir: Path, top_k: int = 5, chunking: str = "turn", **params) -> None:
        super().__init__(llm, encoder, workdir, **params)
        if chunking not in CHUNKINGS:
            raise TypeError(f"system 'naive_rag': chunking must be one of {', '.join(CHUNKINGS)}, got {chunking!r}")
        self.chunking = chunking
        self.top_k = int(top_k)
        self.index = TextIndex(encoder)
        self.n_sessions = 0

    def ingest_session(self, session: Session) -> None:
        ids, texts = [], []
        turns = session.with_turn_ids().turns
        pair = [t for t in turns if t.injected] if self.chunking == "single_shot" else []
        for t in turns:
            if t in pair:
                continue
            ids.append(t.id)  # the chunk id is the turn id: its provenance
            texts.append(_line(session, t))
        if pair:  # one chunk, id joining the pair's turn ids (each a source of it), its turns written alike
            ids.append(PAIR_SEP.join(t.id for t in pair))
            texts.append(PAIR_LINE_SEP.join(_line(session, t) for t in pair))
        self.index.add(ids, texts)
        self.n_sessions += 1

    def retrieve(self, query: str) -> list[tuple[str, str]]:
        by_id = dict(zip(self.index.ids, self.index.texts))
        return [(i, by_id[i]) for i, _ in self.index.search(query, self.top_k)]

    def recall(self, query: str) -> Recall:
        hits = self.retrieve(query)
        items = tuple(ContextItem("chunk", text, tuple(cid.split(PAIR_SEP))) for cid, text in hits)
        meta = {"retrieved": len(hits), **({"control": "single-shot"} if self.chunking == "single_shot" else {})}
        return Recall("\n".join(f"- {text}" for _, text in hits), items, meta)

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
