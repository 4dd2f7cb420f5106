"""A-RAG: agentic RAG with hierarchical retrieval tools (Du et al., 2026), reimplemented from
``Ayanami0730/arag`` at commit a44de6b: ``scripts/build_index.py`` (the sentence index), ``src/arag/agent/base.py``
(the ReAct loop and the forced final answer), ``src/arag/tools/{keyword_search,semantic_search,read_chunk,registry}.py``
(the three tools and their error handling), ``src/arag/core/context.py`` (chunks already read),
``src/arag/agent/prompts/default.txt`` (system prompt) and ``configs/example.yaml`` (max_loops 15, 128k budget).

Write path (no LLM call): the trace is cut into chunks with sequential ids ``"0"``, ``"1"``, ... (upstream's corpus
ids are such numbers, and read_chunk's "read adjacent chunks (± 1)" advice relies on it). Each chunk is split into
sentences with upstream's regex ``[.!?\\n]+``; sentences over 10 characters are embedded with ``self.encoder`` and
mapped to their chunk. Every ``ingest_session`` appends, so a prefix snapshot holds the prefix's index and a task
appends its own sessions.

Chunk unit (``chunk_unit``): ``exchange`` (default) makes one chunk per user/assistant exchange, headed by the
session's date. Upstream's corpora are passages of a few hundred tokens; an exchange (about 460 tokens in
LongMemEval-S) is the nearest unit in a chat trace, keeps a reply with the message it answers, and keeps
keyword_search's length-biased score (Σ count·len) from favouring whole long sessions, which as chunks would also
make each read_chunk cost 2-3k tokens. ``session`` (one chunk per session) and ``turn`` (one per message) are kept
for ablations. Session ids never enter the text the model sees (they can name evidence sessions).

Read path: upstream's loop. The answerer gets the system prompt and the query, and may call keyword_search
(score = Σ count·len(keyword) per chunk, up to 5 matching sentences as snippets), semantic_search (top 3·k sentences
by cosine, grouped by chunk, chunks ranked by their best sentence) and read_chunk (full text; chunks already read in
this query are marked as such), top_k defaulting to 5 and capped at 20. A reply without tool calls is the answer.
After ``max_loops`` (15) tool-enabled calls, or when the conversation exceeds ``max_token_budget`` (128k), a user
message demanding a final answer is appended and the answerer is called once more without tools. ``Answer.context``
is the whole message list the final call was sent (system prompt, query, assistant tool calls, tool results and,
if forced, the demand); ``Answer.meta`` records every tool call, every LLM call and why the loop stopped.

Deliberate deviations:
- The token budget counts the prompt tokens the endpoint reported for the latest call (tool schemas included)
  instead of upstream's tiktoken count of message contents (which adds the system prompt twice and omits tool-call
  arguments); it therefore lags one step, since the newest tool results are counted by the next call. No tiktoken.
- Tool-call ids are rewritten to ``call_<step>_<i>`` (the reply's own ids, random on llama.cpp, would make the next
  prompt nondeterministic); assistant message and tool messages stay consistent.
- An endpoint failure (``LLMCallError``) propagates instead of upstream's ``break`` / "Error: ..." answer.
- Sampling (temperature, max_tokens) is the answerer role's configuration, not upstream's fixed 0.0 / 16384.
- The system prompt adds one sentence saying the corpus is the user's earlier conversations and what a chunk is;
  prompt and tool descriptions are otherwise upstream's in our own words, with the same structure and outputs.
- Tool arguments are coerced where upstream would misbehave: a bare string for ``keywords`` / ``chunk_ids`` becomes a
  one-item list (upstream iterates its characters), list items become strings, ``top_k`` may be an integral number
  or numeric string, null means the default, and a negative ``top_k`` means 0. Unexpected arguments, missing required
  ones, arguments that are not JSON (parsed as ``{}`` as upstream) and unknown tools give an error tool message.
- Semantic ties are broken by sentence order (stable sort); no retrieved-token counts are logged.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np

from inmind_exp.records import Answer, Message, Session, Turn
from inmind_exp.memory import SYSTEMS, CallProfile, MemorySystem, read_json, turn_pairs, write_json

PROMPT_VERSION = "a_rag-v1"
CHUNK_UNITS = ("exchange", "session", "turn")
SENTENCE_SPLIT = re.compile(r"[.!?\n]+")  # build_index.split_sentences and KeywordSearchTool._split_sentences
MIN_SENTENCE_CHARS = 10  # build_index keeps sentences longer than this
SEMANTIC_OVERSAMPLE = 3  # semantic_search ranks the top 3·k sentences

CORPUS_DESCRIPTIONS = {
    "exchange": "one dated exchange per chunk: a message from the user and your reply",
    "session": "one dated conversation session per chunk",
    "turn": "one dated message per chunk, from the user or from you",
}

SYSTEM_PROMPT = """You are a question-answering assistant who can reach a corpus of documents only through the tools below.
The corpus is the record of your earlier conversations with this user, {corpus}.

