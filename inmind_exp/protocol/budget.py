"""What an answer cost in context and what ran for it: the answer context's size (a cheap, deterministic token
count) and the per-answer facts a system reports about its own read path (``Answer.meta``), so that differences in
target recall can be read against how much each system shows and which of its parts actually ran.

The count is the project's one rough rule (a quarter of the characters, rounded up, as the rate limiter's estimate in
``inmind_exp.llm.provider``): deterministic, model-independent and the same for every system, which is what a
comparison across systems needs; it is not any tokenizer's exact count.
"""

from __future__ import annotations

from typing import Any

from inmind_exp.records.answers import Answer

#: ``Answer.meta`` keys a system sets to say what its read path did: HippoRAG 2's ``retrieval_mode`` (``ppr`` or
#: ``dense``), xMemory's ``gate_ran`` (the uncertainty gate read logprobs), A-RAG's ``tool_calls`` and ``steps``.
RAN_KEYS: tuple[str, ...] = ("retrieval_mode", "gate_ran", "tool_calls", "steps")


def count_tokens(text: str) -> int:
    """A deterministic rough token count: ``ceil(len(text) / 4)``."""
    return -(-len(text) // 4)


def context_tokens(answer: Answer | None) -> int | None:
    """Tokens of the memory block the answerer was shown (``Answer.meta['memory_chars']``, set by the answerer in
    every answer mode), so the figure is the same whatever prompt surrounds it; the whole prompt when a system
    reports no block."""
    if answer is None:
        return None
    chars = answer.meta.get("memory_chars")
    return -(-int(chars) // 4) if isinstance(chars, int) else prompt_tokens(answer)


def prompt_tokens(answer: Answer | None) -> int | None:
    """Tokens of the whole prompt the answerer saw: every message and tool call (the final answer excluded)."""
    if answer is None:
        return None
    return count_tokens(Answer(answer.text, answer.context).context_text())


def context_items(answer: Answer | None) -> int | None:
    """How many memory items were in that context; None when the system reports none."""
    return None if answer is None or answer.items is None else len(answer.items)


def what_ran(answer: Answer | None) -> dict[str, Any]:
    """The ``RAN_KEYS`` the system put in the answer's meta, as plain values."""
    if answer is None:
        return {}
    return {k: answer.meta[k] for k in RAN_KEYS if k in answer.meta}
