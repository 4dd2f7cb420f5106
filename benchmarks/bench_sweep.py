"""Sweep scheduling benchmark: a sweep of 8 small configurations (2 tasks each) through ``launch.py -m`` against the
fake OpenAI-compatible server with a fixed latency per call, on N workers. Prints paid calls, wall time, the ideal
(paid calls x latency / workers + the longest single task) and their ratio.

Run from the repository root (``benchmarks`` is a package beside ``inmind_exp`` and ``tests``):

    python -m benchmarks.bench_sweep --workers 4 --latency 1.0

A figure-printing script, not a timed test: the machine's load changes the numbers.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from inmind_exp.testing.fake_openai import FakeOpenAI
from tests.launch_helpers import launch_cmd, run, write_small_data

REPO = Path(__file__).resolve().parents[1]

SWEEP = ["system=backbone,naive_rag", "embedding=bm25", "llm.seed=1,2,3,4"]  # 2 x 4 = 8 configs; the seed is in every cache key, so every call is paid


def ledger_latencies(sweep_dir: Path) -> list[float]:
    out = []
    for p in sorted((sweep_dir / "ledger").glob("*.jsonl")):
        for line in p.read_text().splitlines():
            try:
                out.append(float(json.loads(line)["latency_s"]))
            except (ValueError, KeyError):
                pass
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--latency", type=float, default=1.0, help="seconds per call at the fake server")
    ap.add_argument("--tasks", type=int, default=2, help="tasks per configuration")
    ap.add_argument("extra", nargs="*", help="extra overrides for launch.py")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="inmind-bench-sweep-") as d, FakeOpenAI(delay_s=args.latency) as fake:
        tmp = Path(d)
        write_small_data(tmp / "data", n_tasks=args.tasks)
        cmd = launch_cmd(tmp, fake.base_url, *SWEEP, f"cluster.workers={args.workers}",
                         f"cluster.num_cpus={args.workers}", *args.extra)
        t0 = time.perf_counter()
        proc = run(cmd, timeout=3600)
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            print(proc.stdout[-3000:], proc.stderr[-3000:], sep="\n")
            return proc.returncode
        paid = len([r for r in fake.requests if r.get("path", "").endswith(("/chat/completions", "/embeddings"))])
        longest = max(ledger_latencies(tmp / "sweep"), default=0.0)
        ideal = paid * args.latency / args.workers + longest
        print(f"configurations: 8, tasks per configuration: {args.tasks}, workers: {args.workers}, "
              f"latency: {args.latency:.2f}s")
        print(f"paid calls: {paid}")
        print(f"wall time: {wall:.1f}s (whole launch.py process, Ray and MLflow start included)")
        print(f"ideal: {ideal:.1f}s = {paid} x {args.latency:.2f}s / {args.workers} + longest task {longest:.1f}s")
        print(f"ratio wall/ideal: {wall / ideal:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
