"""Write the smoke trace (``bundled/trace_smoke.json``, selected by ``trace=smoke``): the first sessions of the
bundled trace, each cut to its first user turns with their replies, so that every system can run one task end to end
on the embedded CPU model within minutes.

Deterministic: the output depends only on the bundled trace and the two sizes below. Regenerate after changing them:

    python -m inmind_exp.data.make_smoke_trace            # rewrite inmind_exp/data/bundled/trace_smoke.json
    python -m inmind_exp.data.make_smoke_trace --check    # exit 1 if the shipped file is stale
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path
from typing import Any

from inmind_exp.data.trace import BUNDLED_TRACE

SMOKE_TRACE = BUNDLED_TRACE.with_name("trace_smoke.json")
N_SESSIONS = 3  # the first sessions of the bundled trace
USER_TURNS_PER_SESSION = 2  # each cut before its third user turn: two exchanges (user message + reply)


def cut_session(turns: list[dict[str, Any]], user_turns: int) -> list[dict[str, Any]]:
    """The session's turns up to (not including) its ``user_turns + 1``-th user turn."""
    out: list[dict[str, Any]] = []
    seen = 0
    for t in turns:
        if t["role"] == "user":
            seen += 1
            if seen > user_turns:
                break
        out.append(t)
    return out


def smoke_instance(instance: dict[str, Any], n_sessions: int = N_SESSIONS,
                   user_turns: int = USER_TURNS_PER_SESSION) -> dict[str, Any]:
    """A LongMemEval-s instance holding the first ``n_sessions`` sessions of ``instance``, each cut to
    ``user_turns`` user turns; the other fields are kept, the id gets a ``-smoke`` suffix."""
    out = copy.deepcopy(instance)
    out["question_id"] = f"{instance['question_id']}-smoke"
    out["haystack_session_ids"] = instance["haystack_session_ids"][:n_sessions]
    out["haystack_dates"] = instance["haystack_dates"][:n_sessions]
    out["haystack_sessions"] = [cut_session(s, user_turns) for s in instance["haystack_sessions"][:n_sessions]]
    kept = set(out["haystack_session_ids"])
    out["answer_session_ids"] = [s for s in instance.get("answer_session_ids", []) if s in kept]
    return out


def render(source: Path = BUNDLED_TRACE) -> str:
    """The smoke trace file's exact text (the same JSON layout as the bundled trace)."""
    with open(source, encoding="utf-8") as f:
        instances = json.load(f)
    return json.dumps([smoke_instance(instances[0])], ensure_ascii=False, indent=1) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true", help="do not write; exit 1 if the shipped file differs")
    args = p.parse_args(argv)
    text = render()
    if args.check:
        current = SMOKE_TRACE.read_text(encoding="utf-8") if SMOKE_TRACE.is_file() else ""
        if current != text:
            print(f"{SMOKE_TRACE} is stale: run python -m inmind_exp.data.make_smoke_trace", file=sys.stderr)
            return 1
        print(f"{SMOKE_TRACE} is up to date")
        return 0
    SMOKE_TRACE.write_text(text, encoding="utf-8")
    print(f"wrote {SMOKE_TRACE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
