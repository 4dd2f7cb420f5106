"""Figure-printing benchmark scripts, run from the repository root as ``python -m benchmarks.<name>`` so that
``inmind_exp`` and ``tests`` import without touching ``sys.path``; not timed tests."""
