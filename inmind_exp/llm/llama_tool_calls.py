"""Structured tool calls for the embedded model: a llama-cpp-python chat handler, ``gguf-tool-calls``, that renders
the prompt with the GGUF's own chat template (Qwen2.5's, which lists the tools and asks for
``<tool_call>{"name": ..., "arguments": ...}</tool_call>``) and turns such blocks in the reply into OpenAI
``message.tool_calls``; and the server entry point that registers it (``python -m inmind_exp.llm.llama_tool_calls``
takes ``python -m llama_cpp.server``'s arguments).

Why: llama-cpp-python 0.3.36 returns the GGUF template's tool calls only as text (the model's ``<tool_call>`` block
lands in ``content``), and its function-calling handlers do not fit this model: ``functionary*`` needs a Functionary
model and tokenizer, and ``chatml-function-calling`` uses its own prompt format, drops ``tool`` messages from the
prompt (its template has no branch for them), HTML-escapes message text (Jinja autoescape), and constrains a
non-tool reply under ``tool_choice="auto"`` to a grammar that admits only a function name or the end token, so a
text answer comes back empty.

The parser follows llama.cpp's own for this template family (``common_chat_parse_hermes_2_pro`` and the generic
JSON parser in ``common/chat.cpp``): a JSON call optionally inside ``<tool_call>`` or one of the tags small models use
instead (``<function_call>``, ``<tools>``, ``<tool>``, ``<response>``, ``<json>``, ``<xml>``, ``<JSON>``), optionally
in a Markdown code fence. A call is written in any of the shapes small models are known to use for one:
``{"name": ..., "arguments": ...}`` (keys in either order, ``"parameters"`` for ``"arguments"``); OpenAI's wrapped
``{"type": "function", "function": {"name": ..., "arguments": ...}}``; ``{"tool_calls": [...]}`` or
``{"tool_call": {...}}``; or a JSON list of calls in those shapes. Which of these equivalent shapes the embedded
model writes depends on the CPU's kernels (greedy decoding follows their rounding), so all are accepted.
Differences: only non-streamed replies are parsed (the project does not stream); an untagged, unfenced call counts
only at the start of the reply and only when it names tools that were offered; a block whose JSON does not parse,
or that is not a call in one of the shapes above, stays in ``content`` (the caller sees tool-call-like text, not a
call).
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any

CHAT_FORMAT = "gguf-tool-calls"

_OPEN_TAGS = ("tool_call", "function_call", "tools", "tool", "response", "json", "xml", "JSON")
# an optional code fence, an optional open tag, then the start of a JSON object or list
_OPEN = re.compile(
    r"(?P<fence>```(?:json|xml)?[ \t]*\n\s*)?(?:<(?P<tag>" + "|".join(_OPEN_TAGS) + r")>\s*)?(?=[\{\[])"
)
_ARGUMENT_KEYS = ("arguments", "parameters")


def _one_call(obj: Any) -> dict[str, Any] | None:
    """``{"name", "arguments"}`` (arguments a JSON string) from one call in any accepted shape, else None."""
    if not isinstance(obj, dict):
        return None
    fn = obj.get("function")
    if isinstance(fn, dict) and "name" not in obj:  # OpenAI's wrapped shape, "type" optional
        if obj.get("type", "function") != "function":
            return None
        obj = fn
    name = obj.get("name")
    if not isinstance(name, str) or not name or "description" in obj:  # a tool's definition echoed, not a call
        return None
    args: Any = {}
    for key in _ARGUMENT_KEYS:
        if key in obj:
            args = obj[key]
            break
    if isinstance(args, str):
        try:  # a JSON string is the wire format already; anything else is not a call's arguments
            if not isinstance(json.loads(args), dict):
                return None
        except json.JSONDecodeError:
            return None
    elif isinstance(args, dict):
        args = json.dumps(args, ensure_ascii=False)
    else:
        return None
    return {"name": name, "arguments": args}


def _calls_in(obj: Any) -> list[dict[str, Any]] | None:
    """Every call a parsed JSON value writes (a call, ``{"tool_calls": [...]}``, ``{"tool_call": {...}}`` or a list
    of calls), or None when it is not one of those shapes (a list counts only if every element is a call)."""
    if isinstance(obj, dict) and "name" not in obj and "function" not in obj:
        if isinstance(obj.get("tool_calls"), list):
            obj = obj["tool_calls"]
        elif isinstance(obj.get("tool_call"), dict):
            obj = obj["tool_call"]
    items = obj if isinstance(obj, list) else [obj]
    calls = [_one_call(x) for x in items]
    if not calls or any(c is None for c in calls):
        return None
    return calls  # type: ignore[return-value]


def parse_tool_calls(text: str, tool_names: set[str]) -> tuple[str, list[dict[str, Any]]]:
    """Split a reply into its text and the tool calls written in it: ``(content, [{"name", "arguments"}])``,
    arguments as a JSON string. Text around the blocks is kept, stripped, as the content."""
    decoder = json.JSONDecoder()
    calls: list[dict[str, Any]] = []
    kept: list[str] = []
    pos = 0
    for m in _OPEN.finditer(text):
        if m.start() < pos:
            continue
        start = m.end()
        try:
            obj, end = decoder.raw_decode(text, start)
        except json.JSONDecodeError:
            continue
        found = _calls_in(obj)
        if found is None:
            continue
        tagged = bool(m.group("tag") or m.group("fence"))
        at_start = not "".join(kept).strip() and not text[pos:m.start()].strip()
        if not tagged and (not at_start or any(c["name"] not in tool_names for c in found)):
            continue
        rest = text[end:]
        close = re.match(r"\s*</" + re.escape(m.group("tag")) + r">" if m.group("tag") else r"", rest)
        end += close.end() if close else 0
        if m.group("fence"):
            fence_close = re.match(r"\s*```", text[end:])
            end += fence_close.end() if fence_close else 0
        kept.append(text[pos:m.start()])
        calls.extend(found)
        pos = end
    kept.append(text[pos:])
    return "".join(kept).strip(), calls


def _with_dict_arguments(message: dict[str, Any]) -> dict[str, Any]:
    """An assistant message whose tool-call arguments are JSON strings (the wire format) with the arguments as
    objects, which is what the template's ``tool_call.arguments | tojson`` expects (as vLLM does)."""
    tcs = message.get("tool_calls")
    if not tcs:
        return message
    out = []
    for tc in tcs:
        fn = dict(tc.get("function") or {})
        if isinstance(fn.get("arguments"), str):
            try:
                fn["arguments"] = json.loads(fn["arguments"])
            except json.JSONDecodeError:
                pass
        out.append({**tc, "function": fn})
    return {**message, "tool_calls": out}


