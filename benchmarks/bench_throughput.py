"""Throughput benchmark: one configuration (or a small sweep) through ``launch.py`` against the fake OpenAI-compatible
server with a fixed latency per call and an endpoint concurrency limit C. Prints paid calls, wall time, the ideal
(paid calls x latency / C + the longest task's own chain of calls), their ratio, and the peak resident memory of all
the run's processes (the launch process and its descendants, Ray's and the workers included, sampled from /proc).

Run from the repository root (``benchmarks`` is a package beside ``inmind_exp`` and ``tests``):

    python -m benchmarks.bench_throughput --tasks 32 --latency 1 --concurrency 32
    python -m benchmarks.bench_throughput --sweep --tasks 2 --latency 1 --concurrency 32

A figure-printing script, not a timed test: the machine's load changes the numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from inmind_exp.testing.fake_openai import FakeOpenAI
from tests.launch_helpers import TASKS, env, launch_cmd, write_small_data

REPO = Path(__file__).resolve().parents[1]

ONE = ["system=naive_rag", "embedding=bm25"]
SWEEP = ["system=backbone,naive_rag", "embedding=bm25", "llm.seed=1,2,3,4"]  # 8 configurations, all calls paid
PAID = ("/chat/completions", "/embeddings")


def write_tasks(directory: Path, n: int) -> None:
    """``n`` tasks (the six small ones, cycled under distinct ids and facts) over the small trace."""
    write_small_data(directory, n_tasks=len(TASKS))
    with open(directory / "tasks.jsonl", "w") as f:
        for i in range(n):
            _, dom, um, nq, q, ex = TASKS[i % len(TASKS)]
            f.write(json.dumps({"id": f"b{i:03d}", "domain": dom, "user_message": f"{um} (note {i})",
                                "assistant_message": "Got it, thanks.", "naive_query": nq, "query": q,
                                "explanation": ex, "source": None, "origin": "expert"}) + "\n")


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            kids.setdefault(ppid, []).append(int(d))
    return kids


def _tree(root: int) -> list[int]:
    """``root`` and all its descendants now (Ray's raylet, GCS and workers descend from it)."""
    kids, out, todo = _children(), [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(kids.get(pid, []))
    return out


def _rss(pid: int) -> int:
    """Resident bytes of ``pid`` now (0 once it has gone)."""
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _cpu_s(pid: int) -> float | None:
    """User + system CPU seconds ``pid`` has used so far."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def _steal() -> tuple[int, int]:
    """The machine's (steal, total) CPU time so far, in ticks: steal is time a virtual machine's CPUs were ready to
    run but the host ran something else (a noisy neighbour stretches every wall time here)."""
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    return (values[7] if len(values) > 7 else 0), sum(values[:8])


@dataclass
class Sampled:
    """What ``run_sampled`` measured of one run."""

    proc: subprocess.CompletedProcess
    peak_rss: int  # bytes, all the run's processes at once
    wall: float  # seconds
    cpu_s: float  # CPU seconds used by the run's processes (each sampled every 0.5 s; the last instant is missed)
    steal: float  # fraction of the machine's CPU time lost to the host during the run


def run_sampled(cmd: list[str], timeout: float) -> Sampled:
    """Run ``cmd``; its exit, the peak RSS and CPU time of its process tree (sampled every 0.5 s), its wall time and
    the machine's steal time meanwhile."""
    t0 = time.perf_counter()
    steal0 = _steal()
    proc = subprocess.Popen(cmd, cwd=REPO, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=False)
    peak = [0]
    cpu: dict[int, float] = {}
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.5):
            pids = _tree(proc.pid)  # one walk of /proc per sample, for both figures
            peak[0] = max(peak[0], sum(_rss(pid) for pid in pids))
            for pid in pids:
                used = _cpu_s(pid)
                if used is not None:
                    cpu[pid] = max(cpu.get(pid, 0.0), used)

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    out, err = proc.communicate(timeout=timeout)
    wall = time.perf_counter() - t0
    stop.set()
    t.join()
    steal1 = _steal()
    steal = (steal1[0] - steal0[0]) / max(1, steal1[1] - steal0[1])
    return Sampled(subprocess.CompletedProcess(cmd, proc.returncode, out, err), peak[0], wall, sum(cpu.values()), steal)


def task_chains(sweep_dir: Path) -> list[int]:
    """Each task's own paid calls (its record's usage; the longest bounds the wall time whatever C is)."""
    out = []
    for p in sorted((sweep_dir / "ledger").glob("*.jsonl")):
        for line in p.read_text().splitlines():
            try:
                usage = json.loads(line).get("usage") or {}
                out.append(sum(int(u.get("calls", 0)) - int(u.get("cached_calls", 0)) for u in usage.values()))
            except (ValueError, AttributeError):
                pass
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=32, help="tasks per configuration")
    ap.add_argument("--latency", type=float, default=1.0, help="seconds per call at the fake server")
    ap.add_argument("--concurrency", type=int, default=32, help="requests the fake endpoint answers at once (C)")
    ap.add_argument("--sweep", action="store_true", help="8 small configurations instead of one")
    ap.add_argument("extra", nargs="*", help="extra overrides for launch.py (e.g. cluster.workers=4)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="inmind-bench-tp-") as d, \
            FakeOpenAI(delay_s=args.latency, concurrency=args.concurrency) as fake:
        tmp = Path(d)
        write_tasks(tmp / "data", args.tasks)
        cmd = launch_cmd(tmp, fake.base_url, *(SWEEP if args.sweep else ONE), f"llm.max_concurrency={args.concurrency}",
                         *args.extra, multirun=True)
        run = run_sampled(cmd, timeout=7200)
        proc, peak, wall = run.proc, run.peak_rss, run.wall
        if proc.returncode != 0:
            print(proc.stdout[-3000:], proc.stderr[-3000:], sep="\n")
            return proc.returncode
        paid = len([r for r in fake.requests if r.get("path", "").endswith(PAID)])
        chains = task_chains(tmp / "sweep")
        chain = max(chains, default=0) * args.latency
        ideal = paid * args.latency / args.concurrency + chain
        print(f"configurations: {8 if args.sweep else 1}, tasks each: {args.tasks}, latency: {args.latency:g}s, "
              f"C: {args.concurrency}, overrides: {' '.join(args.extra) or '-'}")
        print(f"records: {len(chains)}, paid calls: {paid}, peak requests in flight at the server: {fake.max_in_flight}")
        print(f"wall: {wall:.1f}s  ideal: {ideal:.1f}s (= {paid} x {args.latency:g}s / {args.concurrency} + longest "
              f"task chain {chain:.0f}s)  ratio: {wall / ideal:.2f}x  peak RSS, all processes: {peak / 2**30:.2f} GiB")
        print(f"CPU used by the run's processes: {run.cpu_s:.1f}s; CPU time the machine lost to its host (steal) "
              f"meanwhile: {run.steal:.0%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
