"""MemGPT core memory (Packer et al., 2023, "MemGPT: Towards LLMs as Operating Systems", arXiv:2310.08560), as the
Letta server keeps it: the agent edits an always-visible core memory through tool calls and keeps everything else in
searchable stores. Write-time routing by the LLM: what the agent puts in its core block is in front of every later
answer; the rest must be found by a search at query time.

Read from ``letta-ai/letta`` (Apache-2.0) at tag 0.16.8 (1131535716e8a31c9a437f8695e25ac98f203a24, the last Python
server; the package from 0.32 on is Letta Code), reimplemented rather than depended on: ``letta/prompts/
system_prompts/memgpt_chat.py`` (system prompt), ``letta/functions/function_sets/base.py`` (``send_message``,
``conversation_search``, ``archival_memory_insert``/``_search``, ``core_memory_append``, ``core_memory_replace``: their
semantics and descriptions), ``letta/schemas/memory.py`` (``_render_memory_blocks_standard``: the core block
rendering), ``letta/prompts/prompt_generator.py`` (``compile_memory_metadata_block``, the system message),
``letta/system.py`` (``package_user_message``, ``package_function_response``, ``get_heartbeat``) and
``letta/constants.py`` (heartbeat texts, ``RETRIEVAL_QUERY_DEFAULT_PAGE_SIZE`` 5); block size from MemGPT 0.3.1's
``memgpt/constants.py`` (``CORE_MEMORY_HUMAN_CHAR_LIMIT`` 2000, the paper-era value; Letta 0.16.8 has 20000). Texts
verbatim in ``systems/prompts/memgpt.py``.

Write path, per (user, assistant) exchange of a session: the memory model gets the system message (the MemGPT
prompt, then the ``<memory_blocks>`` with the ``persona`` and ``human`` blocks and the ``<memory_metadata>``), the
last ``context_messages`` messages of the trace (the in-context FIFO queue) and the user's turn packaged as
``{"type": "user_message", "message": ..., "time": <trace date>}``, with the tools ``send_message``,
``core_memory_append``, ``core_memory_replace``, ``archival_memory_insert``, ``archival_memory_search`` and
``conversation_search`` (each with ``request_heartbeat``). Every tool call runs; a call that asked for a heartbeat,
or failed, runs the agent again after a heartbeat message (upstream's chaining), up to ``max_steps`` calls per
exchange. A reply without tool calls, or one whose calls asked no heartbeat, ends the step. The system message is
recompiled after each step (core memory may have changed). Every trace message goes to recall memory
(``conversation_search``: substring or embedding match, as upstream's hybrid search); archival memory holds what the
agent inserted, searched by embedding.

Read path (``recall``): the same agent on the answerer, given the query as a user message and only the read tools
(``archival_memory_search``, ``conversation_search``, ``send_message``), up to ``max_steps`` calls; its searches are
the retrieval. The answerer's context is the core memory (``core`` items, one per block line, ``visible=True``), the
in-context queue (``message`` items, ``visible=True``) and what the searches returned (``passage`` and ``message``
items, retrieved). ``shared`` and ``paper`` answer over that rendering with their prompts; ``native`` takes the
agent's own ``send_message`` (or its plain reply) as the answer, with the whole agent conversation as context.

Provenance, by the one rule (``inmind_exp.memory.kept_provenance``): a core line kept verbatim keeps its origin and
derived turns; a line an edit wrote or changed, and an archival passage, has as origin the origin of every input of
the call it was written in whose content it still states: the user's turn being handled, the queued messages shown,
the core lines before the edit and what the searches of this step returned; the rest of those inputs are derived.
Raw messages (queue, recall memory) have their own turn as origin.

Faults (on the exchange's turns): a tool call whose arguments are not JSON or miss a required one, an unknown tool
or block label, a ``core_memory_replace`` whose ``old_content`` is not in the block, an edit past the block's limit
(``bad_tool_call``: upstream returns the failure to the agent, which gets a heartbeat, as here); a reply that writes a
tool call as text without a structured call (``tool_call_as_text``); ``max_steps`` reached while the agent still asked
for heartbeats (``step_limit``). ``preflight`` refuses endpoints without structured tool calls (A-RAG's probe).

Deliberate deviations:
  - The agent's own ``send_message`` reply on the write path is not kept: the trace's assistant turn takes its place in
    the queue and recall memory, so the conversation stays the benchmark's.
  - No queue overflow summarisation: the queue is the last ``context_messages`` trace messages (the paper's recursive
    summary and memory-pressure warning are left out; older messages stay reachable through ``conversation_search``).
  - The human block starts empty (upstream's default ``basic.txt`` says "First name: Chad"); the persona is
    upstream's default ``sam_pov``. Block limit 2000 characters (paper era), ``core_char_limit``.
  - Times are trace dates, not the wall clock; the agent id is a constant; tool-call ids are ``call_<step>_<i>``.
  - The search tools take no tag or date filters (tags given to ``archival_memory_insert`` are stored and shown);
    ``conversation_search`` returns the best matches by embedding, substring matches first, instead of Postgres
    hybrid search; results are rendered as upstream (``Found N results: [...]``).
  - At query time the edit tools are not offered: answering must not change memory (both queries see one state).
  - Endpoint failures propagate; sampling is the roles' configuration.
"""

