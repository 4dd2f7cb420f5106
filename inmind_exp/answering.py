"""The shared answerer (``answer=shared``, the default): one neutral, versioned prompt that answers every memory
system's recall, so differences in application between systems come from memory, not from answer prompts.

The prompt only says what the memory block is; it never asks the model to apply, consider or take memories into
account, and it sets no length limit. The backbone control and the always-in-state baseline use the same framing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from inmind_exp.records import Answer, Message

if TYPE_CHECKING:
    from inmind_exp.llm import LLMClient
    from inmind_exp.memory import Recall

SHARED_ANSWER_VERSION = "shared-answer-v1"
SHARED_ANSWER_SYSTEM = (
    "You are a helpful assistant.\n\n"
    "Your memory system retrieved the following from your earlier conversations with this user:\n"
    "<memory>\n{memory}\n</memory>"
)
EMPTY_MEMORY = "(nothing retrieved)"


def shared_messages(query: str, memory_text: str) -> tuple[Message, ...]:
    """The exact messages the shared answerer sees: the memory block in the system message, then the request."""
    return (Message("system", SHARED_ANSWER_SYSTEM.format(memory=memory_text.strip() or EMPTY_MEMORY)),
            Message("user", query))


def shared_answer(client: "LLMClient", query: str, recall: "Recall") -> Answer:
    """Answer ``query`` from ``recall`` with the shared prompt and default generation parameters."""
    context = shared_messages(query, recall.text)
    comp = client.chat(context)
    return Answer(comp.text, context, meta={**recall.meta, "answer_prompt": SHARED_ANSWER_VERSION}, items=recall.items)
