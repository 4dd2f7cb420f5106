"""A-RAG: agentic RAG with hierarchical retrieval tools (Du et al., 2026), reimplemented from
``Ayanami0730/arag`` at commit a44de6b: ``scripts/build_index.py`` (the sentence index), ``src/arag/agent/base.py``
(the ReAct loop and the forced final answer), ``src/arag/tools/{keyword_search,semantic_search,read_chunk,registry}.py``
(the three tools and their error handling), ``src/arag/core/context.py`` (chunks already read),
``src/arag/agent/prompts/default.txt`` (system prompt) and ``configs/example.yaml`` (max_loops 15, 128k budget);
upstream's prompt texts (MIT) are quoted in ``systems/prompts/a_rag.py``.

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
message demanding a final answer is appended and the answerer is called once more without tools. ``Answer.meta``
records every tool call, every LLM call and why the loop stopped (``stop_reason``: answered, tool_call_as_text,
max_loops, token_budget).

Answer modes (the answerer of A-RAG is its agent loop, so both modes run the same loop on the answerer endpoint):
- ``native``: upstream's loop and upstream's final answer: the loop's own reply without tool calls, or the forced
  answer. ``Answer.context`` is the whole message list the final call was sent (system prompt, query, assistant tool
  calls, tool results and, if forced, the demand). ``meta['answer_prompt']`` is ``NATIVE_ANSWER_VERSION``.
- ``shared`` (default): the loop unchanged as retrieval; it stops at the model's own reply (kept in
  ``meta['agent_answer']``) or at a limit, where no forced answer is asked for. The answer is then the shared prompt
  of ``inmind_exp.memory.answering`` over everything the tools returned into the loop's context (``recall``: every tool
  output that returned memory, in order); ``Answer.context`` is the shared prompt's two messages.
- ``paper``: as ``shared``, with the official release's answer prompt instead of the shared one; its ``{context}``
  (and ``Answer.visible``) is the same tool-output text.
In both modes ``Answer.items`` are everything the tools returned into the context: one ``snippet`` item per chunk a
search listed (sources: the turns of the sentences shown) and one ``chunk`` item per chunk read in full (sources: the
chunk's turns). Provenance on write: each chunk keeps the turn id of each of its lines (the date header has none)
and each indexed sentence the turn id of its line; snapshots keep both (older ones load with empty sources).

Tool calls must be structured and their results must reach the model. ``tool_support_problem(client)`` probes an
endpoint once per process with one tool round trip: a tiny request offering one trivial tool with
``tool_choice="auto"``, as the loop asks, and a prompt that needs it; then the same conversation with the tool's
result (a time no model can guess), whose reply must state it; should the model call the tool again instead (the
embedded 1.5B model does, with the result in its prompt), the probe ends as the loop ends at ``max_loops``: upstream's
forced-answer demand with no tools offered, whose reply must state it. The result is kept per endpoint identity, and the
requests go through the client so the call cache answers them in later processes. Measured on the embedded
Qwen2.5-Coder-1.5B: llama-cpp-python's server without a chat format writes the call as fenced JSON text (A-RAG
refuses); ``chatml-function-calling`` returns a structured call, which a one-request probe passed, but its template
has no branch for ``tool`` messages (``inmind_exp.llm.llama_tool_calls``), so the model never sees a result; this
project's ``gguf-tool-calls`` handler (the embedded default) renders them with the GGUF's own template. A forced
named choice would have passed every format, and "required" gets HTTP 500 there. ``ARAG.preflight(models)`` (for
the runner, before any task) and ``answer`` raise ``ToolSupportError`` naming the answerer's base_url and model,
what failed, and the chat formats that keep tool results, when the endpoint fails the round trip. A reply that writes a tool call as
text (``<tools>{...}</tools>``, ``<tool_call>``, ``<function=...>``, a JSON object with "name" and "arguments",
``keyword_search(...)``) but makes no structured call is recorded as a ``tool_call_as_text`` fault and the answer
is marked with ``stop_reason: tool_call_as_text``; a tool call with arguments that are not JSON, an unknown tool
or arguments the tool cannot run with is a ``bad_tool_call`` fault (the model still gets upstream's error message).

Deliberate deviations:
- The token budget counts the prompt tokens the endpoint reported for the latest call (tool schemas included)
  instead of upstream's tiktoken count of message contents (which adds the system prompt twice and omits tool-call
  arguments); it therefore lags one step, since the newest tool results are counted by the next call. No tiktoken.
- Tool-call ids are rewritten to ``call_<step>_<i>`` (the reply's own ids, random on llama.cpp, would make the next
  prompt nondeterministic); assistant message and tool messages stay consistent.
- An endpoint failure (``LLMCallError``) propagates instead of upstream's ``break`` / "Error: ..." answer.
- Sampling (temperature, max_tokens) is the answerer role's configuration, not upstream's fixed 0.0 / 16384.
- The system prompt, the forced-answer demand and the tool and parameter descriptions are upstream's verbatim
  (``systems/prompts/a_rag.py``), except one line added to the system prompt saying the corpus is the user's
  earlier conversations and what a chunk is (upstream's corpus is documents; a user's question cannot be read
  against a corpus the agent does not know is their record), and the ``top_k`` limits stated from the parameters.
- Tool arguments are coerced where upstream would misbehave: a bare string for ``keywords`` / ``chunk_ids`` becomes a
  one-item list (upstream iterates its characters), list items become strings, ``top_k`` may be an integral number
  or numeric string, null means the default, and a negative ``top_k`` means 0. Unexpected arguments, missing required
  ones, arguments that are not JSON (parsed as ``{}`` as upstream) and unknown tools give an error tool message.
- Semantic ties are broken by sentence order (stable sort); no retrieved-token counts are logged.
- A reply that writes a tool call as text still ends the loop as upstream's would, but is a fault and marked; upstream
  would return it as an ordinary answer. In ``shared`` mode a loop that hits a limit gets no forced answer (the
  shared prompt answers instead).
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from inmind_exp.memory.answering import MEMORY_CHARS, SHARED, memory_block
from inmind_exp.memory import (SYSTEMS, Answer, Answerer, CallProfile, ContextItem, EndpointError, MemorySystem,
                               Message, Recall, Session, Turn, at_least, read_json, turn_pairs, write_json)
from systems.prompts.a_rag import (CHUNK_IDS_PARAMETER, FORCE_ANSWER_PROMPT, KEYWORD_SEARCH_DESCRIPTION,
                                   KEYWORD_TOP_K_PARAMETER, KEYWORDS_PARAMETER, PROMPTS_VERSION, QUERY_PARAMETER,
                                   READ_CHUNK_DESCRIPTION, SEMANTIC_SEARCH_DESCRIPTION, SEMANTIC_TOP_K_PARAMETER,
                                   SYSTEM_PROMPT)

if TYPE_CHECKING:
    from inmind_exp.llm import LLMClient, Models

PROMPT_VERSION = "a_rag-v3"
#: upstream's loop: its own final reply (or the forced answer) is the answer
NATIVE_ANSWER_VERSION = "a_rag-native-agent-a44de6b"
CHUNK_UNITS = ("exchange", "session", "turn")
SENTENCE_SPLIT = re.compile(r"[.!?\n]+")  # build_index.split_sentences and KeywordSearchTool._split_sentences
MIN_SENTENCE_CHARS = 10  # build_index keeps sentences longer than this
SEMANTIC_OVERSAMPLE = 3  # semantic_search ranks the top 3·k sentences

CORPUS_DESCRIPTIONS = {
    "exchange": "one dated exchange per chunk: a message from the user and your reply",
    "session": "one dated conversation session per chunk",
    "turn": "one dated message per chunk, from the user or from you",
}


def tool_schemas(default_top_k: int, max_top_k: int) -> list[dict[str, Any]]:
    """The three OpenAI function schemas, in upstream's registration order (keyword, read, semantic)."""
    limits = {"default_top_k": default_top_k, "max_top_k": max_top_k}
    return [
        {"type": "function", "function": {
            "name": "keyword_search",
            "description": KEYWORD_SEARCH_DESCRIPTION,
            "parameters": {"type": "object", "properties": {
                "keywords": {"type": "array", "items": {"type": "string"}, "description": KEYWORDS_PARAMETER},
                "top_k": {"type": "integer", "description": KEYWORD_TOP_K_PARAMETER.format(**limits),
                          "default": default_top_k},
            }, "required": ["keywords"]},
        }},
        {"type": "function", "function": {
            "name": "read_chunk",
            "description": READ_CHUNK_DESCRIPTION,
            "parameters": {"type": "object", "properties": {
                "chunk_ids": {"type": "array", "items": {"type": "string"}, "description": CHUNK_IDS_PARAMETER},
            }, "required": ["chunk_ids"]},
        }},
        {"type": "function", "function": {
            "name": "semantic_search",
            "description": SEMANTIC_SEARCH_DESCRIPTION,
            "parameters": {"type": "object", "properties": {
                "query": {"type": "string", "description": QUERY_PARAMETER},
                "top_k": {"type": "integer", "description": SEMANTIC_TOP_K_PARAMETER.format(**limits),
                          "default": default_top_k},
            }, "required": ["query"]},
        }},
    ]