from __future__ import annotations

import contextlib
import json
import threading
from pathlib import Path
from typing import Any

from inmind_exp.memory import (SYSTEMS, Answer, Answerer, CallProfile, ContextItem, EndpointError, MemorySystem,
                               Message, Models, Recall, Session, TextIndex, at_least, kept_provenance, read_json,
                               turn_pairs, write_json)
from inmind_exp.memory.answering import SHARED
from systems.prompts.memgpt import (ARCHIVAL_MEMORY_INSERT, ARCHIVAL_MEMORY_SEARCH, CONVERSATION_SEARCH,
                                    CORE_MEMORY_APPEND, CORE_MEMORY_REPLACE, FUNC_FAILED_HEARTBEAT_MESSAGE, HUMAN,
                                    HUMAN_BLOCK_DESCRIPTION, MEMORY_BLOCKS_HEADER, NON_USER_MSG_PREFIX, PERSONA,
                                    PERSONA_BLOCK_DESCRIPTION,
                                    PROMPTS_VERSION, REQ_HEARTBEAT_MESSAGE, REQUEST_HEARTBEAT_DESCRIPTION, SEND_MESSAGE,
                                    SYSTEM_PROMPT)

PROMPT_VERSION = "memgpt-v1"
NATIVE_ANSWER_VERSION = "memgpt-native-send_message-0.16.8"
AGENT_ID = "agent-inmind"
WRITE_TOOLS = ("send_message", "core_memory_append", "core_memory_replace", "archival_memory_insert",
               "archival_memory_search", "conversation_search")
READ_TOOLS = ("send_message", "archival_memory_search", "conversation_search")
BLOCKS = ("persona", "human")


def _schema(name: str, doc: tuple[str, dict[str, str]], types: dict[str, dict[str, Any]], required: tuple[str, ...],
            heartbeat: bool = True) -> dict[str, Any]:
    description, args = doc
    props = {k: {**types[k], "description": args[k]} for k in types}
    if heartbeat:
        props["request_heartbeat"] = {"type": "boolean", "description": REQUEST_HEARTBEAT_DESCRIPTION}
    return {"type": "function", "function": {"name": name, "description": description, "parameters": {
        "type": "object", "properties": props, "required": [*required, *(("request_heartbeat",) if heartbeat else ())]}}}


_STR = {"type": "string"}
TOOL_SCHEMAS: dict[str, dict[str, Any]] = {
    "send_message": _schema("send_message", SEND_MESSAGE, {"message": _STR}, ("message",), heartbeat=False),
    "core_memory_append": _schema("core_memory_append", CORE_MEMORY_APPEND, {"label": _STR, "content": _STR},
                                  ("label", "content")),
    "core_memory_replace": _schema("core_memory_replace", CORE_MEMORY_REPLACE,
                                   {"label": _STR, "old_content": _STR, "new_content": _STR},
                                   ("label", "old_content", "new_content")),
    "archival_memory_insert": _schema("archival_memory_insert", ARCHIVAL_MEMORY_INSERT,
                                      {"content": _STR, "tags": {"type": "array", "items": _STR}}, ("content",)),
    "archival_memory_search": _schema("archival_memory_search", ARCHIVAL_MEMORY_SEARCH,
                                      {"query": _STR, "top_k": {"type": "integer"}}, ("query",)),
    "conversation_search": _schema("conversation_search", CONVERSATION_SEARCH,
                                   {"query": _STR, "limit": {"type": "integer"}}, ()),
}
_ARGS = {name: set(s["function"]["parameters"]["properties"]) for name, s in TOOL_SCHEMAS.items()}
_REQUIRED = {name: set(s["function"]["parameters"]["required"]) - {"request_heartbeat"} for name, s in TOOL_SCHEMAS.items()}


