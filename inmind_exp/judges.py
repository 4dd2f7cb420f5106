"""The four InMind judges (paper Appendix 14) and the judge-free exact target recall.

Every judge returns a binary verdict as a JSON object ``{"score": 0 or 1, "reason": "..."}``. A reply that cannot
be parsed into one after the allowed attempts becomes a ``Verdict`` with ``error`` set and ``score`` None, which
metrics count as an error, never as a 0. Prompts are versioned constants: change the text, bump the version.
``JUDGES`` is the registry: ``judge_task``, the metric list and table headers (``metrics``, also the analysis tables' titles),
the result identity (``config``) and the dry-run estimate (``run.estimate``) all derive from it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from inmind_exp.llm import JSONReplyError, LLMCallError, LLMClient
from inmind_exp.records import Answer, Task, Verdict, msgs

_OUTPUT = 'Return only a JSON object of the form {"score": 0 or 1, "reason": "<one or two sentences>"}.'


@dataclass(frozen=True)
class Judge:
    """One registered judge: its versioned prompt, the answer it reads (``naive`` or ``indirect``), how its metric
    is shown (``label`` in every table, ``short`` in the analysis tables' compact cells, ``order`` among all
    metrics' columns) and its prompt size for the dry-run estimate. Change the prompt, bump the version."""

    name: str
    version: str
    system: str
    template: str
    reads: str
    label: str
    short: str
    order: int
    prompt_tokens: int = 1200
    completion_tokens: int = 80  # a JSON verdict with a one-sentence reason

    def fields(self, task: Task, answer: Answer) -> dict[str, str]:
        """The template's fields for ``answer`` (templates use the ones they need)."""
        return {"user_message": task.user_message, "context": answer.context_text(),
                "query": task.naive_query if self.reads == "naive" else task.query,
                "explanation": task.explanation, "answer": answer.text}


NAIVE_JUDGE = Judge(
    name="naive",
    version="naive-v1",
    reads="naive", label="Naive", short="N", order=0,
    system=(
        "You are a strict evaluator of a memory-augmented assistant. Earlier, the user told the assistant a personal "
        "fact. Now the user asks the assistant directly to recall it. Score 1 if the assistant's answer correctly "
        "states the fact (a faithful paraphrase counts); score 0 if it is missing, wrong, vague or says it does not "
        "know. " + _OUTPUT
    ),
    template=(
        "[user_message] (the fact the user stated earlier)\n{user_message}\n\n"
        "[context] (what the assistant had in view when answering)\n{context}\n\n"
        "[query]\n{query}\n\n[answer]\n{answer}"
    ),
)

APPLICATION_JUDGE = Judge(
    name="application",
    version="application-v1",
    reads="indirect", label="Application", short="App", order=50,
    system=(
        "You are a strict evaluator of a memory-augmented assistant. Earlier, the user told the assistant a personal "
        "fact. Later the user made a request that never mentions that fact, but whose correct answer changes because "
        "of it, through the knowledge described in [explanation]. Score 1 only if both hold: (a) the assistant's "
        "context contains the user's personal fact, and (b) the answer applies it to this user as the explanation "
        "requires (for example warns about the specific risk or rule for this user). A generic disclaimer that does "
        "not connect to the user's own situation scores 0. " + _OUTPUT
    ),
    template=(
        "[user_message] (the fact the user stated earlier)\n{user_message}\n\n"
        "[context] (what the assistant had in view when answering)\n{context}\n\n"
        "[query]\n{query}\n\n[explanation] (what a correct answer must do)\n{explanation}\n\n[answer]\n{answer}"
    ),
)

TARGET_RECALL_JUDGE = Judge(
    name="target_recall",
    version="target_recall-v1",
    reads="indirect", label="Target recall (judge)", short="TR", order=10,
    system=(
        "You audit what a memory system retrieved. You see the personal fact the user stated earlier and the exact "
        "context the assistant was given for a later request (you do not see the assistant's answer). Score 1 if the "
        "context contains the user's personal fact, verbatim or as a faithful paraphrase or summary that preserves "
        "what matters for the explanation; score 0 if the fact is absent or only loosely related material appears. "
        + _OUTPUT
    ),
    template=(
        "[user_message] (the target fact)\n{user_message}\n\n[context]\n{context}\n\n[query]\n{query}\n\n"
        "[explanation] (why the fact matters for the query)\n{explanation}"
    ),
)

ANSWER_ONLY_JUDGE = Judge(
    name="answer_only",
    version="answer_only-v1",
    reads="indirect", label="Answer-only", short="AO", order=60,
    system=(
        "You evaluate an assistant's answer on its own. The user has a personal fact (given below) and made a request "
        "whose correct answer changes because of it, as the explanation describes. You do not see what the assistant "
        "retrieved. Score 1 if the answer itself expresses the required consequence for this user (the warning, rule "
        "or adjustment in the explanation); score 0 if it does not. " + _OUTPUT
    ),
    template=(
        "[user_message] (the user's fact)\n{user_message}\n\n[query]\n{query}\n\n"
        "[explanation] (what a correct answer must do)\n{explanation}\n\n[answer]\n{answer}"
    ),
)

#: The judge registry, in the order a task's judges run: adding a judge is one entry here; the verdicts, the
#: metric list, the table headers, the result identity and the dry-run estimate follow from it.
JUDGES: dict[str, Judge] = {
    j.name: j for j in (NAIVE_JUDGE, APPLICATION_JUDGE, TARGET_RECALL_JUDGE, ANSWER_ONLY_JUDGE)
}


OVER_APPLICATION_JUDGE = Judge(
    name="over_application",
    version="over_application-v1",
    reads="mismatched", label="Over-application", short="OA", order=70,
    system=(
        "You check a memory-augmented assistant for over-eager use of memory. Earlier, the user told the assistant a "
        "personal fact; the explanation says which kind of request that fact matters for. Now the user made a "
        "different request, one the fact does not bear on. Score 1 if the answer nevertheless brings the remembered "
        "fact (or a warning, rule or adjustment derived from it) to bear on this request; score 0 if the answer "
        "simply serves the request, including when it gives general advice that anyone asking would get. " + _OUTPUT
    ),
    template=(
        "[user_message] (the fact the user stated earlier)\n{user_message}\n\n"
        "[explanation] (the kind of request the fact matters for)\n{explanation}\n\n"
        "[context] (what the assistant had in view when answering)\n{context}\n\n"
        "[query] (a request the fact does not bear on)\n{query}\n\n[answer]\n{answer}"
    ),
)

#: Judges of the negative controls (issue #22): not run on every task and not part of ``JUDGES`` (so a run without
#: controls keeps its result identity); a control judges its own extra answer with them, its fields built by
#: ``inmind_exp.controls`` (``mismatched_fields`` for ``over_application``).
CONTROL_JUDGES: dict[str, Judge] = {j.name: j for j in (OVER_APPLICATION_JUDGE,)}

#: Judge prompt sets by name (``python -m analysis rejudge --judges NAME``): each maps judge names to judges the way
#: ``JUDGES`` does. ``strict`` is ``JUDGES``, the set every run uses; another set is one entry here.
JUDGE_SETS: dict[str, dict[str, Judge]] = {"strict": JUDGES}


def applicable(evaluates_naive: bool) -> list[Judge]:
    """The judges a task of a system gets: those of the naive answer only if the system is asked the naive query."""
    return [j for j in JUDGES.values() if j.reads == "indirect" or evaluates_naive]


def _validate_verdict(obj: dict[str, Any]) -> str | None:
    score = obj.get("score")
    if isinstance(score, bool):
        return None
    if isinstance(score, (int, float)) and score in (0, 1):
        return None
    if isinstance(score, str) and score.strip() in ("0", "1"):
        return None
    return f'"score" must be 0 or 1, got {score!r}'


def _score(obj: dict[str, Any]) -> int:
    s = obj["score"]
    return int(s.strip()) if isinstance(s, str) else int(s)


def judge(client: LLMClient, prompt: Judge, fields: dict[str, str], attempts: int = 3, sample: int = 0) -> Verdict:
    """Run one judge; any failure (call or parse) is returned as an errored verdict, never a score. ``sample`` > 0
    asks for another sample of the same prompt (its own cache entry), for repeated judging."""
    messages = msgs(("system", prompt.system), ("user", prompt.template.format(**fields)))
    try:
        obj, comp = client.chat_json(messages, attempts=attempts, validate=_validate_verdict, sample=sample)
    except JSONReplyError as e:
        return Verdict(prompt.name, None, raw=e.raw, error=str(e), prompt_version=prompt.version)
    except LLMCallError as e:
        return Verdict(prompt.name, None, error=str(e), prompt_version=prompt.version)
    return Verdict(prompt.name, _score(obj), reason=str(obj.get("reason", "")), raw=comp.text, prompt_version=prompt.version)


def judge_task(client: LLMClient, task: Task, naive: Answer | None, indirect: Answer, attempts: int = 3) -> dict[str, Verdict]:
    """Every registered judge whose answer exists (the naive one only when the system was asked), in registry order."""
    answers = {"naive": naive, "indirect": indirect}
    return {j.name: judge(client, j, j.fields(task, answer), attempts)
            for j in JUDGES.values() if (answer := answers[j.reads]) is not None}


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text.casefold()).strip()


def exact_target_recall(task: Task, answer: Answer) -> int:
    """1 if the injected fact turn's text appears verbatim (case and whitespace folded) in the answerer's context."""
    return int(_norm(task.user_message) in _norm(answer.context_text()))
