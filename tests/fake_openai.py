"""Test-side name for the fake OpenAI-compatible server (it lives in ``inmind_exp.fake_openai`` so that
benchmark scripts can use it too)."""

from inmind_exp.fake_openai import CutReply, Fault, FakeOpenAI, ToolCalls, hashed_embedding

__all__ = ["CutReply", "Fault", "FakeOpenAI", "ToolCalls", "hashed_embedding"]