Your aim is to answer accurately by locating and analysing the relevant information in the documents.

## Available Tools

- **keyword_search**: locate chunks by exact keyword matching
- **semantic_search**: locate chunks by semantic similarity
- **read_chunk**: read the complete text of a specific chunk

## Strategy

Work in rounds: search → read → assess → search → read → ... → answer. For multi-hop questions, break the problem into sub-questions and resolve them one at a time.

## When Answering

- Base your response on the retrieved documents
- Cite the specific chunks that support your answer
- Give clear, direct answers backed by evidence
- Do not speculate beyond what the documents support"""

FORCE_ANSWER_PROMPT = (
    "You have reached the limit. You MUST now give a final answer based on the information gathered so far. "
    "Do NOT call any more tools. Combine the information you have and reply directly."
)

KEYWORD_SEARCH_DESCRIPTION = """Find document chunks by exact, case-insensitive keyword matching. Returns chunk IDs and shortened snippets of the sentences in which the keywords occur.

IMPORTANT: keywords are matched literally in the text. Use SHORT, SPECIFIC terms (1-3 words at most). Each keyword is matched on its own.

Examples of GOOD keywords:
  - Names of entities: "Marie Curie", "Toyota", "Kenya", "Rust"
  - Technical terms: "mitochondria", "compound interest"
  - Key concepts: "remote work", "interest rates"

Examples of BAD keywords (DO NOT use):
  - Long phrases: "the scientist who discovered radium" → use "Marie Curie" instead
  - Questions: "when did the Berlin Wall fall" → use "Berlin Wall", "1989" instead
  - Descriptions: "the country north of the United States" → use "Canada" instead
  - Full sentences: "how does a mortgage work" → use "mortgage", "interest rate" instead

RETURNS: shortened snippets marked with "..." showing where the keywords occur. They help you spot relevant chunks, but you MUST call read_chunk to get the full text before answering."""

SEMANTIC_SEARCH_DESCRIPTION = """Search by meaning with embedding similarity: your query is compared with the sentences of every chunk by vector similarity.

WHEN TO USE:
- When keyword search did not find the relevant information
- When you do not know the exact wording used in the documents
- For matching by concept or meaning

RETURNS: shortened snippets with the matching sentences. Call read_chunk to get the full text before answering."""

READ_CHUNK_DESCRIPTION = """Read the complete content of document chunks, given their IDs.

Returns the full text of the requested chunks, so that you can examine the context and details that search snippets leave out.

IMPORTANT: keyword_search and semantic_search return only shortened snippets marked with "..." - they are NOT enough to answer from. You MUST call read_chunk to get the full content before writing your answer.

STRATEGY:
- Always read the promising chunks your searches found
- Make sure to read the most relevant chunks to gather complete information
- If information looks incomplete or cut off, read the neighbouring chunks (± 1)
- Reading the full text is essential for accurate answers

