"""The plug-in contract, runnable by anyone: ``python -m inmind_exp.testing.check_system module:Class [key=value ...]``
runs every scenario the built-in systems pass (``tests/systems/test_contract.py`` runs the same for each of them)
against any installed memory system, printing each scenario's result, and exits 1 naming what fails (2 when the
class cannot be loaded). ``key=value`` are the system's parameters (YAML values), as in its config's ``params``.

Each scenario builds the system on role clients talking to a fake OpenAI-compatible server on 127.0.0.1
(``inmind_exp.testing.fake_openai``: default replies, so a system must survive replies it cannot use) over a small
trace; the encoder is MiniLM when the system accepts ``minilm``, else ``emb3`` served by the fake, else none.

- ``contract``: no abstract method is left (``recall`` among them), the parameters pass ``check_params`` and the
  class builds; when this fails nothing else is run;
- ``docstring``: the module docstring names its paper (or says there is none) in more than 100 characters;
- ``snapshot_restore``: ingest, snapshot, answer; a fresh instance restored from the snapshot answers the same
  text from the same context, and the query reached the answerer;
- ``answerers``: the protocol's three answerers (``shared``, ``native``, ``paper`` with a stand-in prompt) each
  answer; ``paper`` shows exactly the memory block ``shared`` shows (``Answer.visible``);
- ``writing``: every memory call made while ingesting declares the trace turns it writes (``writing(turns)``), and
  the system makes memory calls on write exactly when its ``cost`` profile says it does;
- ``provenance``: a whole task through the protocol has no error, and on every record verbatim <= origin <= union,
  origin and derived are disjoint on every item, and a rewritten item whose origin holds the fact states it;
- ``keeps_words``: the same with a memory model that keeps the user's words (``testing.user_words``): every item
  that states the fact has the fact's turn as origin (a rewrite that keeps the fact keeps it, by the one rule of
  ``inmind_exp.memory.kept_provenance``);
- ``refusal``: a memory model that refuses every free-text call (a state rewrite): a refusal served while ingesting
  is a fault, and no refusal becomes memory (no item in the context states it; the previous state is kept).
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import yaml

from inmind_exp.memory.answering import Answerer, PaperPrompt
from inmind_exp.llm.embed import APIEncoder, EmbeddingSpec, MiniLMEncoder
from inmind_exp.llm import CallCache, Endpoint, Models
from inmind_exp.memory import SYSTEMS, Answer, Encoder, MemorySystem, Message, Session, Turn
from inmind_exp.protocol.task import inject, run_task
from inmind_exp.records import FACT_TURN_ID, Task, TaskRecord, Trace
from inmind_exp.testing.fake_openai import FakeOpenAI
from inmind_exp.testing.replies import plausible_reply
from inmind_exp.testing.user_words import REFUSAL, refusing_reply, user_words_reply

FACT = "My doctor put me on warfarin after a blood clot last year."
TASK = Task(id="prov", domain="health", user_message=FACT, assistant_message="Thanks for telling me, noted.",
            naive_query="Which medication am I on?", query="Can you plan a weekend hiking trip with some trail snacks?",
            explanation="-")
QUERY = "What should I plant next week?"
_FACT_WORDS = ("warfarin", "clot")
#: item kinds that show stored trace text as it was said (not rewritten), so need not state the fact's words
VERBATIM_KINDS = ("short_term", "page", "turn", "chunk", "message", "passage", "note", "session", "episode")


class ScenarioFailed(AssertionError):
    """A scenario's check did not hold; the message says which."""


def ensure(ok: Any, message: str) -> None:
    if not ok:
        raise ScenarioFailed(message)


def make_trace(n_sessions: int = 4, user_turns_per_session: int = 2, prefix: str = "bg") -> Trace:
    """A small deterministic trace: session i has ``user_turns_per_session`` exchanges about topic i."""
    sessions = []
    for i in range(n_sessions):
        turns: list[Turn] = []
        for j in range(user_turns_per_session):
            turns.append(Turn("user", f"Session {i} question {j}: how do I care for my tomato plants in week {i}?"))
            turns.append(Turn("assistant", f"Session {i} answer {j}: water them deeply and stake them, week {i}."))
        sessions.append(Session(id=f"{prefix}_{i:02d}", date=f"2024/01/{i + 1:02d} (Mon) 10:00", turns=tuple(turns)))
    return Trace(id="tiny", sessions=tuple(sessions))


