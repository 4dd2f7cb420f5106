"""The fake server's memory replies the cost benchmarks run on (``inmind_exp.testing.replies``): built from the
content a call is about, deterministic in it (``plausible_reply``, the minimum), or reworded whenever the request
changed (``sampled_reply``, a sampling model's cache misses)."""

from __future__ import annotations

from inmind_exp.testing.replies import plausible_reply, sampled_reply


def _update(memory: str, session: str) -> dict:
    text = (f"Current memory file:\n<memory>\n{memory}\n</memory>\n\nNew conversation session (2023/05/20):\n"
            f"<session>\n{session}\n</session>\n\nRewrite the complete memory file.")
    return {"messages": [{"role": "system", "content": "You maintain a memory file."}, {"role": "user", "content": text}]}


def test_a_file_rewrite_keeps_the_file_and_adds_what_the_session_says():
    reply = plausible_reply(_update("- likes green tea", "user: I take warfarin every evening\nassistant: Noted."))
    assert reply.splitlines() == ["- likes green tea", "- take warfarin every evening"]
    assert plausible_reply(_update("(empty)", "user: hello there friend")) == "- hello there friend"


def test_sampled_replies_change_with_the_request_and_only_then():
    a, b = _update("- likes tea", "user: I run marathons"), _update("- likes tea", "user: I swim daily")
    assert sampled_reply(a) == sampled_reply(a)  # the same request: the same reply (a cache hit would give it)
    assert sampled_reply(a) != plausible_reply(a) and sampled_reply(a).startswith(plausible_reply(a))
    json_a = {**a, "response_format": {"type": "json_object"}}
    json_b = {**b, "response_format": {"type": "json_object"}}
    assert sampled_reply(json_a)["facts"] != sampled_reply(json_b)["facts"]
    # a text reply of a changed request is reworded; a yes/no decision is not
    assert sampled_reply({"messages": [{"role": "user", "content": "q1"}]}) != \
        sampled_reply({"messages": [{"role": "user", "content": "q2"}]})