Note: chunks you have already read are marked as seen, so their text is not repeated."""


def tool_schemas(default_top_k: int, max_top_k: int) -> list[dict[str, Any]]:
    """The three OpenAI function schemas, in upstream's registration order (keyword, read, semantic)."""
    top_k = {
        "type": "integer",
        "description": f"Number of top-ranked chunks to return (default: {default_top_k}, max: {max_top_k})",
        "default": default_top_k,
    }
    return [
        {"type": "function", "function": {
            "name": "keyword_search",
            "description": KEYWORD_SEARCH_DESCRIPTION,
            "parameters": {"type": "object", "properties": {
                "keywords": {"type": "array", "items": {"type": "string"},
                             "description": "Keywords to search for, each 1-3 words at most "
                                            "(e.g., ['Curie', 'radioactivity', '1903'])."},
                "top_k": dict(top_k),
            }, "required": ["keywords"]},
        }},
        {"type": "function", "function": {
            "name": "read_chunk",
            "description": READ_CHUNK_DESCRIPTION,
            "parameters": {"type": "object", "properties": {
                "chunk_ids": {"type": "array", "items": {"type": "string"},
                              "description": "IDs of the chunks to read (e.g., ['0', '24', '172'])"},
            }, "required": ["chunk_ids"]},
        }},
        {"type": "function", "function": {
            "name": "semantic_search",
            "description": SEMANTIC_SEARCH_DESCRIPTION,
            "parameters": {"type": "object", "properties": {
                "query": {"type": "string",
                          "description": "A natural-language description of the information you are looking for"},
                "top_k": dict(top_k),
            }, "required": ["query"]},
        }},
    ]


TOOL_PARAMS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {  # name -> (required, optional)
    "keyword_search": (("keywords",), ("top_k",)),
    "semantic_search": (("query",), ("top_k",)),
    "read_chunk": ((), ("chunk_ids", "chunk_id")),  # upstream's execute takes either (chunk_id for compatibility)
}


class ToolArgumentError(ValueError):
    """A tool call whose arguments the tool cannot run with; reported to the model as an error tool message."""


def split_sentences(text: str, min_chars: int = 0) -> list[str]:
    """Upstream's sentence split: non-empty stripped pieces between runs of ``.!?`` and newlines, longer than
    ``min_chars`` (10 for the index, 0 for keyword snippets)."""
    return [p for p in (s.strip() for s in SENTENCE_SPLIT.split(text)) if p and len(p) > min_chars]


def chunk_texts(session: Session, unit: str) -> list[str]:
    """The chunks of one session: a date header line, then ``role: content`` lines of the unit's turns."""
    header = f"Date: {session.date}"
    groups: list[tuple[Turn, ...]]
    if unit == "exchange":
        groups = [tuple(t for t in pair if t is not None) for pair in turn_pairs(session)]
    elif unit == "session":
        groups = [tuple(session.turns)] if session.turns else []
    elif unit == "turn":
        groups = [(t,) for t in session.turns]
    else:
        raise ValueError(f"a_rag: chunk_unit must be one of {', '.join(CHUNK_UNITS)}, got {unit!r}")
    return ["\n".join([header] + [f"{t.role}: {t.content}" for t in g]) for g in groups]


def _as_list(value: Any, name: str) -> list[str]:
    if isinstance(value, (str, int, float)) and not isinstance(value, bool):
        return [str(value)]
    if isinstance(value, list):
        return [v if isinstance(v, str) else json.dumps(v) if isinstance(v, (dict, list)) else str(v) for v in value]
    raise ToolArgumentError(f"'{name}' must be a list of strings")


def _as_top_k(value: Any, default: int, cap: int) -> int:
    if value is None:
        k = default
    elif isinstance(value, bool):
        raise ToolArgumentError("'top_k' must be an integer")
    elif isinstance(value, int):
        k = value
    elif isinstance(value, float) and value.is_integer():
        k = int(value)
    elif isinstance(value, str) and value.strip().lstrip("-").isdigit():
        k = int(value.strip())
    else:
        raise ToolArgumentError("'top_k' must be an integer")
    return max(0, min(k, cap))


