"""Profile + retrieval hybrid: the design the InMind paper's routing question is about (Keep It InMind, Section 5.3,
"Routing as the Open Problem"; arXiv 2607.24368).

The paper finds that an always-visible profile (its always-in-state probe) recovers most of the implicit-association
gap while query-time retrieval does not, and asks what a hybrid should route into its visible state. This example
keeps both halves, each with its own routing rule, so a researcher can change one and measure it on InMind:

- **write-time routing**: after every session the memory LLM rewrites a short user profile (at most
  ``profile_lines`` lines of durable facts) from the previous profile and the session's user turns; the answerer
  always sees the whole profile (``ContextItem.visible=True``);
- **read-time retrieval**: every trace turn is one chunk of a ``TextIndex`` (MiniLM, text-embedding-3-large or BM25,
  as the ``embedding`` group says); a query retrieves the ``top_k`` most similar chunks (``visible=False``).

Provenance: a retrieved chunk is one trace turn and carries its id; a profile line follows the project's one rule
(``inmind_exp.memory.kept_provenance``, as every built-in does): a line kept verbatim keeps its provenance, a line
the update wrote has as origin the origin of the inputs (the previous profile's lines, the session's user turns)
whose content it still states, and everything else that call saw as derived. An empty rewrite keeps the previous
profile and is counted as an ``empty_reply`` fault; a refusal or chat reply, or one no longer stating most of the
previous profile (``inmind_exp.memory.unusable_state``), keeps it too, as a ``malformed_reply`` fault.

Not from an upstream repository: this is the example of ``docs/plugins.md``, written for this project; no upstream
code or prompt was read or copied, so there are no deviations to list.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from inmind_exp.memory import (CallProfile, ContextItem, Encoder, MemorySystem, Message, Models, Recall, Session,
                               TextIndex, at_least, kept_provenance, read_json, unusable_state, write_json)

PROFILE_SYSTEM_PROMPT = (  # profile_rag-v1
    "You keep a short profile of one user of an AI assistant: the durable facts about them that could matter in "
    "a later conversation (health, household, work, beliefs and practices, constraints, ongoing plans). "
    "Write one fact per line, at most {max_lines} lines, most important first. Output the complete new profile "
    "and nothing else."
)
PROFILE_USER_PROMPT = (
    "Current profile:\n<profile>\n{profile}\n</profile>\n\n"
    "What the user said in a new session ({date}):\n<session>\n{session}\n</session>\n\n"
    "Rewrite the complete profile."
)


class ProfileRAG(MemorySystem):
    """A visible profile rewritten after every session, plus top-k retrieval over the raw turns."""

    embeddings = ("minilm", "emb3", "bm25")
    version = "3"  # 2: profile-line provenance by the one rule (no catch-all origin); 3: a refused or
    # state-dropping rewrite is a fault and the previous profile stays
    cost = CallProfile(memory_calls_per_session=1.0, prompt_tokens_per_memory_call=800,
                       completion_tokens_per_memory_call=200, prompt_tokens_per_answer_call=1500)
    param_ranges = {"top_k": at_least(1), "profile_lines": at_least(1)}

    def __init__(self, llm: Models, encoder: Encoder | None, workdir: Path, top_k: int = 5, profile_lines: int = 20,
                 **params: Any) -> None:
        super().__init__(llm, encoder, workdir, **params)
        self.top_k = int(top_k)
        self.profile_lines = int(profile_lines)
        self.index = TextIndex(encoder)
        self.profile: list[tuple[str, list[str], list[str]]] = []  # (line, origin turn ids, derived turn ids)

    def ingest_session(self, session: Session) -> None:
        turns = session.with_turn_ids().turns
        self.index.add([t.id for t in turns], [f"[{session.date}] {t.role}: {t.content}" for t in turns])
        said = [t for t in turns if t.role == "user"]
        if not said:
            return
        messages = (
            Message("system", PROFILE_SYSTEM_PROMPT.format(max_lines=self.profile_lines)),
            Message("user", PROFILE_USER_PROMPT.format(
                profile="\n".join(line for line, *_ in self.profile) or "(empty)", date=session.date,
                session="\n".join(t.content for t in said))),
        )
        with self.writing([t.id for t in said]):
            reply = self.llm.memory.chat(messages).text
        lines = [ln.strip().lstrip("-*• ").strip() for ln in reply.strip().splitlines()]
        lines = [ln for ln in lines if ln][: self.profile_lines]
        if not lines:
            self.fault("empty_reply", "profile", "the profile rewrite was empty; the previous profile is kept",
                       [t.id for t in said])
            return
        if problem := unusable_state(reply, "\n".join(line for line, *_ in self.profile)):
            self.fault("malformed_reply", "profile", f"{problem}; the previous profile is kept: {reply[:200]}",
                       [t.id for t in said])
            return
        old = {line: (src, der) for line, src, der in self.profile}
        inputs = [(line, src, der) for line, src, der in self.profile] + [(t.content, [t.id], []) for t in said]
        self.profile = [(line, *(old[line] if line in old else kept_provenance(line, inputs))) for line in lines]

    def recall(self, query: str) -> Recall:
        by_id = dict(zip(self.index.ids, self.index.texts))
        hits = [(i, by_id[i]) for i, _ in self.index.search(query, self.top_k)] if len(self.index) else []
        items = (tuple(ContextItem("profile", line, tuple(src), tuple(der), visible=True)
                       for line, src, der in self.profile)
                 + tuple(ContextItem("chunk", text, (cid,)) for cid, text in hits))
        text = ("User profile (always shown):\n" + ("\n".join(f"- {line}" for line, *_ in self.profile) or "(empty)")
                + "\n\nRetrieved conversation excerpts (most relevant first):\n"
                + ("\n".join(f"- {t}" for _, t in hits) or "(none)"))
        return Recall(text, items, {"profile_lines": len(self.profile), "retrieved": len(hits)})

    def snapshot(self, directory: Path) -> None:
        self.index.save(directory / "index")
        write_json(directory / "profile.json", [[line, src, der] for line, src, der in self.profile])

    def restore(self, directory: Path) -> None:
        self.index.load(directory / "index")
        self.profile = [(e[0], list(e[1]), list(e[2]) if len(e) > 2 else []) for e in read_json(directory / "profile.json")]
