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

The parser follows llama.cpp's own for this template family (``common_chat_parse_hermes_2_pro`` in
``common/chat.cpp``): a JSON object starting with ``"name"``, optionally inside ``<tool_call>`` or one of the tags
small models use instead (``<function_call>``, ``<tools>``, ``<tool>``, ``<response>``, ``<json>``, ``<xml>``,
``<JSON>``), optionally in a Markdown code fence. Differences: only non-streamed replies are parsed (the project
does not stream); an untagged, unfenced object counts only at the start of the reply and only for a tool that was
offered; a block whose JSON does not parse stays in ``content`` (the caller sees tool-call-like text, not a call).
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any

CHAT_FORMAT = "gguf-tool-calls"

_OPEN_TAGS = ("tool_call", "function_call", "tools", "tool", "response", "json", "xml", "JSON")
# an optional code fence, an optional open tag, then the start of a {"name": ...} object
_OPEN = re.compile(
    r"(?P<fence>```(?:json|xml)?[ \t]*\n\s*)?(?:<(?P<tag>" + "|".join(_OPEN_TAGS) + r")>\s*)?(?=\{\s*\"name\"\s*:)"
)


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
        if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
            continue
        tagged = bool(m.group("tag") or m.group("fence"))
        if not tagged and (text[:m.start()].strip() or obj["name"] not in tool_names):
            continue
        args = obj.get("arguments", {})
        if not isinstance(args, str):
            args = json.dumps(args, ensure_ascii=False)
        rest = text[end:]
        close = re.match(r"\s*</" + re.escape(m.group("tag")) + r">" if m.group("tag") else r"", rest)
        end += close.end() if close else 0
        if m.group("fence"):
            fence_close = re.match(r"\s*```", text[end:])
            end += fence_close.end() if fence_close else 0
        kept.append(text[pos:m.start()])
        calls.append({"name": obj["name"], "arguments": args})
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
