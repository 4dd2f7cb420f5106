"""Judge-free measurement per system on the bundled trace, against the fake server with plausible structured replies
(``inmind_exp.testing.replies.plausible_reply``): provenance recall (naive and indirect), verbatim recall, the judge's
target recall, their agreement, memory faults by kind, the looser union provenance, visible-state and retrieved
recall, the mean context tokens and what ran. The fake judge always answers 1, so its "false positives"
are exactly the tasks whose provenance is 0: the figures show the pipeline's measurement, not a model's quality.

Run from the repository root (``benchmarks`` is a package beside ``inmind_exp`` and ``tests``):

    python -m benchmarks.judge_free [system ...] [--tasks 3]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from inmind_exp import env

env.apply(env.HF)

from inmind_exp.testing.replies import plausible_reply  # noqa: E402
from inmind_exp.data import load_tasks, load_trace  # noqa: E402
from inmind_exp.llm.embed import MiniLMEncoder  # noqa: E402
from inmind_exp.testing.fake_openai import FakeOpenAI  # noqa: E402
from inmind_exp.llm import CallCache, Endpoint, Models  # noqa: E402
from inmind_exp.memory import SYSTEMS  # noqa: E402
from inmind_exp.protocol.metrics import compute, fmt_ran  # noqa: E402
from inmind_exp.safety.paths import child_dir  # noqa: E402
from inmind_exp.protocol.task import build_prefix, injection_session_index, run_task  # noqa: E402
from inmind_exp.records import InjectionSpec  # noqa: E402


def measure(name: str, n_tasks: int, workdir: Path) -> str:
    trace, tasks = load_trace(), load_tasks()[:n_tasks]
    j = injection_session_index(trace, InjectionSpec("middle", user_turn=40))
    cls = SYSTEMS.get(name)
    encoder = MiniLMEncoder() if "minilm" in cls.embeddings else None
    t0 = time.perf_counter()
    with FakeOpenAI() as fake:
        fake.rules.append(("", plausible_reply))
        ep = {r: Endpoint(role=r, base_url=fake.base_url, model="fake", max_attempts=2, temperature=0.0,
                          max_tokens=256) for r in ("answerer", "judge", "memory")}
        models = Models.build(ep, CallCache(workdir / "cache"))
        make = lambda wd: cls(models, encoder, wd)  # noqa: E731
        build_prefix(make, trace, j, workdir / "prefix", workdir / "snap")
        recs = [run_task(t, trace, j, make, models, child_dir(workdir, "task", t.id), config_hash="judge-free",
                         system_name=name, evaluates_naive=cls.evaluates_naive, prefix_snapshot=workdir / "snap")
                for t in tasks]
    m = compute(recs)

    def r(k: str) -> str:
        x = m.rates[k]
        return f"{x.successes}/{x.n}" if x.n else "–"

    agree = [int(rec.verdicts["target_recall"].score == rec.target_recall_provenance) for rec in recs
             if rec.error is None and rec.target_recall_provenance is not None and "target_recall" in rec.verdicts]
    kinds = ", ".join(f"{k} {v}" for k, v in m.faults_by_kind.items()) or "none"
    return (f"| {name} | {r('naive_recall_provenance')} | {r('target_recall_provenance')} | {r('target_recall_exact')} "
            f"| {r('target_recall')} | {f'{sum(agree)}/{len(agree)}' if agree else '–'} "
            f"| {len(m.audit.false_positives)} / {len(m.audit.false_negatives)} | {m.fact_write_fault_tasks}/{m.n_ran} "
            f"| {kinds} | {m.n_errors} | {r('target_recall_provenance_union')} | {r('visible_state_recall_provenance')} "
            f"| {r('retrieved_recall_provenance')} | {'–' if m.context_tokens != m.context_tokens else f'{m.context_tokens:.0f}'} "
            f"| {fmt_ran(m)} | {time.perf_counter() - t0:.0f} |")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("systems", nargs="*")
    ap.add_argument("--tasks", type=int, default=3)
    args = ap.parse_args()
    print("| system | naive recall (provenance) | target recall (provenance) | target recall (verbatim) "
          "| target recall (fake judge) | judge = provenance | judge FP / FN | fact-write faults "
          "| faults by kind (all tasks) | task errors | target recall (provenance, union: upper bound) | visible-state recall "
          "| retrieved recall | context tokens | what ran | s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name in args.systems or SYSTEMS.names():
        with tempfile.TemporaryDirectory(prefix=f"judge-free-{name}-") as d:
            print(measure(name, args.tasks, Path(d)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
