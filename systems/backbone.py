"""Backbone (in-context) control, InMind paper Section 4.1 and Appendix 15.2.

No memory system: the answerer sees only the task's fact pair and then the query, which measures whether the
model holds the bridging knowledge once the fact is visible. It keeps the turns the protocol marks ``injected``
and ignores the background trace. The paper does not score it on the naive query; ``answer_naive=true`` asks it
anyway (the fact in context), because the official release's submission needs both turns of every task: a
configuration with it is the in-context control answering the naive query, not a recall measurement.

Answer modes: ``shared`` and ``native`` are the same here (``control="in_context"``, ``inmind_exp.memory.answering``): the
fact pair as conversation turns under "You are a helpful assistant." (the paper's backbone control). ``paper``: the
release's answer prompt with ``{context}`` set to the fact pair as the release writes its target memory (``User: ...``
/ ``Assistant: ...`` lines, the recall's text), then the query. Provenance: the two injected turns are the context's
items.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

from inmind_exp.memory import (SYSTEMS, Answer, CallProfile, ContextItem, MemorySystem, Message, Recall, Session, Turn,
                               read_json, write_json)

ANSWER_SYSTEM_PROMPT = "You are a helpful assistant."  # backbone-v1


@SYSTEMS.register("backbone")
class Backbone(MemorySystem):
    control = "in_context"
    retrieval = False  # no query-time retrieval: a control, not a retrieval configuration
    embeddings = ("minilm", "emb3", "bm25", "none")
    uses_embedding = False  # no retriever: the encoder is never called
    official_params = {"answer_naive": True}  # the release needs both turns of every task in a submission
    evaluates_naive = False
    cost = CallProfile(answer_calls_per_query=1.0, prompt_tokens_per_answer_call=120)

    def __init__(self, llm, encoder, workdir: Path, answer_naive: bool = False, **params) -> None:
        super().__init__(llm, encoder, workdir, **params)
        if not isinstance(answer_naive, bool):
            raise TypeError(f"system 'backbone': answer_naive must be true or false, got {answer_naive!r}")
        self.answer_naive = answer_naive
        self.turns: list[Turn] = []

    @classmethod
    def asks_naive(cls, params: dict[str, Any]) -> bool:
        return params.get("answer_naive") is True

    def ingest_session(self, session: Session) -> None:
        self.turns.extend(t for t in session.turns if t.injected)

    def recall(self, query: str) -> Recall:
        items = tuple(ContextItem("turn", t.content, (t.id,) if t.id else (), visible=True) for t in self.turns)
        return Recall("\n".join(f"{t.role.capitalize()}: {t.content}" for t in self.turns), items)

    def native_answer(self, query: str, recall: Recall) -> Answer:
        context = (
            Message("system", ANSWER_SYSTEM_PROMPT),
            *(Message(t.role, t.content) for t in self.turns),
            Message("user", query),
        )
        comp = self.llm.answerer.chat(context)
        return Answer(comp.text, context, items=recall.items)

    def snapshot(self, directory: Path) -> None:
        write_json(directory / "backbone.json", [asdict(t) for t in self.turns])

    def restore(self, directory: Path) -> None:
        self.turns = [Turn(**t) for t in read_json(directory / "backbone.json")]
