"""Scripted replies for the provenance scenarios of ``check_system`` and ``benchmarks/provenance_rule.py``: a
memory model that keeps the user's words (every text it writes restates the user's sentences it was shown), and
one that refuses every call that replaces a state. Both derive from the request alone, so they are deterministic."""

from __future__ import annotations

import re
from typing import Any

from inmind_exp.testing.replies import plausible_reply

#: a sentence the user said about themselves: it names "my"
_USER_SENTENCE = re.compile(r"[^.?!\n]*\bmy\b[^.?!\n]*[.?!]?", re.I)
#: the JSON keys whose values are memory text the systems store (strings, or lists of strings)
_TEXT_KEYS = ("facts", "statements", "content", "summary", "context", "fact_text")
REFUSAL = "I'm sorry, but I can't help with rewriting this."


def user_sentences(body: dict[str, Any]) -> list[str]:
    """The distinct first-person sentences of every message, first seen first, prefixes such as ``user:`` cut."""
    out: list[str] = []
    for m in body.get("messages", []):
        for s in _USER_SENTENCE.findall(str(m.get("content") or "")):
            s = re.sub(r"^.*?\b(?=my\b|i\b)", "", s.strip(), flags=re.I).strip() if ":" in s else s.strip()
            if s and s not in out:
                out.append(s[0].upper() + s[1:])
    return out


def user_words_reply(body: dict[str, Any]) -> Any:
    """``plausible_reply``, with every memory text it writes made of the user's sentences the call was shown; a
    request offering tools is left to the fake server's defaults (None)."""
    if body.get("tools"):
        return None
    reply = plausible_reply(body)
    said = user_sentences(body)
    if not said:
        return reply
    text = " ".join(said)
    if not isinstance(reply, dict):  # a yes/no question is answered as plausible_reply does; all else restates
        last = str(body["messages"][-1].get("content") or "").lower()
        return ("true" if reply == "true" else "false") if "true" in last or "false" in last else "\n".join(said)
    for key in _TEXT_KEYS:
        if key in reply:
            reply[key] = list(said) if isinstance(reply[key], list) else text
    reply["memory"] = [{**e, "text": text} for e in reply["memory"]]
    return reply


def refusing_reply(body: dict[str, Any]) -> Any:
    """A refusal to every call that asks for free text (a state rewrite); JSON calls are answered plausibly, and a
    request offering tools (an agent's turn, whose text reply replaces no state) is left to the defaults (None)."""
    if body.get("tools"):
        return None
    return plausible_reply(body) if (body.get("response_format") or {}).get("type") == "json_object" else REFUSAL