@SYSTEMS.register("a_rag")
class ARAG(MemorySystem):
    """Sentence-indexed chunks of the trace, searched by the answerer through three tools in a ReAct loop."""

    embeddings = ("minilm", "emb3")
    # no write-path calls; per query the loop makes up to max_loops + 1 answerer calls with a growing context
    cost = CallProfile(answer_calls_per_query=6.0, prompt_tokens_per_answer_call=8000)

    def __init__(self, llm, encoder, workdir: Path, chunk_unit: str = "exchange", max_loops: int = 15,
                 max_token_budget: int = 128_000, default_top_k: int = 5, max_top_k: int = 20, **params) -> None:
        super().__init__(llm, encoder, workdir, **params)
        if encoder is None:
            raise ValueError("a_rag: semantic_search needs a dense encoder (embedding=minilm or emb3)")
        if chunk_unit not in CHUNK_UNITS:
            raise ValueError(f"a_rag: chunk_unit must be one of {', '.join(CHUNK_UNITS)}, got {chunk_unit!r}")
        self.chunk_unit = chunk_unit
        self.max_loops = int(max_loops)
        self.max_token_budget = int(max_token_budget)
        self.default_top_k = int(default_top_k)
        self.max_top_k = int(max_top_k)
        self.system_prompt = SYSTEM_PROMPT.format(corpus=CORPUS_DESCRIPTIONS[chunk_unit])
        self.tools = tool_schemas(self.default_top_k, self.max_top_k)
        # the index: chunks (id = position), sentences, sentence -> chunk id, sentence embeddings
        self.chunk_ids: list[str] = []
        self.chunk_texts: list[str] = []
        self.chunk_sessions: list[str] = []  # for analysis only; never shown to the model
        self.sentences: list[str] = []
        self.sentence_to_chunk: list[str] = []
        self.embeddings: np.ndarray | None = None
        self.n_sessions = 0
        self._by_id: dict[str, str] = {}

    # -- write path ---------------------------------------------------------------------------------------------
    def ingest_session(self, session: Session) -> None:
        new_sentences: list[str] = []
        for text in chunk_texts(session, self.chunk_unit):
            cid = str(len(self.chunk_ids))
            self.chunk_ids.append(cid)
            self.chunk_texts.append(text)
            self.chunk_sessions.append(session.id)
            self._by_id[cid] = text
            for sent in split_sentences(text, MIN_SENTENCE_CHARS):
                new_sentences.append(sent)
                self.sentence_to_chunk.append(cid)
        if new_sentences:
            vecs = np.asarray(self.encoder.encode(new_sentences), dtype=np.float32)
            self.embeddings = vecs if self.embeddings is None else np.vstack([self.embeddings, vecs])
            self.sentences.extend(new_sentences)
        self.n_sessions += 1

    # -- tools --------------------------------------------------------------------------------------------------
    def keyword_search(self, keywords: Any, top_k: Any = None) -> tuple[str, dict[str, Any]]:
        """Rank chunks by Σ count(keyword) · len(keyword), case-insensitive; snippets: up to 5 matching sentences."""
        kws = _as_list(keywords, "keywords")
        k = _as_top_k(top_k, self.default_top_k, self.max_top_k)
        scored: list[tuple[str, int, list[str]]] = []
        for cid, text in zip(self.chunk_ids, self.chunk_texts):
            low = text.lower()
            found: list[str] = []
            score = 0
            for kw in kws:
                count = low.count(kw.lower())
                if count > 0:
                    found.append(kw)
                    score += count * len(kw)
            if score > 0:
                matched = [s for s in split_sentences(text) if any(f.lower() in s.lower() for f in found)]
                scored.append((cid, score, matched[:5]))
        scored.sort(key=lambda x: -x[1])  # stable: ties keep corpus order
        top = scored[:k]
        if not top:
            return f"No results found for keywords: {kws}", {"chunks_found": 0, "chunk_ids": []}
        parts = []
        for cid, _, matched in top:
            snippet = "... " + " ... ".join(matched) + " ..." if matched else "(no exact sentence match)"
            parts.append(f"Chunk ID: {cid}, Matched keywords in chunk: {snippet}")
        return "\n\n".join(parts), {"chunks_found": len(top), "chunk_ids": [c for c, _, _ in top],
                                    "scores": [s for _, s, _ in top]}

    def semantic_search(self, query: Any, top_k: Any = None) -> tuple[str, dict[str, Any]]:
        """Top 3·k sentences by cosine, grouped by chunk; chunks ranked by their best sentence, top k shown."""
        if not isinstance(query, str):
            raise ToolArgumentError("'query' must be a string")
        k = _as_top_k(top_k, self.default_top_k, self.max_top_k)
        groups: dict[str, list[tuple[int, float]]] = {}
        if self.embeddings is not None and k > 0:
            q = np.asarray(self.encoder.encode([query]), dtype=np.float32)[0]
            sims = self.embeddings @ q
            for idx in np.argsort(-sims, kind="stable")[: k * SEMANTIC_OVERSAMPLE]:
                groups.setdefault(self.sentence_to_chunk[idx], []).append((int(idx), float(sims[idx])))
        ranked = sorted(groups.items(), key=lambda g: -max(s for _, s in g[1]))[:k]
        if not ranked:
            return f"No results for: {query}", {"chunks_found": 0, "chunk_ids": []}
        parts = []
        for cid, sents in ranked:
            text = self._by_id[cid]
            ordered = sorted(sents, key=lambda s: text.find(self.sentences[s[0]]))
            matched = "... " + " ... ".join(self.sentences[i] for i, _ in ordered) + " ..."
            parts.append(f"Chunk ID: {cid} (Similarity: {max(s for _, s in sents):.3f})\nMatched: {matched}")
        return "\n\n".join(parts), {"chunks_found": len(ranked), "chunk_ids": [c for c, _ in ranked]}

    def read_chunk(self, read: dict[str, None], chunk_ids: Any = None,
                   chunk_id: Any = None) -> tuple[str, dict[str, Any]]:
        """Full text of each requested chunk; one already read in this query is only marked as read before."""
        if chunk_ids is None:
            if chunk_id is None:
                return "Error: No chunk IDs provided", {"error": "no chunk ids"}
            chunk_ids = [chunk_id]
        ids = _as_list(chunk_ids, "chunk_ids")
        rule, thin = "=" * 80, "-" * 80
        parts: list[str] = []
        new, already, missing = [], [], []
        for cid in ids:
            if cid in read:
                already.append(cid)
                parts += [f"\n{rule}", f"[Chunk {cid}]", "(This chunk has been read before)", rule]
            elif cid in self._by_id:
                parts += [f"\n{rule}", f"[Chunk {cid}]", thin, self._by_id[cid], rule]
                read[cid] = None
                new.append(cid)
            else:
                missing.append(cid)
                parts.append(f"\n[Chunk {cid}] - Not found")
        return "\n".join(parts), {"new_chunks_read": new, "already_read": already, "not_found": missing}

    def run_tool(self, name: str, arguments: Any, read: dict[str, None]) -> tuple[str, dict[str, Any]]:
        """Execute one tool call as upstream's registry does: errors become the tool's reply, never exceptions."""
        log: dict[str, Any] = {}
        try:
            args = json.loads(arguments) if isinstance(arguments, str) else arguments
        except json.JSONDecodeError:
            args = None
        if args is None:  # upstream: unparseable arguments are {} (then the tool complains of what is missing)
            log["malformed_arguments"] = True
            args = {}
        if name not in TOOL_PARAMS:
            return f"Error: Tool '{name}' not found", {**log, "error": "tool_not_found"}
        try:
            if not isinstance(args, dict):
                raise ToolArgumentError("arguments must be a JSON object")
            required, optional = TOOL_PARAMS[name]
            for key in sorted(args):
                if key not in required + optional:
                    raise ToolArgumentError(f"unexpected argument '{key}'")
            for key in required:
                if key not in args:
                    raise ToolArgumentError(f"missing required argument '{key}'")
            if name == "keyword_search":
                result, tlog = self.keyword_search(**args)
            elif name == "semantic_search":
                result, tlog = self.semantic_search(**args)
            else:
                result, tlog = self.read_chunk(read, **args)
        except ToolArgumentError as e:
            return f"Error executing tool: {e}", {**log, "error": str(e)}
        return result, {**log, **tlog}

    # -- read path ----------------------------------------------------------------------------------------------
    def answer(self, query: str) -> Answer:
        messages: list[Message] = [Message("system", self.system_prompt), Message("user", query)]
        read: dict[str, None] = {}  # chunks read in this query, in reading order
        trajectory: list[dict[str, Any]] = []
        calls: list[dict[str, Any]] = []
        last_prompt_tokens = 0
        stop = "max_loops"
        for step in range(1, self.max_loops + 1):
            if last_prompt_tokens > self.max_token_budget:
                stop = "token_budget"
                break
            comp = self.llm.answerer.chat(messages, tools=self.tools, tool_choice="auto")
            last_prompt_tokens = comp.prompt_tokens
            calls.append({"step": step, "tools": True, "prompt_tokens": comp.prompt_tokens,
                          "completion_tokens": comp.completion_tokens, "finish_reason": comp.finish_reason,
                          "tool_calls": len(comp.tool_calls)})
            if not comp.tool_calls:
                return Answer(comp.text, tuple(messages), self._meta("answered", step, trajectory, calls, read))
            tool_calls = tuple(
                {"id": f"call_{step}_{i}", "type": "function",
                 "function": {"name": str((tc.get("function") or {}).get("name") or ""),
                              "arguments": _wire_arguments((tc.get("function") or {}).get("arguments"))}}
                for i, tc in enumerate(comp.tool_calls)
            )
            messages.append(Message("assistant", comp.text or None, tool_calls=tool_calls))
            for tc in tool_calls:
                name, raw = tc["function"]["name"], tc["function"]["arguments"]
                result, log = self.run_tool(name, raw, read)
                messages.append(Message("tool", result, tool_call_id=tc["id"]))
                entry = {"step": step, "tool_call_id": tc["id"], "tool_name": name, "arguments": _logged_args(raw)}
                trajectory.append({**entry, **log})
        steps = len(calls)
        messages.append(Message("user", FORCE_ANSWER_PROMPT))
        context = tuple(messages)
        comp = self.llm.answerer.chat(context)
        calls.append({"step": steps + 1, "tools": False, "prompt_tokens": comp.prompt_tokens,
                      "completion_tokens": comp.completion_tokens, "finish_reason": comp.finish_reason,
                      "tool_calls": len(comp.tool_calls)})
        return Answer(comp.text, context, self._meta(stop, steps, trajectory, calls, read))

    def _meta(self, stop: str, steps: int, trajectory: list[dict[str, Any]], calls: list[dict[str, Any]],
              read: dict[str, None]) -> dict[str, Any]:
        return {
            "prompt_version": PROMPT_VERSION,
            "stop_reason": stop,  # answered | max_loops | token_budget
            "forced_final_answer": stop != "answered",
            "steps": steps,
            "llm_calls": len(calls),
            "calls": calls,
            "trajectory": trajectory,
            "tool_errors": sum(1 for t in trajectory if "error" in t),
            "chunks_read_ids": list(read),
            "chunks_read_sessions": [self.chunk_sessions[int(c)] for c in read],
            "n_chunks": len(self.chunk_ids),
            "n_sentences": len(self.sentences),
        }

    # -- state --------------------------------------------------------------------------------------------------
    def snapshot(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        write_json(directory / "state.json", {
            "chunk_unit": self.chunk_unit,
            "n_sessions": self.n_sessions,
            "chunk_ids": self.chunk_ids,
            "chunk_texts": self.chunk_texts,
            "chunk_sessions": self.chunk_sessions,
            "sentences": self.sentences,
            "sentence_to_chunk": self.sentence_to_chunk,
        })
        emb = directory / "embeddings.npy"
        if self.embeddings is not None:
            np.save(emb, self.embeddings)
        elif emb.exists():
            emb.unlink()

    def restore(self, directory: Path) -> None:
        state = read_json(directory / "state.json")
        if state["chunk_unit"] != self.chunk_unit:
            raise ValueError(f"a_rag: snapshot {directory} was built with chunk_unit={state['chunk_unit']!r}, "
                             f"this instance uses {self.chunk_unit!r}")
        self.n_sessions = state["n_sessions"]
        self.chunk_ids = list(state["chunk_ids"])
        self.chunk_texts = list(state["chunk_texts"])
        self.chunk_sessions = list(state["chunk_sessions"])
        self.sentences = list(state["sentences"])
        self.sentence_to_chunk = list(state["sentence_to_chunk"])
        self._by_id = dict(zip(self.chunk_ids, self.chunk_texts))
        emb = directory / "embeddings.npy"
        self.embeddings = np.load(emb) if emb.is_file() else None
        if len(self.sentences) != (0 if self.embeddings is None else len(self.embeddings)):
            raise ValueError(f"a_rag: snapshot {directory}: {len(self.sentences)} sentences but "
                             f"{0 if self.embeddings is None else len(self.embeddings)} embeddings")


def _wire_arguments(arguments: Any) -> str:
    """Tool-call arguments as the string the wire format needs (a reply's own string is kept byte for byte)."""
    if isinstance(arguments, str):
        return arguments
    return "" if arguments is None else json.dumps(arguments, sort_keys=True)


def _logged_args(raw: str) -> Any:
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return raw
