"""Always-in-state baseline, InMind paper Section 5.2 and Appendix 17 (Algorithm 1).

One markdown file M is rewritten by the memory LLM after every session (M <- Truncate(Update(M, C_i))), truncated
to at most 200 lines and 25,000 bytes, and given whole to the answerer in its system prompt: no embeddings, no
index, no query-time retrieval. The paper's updater and answerer prompts are not reproduced in its text; ours
follow the described behaviour (keep durable user facts, rewrite the whole file) and name no kind of fact (no
category list: the benchmark's domains would be a nudge toward its facts; ``tests/systems/test_prompt_neutrality.py``
checks the project's own prompts for one).

Answer modes: ``shared`` gives the file to the shared prompt as the memory block, ``paper`` to the release's answer
prompt as its ``{context}`` (the same block text); ``native`` uses
``ANSWER_SYSTEM_PROMPT`` below (ours: the paper describes the file "prepended whole to the system prompt" but does
not print the prompt).
Provenance per line, by the one rule of ``inmind_exp.memory.kept_provenance``: a line kept verbatim from the
previous file keeps its origin and derived turns; a line the updater wrote or changed has as origin the origin of
the call's inputs (the previous file's lines, the session's turns) whose content it still states, and everything
else the call saw as derived (a rephrasing beyond word overlap is derived only, never a catch-all origin); a bare
heading has no origin.
The answerer sees every line, so the file's items are all its lines. A reply that is a refusal or chat reply, or
no longer states most of the previous file (``inmind_exp.memory.unusable_state``), is a ``malformed_reply`` fault
and the previous file is kept. A reply cut at the token limit is counted as a
``truncated_reply`` fault by the protocol (the cut file may have lost lines it held).
"""

from __future__ import annotations

from pathlib import Path

from inmind_exp.memory import (SYSTEMS, Answer, CallProfile, ContextItem, MemorySystem, Message, Recall, Session,
                               at_least, content_words, kept_provenance, read_json, unusable_state, write_json)

#: v2: no list of kinds of facts to keep (v1 listed health and medical facts, beliefs and practices, household and
#: relationships, work: the benchmark's own domains, a nudge no retrieval system gets)
PROMPT_VERSION = "always_in_state-v2"

UPDATER_SYSTEM_PROMPT = (
    "You maintain a single markdown memory file about one user of an AI assistant. The file is shown to the "
    "assistant in full before every future conversation, so it must hold everything about the user that could "
    "matter later. Keep it concise and organised under headings; never drop a still-valid fact to make room for "
    "trivia; update facts that changed. Output the complete new file and nothing else."
)
UPDATER_USER_PROMPT = (
    "Current memory file:\n<memory>\n{memory}\n</memory>\n\n"
    "New conversation session ({date}):\n<session>\n{session}\n</session>\n\n"
    "Rewrite the complete memory file to include what this session tells you about the user."
)
ANSWER_SYSTEM_PROMPT = (
    "You are a helpful assistant. Below is your memory file about this user, maintained across all earlier "
    "conversations. Take it into account whenever it bears on the user's request.\n\n<memory>\n{memory}\n</memory>"
)


def truncate(text: str, max_lines: int, max_bytes: int) -> str:
    """Keep at most ``max_lines`` lines and ``max_bytes`` UTF-8 bytes, cutting at a character boundary."""
    lines = text.strip().splitlines()[:max_lines]
    out = "\n".join(lines)
    data = out.encode("utf-8")
    if len(data) > max_bytes:
        out = data[:max_bytes].decode("utf-8", errors="ignore")
    return out


def _strip_fence(text: str) -> str:
    s = text.strip()
    if s.startswith("```") and s.endswith("```"):
        s = s[3:-3]
        s = s.split("\n", 1)[1] if s.startswith(("markdown", "md")) and "\n" in s else s
    return s.strip()


