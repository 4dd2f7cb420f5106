"""Plausible structured replies for the fake OpenAI-compatible server: deterministic, derived from the last
message, carrying every key the memory systems' JSON prompts ask for, so a whole pipeline runs offline and its call
structure can be measured (``benchmarks/bench_calls.py``, ``benchmarks/judge_free.py``, the fault-turn tests)."""

from __future__ import annotations

import hashlib
import re
from typing import Any


def _words(text: str, n: int) -> list[str]:
    return re.findall(r"[A-Za-z][A-Za-z'-]+", text)[:n]


def _block(text: str, tag: str) -> str | None:
    m = re.search(rf"<{tag}>\n?(.*?)\n?</{tag}>", text, re.S)
    return None if m is None else m.group(1)


def _rewritten_file(last: str) -> str | None:
    """A request to rewrite a memory file (``<memory>`` and ``<session>`` blocks): the file's lines kept, and one
    line per user turn of the session made from its words, so what a session says (the fact too) stays in the file
    and reaches every later request, as a model's rewrite does."""
    memory, session = _block(last, "memory"), _block(last, "session")
    if memory is None or session is None:
        return None
    kept = [ln for ln in memory.splitlines() if ln.strip() and ln.strip() != "(empty)"]
    new = ["- " + " ".join(_words(ln[5:], 12)) for ln in session.splitlines() if ln.startswith("user:") and _words(ln[5:], 1)]
    return "\n".join(kept + new) or "- nothing yet"


def plausible_reply(body: dict[str, Any]) -> Any:
    """A deterministic reply carrying the keys the systems' JSON prompts ask for, derived from the last message."""
    messages = body.get("messages", [])
    last = str(messages[-1].get("content") or "") if messages else ""
    h = int(hashlib.sha256(last.encode()).hexdigest(), 16)
    if (body.get("response_format") or {}).get("type") != "json_object":
        rewritten = _rewritten_file(last)
        if rewritten is not None:
            return rewritten
        return "true" if "continu" in last.lower() and h % 3 else "fake answer"
    w = _words(last[-400:], 12) or ["something"]
    fact = "User mentioned " + " ".join(w[:8])
    e1, e2 = (w[0], w[-1]) if len(w) > 1 else (w[0], "user")
    return {
        "score": 1, "reason": "fake", "answer": "fake answer",
        "facts": [fact], "memory": [{"id": str(h % 1000), "text": fact, "event": "ADD"}],
        "keywords": w[:3], "context": " ".join(w[:6]), "tags": w[3:5] or ["general"],
        "should_evolve": h % 2 == 0, "actions": ["strengthen", "update_neighbor"], "suggested_connections": [0],
        "tags_to_update": w[:2], "new_context_neighborhood": [" ".join(w[:4])], "new_tags_neighborhood": [w[:2]],
        "named_entities": [e1, e2], "triples": [[e1, "relates to", e2]], "fact": [[e1, "relates to", e2]],
        "should_end": h % 5 == 0, "statements": [fact], "title": " ".join(w[:4]), "content": fact, "summary": fact,
    }


def sampled_reply(body: dict[str, Any]) -> Any:
    """``plausible_reply`` reworded whenever the request changed, as a sampling model's reply differs on a cache
    miss: the text it writes into memory carries a digest of the whole request, so a reply changed by the fact
    changes every later request that quotes it (the realistic hit profile; ``plausible_reply`` gives the minimum)."""
    reply = plausible_reply(body)
    tag = hashlib.sha256(repr(body.get("messages", [])).encode()).hexdigest()[:6]
    if not isinstance(reply, dict):
        return reply if reply == "true" else f"{reply} ({tag})"

    def reword(v: Any) -> Any:
        return f"{v} ({tag})" if isinstance(v, str) else v

    out = dict(reply)
    for k in ("facts", "statements"):
        out[k] = [reword(x) for x in out[k]]
    out["memory"] = [{**m, "text": reword(m["text"])} for m in out["memory"]]
    for k in ("content", "summary", "context", "answer"):
        out[k] = reword(out[k])
    return out


#: the fake server's reply modes by name (``benchmarks.cache_profile --replies``)
REPLY_MODES = {"plausible": plausible_reply, "sampled": sampled_reply}
