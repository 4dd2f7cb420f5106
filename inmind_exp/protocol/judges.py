"""The four InMind judges (paper Appendix 14) and the judge-free exact target recall.

Every judge returns a binary verdict as a JSON object ``{"score": 0 or 1, "reason": "..."}``. A reply that cannot
be parsed into one after the allowed attempts becomes a ``Verdict`` with ``error`` set and ``score`` None, which
metrics count as an error, never as a 0. Prompts are versioned constants: change the text, bump the version.
``JUDGES`` is the registry: ``judge_task``, the metric list and table headers (``metrics``, also the analysis tables' titles),
the result identity (``config``) and the dry-run estimate (``run.estimate``) all derive from it.

Two prompt sets fill it (``judges.prompts``): ``strict`` (this module's prompts, the default, ``JUDGES`` itself) and
``paper`` (the official release's four judge prompts, read at run time by ``judge_set``, each ``.rstrip()``ped as
the release's ``build_judge_payloads.py`` does, with the release's ``field: value`` user-message layout). A paper
judge keeps its strict twin's name, label and order, so metrics and tables do not fork; its version names the set
and the prompt file's SHA-256. Neither set appends anything to the messages.

How a verdict is asked and read differs. ``strict`` asks for JSON mode (``response_format``, a request parameter),
shows a reply that does not parse back to the model with a one-line repair request (``LLMClient.chat_json``, a
prompt no set contains) and reads a score leniently (``1``, ``"1"``, ``1.0``, ``true``). ``paper`` sends what the
release sends, the messages only, asks again with the same messages, and reads a verdict the release's way ("Parse
only JSON verdicts with binary ``score``", ``skills/evaluate-inmind/SKILL.md``): the reply is one JSON object (a
surrounding code fence is allowed, prose is not) whose ``score`` is the integer 0 or 1. ``judges.json_mode=true``
gives the paper set the JSON-mode envelope (a labelled deviation, its own version). A reply that did not parse is
never served from the call cache: every attempt, and every rerun of a failed verdict, asks the endpoint again.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Mapping

from inmind_exp.llm import JSONReplyError, LLMCallError, LLMClient
from inmind_exp.records import Answer, Message, Task, Verdict, msgs

if TYPE_CHECKING:
    from inmind_exp.data.release import Release

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
    #: the prompt set it belongs to (``strict``: this module; ``paper``: the release's prompt files)
    prompt_set: str = "strict"
    #: JSON mode and the repair turn (``LLMClient.chat_json``); the release sends neither
    json_mode: bool = True
    #: read the score leniently (``"1"``, ``1.0``, ``true``); False: the release's binary integer score only
    lenient: bool = True

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

RELEVANCE_JUDGE = Judge(
    name="relevance",
    version="relevance-v1",
    reads="mismatched", label="Pair related (screen)", short="Rel", order=71,
    system=(
        "You screen pairs for a negative control. Earlier, a user told an assistant a personal fact. Later the same "
        "user makes a request. Decide whether an assistant that remembers the fact should let it change, constrain or "
        "qualify its answer to this request for this user (a warning, a rule, an adjustment, or a point a careful "
        "answer would raise). Score 1 if it should, even in part; score 0 if the request can be served fully and "
        "correctly without any regard to the fact. When in doubt, score 1. " + _OUTPUT
    ),
    template="[user_message] (the fact the user stated earlier)\n{user_message}\n\n[query] (the later request)\n{query}",
    prompt_tokens=250,
)

#: Judges of the negative controls (issue #22): not run on every task and not part of ``JUDGES`` (so a run without
#: controls keeps its result identity); a control judges its own extra answer with them, its fields built by
#: ``inmind_exp.protocol.controls`` (``mismatched_fields`` for ``over_application``).
CONTROL_JUDGES: dict[str, Judge] = {j.name: j for j in (OVER_APPLICATION_JUDGE,)}

#: the judge prompt sets ``judges.prompts`` selects
JUDGE_SETS: tuple[str, ...] = ("strict", "paper")

#: the release's user-message layout for each judge (``build_judge_payloads.py`` ``user_payload``): its fields as
#: ``name: value`` lines in its order; the fields' values are this project's (``Judge.fields``)
PAPER_TEMPLATES: dict[str, str] = {
    "naive": "user_message: {user_message}\ncontext: {context}\nquery: {query}\nanswer: {answer}",
    "target_recall": "user_message: {user_message}\ncontext: {context}\nquery: {query}\nexplanation: {explanation}",
    "application": ("user_message: {user_message}\ncontext: {context}\nquery: {query}\nexplanation: {explanation}\n"
                    "answer: {answer}"),
    "answer_only": "user_message: {user_message}\nquery: {query}\nexplanation: {explanation}\nanswer: {answer}",
}


def paper_judges(release: "Release", json_mode: bool = False) -> dict[str, Judge]:
    """The ``paper`` set: each registered judge with the release's prompt (``Release.prompt`` checks its pinned
    SHA-256), layout and verdict reading (no JSON mode unless ``json_mode``); name, label, order and the answer it
    reads unchanged, so the metrics stay the same."""
    from inmind_exp.data.release import PINNED_SHA256, PROMPTS

    out = {}
    for name, strict in JUDGES.items():
        system = release.prompt(name).rstrip()
        template = PAPER_TEMPLATES[name]
        size = (len(system) + len(template)) // 4 - (len(strict.system) + len(strict.template)) // 4
        out[name] = replace(strict, system=system, template=template, prompt_set="paper", json_mode=json_mode,
                            lenient=False, prompt_tokens=strict.prompt_tokens + size,
                            version=f"paper-{name}-v2-{PINNED_SHA256[PROMPTS[name]][:16]}" + ("-json" * json_mode))
    return out


def judge_set(name: str, release: "Release | None" = None, json_mode: bool | None = None) -> dict[str, Judge]:
    """The judges of prompt set ``name`` (``paper`` needs the release); ValueError naming the choices otherwise.
    ``json_mode`` None keeps the set's own envelope (strict: JSON mode; paper: none)."""
    if name == "strict":
        if json_mode is False:
            return {k: replace(j, json_mode=False, version=j.version + "-nojson") for k, j in JUDGES.items()}
        return dict(JUDGES)
    if name == "paper":
        if release is None:
            raise ValueError("judges.prompts=paper needs the official release")
        return paper_judges(release, bool(json_mode))
    raise ValueError(f"judges.prompts={name!r}: expected one of {', '.join(JUDGE_SETS)}")


