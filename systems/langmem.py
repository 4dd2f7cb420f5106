"""LangMem (LangChain, 2025; the ``langmem`` library, MIT, https://github.com/langchain-ai/langmem, used as installed:
``langmem==0.0.30`` with ``trustcall==0.0.39``, the optional extra ``.[langmem]``): a schema-shaped user *profile*
kept up to date beside a searchable *collection* of memories. No paper; the design is the library's conceptual guide
and its "Manage user profiles" and "Manage semantic memory (collections)" guides (langchain-ai.github.io/langmem).

Read (installed source, the same text as the repository at tag 0.0.30): ``langmem/knowledge/extraction.py``
(``create_memory_manager``, ``MemoryManager.invoke`` and ``_prepare_messages``, ``_MEMORY_INSTRUCTIONS``,
``create_memory_store_manager``, ``MemoryStoreManager.invoke``), ``langmem/utils.py`` (``get_conversation``,
``get_dialated_windows``), and trustcall's ``_base.py`` (``create_extractor``, ``_ExtractUpdates``, ``PatchDoc``: the
tool calls behind every write).

Write path, per session (the library's unit is a conversation), both through the library itself:
  1. profile: ``create_memory_manager(model, schemas=[UserProfile], instructions="Extract user profile
     information", enable_inserts=False)`` (the profile guide), invoked with the session's messages and the current
     profile as ``existing``; trustcall extracts the profile by a forced tool call on the first session and patches
     it by ``PatchDoc`` JSON-patch tool calls afterwards;
  2. collection: ``create_memory_store_manager(model, namespace=("memories",), store=InMemoryStore(index={"dims",
     "embed"}))`` with the library's default instructions, inserts and deletes enabled and ``query_limit`` 5: it
     searches the store for the memories related to the session's last message (``get_dialated_windows``), shows them
     to the manager, which inserts, patches or removes ``Memory`` items by tool calls, and writes the result back.
The chat model the library calls is an adapter onto this project's memory client (``llm.memory``: its retries, cache,
token meter and rate limits), the store's embeddings are ``self.encoder``: no SDK of the library's own is reached.

Read path (``recall``): the profile, one ``profile`` item per field value (``visible=True``: it is in front of every
answer), and the top ``top_k`` collection memories for the query by the store's search (``memory`` items, retrieved).
LangMem has no answer prompt of its own, so ``native`` answers as ``shared``; ``paper`` uses the release's prompt.

Provenance, by the one rule (``inmind_exp.memory.kept_provenance``): a profile value kept verbatim keeps its origin and
derived turns; a new or changed value has as origin the origin of every input of the call whose content it still
states (the session's turns, the previous profile's values), the rest derived; the same for a collection memory over
the session's turns and the memories the manager was shown. Faults: a write the library could not complete (a
malformed or off-schema tool call trustcall could not repair, no tool call: ``malformed_reply``, the state before
the call kept); a profile update that leaves no profile (``empty_reply``). Endpoint failures propagate.

Deliberate deviations:
  - The profile schema extends the guide's ``UserProfile`` (name, language, timezone) with list fields for what a
    personal assistant keeps about a user (``systems/prompts/langmem.py``); a weak schema would score the schema.
  - The library draws ``uuid4`` for the session tag of its prompt and for new memory ids: here they come from a
    counter seeded by the session id (prompts and ids are functions of the trace; determinism), set only inside
    the library calls of this thread.
  - ``tool_choice="any"`` (trustcall's forced choice) is sent as OpenAI's ``"required"``; tool-call ids are derived
    from the call's content (a reply's own ids, random on llama.cpp, would make the next prompt nondeterministic).
  - Memory timestamps are not shown; the store keeps no wall-clock order the answerer could see.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import threading
import uuid as _uuid
from pathlib import Path
from typing import Any, Iterator

from inmind_exp.llm import EndpointError, LLMCallError
from inmind_exp.memory import SYSTEMS, CallProfile, MemorySystem, Recall, kept_provenance, read_json, write_json
from inmind_exp.memory.ranges import at_least
from inmind_exp.records import ContextItem, Message, Session
from systems.prompts.langmem import (PROFILE_DOC, PROFILE_INSTRUCTIONS, PROFILE_LIST_FIELDS, PROFILE_STRING_FIELDS,
                                     PROMPTS_VERSION)

PROMPT_VERSION = "langmem-v1"
LANGMEM_VERSION = "0.0.30"
NAMESPACE = ("memories",)
PROFILE_ID = "profile"


# -- deterministic uuid4 inside the library's calls ------------------------------------------------------------------

class _Uuids(threading.local):
    seed: str | None = None
    n: int = 0


_UUIDS = _Uuids()


class _UuidModule:
    """Stands in for the ``uuid`` module in langmem and trustcall: ``uuid4`` is a counter seeded by the call's
    session while one of our calls runs in this thread, the real one otherwise."""

    def __getattr__(self, name: str) -> Any:
        return getattr(_uuid, name)

    @staticmethod
    def uuid4() -> _uuid.UUID:
        if _UUIDS.seed is None:
            return _uuid.uuid4()
        _UUIDS.n += 1
        return _uuid.UUID(hashlib.sha256(f"{_UUIDS.seed}/{_UUIDS.n}".encode()).hexdigest()[:32], version=4)


@contextlib.contextmanager
def seeded_uuids(seed: str) -> Iterator[None]:
    _UUIDS.seed, _UUIDS.n = seed, 0
    try:
        yield
    finally:
        _UUIDS.seed = None


_PATCHED = threading.Lock()


def _library() -> Any:
    """Import langmem (the optional extra) and let its modules draw uuids from ``_UuidModule``."""
    try:
        import langmem.knowledge.extraction as extraction
        import trustcall._base as trustcall_base
    except ImportError as e:  # pragma: no cover - the extra is installed with .[test]
        raise ImportError("system 'langmem' needs the optional extra: pip install -e '.[langmem]'") from e
    with _PATCHED:
        for module in (extraction, trustcall_base):
            if not isinstance(module.uuid, _UuidModule):
                module.uuid = _UuidModule()
    return extraction


# -- the chat model the library calls: our memory client ---------------------------------------------------------

def _content(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content or ())


def _wire_message(m: Any) -> Message:
    kind = getattr(m, "type", "")
    if kind == "system":
        return Message("system", _content(m.content))
    if kind == "ai":
        calls = tuple({"id": tc["id"], "type": "function",
                       "function": {"name": tc["name"], "arguments": json.dumps(tc["args"], sort_keys=True)}}
                      for tc in m.tool_calls or ())
        return Message("assistant", _content(m.content), tool_calls=calls or None)
    if kind == "tool":
        return Message("tool", _content(m.content), tool_call_id=m.tool_call_id)
    return Message("user", _content(m.content))


#: trustcall's logger: it logs a tool call it drops (validation error, a patch that does not apply) and goes on
TRUSTCALL_LOGGER = "extraction"


class _LibraryErrors(logging.Handler):
    """Collects the library's error records of the calling thread."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.thread = threading.get_ident()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.thread == self.thread:
            self.messages.append(record.getMessage()[:300])