TOOL_PARAMS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {  # name -> (required, optional)
    "keyword_search": (("keywords",), ("top_k",)),
    "semantic_search": (("query",), ("top_k",)),
    "read_chunk": ((), ("chunk_ids", "chunk_id")),  # upstream's execute takes either (chunk_id for compatibility)
}


# -- tool-call support: the preflight probe and tool calls written as text -------------------------------------------

PROBE_VERSION = "a_rag-tool-probe-v3"
PROBE_TOOL = {"type": "function", "function": {
    "name": "get_current_time", "description": "Return the current date and time.",
    "parameters": {"type": "object", "properties": {}, "required": []}}}
PROBE_MESSAGES = (Message("user", "What time is it? Call the get_current_time tool to find out."),)
#: what the probe's tool returns: a time no model can guess, which the model's next reply must state
PROBE_RESULT = "2031-05-17 07:43"
PROBE_RESULT_SEEN = re.compile(r"(?<!\d)0?7:43(?!\d)|2031-05-17")  # its time or its date, in any sentence
#: "auto", as the agent loop asks: a forced choice proves nothing about the loop (llama-cpp-python without a
#: function-calling chat format grammar-forces a named choice into a structured call, yet writes calls as text under
#: "auto"), and its chatml-function-calling handler rejects "required" with an HTTP 500
PROBE_TOOL_CHOICE = "auto"
#: the chat formats that keep tool results in the prompt, named by the refusal (chatml-function-calling drops them)
TOOL_FORMATS = ("this project's gguf-tool-calls handler (llm=local's default; python -m inmind_exp.llm.llama_tool_calls "
                "--chat_format gguf-tool-calls), llama.cpp's llama-server --jinja, or vLLM's --enable-auto-tool-choice "
                "with the model's --tool-call-parser; not llama-cpp-python's chatml-function-calling, which drops tool "
                "results from the prompt")