@SYSTEMS.register("always_in_state")
class AlwaysInState(MemorySystem):
    control = "always_in_state"
    version = "2"  # 2: provenance by the one rule (kept_provenance); a line stating no input is derived, not origin;
    # a refusal or a reply dropping most of the file is a fault and the file is kept
    retrieval = False  # no query-time retrieval: a control, not a retrieval configuration
    embeddings = ("minilm", "emb3", "bm25", "none")
    uses_embedding = False  # no retriever: the encoder is never called
    cost = CallProfile(memory_calls_per_session=1.0, prompt_tokens_per_memory_call=4000, prompt_tokens_per_answer_call=3000,
                       completion_tokens_per_memory_call=2000)  # the whole file, rewritten

    param_ranges = {"max_lines": at_least(1), "max_bytes": at_least(1),
                    "updater_max_tokens": at_least(1, nullable=True)}

    def __init__(self, llm, encoder, workdir: Path, max_lines: int = 200, max_bytes: int = 25_000,
                 updater_max_tokens: int | None = None, **params) -> None:
        super().__init__(llm, encoder, workdir, **params)
        self.max_lines = int(max_lines)
        self.max_bytes = int(max_bytes)
        self.updater_max_tokens = updater_max_tokens
        self.memory = ""
        self.sources: dict[str, list[str]] = {}  # line text -> origin turn ids
        self.derived: dict[str, list[str]] = {}  # line text -> derived turn ids

    def ingest_session(self, session: Session) -> None:
        transcript = "\n".join(f"{t.role}: {t.content}" for t in session.turns)
        messages = (
            Message("system", UPDATER_SYSTEM_PROMPT),
            Message("user", UPDATER_USER_PROMPT.format(memory=self.memory or "(empty)", date=session.date, session=transcript)),
        )
        kwargs = {"max_tokens": self.updater_max_tokens} if self.updater_max_tokens else {}
        with self.writing([t.id for t in session.turns if t.id]):  # the session's turns (the file is only rewritten)
            comp = self.llm.memory.chat(messages, **kwargs)
        new = truncate(_strip_fence(comp.text), self.max_lines, self.max_bytes)
        if not new.strip():
            self.fault("empty_reply", "update", "the updater returned an empty file; the previous file is kept",
                       [t.id for t in session.turns])
            return
        if problem := unusable_state(new, self.memory):
            self.fault("malformed_reply", "update", f"{problem}; the previous file is kept: {new[:200]}",
                       [t.id for t in session.turns])
            return
        inputs = [(line, src, self.derived.get(line, ())) for line, src in self.sources.items()]
        inputs += [(t.content, (t.id,), ()) for t in session.turns if t.id]
        sources, derived = {}, {}
        for line in (ln for ln in new.splitlines() if ln.strip()):
            if line in self.sources:
                sources[line], derived[line] = self.sources[line], self.derived.get(line, [])
            else:
                heading = line.lstrip().startswith("#") and len(content_words(line)) <= 3
                origin, seen = kept_provenance("" if heading else line, inputs)
                sources[line], derived[line] = origin, seen
        self.sources, self.derived = sources, {k: v for k, v in derived.items() if v}
        self.memory = new

    def recall(self, query: str) -> Recall:
        items = tuple(ContextItem("line", line, tuple(self.sources.get(line, ())),
                                  tuple(self.derived.get(line, ())), visible=True) for line in self.memory.splitlines()
                      if line.strip())
        return Recall(self.memory, items, {"memory_bytes": len(self.memory.encode())})

    def native_answer(self, query: str, recall: Recall) -> Answer:
        context = (Message("system", ANSWER_SYSTEM_PROMPT.format(memory=self.memory or "(empty)")), Message("user", query))
        comp = self.llm.answerer.chat(context)
        return Answer(comp.text, context, meta=recall.meta, items=recall.items)

    def snapshot(self, directory: Path) -> None:
        write_json(directory / "state.json", {"memory": self.memory, "sources": self.sources,
                                                 "derived": self.derived})

    def restore(self, directory: Path) -> None:
        state = read_json(directory / "state.json")
        self.memory = state["memory"]
        self.sources = state.get("sources", {})
        self.derived = state.get("derived", {})
