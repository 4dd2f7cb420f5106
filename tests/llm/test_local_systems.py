"""Every memory system proven on a real model: the nine registered systems run one task each, end to end, on the
embedded llama.cpp model and the smoke trace (``trace=smoke``), in-process through ``protocol.run_task`` with the
configuration ``launch.py`` would compose. One server serves the whole module; it also shows that tool calls come
back structured (A-RAG's tools) while plain chat and JSON-mode judge calls keep working.

Sizing (2 CPU cores): the smoke trace has 6 user turns; the memory role is capped at ``MEMORY_MAX_TOKENS`` and the
answerer at ``ANSWER_MAX_TOKENS`` (A-RAG's at llm=local's 200, its loop at ``A_RAG_MAX_LOOPS`` steps); the task is a
short one. Per-system figures (wall time, calls per role, faults) are printed (``-s``) and written to
``smoke_records.jsonl`` in the pytest base temp directory. All nine took 2 h 3 min on a quiet 2-core machine,
so the test runs on demand (``-m local_llm_all_systems``), not in the default suite.

A-RAG is held to a different read-path check: what its context holds is what its agent chose to search for, and the
1.5B model's choice (``keyword_search(["allergy", "food", "dairy"])`` for "What food allergy did the allergist
confirm?", then an answer) misses "allergic to sesame". So for A-RAG the test asserts that the agent's loop ran on
structured tool calls with no tool-call-as-text fault, and that A-RAG's own ``semantic_search`` tool finds the fact's
chunk for the naive query in the index the task built; the agent's context provenance is printed, not asserted.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from inmind_exp.memory.answering import Answerer
from inmind_exp.data.make_smoke_trace import SMOKE_TRACE, render
from inmind_exp.data.trace import load_trace
from inmind_exp.protocol.bounds import exact_target_recall
from inmind_exp.memory import SYSTEMS
from inmind_exp.protocol.task import inject, injection_session_index
from inmind_exp.records import FACT_TURN_ID

REPO = Path(__file__).resolve().parents[2]
TASK_ID = "health_wellness-28"  # "An allergist just confirmed I'm allergic to sesame." (short, unambiguous)
MEMORY_MAX_TOKENS = 1024  # 256 cut Mem0's update reply (it lists every memory) and HippoRAG's OpenIE triples
ALWAYS_IN_STATE_MAX_TOKENS = 1536
ANSWER_MAX_TOKENS = 96
A_RAG_MAX_LOOPS = 4
RAW_TURN_SYSTEMS = ("backbone", "naive_rag")  # context = stored turns verbatim, so the judge-free check applies


def compose(*overrides: str):
    """The config launch.py composes for these overrides (conf/ with the registered schemas)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    from inmind_exp.config.schema import register_configs

    register_configs()
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        return hydra_compose("config", overrides=list(overrides))


# -- the smoke trace (no model) -------------------------------------------------------------------------------------

def test_shipped_smoke_trace_is_what_the_generator_writes():
    assert SMOKE_TRACE.read_text(encoding="utf-8") == render(), "run python -m inmind_exp.data.make_smoke_trace"


def test_trace_smoke_config_selects_the_small_trace_and_an_injection_inside_it(monkeypatch):
    from inmind_exp.config.settings import injection_spec

    monkeypatch.chdir(REPO)  # trace.path is relative to the repository root
    cfg = compose("trace=smoke")
    trace = load_trace(cfg.trace.path, index=cfg.trace.index)
    full = load_trace(None)
    assert [s.id for s in trace.sessions] == [s.id for s in full.sessions[:3]]
    assert all(sum(t.role == "user" for t in s.turns) == 2 for s in trace.sessions)
    for s, f in zip(trace.sessions, full.sessions):  # each session is a prefix of the original
        assert [(t.role, t.content) for t in s.turns] == [(t.role, t.content) for t in f.turns[:len(s.turns)]]
    index = injection_session_index(trace, injection_spec(cfg.injection))
    assert cfg.injection.name == "late" and index == 2
    sessions = inject(trace, _task(), index)
    assert any(t.id == FACT_TURN_ID for t in sessions[index].turns)
    # an explicit choice still wins over the trace's default, and middle's 40th user turn is refused by name
    assert injection_session_index(trace, injection_spec(compose("trace=smoke", "injection=early").injection)) == 0
    with pytest.raises(ValueError, match=r"injection.user_turn=40 is outside the trace's 1..6 user turns"):
        injection_session_index(trace, injection_spec(compose("trace=smoke", "injection=middle").injection))


def _task():
    from inmind_exp.data.tasks import load_tasks

    (task,) = [t for t in load_tasks(None) if t.id == TASK_ID]
    return task


# -- the embedded model ---------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from inmind_exp.llm.local_server import start_local_server

    srv = start_local_server(None, log_dir=tmp_path_factory.mktemp("llama"))
    yield srv
    srv.stop()