def fake_endpoints(base_url: str, **overrides: Any) -> dict[str, Endpoint]:
    """The three roles on the fake server, with quick retries."""
    kw: dict[str, Any] = dict(base_url=base_url, model="fake-model", max_attempts=3, backoff_initial_s=0.01,
                              backoff_max_s=0.05, timeout_s=10.0, temperature=0.0, max_tokens=256)
    kw.update(overrides)
    return {r: Endpoint(role=r, **kw) for r in ("answerer", "judge", "memory")}


def encoder_for(cls: type[MemorySystem], base_url: str, cache: CallCache | None = None) -> Encoder | None:
    """MiniLM when ``cls`` accepts it, else text-embedding-3-large served by the fake, else none (BM25 only)."""
    if "minilm" in cls.embeddings:
        return MiniLMEncoder()
    if "emb3" in cls.embeddings:
        endpoint = Endpoint(role="embedding", base_url=base_url, model="text-embedding-3-large", max_attempts=1)
        return APIEncoder(EmbeddingSpec("emb3", "api", endpoint=endpoint), cache, None, None)
    return None


@dataclass
class Case:
    """One scenario's system class and parameters, on its own fake server, clients and directory."""

    cls: type[MemorySystem]
    params: dict[str, Any]
    fake: FakeOpenAI
    models: Models
    encoder: Encoder | None
    root: Path

    def make(self, workdir: Path) -> MemorySystem:
        return self.cls(self.models, self.encoder, workdir, **self.params)


def check_invariants(rec: TaskRecord) -> None:
    """verbatim <= origin <= union on the indirect query, origin and derived disjoint on every item, and an item
    whose origin holds the fact states it (its text names the fact's content words) unless it shows trace text."""
    exact, origin, union = rec.target_recall_exact, rec.target_recall_provenance, rec.target_recall_provenance_union
    ensure(exact is None or origin is None or exact <= origin, f"verbatim recall {exact} > origin recall {origin}")
    ensure(origin is None or union is None or origin <= union, f"origin recall {origin} > union recall {union}")
    for answer in (rec.naive, rec.indirect):
        for it in answer.items or () if answer is not None else ():
            ensure(set(it.sources).isdisjoint(it.derived), f"an item's origin and derived turns overlap: {it}")
            if FACT_TURN_ID in it.sources and it.kind not in VERBATIM_KINDS:
                ensure(any(w in it.text.lower() for w in _FACT_WORDS),
                       f"a {it.kind!r} item has the fact turn as origin but does not state it: {it.text[:200]!r}")


def run_protocol(make: Callable[[Path], MemorySystem], models: Models, workdir: Path, name: str) -> TaskRecord:
    """``TASK`` through the protocol on a three-session trace, the fact in the second session."""
    rec = run_task(TASK, make_trace(n_sessions=3, user_turns_per_session=2), 1, make, models, workdir,
                   config_hash="h", system_name=name)
    ensure(rec.error is None, f"the task failed: {rec.error}")
    return rec


# -- the scenarios --------------------------------------------------------------------------------------------------

def contract(case: Case) -> None:
    missing = sorted(getattr(case.cls, "__abstractmethods__", ()))
    ensure(not missing, f"abstract method(s) not implemented: {', '.join(missing)}")
    problems = case.cls.check_params(case.params)
    ensure(not problems, "; ".join(problems))
    case.make(case.root / "built")


def docstring(case: Case) -> None:
    doc = sys.modules[case.cls.__module__].__doc__ or ""
    ensure(len(doc) > 100 and re.search(r"et al\.|paper", doc, re.I),
           f"the docstring of module {case.cls.__module__} must name its paper (or say it has none) and its "
           "deviations, in more than 100 characters")


