"""Test doubles the tests and the offline benchmarks share: a fake OpenAI-compatible HTTP server (``fake_openai``)
and deterministic plausible replies for it (``replies``); and the plug-in contract any memory system can be checked
against (``check_system``). Never imported by a run."""