def _endpoint(server, role: str, max_tokens: int):
    from inmind_exp.llm import Endpoint

    return Endpoint(role=role, base_url=server.base_url, model=server.model_alias, cache_id=server.cache_id,
                    max_tokens=max_tokens, max_attempts=2, timeout_s=900.0, max_concurrency=1)


#: requests that each ask A-RAG's agent for a search; the model may answer any of them in prose instead
_SEARCH_REQUESTS = ("Search my chat history for the half marathon I signed up for.",
                    "Use keyword_search to find where I mentioned my dog.",
                    "Look up what I said about my allergy.")


@pytest.mark.slow
@pytest.mark.local_llm
@pytest.mark.timeout(1800)
def test_tool_calls_come_back_structured_and_plain_and_json_calls_still_work(server):
    """A-RAG's own system prompt and tools through the real openai client: a call the model writes comes back as
    message.tool_calls, whatever shape it wrote it in, never as call-like text.

    What the code guarantees is asserted, not which of several equivalent outputs the machine's kernels make the
    greedy-decoded model choose (issue #27: one machine gave ``<tools>{"type": "function", ...}``, another
    ``<tool_call>{"name": ...}``; on AMX machines a question made it write a plan and no call). So: no reply keeps
    call-like text, at least one of three search requests gets a structured call, the plain reply has no call, and
    the JSON judge call gives a parsed verdict (its score is the model's judgement, not asserted)."""
    from systems import a_rag
    from inmind_exp.protocol.judges import NAIVE_JUDGE, judge
    from inmind_exp.llm import LLMClient
    from inmind_exp.llm.llama_tool_calls import CHAT_FORMAT
    from inmind_exp.records import Message

    assert server.cache_id.endswith(f":chat-{CHAT_FORMAT}")
    client = LLMClient(_endpoint(server, "answerer", 200))
    system = Message("system", a_rag.SYSTEM_PROMPT.format(corpus=a_rag.CORPUS_DESCRIPTIONS["exchange"]))
    structured = 0
    for request in _SEARCH_REQUESTS:
        comp = client.chat([system, Message("user", request)], tools=a_rag.tool_schemas(5, 20), tool_choice="auto")
        text = comp.text or ""
        assert "<tool_call>" not in text and not re.search(r'"(name|function|tool_calls?)"\s*:', text), \
            f"call-like text not turned into a call: {text[:300]!r}"
        for tc in comp.tool_calls:
            assert tc["function"]["name"] in a_rag.TOOL_PARAMS
            assert isinstance(json.loads(tc["function"]["arguments"]), dict)
        if comp.tool_calls:
            assert comp.finish_reason == "tool_calls"
            structured += 1
            break
    assert structured, "none of the search requests got a tool call"
    plain = client.chat([Message("user", "What is the capital of France? Answer in one word.")], max_tokens=16)
    assert (plain.text or "").strip() and not plain.tool_calls
    verdict = judge(LLMClient(_endpoint(server, "judge", 96)), NAIVE_JUDGE, {
        "user_message": "My doctor put me on warfarin.", "context": "(not shown)", "query": "What medication am I on?",
        "answer": "You take warfarin."})
    assert verdict.error is None and verdict.score in (0, 1)


def _estimated_calls(name: str) -> float:
    """Rough LLM calls of one smoke task (6 user turns, 3 sessions, 2 queries): cheap systems run first."""
    c = SYSTEMS.get(name).cost
    return (7 * c.memory_calls_per_user_turn + 3 * c.memory_calls_per_session
            + 2 * (c.memory_calls_per_query + c.answer_calls_per_query))


def _summary(name: str, rec, wall_s: float) -> dict:
    naive_ctx = rec.naive if rec.naive is not None else None
    task = _task()
    return {
        "system": name,
        "wall_s": round(wall_s, 1),
        "task_latency_s": rec.latency_s,
        "calls": {role: u.calls for role, u in sorted(rec.usage.items())},
        "tokens": {role: [u.prompt_tokens, u.completion_tokens] for role, u in sorted(rec.usage.items())},
        "error": rec.error,
        "fact_write_fault": rec.fact_write_fault,
        "faults": rec.fault_counts(),
        "naive_recall_provenance": rec.naive_recall_provenance,
        "target_recall_provenance": rec.target_recall_provenance,
        "naive_recall_provenance_union": rec.naive_recall_provenance_union,
        "target_recall_provenance_union": rec.target_recall_provenance_union,
        "visible_state_recall_provenance": rec.visible_state_recall_provenance,
        "retrieved_recall_provenance": rec.retrieved_recall_provenance,
        "context_tokens": rec.context_tokens,
        "ran": dict(rec.ran),
        "naive_exact": exact_target_recall(task, naive_ctx) if naive_ctx is not None else None,
        "indirect_exact": rec.target_recall_exact,
        "verdicts": {k: v.score for k, v in sorted(rec.verdicts.items())},
        "naive_answer": (rec.naive.text[:200] if rec.naive else None),
        "indirect_meta": {k: v for k, v in (rec.indirect.meta if rec.indirect else {}).items()
                          if k in ("stop_reason", "steps", "tool_errors", "chunks_read_ids")},
    }