def applicable(evaluates_naive: bool, judges: Mapping[str, Judge] | None = None) -> list[Judge]:
    """The judges a task of a system gets: those of the naive answer only if the system is asked the naive query."""
    return [j for j in (JUDGES if judges is None else judges).values() if j.reads == "indirect" or evaluates_naive]


def judge_messages(prompt: Judge, fields: dict[str, str]) -> tuple[Message, ...]:
    """The exact messages of one judge request: the set's system prompt, then its user-message layout filled in."""
    return msgs(("system", prompt.system), ("user", prompt.template.format(**fields)))


def _validate_verdict(obj: dict[str, Any]) -> str | None:
    score = obj.get("score")
    if isinstance(score, bool):
        return None
    if isinstance(score, (int, float)) and score in (0, 1):
        return None
    if isinstance(score, str) and score.strip() in ("0", "1"):
        return None
    return f'"score" must be 0 or 1, got {score!r}'


def _validate_binary(obj: dict[str, Any]) -> str | None:
    """The release's rule: ``score`` is the integer 0 or 1 (not ``true``, ``"1"`` or ``1.0``)."""
    score = obj.get("score")
    if type(score) is int and score in (0, 1):
        return None
    return f'"score" must be the integer 0 or 1, got {score!r}'


def parse_verdict_json(text: str) -> dict[str, Any]:
    """A reply that is one JSON object, optionally inside a code fence (no prose around it); ValueError if not."""
    s = text.strip()
    fenced = re.fullmatch(r"```(?:json)?\s*(.*?)\s*```", s, re.S)
    if fenced:
        s = fenced.group(1)
    try:
        obj = json.loads(s)
    except json.JSONDecodeError as e:
        raise ValueError(f"not a JSON object: {e.msg}") from None
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
    return obj


def _score(obj: dict[str, Any]) -> int:
    s = obj["score"]
    return int(s.strip()) if isinstance(s, str) else int(s)


def judge(client: LLMClient, prompt: Judge, fields: dict[str, str], attempts: int = 3, sample: int = 0) -> Verdict:
    """Run one judge; any failure (call or parse) is returned as an errored verdict, never a score. ``sample`` > 0
    asks for another sample of the same prompt (its own cache entry), for repeated judging."""
    messages = judge_messages(prompt, fields)
    before = len(client.meter.served_calls(client.role))

    def verdict(score: int | None, **kw: Any) -> Verdict:
        """The verdict with what ran: the model the endpoint reported for its last reply, the endpoint's host."""
        calls = client.meter.served_calls(client.role, before)
        return Verdict(prompt.name, score, prompt_version=prompt.version, model=calls[-1][0] if calls else "",
                       host=client.endpoint.host, **kw)

    try:
        obj, comp = client.chat_json(
            messages, attempts=attempts, sample=sample, json_mode=prompt.json_mode, reask_failed=True,
            validate=_validate_verdict if prompt.lenient else _validate_binary,
            parse=None if prompt.lenient else parse_verdict_json)
    except JSONReplyError as e:
        return verdict(None, raw=e.raw, error=str(e))
    except LLMCallError as e:
        return verdict(None, error=str(e))
    return verdict(_score(obj), reason=str(obj.get("reason", "")), raw=comp.text)


def judge_task(client: LLMClient, task: Task, naive: Answer | None, indirect: Answer, attempts: int = 3,
               judges: Mapping[str, Judge] | None = None,
               done: Mapping[str, Verdict] | None = None) -> dict[str, Verdict]:
    """Every judge of the set (``JUDGES`` by default) whose answer exists (the naive one only when the system was
    asked), in registry order. ``done`` holds verdicts already obtained (a rerun): a valid one of the same prompt
    version is kept, so only failed or missing verdicts are asked."""
    answers = {"naive": naive, "indirect": indirect}
    out = {}
    for j in (JUDGES if judges is None else judges).values():
        if (answer := answers[j.reads]) is None:
            continue
        old = (done or {}).get(j.name)
        keep = old is not None and old.ok and old.prompt_version == j.version
        out[j.name] = old if keep else judge(client, j, j.fields(task, answer), attempts)  # type: ignore[assignment]
    return out


