"""Where the first seconds of a run go: one task of one configuration through ``launch.py`` against the fake server
(no latency), each line of the run's output printed with the seconds since launch when it appeared, after the time
of the imports alone (``python -c 'import launch'``), and Ray's start timed in a fresh process. ``--sweep`` (with
``--tasks``, ``--latency``) follows bench_throughput's 8-configuration sweep the same way.

Run from the repository root (``benchmarks`` is a package beside ``inmind_exp`` and ``tests``):

    python -m benchmarks.startup_phases
    python -m benchmarks.startup_phases --sweep --tasks 4 --latency 2

A figure-printing script, not a timed test.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from inmind_exp.testing.fake_openai import FakeOpenAI
from benchmarks.bench_throughput import SWEEP, write_tasks
from tests.launch_helpers import env, launch_cmd, write_small_data

REPO = Path(__file__).resolve().parents[1]

RAY_START = ("import time, ray; t = time.perf_counter(); ray.init(address='local', num_cpus=2, include_dashboard=False);"
             " print(f'{time.perf_counter() - t:.1f}')")


def timed(code: str) -> float:
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env(), capture_output=True, check=True)
    return time.perf_counter() - t


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sweep", action="store_true", help="bench_throughput's 8 configurations instead of one task")
    ap.add_argument("--tasks", type=int, default=4, help="tasks per configuration (with --sweep)")
    ap.add_argument("--latency", type=float, default=0.0, help="seconds per call at the fake server")
    ap.add_argument("--concurrency", type=int, default=32, help="requests the fake endpoint answers at once")
    ap.add_argument("--skip-imports", action="store_true", help="only the run's timeline")
    args = ap.parse_args()
    if not args.skip_imports:
        imports()
    with tempfile.TemporaryDirectory(prefix="inmind-startup-") as d, \
            FakeOpenAI(delay_s=args.latency, concurrency=args.concurrency) as fake:
        tmp = Path(d)
        if args.sweep:
            write_tasks(tmp / "data", args.tasks)
            runs = [*SWEEP, f"llm.max_concurrency={args.concurrency}"]
        else:
            write_small_data(tmp / "data", n_tasks=1)
            runs = ["system=naive_rag", "embedding=bm25"]
        return timeline(launch_cmd(tmp, fake.base_url, *runs, "hydra/job_logging=default"), fake)


def imports() -> None:
    print(f"python start + `import launch` (driver imports): {timed('import launch'):.1f}s")
    print(f"... + `import ray`: {timed('import launch, ray'):.1f}s; + mlflow: {timed('import launch, ray, mlflow'):.1f}s")
    out = subprocess.run([sys.executable, "-c", RAY_START], cwd=REPO, env=env(), capture_output=True, text=True)
    print(f"ray.init of a local 2-CPU Ray (in a process with ray imported): {out.stdout.strip().splitlines()[-1]}s")


def timeline(cmd: list[str], fake: FakeOpenAI) -> int:
    """Run ``cmd``, printing each output line with the seconds since launch; the first request and the exit."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=REPO, env=env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    first = {"req": None}

    def watch() -> None:
        while proc.poll() is None:
            if first["req"] is None and fake.requests:
                first["req"] = fake.requests[0]["t"]
            time.sleep(0.05)

    threading.Thread(target=watch, daemon=True).start()
    wall0 = time.time()
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.strip():
            print(f"{time.perf_counter() - t0:6.1f}s  {line.rstrip()[:150]}")
    proc.wait()
    if fake.requests:
        print(f"first request at the endpoint: {fake.requests[0]['t'] - wall0:.1f}s after launch")
    if fake.requests:
        print(f"last request at the endpoint: {fake.requests[-1]['t'] - wall0:.1f}s after launch")
    print(f"exit {proc.returncode} after {time.perf_counter() - t0:.1f}s")
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