@pytest.mark.slow
@pytest.mark.local_llm
@pytest.mark.local_llm_all_systems
@pytest.mark.timeout(5400)  # A-Mem took 2350 s on a quiet machine with 1024-token memory replies; room for load
@pytest.mark.parametrize("name", sorted(SYSTEMS.names(), key=lambda n: (_estimated_calls(n), n)))
def test_system_runs_one_task_end_to_end_on_the_embedded_model(name, server, tmp_path, tmp_path_factory, monkeypatch):
    """No task error, no fault writing the fact, and the fact's turn in the context of the query that asks for it
    (the naive query; for the backbone, which is not asked it, the indirect one)."""
    from inmind_exp.llm.embed import build_encoder
    from inmind_exp.llm import CallCache, Models
    from inmind_exp.protocol.task import build_prefix, run_task
    from inmind_exp.plan.plan import plan_config

    monkeypatch.chdir(REPO)
    overrides = [f"system={name}", "trace=smoke", "llm=local"]
    # always_in_state's one memory call per session rewrites the whole file: llm=local's 512 tokens cut it on the
    # fact's session (a truncated_reply fault on the fact, seen on this model), so it gets room for the whole file
    memory_max = ALWAYS_IN_STATE_MAX_TOKENS if name == "always_in_state" else MEMORY_MAX_TOKENS
    overrides.append(f"llm.roles.memory.max_tokens={memory_max}")
    if name == "a_rag":  # its answerer writes tool calls, often after a plan: 96 tokens cut it off before the call
        overrides.append(f"system.params.max_loops={A_RAG_MAX_LOOPS}")
    else:
        overrides.append(f"llm.roles.answerer.max_tokens={ANSWER_MAX_TOKENS}")
    plan = plan_config(compose(*overrides), tmp_path / "root", tmp_path / "job")
    endpoints = {r: e.with_base_url(server.base_url, server.cache_id) for r, e in plan.endpoints.items()}
    assert all(e.cache_id == server.cache_id for e in endpoints.values())  # the plan names the server it gets
    cache = CallCache(tmp_path / "cache")
    models = Models.build(endpoints, cache)
    encoder = build_encoder(plan.embedding, cache, models.meter)
    cls = plan.system_cls

    made = []

    def make(workdir: Path):
        made.append(cls(models, encoder, workdir, **plan.system_params))
        return made[-1]

    task = _task()
    t0 = time.perf_counter()
    build_prefix(make, plan.trace, plan.session_index, tmp_path / "prefix-build", tmp_path / "prefix")
    rec = run_task(task, plan.trace, plan.session_index, make, models, tmp_path / "work" / "task",
                   config_hash=plan.config_hash, system_name=name, evaluates_naive=cls.evaluates_naive,
                   prefix_snapshot=tmp_path / "prefix", answerer=Answerer(plan.answer_mode, plan.answer_prompt))
    summary = _summary(name, rec, time.perf_counter() - t0)
    print("\n[smoke] " + json.dumps(summary), flush=True)
    out = tmp_path_factory.getbasetemp() / "smoke_records.jsonl"
    with open(out, "a", encoding="utf-8") as f:
        f.write(json.dumps({"summary": summary, "record": rec.to_dict()}, ensure_ascii=False) + "\n")

    assert rec.error is None, rec.error
    assert not rec.fact_write_fault, rec.faults
    if name == "a_rag":  # its agent picks what to search; the tools must find the fact (module docstring)
        loop = rec.naive.meta
        assert loop["trajectory"], loop  # at least one structured tool call was run
        assert "tool_call_as_text" not in rec.fault_counts()
        items: list = []
        made[-1].semantic_search(_task().naive_query, items=items)  # the instance that answered, restored state
        assert any(FACT_TURN_ID in it.sources for it in items), [it.sources for it in items]
        return
    if cls.evaluates_naive:
        assert rec.naive_recall_provenance == 1, (
            f"{name}: the naive query's context does not show the fact turn by provenance "
            f"(provenance {rec.naive_recall_provenance}, verbatim {summary['naive_exact']})")
    else:
        assert rec.target_recall_provenance == 1, f"{name}: the fact turn is not in the indirect query's context"
    if name in RAW_TURN_SYSTEMS:  # they show stored turns verbatim: the fact's text itself must be in the context
        assert (summary["naive_exact"] if cls.evaluates_naive else summary["indirect_exact"]) == 1
