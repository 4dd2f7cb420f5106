"""Benchmark script: how many LLM calls and prompt tokens each memory system spends on the bundled trace, and per
task once the prefix is shared and the call cache is warm. Runs against the fake OpenAI-compatible server with
plausible structured replies, so the figures are the pipeline's call structure, not a real model's behaviour.

Run from the repository root (``benchmarks`` is a package beside ``inmind_exp`` and ``tests``):

    python -m benchmarks.bench_calls [system ...] [--tasks 2]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

from inmind_exp import env
from inmind_exp.data import load_tasks, load_trace
from inmind_exp.llm.embed import MiniLMEncoder
from inmind_exp.testing.fake_openai import FakeOpenAI
from inmind_exp.testing.replies import plausible_reply
from inmind_exp.llm import CallCache, Endpoint, Models
from inmind_exp.safety.paths import child_dir
from inmind_exp.protocol.task import build_prefix, injection_session_index, run_task
from inmind_exp.records import InjectionSpec, Usage
from inmind_exp.memory import SYSTEMS

env.apply(env.HF)


def _paid(u: dict[str, Usage]) -> tuple[int, int, int]:
    calls = sum(x.calls - x.cached_calls for x in u.values())
    tokens = sum(x.prompt_tokens - x.cached_prompt_tokens for x in u.values())
    cached = sum(x.cached_calls for x in u.values())
    return calls, tokens, cached


def bench(name: str, n_tasks: int, workdir: Path) -> dict[str, Any]:
    trace = load_trace()
    tasks = load_tasks()[:n_tasks]
    j = injection_session_index(trace, InjectionSpec("middle", user_turn=40))
    cls = SYSTEMS.get(name)
    encoder = MiniLMEncoder() if "minilm" in cls.embeddings else None
    with FakeOpenAI() as fake:
        fake.rules.append(("", plausible_reply))
        ep = {r: Endpoint(role=r, base_url=fake.base_url, model="fake", max_attempts=2, temperature=0.0, max_tokens=256)
              for r in ("answerer", "judge", "memory")}
        models = Models.build(ep, CallCache(workdir / "cache"))

        def make(wd: Path) -> Any:
            return cls(models, encoder, wd)

        t0 = time.perf_counter()
        full = make(workdir / "full")
        before = models.meter.snapshot()
        for s in trace.sessions:
            full.ingest_session(s)
        ingest = models.meter.diff(models.meter.snapshot(), before)
        ingest_s = time.perf_counter() - t0
        before = models.meter.snapshot()
        build_prefix(make, trace, j, workdir / "prefix", workdir / "prefix_snap")
        prefix = models.meter.diff(models.meter.snapshot(), before)
        per_task = []
        for task in tasks:
            rec = run_task(task, trace, j, make, models, child_dir(workdir, "task", task.id), config_hash="bench",
                           system_name=name, evaluates_naive=cls.evaluates_naive, prefix_snapshot=workdir / "prefix_snap")
            mem = {k: v for k, v in rec.usage.items() if k == "memory"}
            per_task.append((_paid(rec.usage), _paid(mem), rec.error))
    ic, it, _ = _paid(ingest)
    pc, pt, pcached = _paid(prefix)
    return {"system": name, "ingest_calls": ic, "ingest_prompt_tokens": it, "ingest_s": ingest_s,
            "prefix_paid_calls": pc, "prefix_cached_calls": pcached, "per_task": per_task}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("systems", nargs="*", default=None)
    ap.add_argument("--tasks", type=int, default=2)
    args = ap.parse_args()
    names = args.systems or SYSTEMS.names()
    print("| system | ingest trace: memory calls | prompt tokens | s | prefix (after full ingest): paid / cached "
          "| per task: paid calls (memory) / prompt tokens / cached calls |")
    print("|---|---|---|---|---|---|")
    for name in names:
        with tempfile.TemporaryDirectory(prefix=f"bench-{name}-") as d:
            r = bench(name, args.tasks, Path(d))
        tasks = "; ".join(f"{c} ({m[0]}) / {t} / {k}" + (" ERROR" if err else "") for (c, t, k), m, err in r["per_task"])
        print(f"| {name} | {r['ingest_calls']} | {r['ingest_prompt_tokens']} | {r['ingest_s']:.0f} "
              f"| {r['prefix_paid_calls']} / {r['prefix_cached_calls']} | {tasks} |", flush=True)


if __name__ == "__main__":
    main()