_TOOL_SUPPORT: dict[str, str] = {}  # endpoint identity -> the probe's problem ("" when it passed), once per process
_TOOL_SUPPORT_LOCK = threading.Lock()


class ToolSupportError(EndpointError):
    """The answerer endpoint does not return structured tool calls, or does not show the model their results, which
    A-RAG's agent loop needs."""


def tool_support_problem(client: "LLMClient") -> str:
    """What the endpoint gets wrong in one tool round trip, "" when nothing: offered one trivial tool with
    ``tool_choice="auto"`` (as the loop) and a prompt that asks for it, the model must call it in the ``tool_calls``
    field (a call written as text is no support), then, sent the tool's result (a time it cannot guess), reply with
    that time (after one more tool call, asked for a final answer without tools, as the loop's last step): a chat
    format that drops tool results from the prompt fails here. The result is kept per endpoint
    identity for the process, and the requests go through the client, so its call cache answers them for every
    later process of the run."""
    key = client.endpoint.identity
    with _TOOL_SUPPORT_LOCK:
        if key in _TOOL_SUPPORT:
            return _TOOL_SUPPORT[key]
    name = PROBE_TOOL["function"]["name"]
    first = client.chat(PROBE_MESSAGES, tools=[PROBE_TOOL], tool_choice=PROBE_TOOL_CHOICE)
    calls = [tc for tc in first.tool_calls if (tc.get("function") or {}).get("name") == name]
    if not calls:
        problem = "returned no structured tool call when asked to call a tool"
    else:
        call = {"id": str(calls[0].get("id") or "call_probe"), "type": "function",
                "function": {"name": name, "arguments": _wire_arguments((calls[0].get("function") or {}).get("arguments"))}}
        messages = (*PROBE_MESSAGES, Message("assistant", first.text or "", tool_calls=(call,)),
                    Message("tool", PROBE_RESULT, tool_call_id=call["id"]))
        second = client.chat(messages, tools=[PROBE_TOOL], tool_choice=PROBE_TOOL_CHOICE)
        forced = bool(second.tool_calls)
        if forced:  # it asked again (a small model does, with the result in view): end as the loop does at max_loops
            second = client.chat((*messages, Message("user", FORCE_ANSWER_PROMPT)))
        problem = "" if not second.tool_calls and PROBE_RESULT_SEEN.search(second.text or "") else (
            f"called the tool, but its reply to the tool's result ({PROBE_RESULT!r}) did not state it "
            f"({'another tool call' if second.tool_calls else repr((second.text or '')[:120])}"
            f"{', even when asked for a final answer without tools' if forced else ''}): the model never saw the result")
    with _TOOL_SUPPORT_LOCK:
        _TOOL_SUPPORT[key] = problem
    return problem


