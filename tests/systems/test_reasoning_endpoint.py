"""Every registered system runs the whole protocol against a fake that refuses exactly what a reasoning-model API
(GPT-5-mini) refuses with HTTP 400: ``max_tokens``, a ``temperature`` or ``top_p`` other than 1, ``logprobs`` and
``top_logprobs`` (issue #10, item 4). With ``Endpoint.reasoning`` the client sends none of them, so no task may
fail, and xMemory's logprob gate must fall back and say so on the record."""

from __future__ import annotations

import pytest

from inmind_exp.llm import CallCache, Models
from inmind_exp.memory import SYSTEMS
from inmind_exp.protocol.task import run_task
from inmind_exp.records import Task
from tests.conftest import fake_endpoints, make_trace
from tests.fake_openai import FakeOpenAI, Fault

TASK = Task(id="bees", domain="other", user_message="I keep two beehives on the flat roof of my apartment building.",
            assistant_message="Good to know, thanks for telling me.", naive_query="Where do I keep my beehives?",
            query="Where do my beehives live?", explanation="The hives are on the roof.")

#: replies that take xMemory past its no-fact baseline to the gated read path (every user message opens an
#: episode, each episode yields one fact); no other system's prompts contain these markers
XMEMORY_RULES = [
    ("dialogue boundary detection expert", lambda body: {"should_end": "Newly added messages:\nuser:" in _text(body),
                                                        "reason": "new exchange"}),
    ("episodic memory generation expert", {"title": "An exchange", "content": "The user asked something.",
                                                   "timestamp": "2024-01-01T10:00:00"}),
    ("knowledge extraction specialist", {"statements": ["The user keeps beehives on the roof."]}),
    ("comparing original conversation with predicted", {"statements": ["The user grows tomato plants."]}),
]


def _text(body: dict) -> str:
    return "\n".join(str(m.get("content") or "") for m in body.get("messages", []))


def reasoning_refusal(body: dict) -> Fault | None:
    """HTTP 400 for what the reasoning API refuses; None for a request it accepts."""
    bad = [k for k in ("max_tokens", "logprobs", "top_logprobs") if k in body]
    bad += [k for k in ("temperature", "top_p") if k in body and body[k] != 1]
    if not bad:
        return None
    return Fault(400, body={"error": {"message": f"Unsupported parameter(s): {', '.join(bad)}. This model "
                                                 "does not support them.", "type": "invalid_request_error"}})


def test_the_fake_refuses_what_the_reasoning_api_refuses():
    assert reasoning_refusal({"max_completion_tokens": 10, "temperature": 1, "top_p": 1}) is None
    for body in ({"max_tokens": 10}, {"temperature": 0.0}, {"top_p": 0.9}, {"logprobs": True}, {"top_logprobs": 1}):
        assert reasoning_refusal(body).status == 400


@pytest.mark.parametrize("name", SYSTEMS.names())
def test_every_system_runs_on_a_reasoning_endpoint(name, encoder, tmp_path):
    cls = SYSTEMS.get(name)
    with FakeOpenAI(rules=list(XMEMORY_RULES), validator=reasoning_refusal) as fake:
        models = Models.build(fake_endpoints(fake.base_url, reasoning=True, max_tokens=256),
                              CallCache(tmp_path / "cache"))
        enc = encoder if "minilm" in cls.embeddings else None
        rec = run_task(TASK, make_trace(n_sessions=3, user_turns_per_session=2), 1,
                       lambda wd: cls(models, enc, wd), models, tmp_path / "w", config_hash="h", system_name=name,
                       evaluates_naive=cls.evaluates_naive)
        reqs = fake.chat_requests()
    assert rec.error is None, rec.error
    assert reqs and all(reasoning_refusal(b) is None for b in reqs)  # nothing was even attempted and refused
    assert all(b["max_completion_tokens"] for b in reqs if "max_completion_tokens" in b)
    assert rec.indirect is not None and set(rec.verdicts)
    if name == "xmemory":
        gate = [f for f in rec.faults if f.kind == "logprobs_unavailable"]
        assert [f.phase for f in gate] == ["naive", "indirect"] and all(f.where == "gate" for f in gate)
        assert rec.indirect.meta["gate"] == "fallback_no_logprobs"