def chat_model(client: Any) -> Any:
    """A LangChain chat model whose every call is ``client.chat`` (tools and tool choice passed on, the choice "any"
    as OpenAI's "required", a tool name as a named choice); tool-call ids are derived from the call's content."""
    from langchain_core.language_models.chat_models import BaseChatModel
    from langchain_core.messages import AIMessage
    from langchain_core.outputs import ChatGeneration, ChatResult
    from langchain_core.utils.function_calling import convert_to_openai_tool

    class InMindChatModel(BaseChatModel):
        client: Any

        @property
        def _llm_type(self) -> str:
            return "inmind-exp"

        def bind_tools(self, tools: Any, *, tool_choice: Any = None, **kwargs: Any) -> Any:
            formatted = [convert_to_openai_tool(t) for t in tools]
            if tool_choice == "any" or tool_choice is True:
                tool_choice = "required"
            elif isinstance(tool_choice, str) and tool_choice not in ("auto", "none", "required"):
                tool_choice = {"type": "function", "function": {"name": tool_choice}}
            return self.bind(tools=formatted, tool_choice=tool_choice, **kwargs)

        def _generate(self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any) -> Any:
            wire = [_wire_message(m) for m in messages]
            extra = {k: kwargs[k] for k in ("tools", "tool_choice") if kwargs.get(k) is not None}
            comp = self.client.chat(wire, **extra)
            calls, invalid = [], []
            for i, tc in enumerate(comp.tool_calls):
                fn = tc.get("function") or {}
                name, raw = str(fn.get("name") or ""), fn.get("arguments")
                raw = raw if isinstance(raw, str) else json.dumps(raw or {}, sort_keys=True)
                cid = "call_" + hashlib.sha256(f"{len(wire)}/{i}/{name}/{raw}".encode()).hexdigest()[:16]
                try:
                    args = json.loads(raw) if raw.strip() else {}
                    if not isinstance(args, dict):
                        raise ValueError("arguments are not an object")
                    calls.append({"name": name, "args": args, "id": cid, "type": "tool_call"})
                except ValueError as e:
                    invalid.append({"name": name, "args": raw, "id": cid, "error": str(e), "type": "invalid_tool_call"})
            msg = AIMessage(content=comp.text or "", tool_calls=calls, invalid_tool_calls=invalid)
            return ChatResult(generations=[ChatGeneration(message=msg)])

    return InMindChatModel(client=client)


