"""A system's own endpoint check runs before any task: A-RAG against an endpoint that writes tool calls as text
exits 2 with a message naming the endpoint, and nothing is paid for tasks or logged as a run."""

from __future__ import annotations

import pytest

from tests.fake_openai import FakeOpenAI
from tests.launch_helpers import launch_cmd, run, write_small_data

#: every test here runs launch.py in a subprocess
pytestmark = pytest.mark.slow


def test_a_rag_refuses_an_endpoint_without_structured_tool_calls(tmp_path):
    write_small_data(tmp_path / "data")
    with FakeOpenAI() as fake:
        fake.add_rule("Call the get_current_time tool", '<tools>{"name": "get_current_time", "arguments": {}}</tools>')
        p = run(launch_cmd(tmp_path, fake.base_url, "system=a_rag", "embedding=minilm", multirun=False))
        assert p.returncode == 2, p.stdout[-2000:] + p.stderr[-2000:]
        assert f"{fake.base_url}" in p.stderr and "fake-model" in p.stderr and "tool" in p.stderr
        chat = [r for r in fake.requests if r["path"].endswith("/chat/completions")]
        assert len(chat) == 1  # the probe only: no task ran
    assert not list((tmp_path / "run" / "ledger").glob("*.jsonl")) if (tmp_path / "run" / "ledger").exists() else True
