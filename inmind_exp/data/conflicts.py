"""Conflict filter (paper Section 3.3 (ii), Appendix 9): does a task's fact contradict the persona of the trace?

An LLM judge sees the fact and a compact excerpt of what the user already said in the trace: the background user
turns most similar to the fact (where a contradiction would be: pets for a cat, occupation for a pilot's exam) plus
a small evenly spaced sample of the whole trace for the general persona, each cut to ``max_chars``. With the defaults
(8 + 6 turns of at most 320 characters) the prompt stays near 1.5k tokens, inside a 4k-context local model; a large
API model can be given more turns. A conflict must quote the contradicted earlier statement verbatim (checked, and
re-asked otherwise). A call or parse failure is an error verdict, never "no conflict".
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Any, Callable, Sequence

from inmind_exp.data.filters import BackgroundTurn, background_user_turns
from inmind_exp.llm.embed import Encoder, TextIndex
from inmind_exp.llm import JSONReplyError, LLMCallError, LLMClient
from inmind_exp.records import Task, Trace, Verdict, msgs

CONFLICT_PROMPT_VERSION = "conflict-v1"
CONFLICT_SYSTEM = (
    "You check whether a new personal fact a user states can be true together with what the same user said "
    "earlier about themselves. A conflict means both cannot be true at once, such as owning a cat after saying "
    "there are no pets at home. Most new facts do not conflict: a fact that is new, unrelated, unusual, or simply "
    "never mentioned before is NOT a conflict, and neither is a change that the earlier statements leave open. "
    "Answer 1 only for a clear incompatibility with one specific earlier statement, and copy that statement "
    "word for word as evidence.\n"
    'Return only a JSON object: {"reason": "<one sentence comparing the new fact with the earlier statements>", '
    '"evidence": "<the contradicted earlier statement, copied exactly, or empty>", "conflict": 0 or 1}.'
)
CONFLICT_TEMPLATE = (
    "[earlier statements by the user] (excerpts from past conversations, oldest first)\n{excerpts}\n\n"
    "[new fact stated by the user]\n{fact}\n\n"
    "Does the new fact contradict any earlier statement?"
)


@dataclass(frozen=True)
class PersonaSettings:
    """How much of the trace the judge sees: similar turns, a fixed spread sample, and a per-turn character cap."""

    k_similar: int = 8
    k_sample: int = 6
    max_chars: int = 320


@dataclass(frozen=True)
class ConflictResult:
    """The judge's verdict for one task (``verdict.score`` 1 = conflict) and the trace turns it was shown."""

    task_id: str
    verdict: Verdict
    evidence: str
    shown: tuple[str, ...]

    @property
    def conflict(self) -> bool:
        return self.verdict.ok and self.verdict.score == 1

    def to_dict(self) -> dict[str, Any]:
        return {"task_id": self.task_id, "verdict": asdict(self.verdict), "evidence": self.evidence, "shown": list(self.shown)}


def spread_sample(n: int, k: int) -> list[int]:
    """``k`` indices evenly spaced over ``range(n)``, first and last included (deterministic)."""
    if k <= 0 or n <= 0:
        return []
    if k >= n:
        return list(range(n))
    if k == 1:
        return [0]
    return sorted({round(i * (n - 1) / (k - 1)) for i in range(k)})


def _clip(text: str, n: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1].rstrip() + "…"