def a_rag_tool_support(client: "LLMClient") -> bool:
    """Whether ``client``'s endpoint passes the tool round trip (``tool_support_problem``)."""
    return not tool_support_problem(client)


def require_tool_support(client: "LLMClient") -> None:
    """Raise ``ToolSupportError`` naming the endpoint (base_url, model), what went wrong and the chat formats that
    work, when the endpoint fails the tool round trip."""
    problem = tool_support_problem(client)
    if problem:
        ep = client.endpoint
        raise ToolSupportError(
            f"a_rag: the {ep.role} endpoint {ep.base_url} (model {ep.model}) {problem}; A-RAG's agent loop needs tool "
            f"calls in the API's tool_calls field and their results in the prompt (serve the model with a chat format "
            f"that keeps tool results: {TOOL_FORMATS}; or leave a_rag out of the sweep)")


def clear_tool_support_cache() -> None:
    """Forget the probe results of this process (tests whose fake servers may reuse a port)."""
    with _TOOL_SUPPORT_LOCK:
        _TOOL_SUPPORT.clear()


TOOL_TEXT_MARKERS = re.compile(
    r"<\s*/?\s*(?:tool_call|tool_calls|tools|function_call|function|tool_use)\b[^>]*>|<\|python_tag\|>|\[TOOL_CALLS\]"
    r"|\b(?:keyword_search|semantic_search|read_chunk)\s*\(", re.I)


def tool_call_text(text: str) -> str | None:
    """The evidence that a reply writes a tool call as text instead of calling it: a tool-call tag
    (``<tool_call>``, ``<tools>``, ``<function=...>``, ``[TOOL_CALLS]`` ...), one of A-RAG's tools written as a call,
    or a JSON object with "name" and "arguments"/"parameters"; None for an ordinary answer."""
    m = TOOL_TEXT_MARKERS.search(text or "")
    if m:
        return m.group(0)
    decoder = json.JSONDecoder()
    starts = [i for i, c in enumerate(text or "") if c == "{"][:50]
    for i in starts:
        try:
            obj, _ = decoder.raw_decode(text, i)
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict) and "name" in obj and ("arguments" in obj or "parameters" in obj):
            return json.dumps(obj)[:200]
    return None


@dataclass(frozen=True)
class Trajectory:
    """One run of the agent loop: the messages of its last call, its own final reply, what the tools returned
    (``outputs``, ``items``) and the diagnostics for ``Answer.meta``."""

    messages: tuple[Message, ...]
    text: str
    outputs: tuple[str, ...]
    items: tuple[ContextItem, ...]
    meta: dict[str, Any]


class ToolArgumentError(ValueError):
    """A tool call whose arguments the tool cannot run with; reported to the model as an error tool message."""


def split_sentences(text: str, min_chars: int = 0) -> list[str]:
    """Upstream's sentence split: non-empty stripped pieces between runs of ``.!?`` and newlines, longer than
    ``min_chars`` (10 for the index, 0 for keyword snippets)."""
    return [p for p in (s.strip() for s in SENTENCE_SPLIT.split(text)) if p and len(p) > min_chars]


def chunk_texts(session: Session, unit: str) -> list[str]:
    """The chunks of one session: a date header line, then ``role: content`` lines of the unit's turns."""
    return [text for text, _ in chunks_with_line_turns(session, unit)]