def snapshot_restore(case: Case) -> None:
    a = case.make(case.root / "a")
    for s in make_trace(n_sessions=3, user_turns_per_session=2).sessions:
        a.ingest_session(s)
    a.snapshot(case.root / "snap")
    first = a.answer(QUERY)
    ensure(isinstance(first, Answer) and isinstance(first.text, str), f"answer() returned {first!r}")
    ensure(first.context and all(isinstance(m, Message) for m in first.context), "the answer's context is empty")
    ensure(QUERY in first.context_text(), "the query never reached the answerer")
    b = case.make(case.root / "b")
    b.restore(case.root / "snap")
    second = b.answer(QUERY)
    ensure(second.context == first.context, "restored from the snapshot, the answerer's context differs")
    ensure(second.text == first.text, "restored from the snapshot, the answer differs")


def answerers(case: Case) -> None:
    prompt = PaperPrompt("Stand-in prompt.\n{context}\nEnd.", sha256="0" * 64)
    a = case.make(case.root / "a")
    for s in make_trace(n_sessions=2, user_turns_per_session=2).sessions:
        a.ingest_session(s)
    a.snapshot(case.root / "snap")
    answers = {}
    for mode in ("shared", "native", "paper"):
        b = case.make(case.root / mode)
        b.restore(case.root / "snap")
        answers[mode] = b.answer(QUERY, Answerer(mode, prompt if mode == "paper" else None))
        sent = "\n".join(str(m.content) for m in answers[mode].context)
        ensure(QUERY in sent, f"answer={mode}: the query never reached the answerer")
    paper = answers["paper"]
    ensure(paper.visible is not None and paper.context_text() == paper.visible,
           "answer=paper: the visible context is not the block substituted into the release's prompt")
    ensure([m.role for m in paper.context] == ["system", "user"] and paper.context[1].content == QUERY
           and paper.context[0].content == f"Stand-in prompt.\n{paper.visible}\nEnd.",
           "answer=paper: the call is not the release's prompt around the memory block, then the query")
    if case.cls.control != "in_context":
        shared = str(answers["shared"].context[0].content).split("<memory>\n", 1)[-1].rsplit("\n</memory>", 1)[0]
        ensure(shared == paper.visible, "answer=paper shows another memory block than answer=shared")


def writing(case: Case) -> None:
    declared: list[tuple[str, tuple[str, ...] | None]] = []
    meter = case.models.meter
    finished = meter.finished

    def spy(role: str, finish_reason: str | None, prompt: str = "") -> None:
        declared.append((role, getattr(meter._about, "turns", None)))
        finished(role, finish_reason, prompt)

    meter.finished = spy  # type: ignore[method-assign]
    case.fake.add_rule("", plausible_reply)
    mem = case.make(case.root / "w")
    seen: set[str] = set()
    for s in inject(make_trace(n_sessions=4, user_turns_per_session=3), TASK, 2):
        seen |= {t.id for t in s.turns}
        before = len(declared)
        mem.ingest_session(s)
        for role, turns in declared[before:]:
            ensure(role == "memory", f"a call on the {role} role while ingesting {s.id}")
            ensure(turns is not None, f"a memory call while ingesting {s.id} declared no turns (self.writing)")
            ensure(turns and set(turns or ()) <= seen, f"a memory call while ingesting {s.id} declared {turns}, "
                   "not turns of this or an earlier session")
    n = sum(1 for role, _ in declared if role == "memory")
    expected = case.cls.cost.memory_calls_per_user_turn + case.cls.cost.memory_calls_per_session > 0
    ensure((n > 0) is expected, f"{n} memory call(s) on write, but its cost profile says "
           f"{'some' if expected else 'none'}")


def provenance(case: Case) -> None:
    check_invariants(run_protocol(case.make, case.models, case.root / "run", case.cls.name or "checked"))


def keeps_words(case: Case) -> None:
    case.fake.add_rule("", user_words_reply)
    rec = run_protocol(case.make, case.models, case.root / "run", case.cls.name or "checked")
    check_invariants(rec)
    for answer in (rec.naive, rec.indirect):
        for it in answer.items or () if answer is not None else ():
            ensure(FACT_TURN_ID in it.sources or not all(w in it.text.lower() for w in _FACT_WORDS),
                   f"a {it.kind!r} item states the fact but does not have its turn as origin: {it.text[:200]!r}")