class PersonaExcerpts:
    """Picks the trace user turns shown to the judge for a fact: nearest by the encoder, plus a spread sample."""

    def __init__(self, trace: Trace, encoder: Encoder | None, settings: PersonaSettings = PersonaSettings()):
        self.turns: list[BackgroundTurn] = background_user_turns(trace)
        if not self.turns:
            raise ValueError(f"trace {trace.id!r} has no user turns to judge against")
        self.settings = settings
        self.index = TextIndex(encoder)
        self.index.add([str(i) for i in range(len(self.turns))], [t.text for t in self.turns])
        self.sample = spread_sample(len(self.turns), settings.k_sample)

    def pick(self, fact: str) -> list[int]:
        near = [int(i) for i, _ in self.index.search(fact, self.settings.k_similar)]
        return sorted(set(near) | set(self.sample))

    def render(self, picked: Sequence[int]) -> str:
        lines = []
        for i in picked:
            t = self.turns[i]
            lines.append(f"- [{t.date}] {_clip(t.text, self.settings.max_chars)}")
        return "\n".join(lines)

    def ref(self, i: int) -> str:
        t = self.turns[i]
        return f"{t.session_id}#{t.turn_index}"


def _norm(text: str) -> str:
    return " ".join(text.casefold().replace("…", " ").replace("...", " ").split()).strip(" \"'.,;:!?")


def _conflict_value(c: Any) -> int | None:
    if isinstance(c, bool):
        return int(c)
    if isinstance(c, (int, float)) and c in (0, 1):
        return int(c)
    if isinstance(c, str) and c.strip() in ("0", "1"):
        return int(c.strip())
    return None


def _validator(shown_texts: Sequence[str]) -> Callable[[dict[str, Any]], str | None]:
    """A verdict needs "conflict" 0 or 1; a conflict must quote one of the shown earlier statements (small models
    otherwise cite the new fact itself, or the prompt's example, as the contradicted statement)."""
    haystack = [_norm(t) for t in shown_texts]

    def validate(obj: dict[str, Any]) -> str | None:
        c = _conflict_value(obj.get("conflict"))
        if c is None:
            return f'"conflict" must be 0 or 1, got {obj.get("conflict")!r}'
        if c == 1:
            ev = _norm(str(obj.get("evidence") or ""))
            if len(ev) < 8 or not any(ev in h for h in haystack):
                return '"evidence" must copy, word for word, the earlier statement that the new fact contradicts'
        return None

    return validate


def judge_conflict(
    client: LLMClient, task: Task, excerpts: PersonaExcerpts, picked: Sequence[int] | None = None, attempts: int = 3
) -> ConflictResult:
    """One judge call for one task; any failure comes back as an errored verdict."""
    if picked is None:
        picked = excerpts.pick(task.user_message)
    shown = tuple(excerpts.ref(i) for i in picked)
    messages = msgs(
        ("system", CONFLICT_SYSTEM),
        ("user", CONFLICT_TEMPLATE.format(excerpts=excerpts.render(picked), fact=task.user_message)),
    )
    try:
        validate = _validator([excerpts.turns[i].text for i in picked])
        obj, comp = client.chat_json(messages, attempts=attempts, validate=validate)
    except JSONReplyError as e:
        return ConflictResult(task.id, Verdict("conflict", None, raw=e.raw, error=str(e),
                                               prompt_version=CONFLICT_PROMPT_VERSION), "", shown)
    except LLMCallError as e:
        return ConflictResult(task.id, Verdict("conflict", None, error=str(e), prompt_version=CONFLICT_PROMPT_VERSION),
                              "", shown)
    score = _conflict_value(obj["conflict"])
    verdict = Verdict("conflict", score, reason=str(obj.get("reason", "")), raw=comp.text,
                      prompt_version=CONFLICT_PROMPT_VERSION)
    return ConflictResult(task.id, verdict, str(obj.get("evidence") or ""), shown)


def conflict_filter(
    client: LLMClient,
    tasks: Sequence[Task],
    trace: Trace,
    encoder: Encoder | None,
    settings: PersonaSettings = PersonaSettings(),
    workers: int = 1,
) -> list[ConflictResult]:
    """Judge every task's fact against the trace persona; results in task order."""
    excerpts = PersonaExcerpts(trace, encoder, settings)
    picks = [excerpts.pick(t.user_message) for t in tasks]  # encoder and index stay on this thread
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        return list(pool.map(lambda tp: judge_conflict(client, tp[0], excerpts, tp[1]), zip(tasks, picks)))
