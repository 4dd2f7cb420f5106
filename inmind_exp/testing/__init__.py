"""Test doubles the tests and the offline benchmarks share: a fake OpenAI-compatible HTTP server (``fake_openai``)
and deterministic plausible replies for it (``replies``). Never imported by a run."""