def chunks_with_line_turns(session: Session, unit: str) -> list[tuple[str, list[str]]]:
    """Each chunk's text with the turn id of each of its lines ("" for the date header): a sentence never spans a
    newline, so every sentence of a chunk derives from exactly the turn of its line."""
    header = f"Date: {session.date}"
    out = []
    for group in _turn_groups(session.with_turn_ids(), unit):
        lines, turns = [header], [""]
        for t in group:
            part = f"{t.role}: {t.content}".split("\n")
            lines += part
            turns += [t.id] * len(part)
        out.append(("\n".join(lines), turns))
    return out


def _turn_groups(session: Session, unit: str) -> list[tuple[Turn, ...]]:
    groups: list[tuple[Turn, ...]]
    if unit == "exchange":
        groups = [tuple(t for t in pair if t is not None) for pair in turn_pairs(session)]
    elif unit == "session":
        groups = [tuple(session.turns)] if session.turns else []
    elif unit == "turn":
        groups = [(t,) for t in session.turns]
    else:
        raise ValueError(f"a_rag: chunk_unit must be one of {', '.join(CHUNK_UNITS)}, got {unit!r}")
    return groups


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

    version = "3"  # 2: upstream's system prompt, forced-answer demand and tool descriptions verbatim (were ours);
    # 3: an assistant message beside tool calls carries content "" not null (llama-cpp-python's server refuses null),
    # and the tool probe ends with the loop's forced final answer when the model calls the tool again

    embeddings = ("minilm", "emb3")
    # no write-path calls; per query the loop makes up to max_loops + 1 answerer calls with a growing context
    cost = CallProfile(answer_calls_per_query=6.0, prompt_tokens_per_answer_call=8000)

    param_ranges = {"max_loops": at_least(1), "max_token_budget": at_least(1), "default_top_k": at_least(1),
                    "max_top_k": at_least(1)}

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
        self.chunk_line_turns: list[list[str]] = []  # provenance: the turn id of each line ("" for the date header)
        self.sentences: list[str] = []
        self.sentence_to_chunk: list[str] = []
        self.sentence_turns: list[str] = []  # provenance: the turn id each indexed sentence comes from
        self.embeddings: np.ndarray | None = None
        self.n_sessions = 0
        self._by_id: dict[str, str] = {}

    # -- write path ---------------------------------------------------------------------------------------------
    def ingest_session(self, session: Session) -> None:
        new_sentences: list[str] = []
        for text, line_turns in chunks_with_line_turns(session, self.chunk_unit):
            cid = str(len(self.chunk_ids))
            self.chunk_ids.append(cid)
            self.chunk_texts.append(text)
            self.chunk_sessions.append(session.id)
            self.chunk_line_turns.append(line_turns)
            self._by_id[cid] = text
            for sent, turn in self._line_sentences(cid, MIN_SENTENCE_CHARS):
                new_sentences.append(sent)
                self.sentence_to_chunk.append(cid)
                self.sentence_turns.append(turn)
        if new_sentences:
            vecs = np.asarray(self.encoder.encode(new_sentences), dtype=np.float32)
            self.embeddings = vecs if self.embeddings is None else np.vstack([self.embeddings, vecs])
            self.sentences.extend(new_sentences)
        self.n_sessions += 1

    def _line_sentences(self, cid: str, min_chars: int = 0) -> list[tuple[str, str]]:
        """The chunk's sentences (exactly ``split_sentences(text, min_chars)``, since newlines split sentences) with
        the turn id of the line each comes from."""
        lines = self._by_id[cid].split("\n")
        turns = self.chunk_line_turns[int(cid)] if int(cid) < len(self.chunk_line_turns) else []
        turns = turns if len(turns) == len(lines) else [""] * len(lines)  # a snapshot from before provenance
        return [(sent, turn) for line, turn in zip(lines, turns) for sent in split_sentences(line, min_chars)]

    def chunk_sources(self, cid: str) -> tuple[str, ...]:
        """The turn ids a chunk derives from, in order."""
        turns = self.chunk_line_turns[int(cid)] if int(cid) < len(self.chunk_line_turns) else []
        return tuple(dict.fromkeys(t for t in turns if t))

    # -- tools --------------------------------------------------------------------------------------------------
    def keyword_search(self, keywords: Any, top_k: Any = None,
                       items: list[ContextItem] | None = None) -> tuple[str, dict[str, Any]]:
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
                matched = [(s, turn) for s, turn in self._line_sentences(cid)
                           if any(f.lower() in s.lower() for f in found)]
                scored.append((cid, score, matched[:5]))
        scored.sort(key=lambda x: -x[1])  # stable: ties keep corpus order
        top = scored[:k]
        if not top:
            return f"No results found for keywords: {kws}", {"chunks_found": 0, "chunk_ids": []}
        parts = []
        for cid, _, matched in top:
            snippet = "... " + " ... ".join(s for s, _ in matched) + " ..." if matched else "(no exact sentence match)"
            parts.append(f"Chunk ID: {cid}, Matched keywords in chunk: {snippet}")
            if items is not None:
                items.append(ContextItem("snippet", parts[-1], tuple(dict.fromkeys(t for _, t in matched if t))))
        return "\n\n".join(parts), {"chunks_found": len(top), "chunk_ids": [c for c, _, _ in top],
                                    "scores": [s for _, s, _ in top]}

    def semantic_search(self, query: Any, top_k: Any = None,
                        items: list[ContextItem] | None = None) -> tuple[str, dict[str, Any]]:
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
            if items is not None:
                turns = (self.sentence_turns[i] if i < len(self.sentence_turns) else "" for i, _ in ordered)
                items.append(ContextItem("snippet", parts[-1], tuple(dict.fromkeys(t for t in turns if t))))
        return "\n\n".join(parts), {"chunks_found": len(ranked), "chunk_ids": [c for c, _ in ranked]}

    def read_chunk(self, read: dict[str, None], chunk_ids: Any = None, chunk_id: Any = None,
                   items: list[ContextItem] | None = None) -> tuple[str, dict[str, Any]]:
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
                if items is not None:
                    items.append(ContextItem("chunk", f"[Chunk {cid}]\n{self._by_id[cid]}", self.chunk_sources(cid)))
            else:
                missing.append(cid)
                parts.append(f"\n[Chunk {cid}] - Not found")
        return "\n".join(parts), {"new_chunks_read": new, "already_read": already, "not_found": missing}

    def run_tool(self, name: str, arguments: Any, read: dict[str, None],
                 items: list[ContextItem] | None = None) -> tuple[str, dict[str, Any]]:
        """Execute one tool call as upstream's registry does: errors become the tool's reply, never exceptions.
        What the tool puts into the context is appended to ``items`` with its turn ids."""
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
                result, tlog = self.keyword_search(**args, items=items)
            elif name == "semantic_search":
                result, tlog = self.semantic_search(**args, items=items)
            else:
                result, tlog = self.read_chunk(read, **args, items=items)
        except ToolArgumentError as e:
            return f"Error executing tool: {e}", {**log, "error": str(e)}
        return result, {**log, **tlog}

    # -- read path ----------------------------------------------------------------------------------------------
    @classmethod
    def preflight(cls, models: "Models") -> None:
        """Refuse a run whose answerer returns no structured tool calls (``ToolSupportError`` names the endpoint);
        the runner may call this before any task starts, and ``answer`` calls it anyway (cached per endpoint)."""
        require_tool_support(models.answerer)

    def answer(self, query: str, answerer: Answerer = SHARED) -> Answer:
        """The agent loop is the answerer's own retrieval: ``native`` is upstream's loop and its own final reply (or
        forced answer), with the whole trajectory as the context; in the other modes the protocol's answerer
        answers over everything the tools returned (``recall``; the loop's own reply is kept in
        ``meta['agent_answer']``)."""
        require_tool_support(self.llm.answerer)
        if answerer.mode != "native":
            return super().answer(query, answerer)
        tr = self._run_loop(query, final_call=True)
        return Answer(tr.text, tr.messages, {**tr.meta, "answer_prompt": NATIVE_ANSWER_VERSION,
                                             MEMORY_CHARS: len(memory_block("\n\n".join(tr.outputs)))}, items=tr.items)

    def recall(self, query: str) -> Recall:
        """The agent loop's retrieval: every tool output that put memory into the context, in order, with its items.
        The loop stops at its own reply; when a limit is hit no forced answer is asked for."""
        tr = self._run_loop(query, final_call=False)
        return Recall("\n\n".join(tr.outputs), tr.items, {**tr.meta, "agent_answer": tr.text})

    def _run_loop(self, query: str, final_call: bool) -> Trajectory:
        messages: list[Message] = [Message("system", self.system_prompt), Message("user", query)]
        read: dict[str, None] = {}  # chunks read in this query, in reading order
        trajectory: list[dict[str, Any]] = []
        calls: list[dict[str, Any]] = []
        items: list[ContextItem] = []
        outputs: list[str] = []
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
                stop = self._reply_stop(comp.text, step)
                meta = self._meta(stop, step, trajectory, calls, read)
                return Trajectory(tuple(messages), comp.text, tuple(outputs), tuple(items), meta)
            tool_calls = tuple(
                {"id": f"call_{step}_{i}", "type": "function",
                 "function": {"name": str((tc.get("function") or {}).get("name") or ""),
                              "arguments": _wire_arguments((tc.get("function") or {}).get("arguments"))}}
                for i, tc in enumerate(comp.tool_calls)
            )
            messages.append(Message("assistant", comp.text or "", tool_calls=tool_calls))
            for tc in tool_calls:
                name, raw = tc["function"]["name"], tc["function"]["arguments"]
                found: list[ContextItem] = []
                result, log = self.run_tool(name, raw, read, found)
                messages.append(Message("tool", result, tool_call_id=tc["id"]))
                entry = {"step": step, "tool_call_id": tc["id"], "tool_name": name, "arguments": _logged_args(raw)}
                trajectory.append({**entry, **log})
                if "error" in log or log.get("malformed_arguments"):
                    self.fault("bad_tool_call", "agent_loop",
                               f"step {step}: {name}({raw[:200]}): {log.get('error', 'arguments are not JSON')}")
                if found:
                    items += found
                    outputs.append(result)
        steps = len(calls)
        if not final_call:
            return Trajectory(tuple(messages), "", tuple(outputs), tuple(items),
                              self._meta(stop, steps, trajectory, calls, read))
        messages.append(Message("user", FORCE_ANSWER_PROMPT))
        context = tuple(messages)
        comp = self.llm.answerer.chat(context)
        calls.append({"step": steps + 1, "tools": False, "prompt_tokens": comp.prompt_tokens,
                      "completion_tokens": comp.completion_tokens, "finish_reason": comp.finish_reason,
                      "tool_calls": len(comp.tool_calls)})
        if self._reply_stop(comp.text, steps + 1) == "tool_call_as_text":
            stop = "tool_call_as_text"
        meta = self._meta(stop, steps, trajectory, calls, read)
        meta["forced_final_answer"] = True
        return Trajectory(context, comp.text, tuple(outputs), tuple(items), meta)

    def _reply_stop(self, text: str, step: int) -> str:
        """A reply without structured tool calls ends the loop; if it writes a tool call as text it is a fault and
        the answer is marked, never taken for an ordinary answer."""
        evidence = tool_call_text(text)
        if evidence is None:
            return "answered"
        self.fault("tool_call_as_text", "agent_loop",
                   f"step {step}: the reply wrote a tool call as text ({evidence}) and no structured tool call: {text}")
        return "tool_call_as_text"

    def _meta(self, stop: str, steps: int, trajectory: list[dict[str, Any]], calls: list[dict[str, Any]],
              read: dict[str, None]) -> dict[str, Any]:
        return {
            "prompt_version": PROMPT_VERSION,
            "stop_reason": stop,  # answered | tool_call_as_text | max_loops | token_budget
            "forced_final_answer": False,
            "steps": steps,
            "tool_calls": len(trajectory),  # every tool call the agent made (what ran, ``inmind_exp.protocol.budget``)
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
            "chunk_line_turns": self.chunk_line_turns,
            "sentences": self.sentences,
            "sentence_to_chunk": self.sentence_to_chunk,
            "sentence_turns": self.sentence_turns,
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
        # snapshots from before provenance load with empty sources
        self.chunk_line_turns = [list(t) for t in state.get("chunk_line_turns", [])] or [
            [""] * len(text.split("\n")) for text in self.chunk_texts]
        self.sentence_turns = list(state.get("sentence_turns", [])) or [""] * len(self.sentences)
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
