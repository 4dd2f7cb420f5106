"""Benchmark script: each memory system's hit profile on the official trace (the leaderboard's injection point)
against the fake OpenAI-compatible server: paid memory calls of the prefix, of the first task and of each later
task once the call cache holds the earlier tasks' replies, beside the ``CallProfile`` bound of the same setting.
``--write`` stores the fractions in ``inmind_exp/plan/calibration.json`` (what the dry run's expected figures use,
``inmind_exp.plan.expected``); without it the script also prints the estimate's error against the measured run.

``--replies sampled`` (the default, the realistic figure) rewords every reply whose request changed, as a sampling
model does on a cache miss; ``--replies plausible`` keeps replies deterministic in their content (the minimum).

    INMIND_RELEASE=/work/shared/inmind-official python -m benchmarks.cache_profile [system ...] [--tasks 4] [--write]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from inmind_exp import env
from inmind_exp.data.official import load_official_tasks, load_official_trace
from inmind_exp.data.release import find_release
from inmind_exp.llm import CallCache, Endpoint, Models
from inmind_exp.memory import SYSTEMS
from inmind_exp.plan.estimate import memory_bounds
from inmind_exp.plan.expected import CALIBRATION, expected_memory_calls, load_calibration
from inmind_exp.protocol.task import build_prefix, injection_session_index, run_task
from inmind_exp.records import InjectionSpec, Usage
from inmind_exp.safety.paths import child_dir
from inmind_exp.testing.fake_openai import FakeOpenAI
from inmind_exp.testing.replies import REPLY_MODES

env.apply(env.HF)

#: the leaderboard's injection point (conf/injection/middle.yaml)
INJECTION = InjectionSpec("middle", user_turn=40)


def _paid(u: dict[str, Usage], roles: tuple[str, ...] = ("memory",)) -> int:
    return sum(x.calls - x.cached_calls for r, x in u.items() if r in roles)


def measure(name: str, n_tasks: int, offset: int, replies: str, workdir: Path) -> dict[str, Any]:
    """Paid calls of the prefix and of ``n_tasks`` tasks run one after another over one call cache."""
    release = find_release()
    trace = load_official_trace(release)
    tasks = load_official_tasks(release)[offset:offset + n_tasks]
    j = injection_session_index(trace, INJECTION)
    cls = SYSTEMS.get(name)
    params = dict(cls.official_params)
    encoder = None
    if "minilm" in cls.embeddings:
        from inmind_exp.llm.embed import MiniLMEncoder

        encoder = MiniLMEncoder()
    queries = 2 if cls.asks_naive(params) else 1
    bound_prefix, bound_task = memory_bounds(cls.cost, trace.sessions, j, queries)
    t0 = time.perf_counter()
    with FakeOpenAI() as fake:
        fake.rules.append(("", REPLY_MODES[replies]))
        ep = {r: Endpoint(role=r, base_url=fake.base_url, model="fake", max_attempts=2, temperature=0.0, max_tokens=256)
              for r in ("answerer", "judge", "memory")}
        models = Models.build(ep, CallCache(workdir / "cache"))

        def make(wd: Path) -> Any:
            return cls(models, encoder, wd, **params)

        before = models.meter.snapshot()
        build_prefix(make, trace, j, workdir / "prefix", workdir / "prefix_snap")
        prefix = _paid(models.meter.diff(models.meter.snapshot(), before))
        per_task, other, errors = [], [], []
        for task in tasks:
            rec = run_task(task, trace, j, make, models, child_dir(workdir, "task", task.id), config_hash="profile",
                           system_name=name, evaluates_naive=cls.asks_naive(params), prefix_snapshot=workdir / "prefix_snap")
            per_task.append(_paid(rec.usage))
            other.append(_paid(rec.usage, ("answerer", "judge")))
            errors.append(rec.error)
    return {"system": name, "replies": replies, "tasks": [t.id for t in tasks], "prefix_calls": prefix,
            "task_memory_calls": per_task, "task_other_calls": other, "errors": [e for e in errors if e],
            "bound_prefix_calls": bound_prefix, "bound_task_memory_calls": bound_task,
            "wall_s": round(time.perf_counter() - t0, 1)}


def fractions(m: dict[str, Any]) -> dict[str, Any]:
    """The calibration entry of one measurement: each measured count as a fraction of its bound."""
    later = m["task_memory_calls"][1:] or m["task_memory_calls"]

    def frac(x: float, bound: float) -> float:
        return round(x / bound, 4) if bound else 0.0

    return {"prefix": frac(m["prefix_calls"], m["bound_prefix_calls"]),
            "first_task": frac(m["task_memory_calls"][0], m["bound_task_memory_calls"]),
            "later_task": frac(sum(later) / len(later), m["bound_task_memory_calls"]),
            "measured": {k: m[k] for k in ("replies", "tasks", "prefix_calls", "task_memory_calls",
                                           "bound_prefix_calls", "bound_task_memory_calls")}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("systems", nargs="*", default=None)
    ap.add_argument("--tasks", type=int, default=4, help="tasks run one after another (the first, then later ones)")
    ap.add_argument("--offset", type=int, default=0, help="the first task's index in the official task file")
    ap.add_argument("--replies", choices=sorted(REPLY_MODES), default="sampled")
    ap.add_argument("--write", action="store_true", help=f"store the fractions in {CALIBRATION}")
    ap.add_argument("--json", type=Path, help="also append each measurement to this JSON-lines file")
    args = ap.parse_args()
    names = args.systems or SYSTEMS.names()
    shipped = load_calibration()
    print("| system | prefix calls (bound) | first task | later tasks | bound per task | expected / measured "
          "(memory calls) | error | s |")
    print("|---|---|---|---|---|---|---|---|")
    cal = dict(shipped)
    for name in names:
        with tempfile.TemporaryDirectory(prefix=f"profile-{name}-") as d:
            m = measure(name, args.tasks, args.offset, args.replies, Path(d))
        measured = m["prefix_calls"] + sum(m["task_memory_calls"])
        expected = expected_memory_calls(shipped.get(name), m["bound_prefix_calls"], m["bound_task_memory_calls"],
                                         len(m["task_memory_calls"]))
        error = f"{(expected - measured) / measured:+.0%}" if measured else "–"
        print(f"| {name} | {m['prefix_calls']} ({m['bound_prefix_calls']:.0f}) | {m['task_memory_calls'][0]} "
              f"| {', '.join(map(str, m['task_memory_calls'][1:]))} | {m['bound_task_memory_calls']:.0f} "
              f"| {expected:.0f} / {measured} | {error} | {m['wall_s']:.0f} |"
              + (f" ERRORS: {m['errors']}" if m["errors"] else ""), flush=True)
        if args.json:
            with open(args.json, "a", encoding="utf-8") as f:
                f.write(json.dumps(m) + "\n")
        cal[name] = fractions(m)
        if args.write:
            CALIBRATION.write_text(json.dumps(cal, indent=1, sort_keys=True) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