def profile_schema() -> Any:
    """The ``UserProfile`` pydantic model (see ``systems/prompts/langmem.py``)."""
    from pydantic import Field, create_model

    fields: dict[str, Any] = {name: (str | None, Field(default=None, description=desc))
                              for name, desc in PROFILE_STRING_FIELDS}
    fields.update({name: (list[str], Field(default_factory=list, description=desc)) for name, desc in PROFILE_LIST_FIELDS})
    model = create_model("UserProfile", **fields)
    model.__doc__ = PROFILE_DOC
    return model


def profile_lines(profile: dict[str, Any]) -> list[str]:
    """The profile as the answerer sees it: one ``field: value`` line per string value and per list item."""
    lines = []
    for name, _ in PROFILE_STRING_FIELDS + PROFILE_LIST_FIELDS:
        value = profile.get(name)
        for v in value if isinstance(value, list) else [value]:
            if v is not None and str(v).strip():
                lines.append(f"{name}: {v}")
    return lines


def _memory_text(value: dict[str, Any]) -> str:
    content = value.get("content")
    if isinstance(content, dict):
        return str(content.get("content", json.dumps(content, sort_keys=True)))
    return str(content)


@SYSTEMS.register("langmem")
class LangMem(MemorySystem):
    """LangMem's profile (always visible) beside its searched collection, both written by the library's managers."""

    version = "1"
    embeddings = ("minilm", "emb3")
    routing = True  # the profile: write-time routing into an always-visible state (``inmind_exp.memory.traits``)
    # per session: the profile manager and the collection manager, one tool call each (trustcall re-asks on a
    # schema error); prompts hold the session's transcript
    cost = CallProfile(memory_calls_per_session=2.5, prompt_tokens_per_memory_call=5000,
                       completion_tokens_per_memory_call=500, prompt_tokens_per_answer_call=2500)
    param_ranges = {"top_k": at_least(1), "query_limit": at_least(1)}

    def __init__(self, llm, encoder, workdir: Path, top_k: int = 10, query_limit: int = 5, **params: Any) -> None:
        super().__init__(llm, encoder, workdir, **params)
        if encoder is None:
            raise ValueError("system 'langmem': the store's search needs a dense embedding (minilm or emb3)")
        self.top_k = int(top_k)
        self.query_limit = int(query_limit)
        extraction = _library()
        self.model = chat_model(self.llm.memory)
        self.profile_model = profile_schema()
        self.profile_manager = extraction.create_memory_manager(
            self.model, schemas=[self.profile_model], instructions=PROFILE_INSTRUCTIONS, enable_inserts=False)
        self.store = self._new_store()
        self.store_manager = extraction.create_memory_store_manager(
            self.model, namespace=NAMESPACE, store=self.store, query_limit=self.query_limit)
        self.profile: dict[str, Any] = {}
        self.profile_prov: dict[str, tuple[list[str], list[str]]] = {}  # line -> (origin, derived)
        self.memory_prov: dict[str, tuple[list[str], list[str]]] = {}  # store key -> (origin, derived)
        self.n_sessions = 0

    def _new_store(self) -> Any:
        from langgraph.store.memory import InMemoryStore

        encoder = self.encoder
        return InMemoryStore(index={"dims": int(encoder.dim), "embed": lambda texts: encoder.encode(list(texts)).tolist()})

    # -- write path -----------------------------------------------------------------------------------------------
    def ingest_session(self, session: Session) -> None:
        session = session.with_turn_ids()
        messages = [{"role": "user" if t.role == "user" else "assistant", "content": t.content} for t in session.turns]
        turns = [t.id for t in session.turns if t.id]
        inputs = [(t.content, (t.id,) if t.id else (), ()) for t in session.turns]
        if messages:
            self._update_profile(messages, session.id, turns, inputs)
            self._update_collection(messages, session.id, turns, inputs)
        self.n_sessions += 1

    def _call(self, where: str, turns: list[str], seed: str, fn: Any) -> Any:
        """One library call that writes ``turns``: its result, or None (a fault) when the library could not
        complete it; a tool call the library dropped (trustcall logs it as an error and goes on: an off-schema
        profile, a patch that does not apply) is a fault too. Endpoint failures propagate."""
        errors = _LibraryErrors()
        logger = logging.getLogger(TRUSTCALL_LOGGER)
        logger.addHandler(errors)
        try:
            with seeded_uuids(seed), self.writing(turns):
                return fn()
        except (LLMCallError, EndpointError):
            raise
        except Exception as e:  # noqa: BLE001 - trustcall's validation errors, an off-schema call it gave up on
            self.fault("malformed_reply", where, f"{type(e).__name__}: {e}; the state before the call is kept", turns)
            return None
        finally:
            logger.removeHandler(errors)
            if errors.messages:
                self.fault("malformed_reply", where, "the library dropped a tool call: " + "; ".join(errors.messages),
                           turns)

    def _update_profile(self, messages: list[dict[str, str]], sid: str, turns: list[str], inputs: list) -> None:
        existing = [(PROFILE_ID, "UserProfile", dict(self.profile))] if self.profile else None
        payload: dict[str, Any] = {"messages": messages, **({"existing": existing} if existing else {})}
        out = self._call("langmem.profile", turns, f"profile/{sid}", lambda: self.profile_manager.invoke(payload))
        if out is None:
            return
        # a patched or new profile comes back as the schema; the existing one, unchanged, as the dict it was given
        profiles = [m.content.model_dump(mode="json") if hasattr(m.content, "model_dump") else m.content
                    for m in out if isinstance(m.content, dict) or (hasattr(m.content, "model_dump")
                                                                   and m.content.__repr_name__() == "UserProfile")]
        if not profiles:
            self.fault("empty_reply", "langmem.profile", "the manager returned no profile; the previous one is kept",
                       turns)
            return
        new = dict(profiles[-1])
        shown = [(line, o, d) for line, (o, d) in self.profile_prov.items()] + list(inputs)
        prov = {}
        for line in profile_lines(new):
            prov[line] = self.profile_prov[line] if line in self.profile_prov else kept_provenance(line, shown)
        self.profile, self.profile_prov = new, prov

    def _update_collection(self, messages: list[dict[str, str]], sid: str, turns: list[str], inputs: list) -> None:
        before = {item.key: item for item in self.store.search(NAMESPACE, limit=1_000_000)}
        # the memories the manager will be shown: the library's own search (its last-message window)
        shown_keys: list[str] = []
        with contextlib.suppress(Exception):
            from langmem import utils as lm_utils

            for q in lm_utils.get_dialated_windows(_lc_messages(messages), self.query_limit // 4):
                shown_keys += [it.key for it in self.store.search(NAMESPACE, query=q, limit=self.query_limit)]
        shown = [(_memory_text(before[k].value), *self.memory_prov.get(k, ([], []))) for k in dict.fromkeys(shown_keys)
                 if k in before]
        puts = self._call("langmem.collection", turns, f"collection/{sid}",
                          lambda: self.store_manager.invoke({"messages": messages}))
        if puts is None:
            return
        after = {item.key: item for item in self.store.search(NAMESPACE, limit=1_000_000)}
        for key in list(self.memory_prov):
            if key not in after:
                del self.memory_prov[key]
        for key, item in sorted(after.items()):
            if key in before and before[key].value == item.value and key in self.memory_prov:
                continue
            self.memory_prov[key] = kept_provenance(_memory_text(item.value), shown + list(inputs))

    # -- read path ------------------------------------------------------------------------------------------------
    def recall(self, query: str) -> Recall:
        lines = profile_lines(self.profile)
        items = [ContextItem("profile", line, tuple(self.profile_prov.get(line, ([], []))[0]),
                             tuple(self.profile_prov.get(line, ([], []))[1]), visible=True) for line in lines]
        hits = self.store.search(NAMESPACE, query=query, limit=self.top_k)
        for it in hits:
            origin, derived = self.memory_prov.get(it.key, ([], []))
            items.append(ContextItem("memory", _memory_text(it.value), tuple(origin), tuple(derived)))
        memories = [i.text for i in items if not i.visible]
        text = "User profile:\n" + ("\n".join(lines) or "(empty)")
        if memories:
            text += "\n\nMemories:\n" + "\n".join(f"- {m}" for m in memories)
        return Recall(text, tuple(items), {"prompt_version": PROMPT_VERSION, "prompts": PROMPTS_VERSION,
                                           "retrieved": len(hits), "profile_lines": len(lines),
                                           "n_memories": len(self.memory_prov)})

    # -- state ----------------------------------------------------------------------------------------------------
    def snapshot(self, directory: Path) -> None:
        items = sorted(self.store.search(NAMESPACE, limit=1_000_000), key=lambda it: it.key)
        write_json(Path(directory) / "state.json", {
            "prompt_version": PROMPT_VERSION, "profile": self.profile,
            "profile_prov": {k: [o, d] for k, (o, d) in self.profile_prov.items()},
            "memories": [{"key": it.key, "value": it.value} for it in items],
            "memory_prov": {k: [o, d] for k, (o, d) in self.memory_prov.items()}, "n_sessions": self.n_sessions})

    def restore(self, directory: Path) -> None:
        state = read_json(Path(directory) / "state.json")
        self.profile = dict(state["profile"])
        self.profile_prov = {k: (list(o), list(d)) for k, (o, d) in state["profile_prov"].items()}
        self.store = self._new_store()
        for m in state["memories"]:
            self.store.put(NAMESPACE, m["key"], m["value"])
        self.store_manager = _library().create_memory_store_manager(
            self.model, namespace=NAMESPACE, store=self.store, query_limit=self.query_limit)
        self.memory_prov = {k: (list(o), list(d)) for k, (o, d) in state["memory_prov"].items()}
        self.n_sessions = int(state["n_sessions"])


def _lc_messages(messages: list[dict[str, str]]) -> list[Any]:
    from langchain_core.messages import convert_to_messages

    return convert_to_messages(messages)