def refusal(case: Case) -> None:
    mem = case.make(case.root / "r")
    pending: list[tuple[int, str]] = []  # the fault count when the last refusal was served, and its request
    unfaulted: list[str] = []

    def settle() -> None:  # a refused call is followed by a fault before the system's next call (or the end)
        if pending and len(mem.faults) == pending[-1][0]:
            unfaulted.append(pending[-1][1])
        pending.clear()

    def reply(body: dict[str, Any]) -> Any:
        settle()
        out = refusing_reply(body)
        if out == REFUSAL:
            pending.append((len(mem.faults), str(body["messages"][0].get("content") or "")[:80]))
        return out

    case.fake.add_rule("", reply)
    for s in inject(make_trace(n_sessions=3, user_turns_per_session=2), TASK, 1):
        mem.ingest_session(s)
    mem.end_ingestion()
    settle()
    ensure(not unfaulted, f"{len(unfaulted)} refused memory call(s) while ingesting recorded no fault (a refusal "
           f"to a state-replacing call is a malformed_reply fault); the first: {unfaulted[:1]}")
    case.fake.rules.clear()
    stated = [it.text[:120] for it in mem.recall(QUERY).items or () if "can't help" in it.text]
    ensure(not stated, f"a refusal became memory (the previous state must stay): {stated}")


SCENARIOS: dict[str, Callable[[Case], None]] = {f.__name__: f for f in (
    contract, docstring, snapshot_restore, answerers, writing, provenance, keeps_words, refusal)}


@dataclass(frozen=True)
class Result:
    scenario: str
    ok: bool | None  # None: not run (the contract failed)
    detail: str = ""


def check(cls: type[MemorySystem], params: dict[str, Any] | None = None,
          scenarios: tuple[str, ...] = tuple(SCENARIOS)) -> list[Result]:
    """Run ``scenarios`` against ``cls`` built with ``params``; one result each, in order."""
    out: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="check_system-") as tmp:
        for name in scenarios:
            if out and out[0].scenario == "contract" and not out[0].ok:
                out.append(Result(name, None, "not run: the contract fails"))
                continue
            root = Path(tmp) / name
            with FakeOpenAI() as fake:
                cache = CallCache(root / "cache")
                models = Models.build(fake_endpoints(fake.base_url), cache)
                case = Case(cls, dict(params or {}), fake, models, encoder_for(cls, fake.base_url, cache), root)
                try:
                    SCENARIOS[name](case)
                    out.append(Result(name, True))
                except ScenarioFailed as e:
                    out.append(Result(name, False, str(e)))
                except Exception as e:  # noqa: BLE001 - every failure is a result, with where it happened
                    out.append(Result(name, False, f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=-3)}"))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m inmind_exp.testing.check_system",
                                     description=(__doc__ or "").split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("system", help="the class: package.module:Class, or an installed or built-in system name")
    parser.add_argument("params", nargs="*", metavar="key=value", help="the system's parameters (YAML values)")
    parser.add_argument("--only", action="append", choices=list(SCENARIOS), help="run only this scenario (repeat)")
    args = parser.parse_args(argv)
    params: dict[str, Any] = {}
    for p in args.params:
        key, sep, value = p.partition("=")
        if not sep or not key:
            parser.error(f"parameter {p!r}: expected key=value")
        params[key] = yaml.safe_load(value)
    try:
        cls = SYSTEMS.get(args.system)
    except KeyError as e:
        parser.error(str(e.args[0] if e.args else e))
    results = check(cls, params, tuple(s for s in SCENARIOS if not args.only or s in args.only))
    for r in results:
        status = "PASS" if r.ok else "SKIP" if r.ok is None else "FAIL"
        print(f"{status} {r.scenario}" + (f": {r.detail}" if r.detail else ""), flush=True)
    failed = [f"{r.scenario} ({r.detail.splitlines()[0]})" for r in results if r.ok is False]
    if failed:
        print(f"check_system: {args.system} fails {'; '.join(failed)}", file=sys.stderr)
        return 1
    print(f"check_system: {args.system} passes all {len(results)} scenarios")
    return 0


if __name__ == "__main__":
    sys.exit(main())