def gguf_tool_calls_handler(*, llama: Any, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None,
                            tool_choice: Any = None, stream: bool = False, **kwargs: Any) -> Any:
    """The GGUF template's chat handler, with ``<tool_call>`` blocks of a non-streamed reply returned as
    ``message.tool_calls`` whenever tools were offered (and ``tool_choice`` is not ``"none"``)."""
    base = llama._chat_handlers.get("chat_template.default")
    if base is None:
        raise ValueError(f"chat_format {CHAT_FORMAT}: the model file has no tokenizer.chat_template")
    resp = base(llama=llama, messages=[_with_dict_arguments(m) for m in messages], tools=tools,
                tool_choice=tool_choice, stream=stream, **kwargs)
    if stream or not tools or tool_choice == "none":
        return resp
    choice = resp["choices"][0]
    msg = choice["message"]
    if msg.get("tool_calls"):  # a forced tool_choice: the base handler already constrained and returned the call
        return resp
    content, calls = parse_tool_calls(msg.get("content") or "", {t["function"]["name"] for t in tools})
    if calls:
        msg["content"] = content or None
        msg["tool_calls"] = [{"id": f"call_{i}_{resp['id']}", "type": "function", "function": c}
                             for i, c in enumerate(calls)]
        choice["finish_reason"] = "tool_calls"
    return resp


def register() -> None:
    """Make ``--chat_format gguf-tool-calls`` known to llama-cpp-python in this process."""
    from llama_cpp import llama_chat_format

    llama_chat_format.register_chat_completion_handler(CHAT_FORMAT)(gguf_tool_calls_handler)


AMX_ENV = "INMIND_LLAMA_AMX"


def cpu_advertises_amx(cpuinfo: str | None = None) -> bool:
    """Whether the CPU flags (``/proc/cpuinfo``) list AMX tiles, which ggml's CPU backend then uses for weights."""
    if cpuinfo is None:
        try:
            with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
                cpuinfo = f.read()
        except OSError:
            return False
    return any(line.startswith("flags") and "amx_tile" in line.split() for line in cpuinfo.splitlines())


def keep_weights_in_plain_cpu_buffers() -> None:
    """Load every model with ``use_extra_bufts=False``: no AMX (nor repacked) weight buffers.

    Why: ggml built with ``-march=native`` on a CPU that advertises AMX puts the weights in AMX buffers, and its AMX
    matmul died with SIGILL (``tilezero``) on the first prompt of more than a few tokens on this project's 2-core VMs
    (Firecracker guests that list ``amx_tile`` and grant the permission): the server was gone and every call failed
    with a connection error. Plain CPU buffers ran at 107 prompt / 13 generated tokens/s there, the speed seen on
    machines without AMX. ``INMIND_LLAMA_AMX=1`` keeps AMX for a machine where it works."""
    import llama_cpp.llama_cpp as lib

    default = lib.llama_model_default_params

    def params():  # type: ignore[no-untyped-def]
        p = default()
        p.use_extra_bufts = False
        return p

    lib.llama_model_default_params = params


def main() -> None:
    """``python -m llama_cpp.server`` with this module's chat format registered first (and AMX weight buffers off
    where the CPU advertises AMX, unless ``INMIND_LLAMA_AMX=1``)."""
    import os

    register()
    if cpu_advertises_amx() and os.environ.get(AMX_ENV, "") != "1":
        print("[inmind] CPU advertises AMX: llama.cpp weights in plain CPU buffers (set INMIND_LLAMA_AMX=1 to use AMX)",
              file=sys.stderr, flush=True)
        keep_weights_in_plain_cpu_buffers()
    from llama_cpp.server.__main__ import main as server_main

    sys.argv[0] = "llama_cpp.server"
    server_main()


if __name__ == "__main__":
    main()
