"""Issue 43's hostile probes, run again: each numbered probe (1–10, 10a–k) launches ``launch.py`` (or, for 10j, kills
it) against a local misbehaving endpoint and measures what happens; the table prints, per probe, what the issue saw
(``before``) and what this checkout does (``after``), and whether that is the wanted behaviour.

Run from the repository root (``benchmarks`` is a package beside ``inmind_exp`` and ``tests``); about 10–20 minutes
on 2 cores:

    python -m benchmarks.hostile_probes            # every probe
    python -m benchmarks.hostile_probes 4 10j      # some

A figure-printing script, not a timed test: each behaviour also has its own test under ``tests/``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Callable

from inmind_exp.testing.fake_openai import Fault, FakeOpenAI
from tests.launch_helpers import REPO, alive, descendants, env, launch_cmd, mlflow_runs, sigint_default, write_small_data

BASE = ("system=backbone", "embedding=bm25")
KEY = "sk-probe-" + "5" * 24  # planted: must reach no file
ESCAPES = "bad request \x1b[2J\x1b]0;pwned\x07\x1b[31mred\x1b[0m\r\x9b"

#: probe -> (what it does, what the issue saw)
PROBES: dict[str, tuple[str, str]] = {
    "1": ("endpoint echoes the key in a 200 reply", "key unredacted in 4 cache files"),
    "2": ("token in the base URL's query string", "token in MLflow, config.yaml, stdout"),
    "3": ("edit a judge module's code, rerun", "same hash: '2 already done' reused"),
    "4": ("/models drips 1 byte/s, deadline 5 s", "held the launch 300 s"),
    "5": ("invalid bytes + empty verdicts in the ledger", "exit 1 on every launch"),
    "6": ("429 with Retry-After nan / -1 / inf", "ValueError: 2 of 3 tasks lost"),
    "7": ("negative token counts, rerun from cache", "all 12 calls paid again"),
    "8": ("ANSI escapes in a 400's message", "raw escapes on terminal and log"),
    "9": ("local Ray fails to start", "exit 1/2, 30-line traceback"),
    "10a": ("cluster.workers=1000 on this host", "1000 CPUs declared, 82 processes"),
    "10b": ("second Ctrl-C during clean-up", "MLflow run left RUNNING"),
    "10c": ("MLflow store unusable (full/damaged)", "exit 1, 129-line traceback"),
    "10d": ("tracking.uri under /proc", "traceback after the task was paid"),
    "10e": ("read-only hydra.run.dir", "traceback"),
    "10f": ("run.cache_dir is a file", "traceback"),
    "10g": ("system=nonexistent", "exit 1 (documented as a crash)"),
    "10h": ("dataset.limit=abc", "exit 1 (documented as a crash)"),
    "10i": ("every chat call answered 401", "retried at task level, 'rerun may help'"),
    "10j": ("kill -9 of the driver mid-run", "Ray agents lived ~60 s more"),
    "10k": ("corrupt cache entries, rerun", "never reported"),
}


def _run(cmd: list[str], extra_env: dict[str, str] | None = None, timeout: float = 600,
         cwd: Path = REPO) -> tuple[subprocess.CompletedProcess, float]:
    e = {**env(), **(extra_env or {})}
    t0 = time.monotonic()
    p = subprocess.run(cmd, cwd=cwd, env=e, capture_output=True, text=True, timeout=timeout)
    return p, time.monotonic() - t0


def _lines(text: str) -> int:
    return len([line for line in text.splitlines() if line.strip() and not line.startswith("[progress]")])


def _files_with(root: Path, needle: str) -> list[Path]:
    found = []
    for p in root.rglob("*"):
        if p.is_file():
            try:
                if needle.encode() in p.read_bytes():
                    found.append(p)
            except OSError:
                continue
    return found


def _clean_exit(p: subprocess.CompletedProcess, code: int) -> bool:
    return p.returncode == code and "Traceback" not in p.stderr


# -- the probes: each returns (after, passed) -------------------------------------------------------------------

def p1(tmp: Path) -> tuple[str, bool]:
    write_small_data(tmp / "data", n_tasks=2, n_sessions=3)
    with FakeOpenAI() as fake:
        fake.default_text = f"sure, your key is {KEY}"
        fake.default_json = {"score": 1, "reason": f"the key {KEY} was seen"}
        p, _ = _run(launch_cmd(tmp, fake.base_url, *BASE, "llm.api_key_env=PROBE_KEY", multirun=False),
                    {"PROBE_KEY": KEY})
    files = _files_with(tmp, KEY)
    leaked = files + ([Path("<stdout/stderr>")] if KEY in p.stdout + p.stderr else [])
    return f"exit {p.returncode}; key in {len(leaked)} files", p.returncode == 0 and not leaked


def p2(tmp: Path) -> tuple[str, bool]:
    write_small_data(tmp / "data", n_tasks=2, n_sessions=3)
    token = "tok" + "7" * 20
    with FakeOpenAI() as fake:
        p, _ = _run(launch_cmd(tmp, f"{fake.base_url}?token={token}", *BASE, multirun=False))
        asked = len(fake.requests)
    leaked = _files_with(tmp, token) + ([Path("out")] if token in p.stdout + p.stderr else [])
    return (f"exit {p.returncode}, {asked} requests, token in {len(leaked)} places",
            _clean_exit(p, 2) and asked == 0 and not leaked)


def p3(tmp: Path) -> tuple[str, bool]:
    """A copy of the checkout (its tracked files), run twice with a code-only edit of the judges in between."""
    repo = tmp / "repo"
    files = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    for f in files:
        (repo / f).parent.mkdir(parents=True, exist_ok=True)
        if (REPO / f).is_symlink():  # conf/ is inmind_exp/conf's
            os.symlink(os.readlink(REPO / f), repo / f)
        elif (REPO / f).is_file():
            shutil.copy2(REPO / f, repo / f)
    write_small_data(tmp / "data", n_tasks=2, n_sessions=3)
    outs = []
    with FakeOpenAI() as fake:
        for edit in (False, False, True):  # run; rerun (all reused); edit and rerun
            if edit:
                judges = repo / "inmind_exp" / "protocol" / "judges.py"
                judges.write_text(judges.read_text() + "\n\ndef _probe_edit() -> int:\n    return 1\n")
            cmd = launch_cmd(tmp, fake.base_url, *BASE, multirun=False)
            cmd[1] = str(repo / "launch.py")
            p, _ = _run(cmd, {"PYTHONPATH": str(repo)}, cwd=repo)
            outs.append(p)
    done = [next((line.split("(")[1].split(")")[0] for line in (p.stdout + p.stderr).splitlines()
                  if "already done)" in line), "?") for p in outs]
    return (f"rerun '{done[1]}'; after the edit '{done[2]}'",
            all(p.returncode == 0 for p in outs) and done[1].startswith("2 ") and done[2].startswith("0 "))


class _Drip(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "1000")
        self.end_headers()
        try:
            for _ in range(400):
                self.wfile.write(b" ")
                self.wfile.flush()
                time.sleep(1)
        except OSError:
            pass

    do_POST = do_GET


def p4(tmp: Path) -> tuple[str, bool]:
    write_small_data(tmp / "data", n_tasks=2, n_sessions=3)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Drip)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/v1"
        p, took = _run(launch_cmd(tmp, url, *BASE, "llm.deadline_s=5", multirun=False), timeout=400)
    finally:
        server.shutdown()
        server.server_close()
    return f"exit {p.returncode} after {took:.0f} s", _clean_exit(p, 2) and took < 60


def p5(tmp: Path) -> tuple[str, bool]:
    write_small_data(tmp / "data", n_tasks=3, n_sessions=3)
    with FakeOpenAI() as fake:
        first, _ = _run(launch_cmd(tmp, fake.base_url, *BASE, multirun=False))
        ledger = next(tmp.rglob("ledger/*.jsonl"))
        lines = ledger.read_bytes().splitlines()
        lines[0] = lines[0].replace(b'"reason": "', b'"reason": "\xff\xfe', 1).replace(b'"reason":"', b'"reason":"\xff\xfe', 1)
        record = json.loads(lines[1])
        record["verdicts"] = []
        lines[1] = json.dumps(record).encode()
        ledger.write_bytes(b"\n".join(lines) + b"\n")
        p, _ = _run(launch_cmd(tmp, fake.base_url, *BASE, multirun=False))
    named = f"{ledger.name}:1" in p.stderr + p.stdout and f"{ledger.name}:2" in p.stderr + p.stdout
    return (f"exit {p.returncode}, {'file:line named' if named else 'no file:line'}, 2 tasks rerun",
            first.returncode == 0 and _clean_exit(p, 0) and named)


def p6(tmp: Path) -> tuple[str, bool]:
    write_small_data(tmp / "data", n_tasks=3, n_sessions=3)
    with FakeOpenAI() as fake:
        fake.fail_next(*(Fault(status=429, headers={"Retry-After": v}) for v in ("nan", "-1", "inf")))
        p, _ = _run(launch_cmd(tmp, fake.base_url, *BASE, multirun=False))
    ledger = next(tmp.rglob("ledger/*.jsonl"))
    lost = 3 - sum(1 for line in ledger.read_text().splitlines() if line.strip() and '"error": null' in line)
    return f"exit {p.returncode}, {lost} tasks lost", _clean_exit(p, 0) and lost == 0


def p7(tmp: Path) -> tuple[str, bool]:
    write_small_data(tmp / "data", n_tasks=2, n_sessions=3)
    with FakeOpenAI() as fake:
        fake.usage = {"prompt_tokens": -7, "completion_tokens": -3, "total_tokens": -10}
        first, _ = _run(launch_cmd(tmp, fake.base_url, *BASE, multirun=False))
        paid = len(fake.chat_requests())
        for ledger in tmp.rglob("ledger/*.jsonl"):
            ledger.unlink()  # the tasks run again, every call from the cache
        fake.reset_log()
        p, _ = _run(launch_cmd(tmp, fake.base_url, *BASE, multirun=False))
        repaid = len(fake.chat_requests())
    return (f"exit {first.returncode}/{p.returncode}, {repaid} of {paid} calls repaid",
            first.returncode == 0 and p.returncode == 0 and paid > 0 and repaid == 0)


def p8(tmp: Path) -> tuple[str, bool]:
    write_small_data(tmp / "data", n_tasks=2, n_sessions=3)
    refuse = Fault(status=400, body={"error": {"message": ESCAPES, "type": "invalid_request_error"}})
    with FakeOpenAI(validator=lambda body: refuse) as fake:
        p, _ = _run(launch_cmd(tmp, fake.base_url, *BASE, multirun=False))
    log = (tmp / "run" / "launch.log").read_text()
    raw = any(c in text for text in (p.stdout + p.stderr, log) for c in ("\x1b", "\x07", "\r", "\x9b"))
    return f"exit {p.returncode}, {'raw' if raw else 'escaped'}", _clean_exit(p, 3) and not raw and "\\x1b[2J" in log


def p9(tmp: Path) -> tuple[str, bool]:
    write_small_data(tmp / "data", n_tasks=2, n_sessions=3)
    (tmp / "not-a-dir").write_text("")
    with FakeOpenAI() as fake:
        p, _ = _run(launch_cmd(tmp, fake.base_url, *BASE, multirun=False), {"RAY_TMPDIR": str(tmp / "not-a-dir" / "r")})
    tries = (p.stdout + p.stderr).count("a local Ray did not start")
    return f"exit {p.returncode}, tried {tries} times", _clean_exit(p, 75) and tries == 2


def _one_line_exit(tmp: Path, code: int, *overrides: str, before: Callable[[Path], None] | None = None,
                   said: str = "") -> tuple[str, bool]:
    write_small_data(tmp / "data", n_tasks=2, n_sessions=3)
    if before is not None:
        before(tmp)
    with FakeOpenAI() as fake:
        p, _ = _run(launch_cmd(tmp, fake.base_url, *BASE, *overrides, multirun=False))
        paid = len(fake.chat_requests())
    errors = [line for line in p.stderr.splitlines() if line.startswith(("error", "[inmind] error", "Error"))
              or "error:" in line.lower()]
    ok = _clean_exit(p, code) and (not said or said in p.stderr)
    return f"exit {p.returncode}, {len(errors) or _lines(p.stderr)} error line(s), {paid} calls paid", ok


def p10a(tmp: Path) -> tuple[str, bool]:
    return _one_line_exit(tmp, 2, "cluster.workers=1000", said="cluster.workers=1000")


def p10b(tmp: Path) -> tuple[str, bool]:
    write_small_data(tmp / "data", n_tasks=6, n_sessions=3)
    with FakeOpenAI(delay_s=0.7) as fake:
        proc = subprocess.Popen(launch_cmd(tmp, fake.base_url, "system=naive_rag", "embedding=bm25", "cluster.workers=1",
                                           "cluster.tasks_per_worker=1"), cwd=REPO, env=env(),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                preexec_fn=sigint_default)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None:
            if any(p.read_text().strip() for p in tmp.rglob("ledger/*.jsonl")):
                break
            time.sleep(0.5)
        if proc.poll() is not None:
            return f"exit {proc.returncode} before a task finished", False
        signalled = sum(len(p.read_text().splitlines()) for p in tmp.rglob("ledger/*.jsonl"))
        proc.send_signal(signal.SIGINT)
        time.sleep(0.3)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=180)
        done = sum(len(p.read_text().splitlines()) for p in tmp.rglob("ledger/*.jsonl"))
    statuses = sorted({r.info.status for r in mlflow_runs(tmp)})
    return (f"exit {proc.returncode}, MLflow runs {'/'.join(statuses)} (stopped at {signalled}/6 tasks, {done} done)",
            proc.returncode == 130 and statuses == ["KILLED"] and "Traceback" not in err)


def p10c(tmp: Path) -> tuple[str, bool]:
    def damage(t: Path) -> None:
        (t / "mlflow.db").write_bytes(b"this is no sqlite database" * 100)
    return _one_line_exit(tmp, 3, before=damage, said="the MLflow store")


def p10d(tmp: Path) -> tuple[str, bool]:
    return _one_line_exit(tmp, 2, "tracking.uri=sqlite:////proc/inmind/mlflow.db", said="tracking.uri=")


def p10e(tmp: Path) -> tuple[str, bool]:
    return _one_line_exit(tmp, 2, "hydra.run.dir=/proc/inmind-run", said="hydra")


def p10f(tmp: Path) -> tuple[str, bool]:
    return _one_line_exit(tmp, 2, f"run.cache_dir={tmp / 'a-file'}",
                          before=lambda t: (t / "a-file").write_text(""), said="run.cache_dir=")


def p10g(tmp: Path) -> tuple[str, bool]:
    return _one_line_exit(tmp, 2, "system=nonexistent")


def p10h(tmp: Path) -> tuple[str, bool]:
    return _one_line_exit(tmp, 2, "dataset.limit=abc")


def p10i(tmp: Path) -> tuple[str, bool]:
    write_small_data(tmp / "data", n_tasks=2, n_sessions=3)
    refuse = Fault(status=401, body={"error": {"message": "invalid api key", "type": "invalid_request_error"}})
    with FakeOpenAI(validator=lambda body: refuse) as fake:
        p, _ = _run(launch_cmd(tmp, fake.base_url, *BASE, multirun=False))
        asked = len(fake.chat_requests())
    hint = "Rerun the same command" in p.stdout + p.stderr
    return (f"exit {p.returncode}, {asked} calls for 2 tasks, {'rerun hint' if hint else 'no rerun hint'}",
            _clean_exit(p, 3) and asked == 2 and not hint)


def p10j(tmp: Path) -> tuple[str, bool]:
    write_small_data(tmp / "data", n_tasks=6, n_sessions=3)
    with FakeOpenAI(delay_s=0.7) as fake:
        proc = subprocess.Popen(launch_cmd(tmp, fake.base_url, *BASE, "cluster.workers=1", multirun=False),
                                cwd=REPO, env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None and len(fake.chat_requests()) < 3:
            time.sleep(0.5)
        time.sleep(2)  # the node's agents are up
        node = descendants(proc.pid)
        proc.kill()
        proc.wait()
        t0 = time.monotonic()
        while alive(node) and time.monotonic() - t0 < 120:
            time.sleep(0.05)
        gone = time.monotonic() - t0
    left = alive(node)
    return f"{len(node)} processes gone {gone:.1f} s after kill -9", not left and gone < 5


def p10k(tmp: Path) -> tuple[str, bool]:
    write_small_data(tmp / "data", n_tasks=2, n_sessions=3)
    with FakeOpenAI() as fake:
        first, _ = _run(launch_cmd(tmp, fake.base_url, *BASE, multirun=False))
        entries = sorted((tmp / "cache").rglob("*.json"))[:3]
        for e in entries:
            e.write_text("{")
        for ledger in tmp.rglob("ledger/*.jsonl"):
            ledger.unlink()
        p, _ = _run(launch_cmd(tmp, fake.base_url, *BASE, multirun=False))
    said = next((line.split(", ")[-2] for line in p.stderr.splitlines() + p.stdout.splitlines()
                 if "unusable cache entries" in line), "")
    return (f"exit {p.returncode}, summary: '{said or 'nothing'}' ({len(entries)} corrupted)",
            first.returncode == 0 and p.returncode == 0 and f"{len(entries)} unusable cache entries" in said)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("probes", nargs="*", help="probe numbers (default: all)")
    args = parser.parse_args()
    chosen = args.probes or list(PROBES)
    rows = []
    for name in chosen:
        what, before = PROBES[name]
        tmp = Path(tempfile.mkdtemp(prefix=f"hp{name}-"))
        t0 = time.monotonic()
        try:
            after, ok = globals()[f"p{name}"](tmp)
        except Exception as e:  # noqa: BLE001 - a probe that breaks is a failed probe, reported in its row
            after, ok = f"probe failed: {type(e).__name__}: {e}"[:90], False
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        rows.append((name, what, before, after, "pass" if ok else "FAIL"))
        print(f"[probe {name}] {after} ({'pass' if ok else 'FAIL'}, {time.monotonic() - t0:.0f} s)", flush=True)
    widths = [max(len(r[i]) for r in rows + [("probe", "what", "before (issue 43)", "after", "")]) for i in range(5)]
    header = ("probe", "what", "before (issue 43)", "after", "")
    print()
    for r in [header, tuple("-" * w for w in widths), *rows]:
        print("| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |")
    print(f"\n{sum(r[4] == 'pass' for r in rows)}/{len(rows)} pass")


if __name__ == "__main__":
    main()
