"""The tests' name for the fake OpenAI-compatible server (``inmind_exp.testing.fake_openai``, where the benchmark
scripts reach it too): every test imports it from here."""

from inmind_exp.testing.fake_openai import CutReply, Fault, FakeOpenAI, ToolCalls, hashed_embedding

__all__ = ["CutReply", "Fault", "FakeOpenAI", "ToolCalls", "hashed_embedding"]
