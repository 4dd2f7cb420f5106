"""The answerer, which the protocol chooses (``answer=shared|native|paper``), never the system: ``Answerer.answer`` is
the one place the mode picks a prompt. ``native`` is the system's own upstream prompt (``MemorySystem.native_answer``);
``shared`` (the default) and ``paper`` are the same for every system:

``shared``: one neutral, versioned prompt that answers every memory system's recall, so differences in application
between systems come from memory, not from answer prompts. The prompt only says what the memory block is; it never
asks the model to apply, consider or take memories into account, and it sets no length limit. The backbone control
and the always-in-state baseline use the same framing.

``paper``: the official release's ``evaluation/prompts/answer_system.txt``, read at run time (never copied here),
with ``{context}`` replaced by the same memory block ``shared`` shows, as the system message, then the query. It is
not neutral (it asks the answerer to "proactively mention" safety-relevant information): use it to compare with the
paper and the leaderboard. The substituted block is recorded as ``Answer.visible``, the context judges read.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar

from inmind_exp.records import Answer, ContextItem, Message
from inmind_exp.records.payload import JsonDict

if TYPE_CHECKING:
    from inmind_exp.data.release import Release
    from inmind_exp.llm import LLMClient, Models

ANSWER_MODES: tuple[str, ...] = ("shared", "native", "paper")


class Recall(Protocol):
    """What an answerer reads of a system's recall (``inmind_exp.memory.Recall`` has this shape): stated here, so
    this module does not import ``memory``, which imports it (no import circle)."""

    @property
    def text(self) -> str: ...
    @property
    def items(self) -> tuple[ContextItem, ...]: ...
    @property
    def meta(self) -> JsonDict: ...


R = TypeVar("R", bound=Recall)


class Answerable(Protocol, Generic[R]):
    """What the answerer reads of a memory system (``inmind_exp.memory.MemorySystem`` has this shape)."""

    llm: "Models"

    @property
    def control(self) -> str: ...
    def recall(self, query: str) -> R: ...
    def native_answer(self, query: str, recall: R) -> Answer: ...

SHARED_ANSWER_VERSION = "shared-answer-v1"
SHARED_ANSWER_SYSTEM = (
    "You are a helpful assistant.\n\n"
    "Your memory system retrieved the following from your earlier conversations with this user:\n"
    "<memory>\n{memory}\n</memory>"
)
EMPTY_MEMORY = "(nothing retrieved)"
PAPER_ANSWER_VERSION = "paper-answer-v1"
PAPER_PLACEHOLDER = "{context}"
#: ``Answer.meta`` key: the characters of the memory block the answerer was shown (``memory_block`` of the recall),
#: whatever prompt surrounds it; the protocol's ``context_tokens`` counts it
MEMORY_CHARS = "memory_chars"


@dataclass(frozen=True)
class PaperPrompt:
    """The release's answer prompt as read (and hash-checked) at plan time; ``version`` and ``sha256`` go into
    the result identity."""

    text: str
    sha256: str
    version: str = PAPER_ANSWER_VERSION

    def __post_init__(self) -> None:
        if self.text.count(PAPER_PLACEHOLDER) != 1:
            raise ValueError(f"the paper answer prompt must hold {PAPER_PLACEHOLDER} exactly once")

    def identity(self) -> dict[str, str]:
        return {"mode": "paper", "version": self.version, "sha256": self.sha256}


def load_paper_prompt(release: "Release") -> PaperPrompt:
    """The release's answer prompt, exactly as the file holds it (``Release.prompt`` checks its pinned hash)."""
    from inmind_exp.data.release import PINNED_SHA256, PROMPTS

    return PaperPrompt(release.prompt("answer"), PINNED_SHA256[PROMPTS["answer"]])


def memory_block(memory_text: str) -> str:
    """The memory block as both shared answerers show it: the system's rendering, or a marker when empty."""
    return memory_text.strip() or EMPTY_MEMORY


def shared_messages(query: str, memory_text: str) -> tuple[Message, ...]:
    """The exact messages the shared answerer sees: the memory block in the system message, then the request."""
    return (Message("system", SHARED_ANSWER_SYSTEM.format(memory=memory_block(memory_text))),
            Message("user", query))


def paper_messages(prompt: PaperPrompt, query: str, context: str) -> tuple[Message, ...]:
    """The release's answer call: its prompt with ``{context}`` replaced by ``context`` (a plain substitution, so
    braces in memory are kept), then the query."""
    return Message("system", prompt.text.replace(PAPER_PLACEHOLDER, context)), Message("user", query)


def paper_answer(client: "LLMClient", query: str, recall: "Recall", prompt: PaperPrompt) -> Answer:
    """Answer ``query`` with the paper's prompt over ``recall``'s memory block, the answer's ``visible`` context."""
    visible = memory_block(recall.text)
    messages = paper_messages(prompt, query, visible)
    comp = client.chat(messages)
    return Answer(comp.text, messages, meta={**recall.meta, "answer_prompt": prompt.version}, items=recall.items,
                  visible=visible)


def shared_answer(client: "LLMClient", query: str, recall: "Recall") -> Answer:
    """Answer ``query`` from ``recall`` with the shared prompt and default generation parameters."""
    context = shared_messages(query, recall.text)
    comp = client.chat(context)
    return Answer(comp.text, context, meta={**recall.meta, "answer_prompt": SHARED_ANSWER_VERSION}, items=recall.items)


@dataclass(frozen=True)
class Answerer:
    """The run's answerer (``answer=`` in the config), handed by the protocol to ``MemorySystem.answer``: ``mode``
    and, for ``paper``, the release's prompt as read at plan time."""

    mode: str = "shared"
    paper: PaperPrompt | None = None

    def __post_init__(self) -> None:
        if self.mode not in ANSWER_MODES:
            raise ValueError(f"answer must be one of {', '.join(ANSWER_MODES)}, got {self.mode!r}")
        if self.mode == "paper" and self.paper is None:
            raise ValueError("answer=paper needs the release's answer prompt")

    def answer(self, system: Answerable[R], query: str) -> Answer:
        """The one answer-mode dispatch: the system's recall for ``query`` answered by the paper's prompt, the
        system's own (``native``), or the shared one. The in-context control (``control="in_context"``, the paper's
        backbone) is its own prompt in ``shared`` mode too: its context is the conversation holding the fact."""
        recall = system.recall(query)
        if self.paper is not None and self.mode == "paper":
            answer = paper_answer(system.llm.answerer, query, recall, self.paper)
        elif self.mode == "native" or system.control == "in_context":
            answer = system.native_answer(query, recall)
        else:
            answer = shared_answer(system.llm.answerer, query, recall)
        return replace(answer, meta={**answer.meta, MEMORY_CHARS: len(memory_block(recall.text))})


#: the default answerer: the shared prompt
SHARED = Answerer()