class ToolFailed(ValueError):
    """A tool call upstream answers with ``status: Failed`` (bad arguments, unknown label, no match, over limit)."""


class MemGPTToolSupportError(EndpointError):
    """An endpoint that does not return structured tool calls (or drops their results), which MemGPT's agent needs."""


def _dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False)


def package_user_message(message: str, time: str) -> str:
    return _dumps({"type": "user_message", "message": message, "time": time})


def package_function_response(ok: bool, response: Any, time: str) -> str:
    return _dumps({"status": "OK" if ok else "Failed", "message": response, "time": time})


def heartbeat(reason: str, time: str) -> str:
    return _dumps({"type": "heartbeat", "reason": reason, "time": time})


def _wire(arguments: Any) -> str:
    if isinstance(arguments, str):
        return arguments
    return "" if arguments is None else json.dumps(arguments, sort_keys=True)


def _int(value: Any, default: int) -> int:
    if value is None:
        return default
    if isinstance(value, bool):
        raise ToolFailed("expected an integer")
    try:
        return max(0, int(value))
    except (TypeError, ValueError):
        raise ToolFailed(f"expected an integer, got {value!r}") from None


_PROBE_LOCK = threading.Lock()


@SYSTEMS.register("memgpt")
class MemGPT(MemorySystem):
    """An agent that routes facts into an always-visible core block by tool calls, the rest to searchable stores."""

    version = "1"
    embeddings = ("minilm", "emb3")
    routing = True  # write-time routing into an always-visible state (``inmind_exp.memory.traits``)
    # per user turn: one agent call plus the heartbeats it chains (measured: 1 on the fake server's scripted agent and
    # on the embedded 1.5B model, which answered with send_message alone; 1.5 allows for chaining); prompt: 2.9k tokens
    # with an empty queue on the embedded model, about 1.5k more with 10 queued messages. Per query: the agent's
    # search loop on the answerer (1-2 calls of 2.2k+ tokens) and the answer over core, queue and results (about 2k)
    cost = CallProfile(memory_calls_per_user_turn=1.5, prompt_tokens_per_memory_call=4500,
                       completion_tokens_per_memory_call=150, answer_calls_per_query=3.0,
                       prompt_tokens_per_answer_call=3000)
    param_ranges = {"core_char_limit": at_least(1), "context_messages": at_least(0), "max_steps": at_least(1),
                    "archival_top_k": at_least(1), "conversation_top_k": at_least(1)}

    def __init__(self, llm, encoder, workdir: Path, core_char_limit: int = 2000, context_messages: int = 10,
                 max_steps: int = 5, archival_top_k: int = 10, conversation_top_k: int = 5, **params: Any) -> None:
        super().__init__(llm, encoder, workdir, **params)
        if encoder is None:
            raise ValueError("system 'memgpt': archival and recall search need a dense embedding (minilm or emb3)")
        self.core_char_limit = int(core_char_limit)
        self.context_messages = int(context_messages)
        self.max_steps = int(max_steps)
        self.archival_top_k = int(archival_top_k)
        self.conversation_top_k = int(conversation_top_k)
        self.blocks: dict[str, str] = {"persona": PERSONA.strip(), "human": HUMAN}
        #: block -> line -> (origin, derived) of each line of the block's value
        self.line_prov: dict[str, dict[str, tuple[list[str], list[str]]]] = {b: {} for b in BLOCKS}
        #: archival passages: id -> {"text", "tags", "time", "sources", "derived"}
        self.archival: dict[str, dict[str, Any]] = {}
        self.archival_index = TextIndex(encoder)
        #: recall memory: every trace message, in order: {"id", "role", "text", "time", "turn"}
        self.messages: list[dict[str, Any]] = []
        self.message_index = TextIndex(encoder)
        self.counter = 0
        self.last_time = ""
        self.edits: list[dict[str, Any]] = []  # every memory edit, for diagnostics

    # -- preflight ------------------------------------------------------------------------------------------------
    @classmethod
    def preflight(cls, models: Models) -> None:
        """Refuse endpoints whose tool calls are not structured or whose results the model never sees (A-RAG's
        round-trip probe, cached per endpoint)."""
        from systems.a_rag import TOOL_FORMATS, tool_support_problem

        for client in (models.memory, models.answerer):
            with _PROBE_LOCK:
                problem = tool_support_problem(client)
            if problem:
                ep = client.endpoint
                raise MemGPTToolSupportError(
                    f"memgpt: the {ep.role} endpoint {ep.base_url} (model {ep.model}) {problem}; MemGPT's memory edits "
                    f"are tool calls (serve the model with a chat format that keeps tool results: {TOOL_FORMATS})")

    # -- rendering ------------------------------------------------------------------------------------------------
    def memory_blocks(self) -> str:
        """``Memory._render_memory_blocks_standard``: each block's description, size and value."""
        parts = []
        for label, desc in (("persona", PERSONA_BLOCK_DESCRIPTION), ("human", HUMAN_BLOCK_DESCRIPTION)):
            value = self.blocks[label]
            parts.append(f"<{label}>\n<description>\n{desc}\n</description>\n<metadata>\n- chars_current={len(value)}"
                         f"\n- chars_limit={self.core_char_limit}\n</metadata>\n<value>\n{value}\n</value>\n</{label}>\n")
        return MEMORY_BLOCKS_HEADER + "\n".join(parts) + "\n</memory_blocks>"

    def system_message(self, time: str) -> str:
        """``get_system_message_from_compiled_memory``: the prompt, then the blocks and the memory metadata."""
        meta = ["<memory_metadata>", f"- AGENT_ID: {AGENT_ID}", "- CONVERSATION_ID: default",
                f"- System prompt last recompiled: {time}",
                f"- {len(self.messages)} previous messages between you and the user are stored in recall memory"]
        if self.archival:
            meta.append(f"- {len(self.archival)} total memories you created are stored in archival memory "
                        "(use tools to access them)")
        meta.append("</memory_metadata>")
        return SYSTEM_PROMPT + "\n\n" + self.memory_blocks() + "\n\n" + "\n".join(meta)

    def queue(self) -> list[dict[str, Any]]:
        return self.messages[-self.context_messages:] if self.context_messages else []

    def queue_messages(self) -> list[Message]:
        return [Message("user", package_user_message(m["text"], m["time"])) if m["role"] == "user"
                else Message("assistant", m["text"]) for m in self.queue()]

    # -- the agent loop -------------------------------------------------------------------------------------------
    def step(self, client, user_text: str, time: str, tools: tuple[str, ...], turns: tuple[str, ...] = (),
             inputs: list | None = None) -> dict[str, Any]:
        """Run the agent on one user message until it stops chaining or ``max_steps``; returns the final messages,
        the last reply, the ``send_message`` texts, the search results (items) and a log."""
        messages: list[Message] = [*self.queue_messages(), Message("user", package_user_message(user_text, time))]
        schemas = [TOOL_SCHEMAS[t] for t in tools]
        found: list[ContextItem] = []
        outputs: list[str] = []
        sent: list[str] = []
        log: list[dict[str, Any]] = []
        reply = ""
        stop = "max_steps"
        base = len(inputs) if inputs is not None else 0
        sys_msg = Message("system", self.system_message(time))
        for n in range(1, self.max_steps + 1):
            sys_msg = Message("system", self.system_message(time))
            with self.writing(list(turns)) if turns else contextlib.nullcontext():  # a write-path call: its turns
                comp = client.chat((sys_msg, *messages), tools=schemas, tool_choice="auto")
            reply = comp.text or ""
            if not comp.tool_calls:
                stop = "no_tool_call"
                self._text_call(reply, n, turns)
                break
            calls = tuple({"id": f"call_{n}_{i}", "type": "function",
                           "function": {"name": str((tc.get("function") or {}).get("name") or ""),
                                        "arguments": _wire((tc.get("function") or {}).get("arguments"))}}
                          for i, tc in enumerate(comp.tool_calls))
            messages.append(Message("assistant", reply, tool_calls=calls))
            again, failed = False, False
            for tc in calls:
                name, raw = tc["function"]["name"], tc["function"]["arguments"]
                ok, result, wants, hits = self.run_tool(name, raw, tools, time, turns, inputs, found)
                messages.append(Message("tool", package_function_response(ok, result, time), tool_call_id=tc["id"]))
                log.append({"step": n, "tool": name, "arguments": raw[:500], "ok": ok})
                if name == "send_message" and ok:
                    sent.append(str(result))
                if hits:
                    outputs.append(result if isinstance(result, str) else _dumps(result))
                    if inputs is not None:  # what a search returned is an input of the edits that follow
                        inputs.extend((it.text, it.sources, it.derived) for it in found[len(inputs) - base:])
                if not ok:
                    failed = True
                    self.fault("bad_tool_call", "memgpt.agent", f"step {n}: {name}({raw[:200]}): {result}", turns)
                again = again or wants
            if not (again or failed):
                stop = "done"
                break
            if n < self.max_steps:
                reason = FUNC_FAILED_HEARTBEAT_MESSAGE if failed else REQ_HEARTBEAT_MESSAGE
                messages.append(Message("user", heartbeat(reason, time)))
        else:
            self.fault("step_limit", "memgpt.agent", f"{self.max_steps} calls and the agent still chained", turns)
        return {"messages": (sys_msg, *messages), "reply": reply, "sent": sent, "items": found, "outputs": outputs,
                "log": log, "stop": stop, "steps": n}

    def _text_call(self, text: str, n: int, turns: tuple[str, ...]) -> None:
        from systems.a_rag import tool_call_text

        evidence = tool_call_text(text)
        if evidence is None:
            for name in WRITE_TOOLS:  # a MemGPT tool written as text
                if f"{name}(" in text or f'"{name}"' in text:
                    evidence = name
                    break
        if evidence is not None:
            self.fault("tool_call_as_text", "memgpt.agent",
                       f"step {n}: the reply wrote a tool call as text ({evidence}) and no structured call: {text[:300]}",
                       turns)

    def run_tool(self, name: str, raw: str, tools: tuple[str, ...], time: str, turns: tuple[str, ...],
                 inputs: list | None, found: list[ContextItem]) -> tuple[bool, Any, bool, bool]:
        """One tool call: (ok, response, heartbeat requested, returned memory). Failures are returned, not raised."""
        try:
            args = json.loads(raw) if raw.strip() else {}
        except json.JSONDecodeError:
            return False, f"Error parsing arguments: not JSON: {raw[:200]}", False, False
        if not isinstance(args, dict):
            return False, "Error: arguments must be a JSON object", False, False
        wants = args.pop("request_heartbeat", False)
        wants = wants is True or (isinstance(wants, str) and wants.strip().lower() == "true")
        if name not in tools:
            return False, f"Error: tool '{name}' not found", wants, False
        try:
            unknown = sorted(set(args) - _ARGS[name])
            if unknown:
                raise ToolFailed(f"unexpected argument(s) {', '.join(unknown)}")
            missing = sorted(_REQUIRED[name] - set(args))
            if missing:
                raise ToolFailed(f"missing required argument(s) {', '.join(missing)}")
            if name == "send_message":
                return True, str(args["message"]), wants, False
            if name == "archival_memory_search":
                return True, self.archival_search(str(args["query"]), _int(args.get("top_k"), self.archival_top_k),
                                                  found), wants, True
            if name == "conversation_search":
                query = args.get("query")
                return True, self.conversation_search(None if query is None else str(query),
                                                      _int(args.get("limit"), self.conversation_top_k), found), wants, True
            if name == "archival_memory_insert":
                return True, self.archival_insert(str(args["content"]), args.get("tags"), time, turns,
                                                  inputs or []), wants, False
            if name == "core_memory_append":
                label, content = str(args["label"]), str(args["content"])
                return True, self.edit_block(label, self._block(label) + "\n" + content, turns, inputs or []), wants, False
            label, old, new = str(args["label"]), str(args["old_content"]), str(args["new_content"])
            current = self._block(label)
            if old not in current or not old:
                raise ToolFailed(f"Old content '{old}' not found in memory block '{label}'")
            return True, self.edit_block(label, current.replace(old, new), turns, inputs or []), wants, False
        except ToolFailed as e:
            return False, f"Error executing function {name}: {e}", wants, False

    def _block(self, label: str) -> str:
        if label not in self.blocks:
            raise ToolFailed(f"Block with label '{label}' not found (blocks: {', '.join(BLOCKS)})")
        return self.blocks[label]

    # -- memory operations ----------------------------------------------------------------------------------------
    def edit_block(self, label: str, value: str, turns: tuple[str, ...], inputs: list) -> str:
        """Set a core block (upstream's ``update_block_value``, which refuses a value over the limit); every line not
        kept verbatim gets its provenance by the rule over the call's inputs and the block's previous lines."""
        if len(value) > self.core_char_limit:
            raise ToolFailed(f"Edit failed: Exceeds {self.core_char_limit} character limit (requested {len(value)})")
        old = self.line_prov[label]
        shown = [(line, o, d) for line, (o, d) in old.items()] + list(inputs)
        prov: dict[str, tuple[list[str], list[str]]] = {}
        for line in (ln for ln in value.splitlines() if ln.strip()):
            prov[line] = old[line] if line in old else kept_provenance(line, shown)
        self.blocks[label], self.line_prov[label] = value, prov
        self.edits.append({"block": label, "turns": list(turns), "chars": len(value)})
        return value

    def archival_insert(self, content: str, tags: Any, time: str, turns: tuple[str, ...], inputs: list) -> str:
        if not content.strip():
            raise ToolFailed("content is empty")
        self.counter += 1
        pid = f"passage-{self.counter:06d}"
        origin, derived = kept_provenance(content, inputs)
        self.archival[pid] = {"text": content, "tags": [str(t) for t in tags] if isinstance(tags, list) else [],
                              "time": time, "sources": origin, "derived": derived}
        self.archival_index.add([pid], [content])
        self.edits.append({"archival": pid, "turns": list(turns)})
        return f"Inserted archival memory {pid}"

    def archival_search(self, query: str, k: int, found: list[ContextItem]) -> str:
        hits = self.archival_index.search(query, k)
        if not hits:
            return "No results found."
        rows = []
        for pid, _score in hits:
            p = self.archival[pid]
            rows.append({"id": pid, "timestamp": p["time"], "content": p["text"], "tags": p["tags"]})
            found.append(ContextItem("passage", f"{p['time']}: {p['text']}", tuple(p["sources"]), tuple(p["derived"])))
        return rows

    def conversation_search(self, query: str | None, k: int, found: list[ContextItem]) -> str:
        if query is None or not query.strip():
            chosen = list(range(len(self.messages)))[-k:] if k else []
        else:
            low = query.lower()
            exact = [i for i, m in enumerate(self.messages) if low in m["text"].lower()]
            ranked = [int(i) for i, _ in self.message_index.search(query, k)]
            chosen = list(dict.fromkeys(exact + ranked))[:k]
        if not chosen:
            return "No results found."
        rows = []
        for i in chosen:
            m = self.messages[i]
            rows.append({"role": m["role"], "content": m["text"]})
            found.append(ContextItem("message", f"{m['time']} {m['role']}: {m['text']}", (m["turn"],) if m["turn"] else ()))
        return f"Found {len(rows)} results: {_dumps(rows)}"

    # -- write path -----------------------------------------------------------------------------------------------
    def ingest_session(self, session: Session) -> None:
        for user, assistant in turn_pairs(session.with_turn_ids()):
            if user is not None:
                turns = (user.id,) if user.id else ()
                inputs = [(m["text"], (m["turn"],) if m["turn"] else (), ()) for m in self.queue()]
                inputs.append((user.content, turns, ()))
                self.step(self.llm.memory, user.content, session.date, WRITE_TOOLS, turns, inputs)
                self._remember("user", user.content, session.date, user.id)
            if assistant is not None:
                self._remember("assistant", assistant.content, session.date, assistant.id)
        self.last_time = session.date

    def _remember(self, role: str, text: str, time: str, turn: str | None) -> None:
        mid = str(len(self.messages))
        self.messages.append({"id": mid, "role": role, "text": text, "time": time, "turn": turn or ""})
        self.message_index.add([mid], [f"{role}: {text}"])

    # -- read path ------------------------------------------------------------------------------------------------
    def visible_items(self) -> list[ContextItem]:
        """The core blocks (one ``core`` item per line) and the in-context queue: in front of every answer."""
        items = []
        for label in BLOCKS:
            for line in (ln for ln in self.blocks[label].splitlines() if ln.strip()):
                origin, derived = self.line_prov[label].get(line, ([], []))
                items.append(ContextItem("core", line, tuple(origin), tuple(derived), visible=True))
        items += [ContextItem("message", f"{m['time']} {m['role']}: {m['text']}", (m["turn"],) if m["turn"] else (),
                              visible=True) for m in self.queue()]
        return items

    def _agent(self, query: str) -> dict[str, Any]:
        return self.step(self.llm.answerer, query, self.last_time, READ_TOOLS)

    def _recall(self, run: dict[str, Any]) -> Recall:
        queue = "\n".join(f"{m['time']} {m['role']}: {m['text']}" for m in self.queue())
        parts = [self.memory_blocks()]
        if queue:
            parts.append(f"Recent messages:\n{queue}")
        if run["outputs"]:
            parts.append("Search results:\n" + "\n".join(run["outputs"]))
        meta = {"prompt_version": PROMPT_VERSION, "prompts": PROMPTS_VERSION, "stop_reason": run["stop"],
                "steps": run["steps"], "tool_calls": len(run["log"]), "trajectory": run["log"],
                "agent_answer": " ".join(run["sent"]) or run["reply"], "core_chars": len(self.blocks["human"]),
                "n_archival": len(self.archival), "n_messages": len(self.messages)}
        return Recall("\n\n".join(parts), tuple(self.visible_items() + run["items"]), meta)

    def recall(self, query: str) -> Recall:
        return self._recall(self._agent(query))

    def answer(self, query: str, answerer: Answerer = SHARED) -> Answer:
        """The agent's search loop is the answerer's own retrieval: ``native`` is the agent's own ``send_message``
        with its whole trajectory as the context; in the other modes the protocol's answerer answers over the core
        blocks, the queue and what the searches returned (``recall``; the agent's reply is kept in
        ``meta['agent_answer']``)."""
        if answerer.mode != "native":
            return super().answer(query, answerer)
        run = self._agent(query)
        recall = self._recall(run)
        text = " ".join(run["sent"]) or run["reply"]
        return Answer(text, tuple(run["messages"]), {**recall.meta, "answer_prompt": NATIVE_ANSWER_VERSION},
                      items=recall.items)

    # -- state ----------------------------------------------------------------------------------------------------
    def snapshot(self, directory: Path) -> None:
        write_json(Path(directory) / "state.json", {
            "prompt_version": PROMPT_VERSION, "blocks": self.blocks,
            "line_prov": {b: {line: [o, d] for line, (o, d) in p.items()} for b, p in self.line_prov.items()},
            "archival": self.archival, "messages": self.messages, "counter": self.counter,
            "last_time": self.last_time, "edits": self.edits})

    def restore(self, directory: Path) -> None:
        state = read_json(Path(directory) / "state.json")
        self.blocks = dict(state["blocks"])
        self.line_prov = {b: {line: (list(o), list(d)) for line, (o, d) in p.items()}
                          for b, p in state["line_prov"].items()}
        self.archival = {k: state["archival"][k] for k in sorted(state["archival"])}
        self.archival_index = TextIndex(self.encoder)
        self.archival_index.add(list(self.archival), [p["text"] for p in self.archival.values()])
        self.messages = list(state["messages"])
        self.message_index = TextIndex(self.encoder)
        self.message_index.add([m["id"] for m in self.messages], [f"{m['role']}: {m['text']}" for m in self.messages])
        self.counter = int(state["counter"])
        self.last_time = state["last_time"]
        self.edits = list(state["edits"])
