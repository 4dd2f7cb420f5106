"""Screenshots for the guide (docs/mlflow.md, docs/analysis.md), 1400 px wide as a reader's window shows them: run a
3-system sweep against the fake OpenAI-compatible server, photograph its end screen (the terminal's last lines),
its ``report.html`` and per-task viewer, then start ``mlflow ui`` on its SQLite store and photograph the runs list,
the chart view, the per-task view and the compare view with headless Chromium. MLflow's pages are shot as a new user
gets them, the MLflow Assistant panel that MLflow 3 opens on the right of a fresh browser included (its × closes it;
the browser remembers). The numbers come from the fake server (deterministic pseudo-random verdicts): they show the
layout, not any system's quality.

    python docs/screenshots.py [--out docs/img] [--keep DIR]

Needs Chromium (Debian: ``apt-get install -y chromium``). Takes about two minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import hashlib
import html
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from inmind_exp.testing.fake_openai import FakeOpenAI  # noqa: E402
from inmind_exp.tracking import runs_view_url  # noqa: E402
from tests.launch_helpers import write_small_data  # noqa: E402

SYSTEMS = ("backbone", "naive_rag", "always_in_state")
EXPERIMENT = "inmind"
#: every picture is as wide as a laptop's browser window; the height shows what a reader scrolls to (the compare
#: page's metric and param tables are below its plots)
WIDTH = 1400
WINDOWS = {"mlflow_runs.png": (WIDTH, 600), "mlflow_charts.png": (WIDTH, 1000), "mlflow_samples.png": (WIDTH, 800),
           "mlflow_compare.png": (WIDTH, 2000), "mlflow_parent.png": (WIDTH, 1700), "end_screen.png": (WIDTH, 900), "report.png": (WIDTH, 1500),
           "viewer.png": (WIDTH, 1400)}
#: the end screen starts at the sweep's first headline row's table header
END_SCREEN_FROM = "| configuration"
#: Chrome flags for a reproducible, offline, headless capture (no first-run UI, no background network, no GPU).
CHROME_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--hide-scrollbars", "--force-device-scale-factor=1")


def fake_verdict(body: dict) -> dict:
    """A judge verdict that differs by system and task but is the same on every run (hash of the prompt)."""
    text = json.dumps(body.get("messages", []), sort_keys=True)
    h = int(hashlib.sha256(text.encode()).hexdigest()[:8], 16)
    return {"score": int(h % 3 != 0), "reason": "fake verdict (screenshot data)"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_sweep(work: Path, base_url: str, n_tasks: int) -> str:
    """Run the sweep in ``work``; its standard output (the end screen; the progress lines are on stderr)."""
    tasks, trace = write_small_data(work / "data", n_tasks=n_tasks, n_sessions=21)
    cmd = [sys.executable, str(REPO / "launch.py"), "-m", f"system={','.join(SYSTEMS)}", "embedding=bm25",
           "llm=vllm", f"llm.base_url={base_url}", "llm.model=Qwen/Qwen2.5-7B-Instruct", f"dataset.path={tasks}",
           "dataset.limit=null", f"trace.path={trace}", f"tracking.uri=sqlite:///{work / 'mlflow.db'}",
           f"tracking.experiment={EXPERIMENT}", f"hydra.sweep.dir={work / 'multirun'}",
           f"run.cache_dir={work / 'cache'}", "cluster.workers=2", "cluster.num_cpus=2"]
    env = {**os.environ, "PYTHONPATH": str(REPO), "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0",
           "MLFLOW_DISABLE_TELEMETRY": "true", "HF_HUB_OFFLINE": "1"}
    p = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=1200)
    if p.returncode != 0:
        sys.exit(f"sweep failed ({p.returncode}):\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    (work / "terminal.txt").write_text(p.stdout, encoding="utf-8")
    return p.stdout


def end_screen_page(terminal: str, out: Path) -> Path:
    """An HTML page showing the terminal's end screen (from the headline table on) as a dark terminal does."""
    lines = terminal.splitlines()
    start = next((i for i, x in enumerate(lines) if x.startswith(END_SCREEN_FROM)), max(0, len(lines) - 30))
    text = "\n".join(lines[max(0, start - 2):])
    out.write_text("<!doctype html><meta charset='utf-8'><body style='margin:0;background:#1e1e1e'><pre style='"
                   "color:#ddd;font:13px/1.35 DejaVu Sans Mono,monospace;padding:12px;white-space:pre-wrap'>"
                   f"{html.escape(text)}</pre></body>", encoding="utf-8")
    return out


def start_ui(work: Path, port: int) -> subprocess.Popen:
    mlflow = Path(sys.executable).with_name("mlflow")
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false", "MLFLOW_DISABLE_TELEMETRY": "true"}
    proc = subprocess.Popen([str(mlflow), "ui", "--backend-store-uri", f"sqlite:///{work / 'mlflow.db'}",
                             "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
                            cwd=work, env=env, stdout=open(work / "mlflow_ui.log", "w"), stderr=subprocess.STDOUT,
                            start_new_session=True)
    deadline = time.time() + 180
    while time.time() < deadline:
        if proc.poll() is not None:
            sys.exit(f"mlflow ui exited: {(work / 'mlflow_ui.log').read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return proc
        except OSError:
            time.sleep(1)
    proc.terminate()
    sys.exit("mlflow ui did not answer /health within 180 s")


def screenshot(chrome: str, url: str, out: Path, profile: Path, budget_ms: int, window: tuple[int, int]) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    cmd = [chrome, *CHROME_FLAGS, f"--user-data-dir={profile}", f"--window-size={window[0]},{window[1]}",
           f"--virtual-time-budget={budget_ms}", f"--screenshot={out}", url]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if p.returncode != 0 or not out.is_file():
        sys.exit(f"chromium failed on {url}: {p.stderr[-2000:]}")
    shrink_png(out)
    print(f"[screenshots] {out} <- {url}", flush=True)


def shrink_png(png: Path) -> None:
    """A 256-colour palette keeps the committed pictures small (UI screenshots have few colours)."""
    from PIL import Image

    with Image.open(png) as im:
        small = im.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT)
    small.save(png, optimize=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=REPO / "docs" / "img")
    ap.add_argument("--keep", type=Path, help="work directory to keep and reuse (default: a temporary one, removed)")
    ap.add_argument("--tasks", type=int, default=6)
    ap.add_argument("--budget-ms", type=int, default=20000, help="Chromium virtual time for the page to render")
    args = ap.parse_args()
    chrome = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if not chrome:
        sys.exit("no Chromium found: apt-get install -y chromium")
    work = args.keep or Path(tempfile.mkdtemp(prefix="inmind-shots-"))
    work.mkdir(parents=True, exist_ok=True)
    if not (args.keep and (work / "mlflow.db").is_file()):  # --keep DIR with a finished sweep: photograph only
        with FakeOpenAI(rules=[('"score"', fake_verdict)]) as fake:
            run_sweep(work, fake.base_url, args.tasks)
    report = work / "multirun" / "analysis"
    local = {"end_screen.png": end_screen_page((work / "terminal.txt").read_text(), work / "end_screen.html").as_uri(),
             "report.png": (report / "report.html").as_uri(),
             "viewer.png": (report / "viewer.html").as_uri() + "?task=t001"}

    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{work / 'mlflow.db'}")
    exp = client.get_experiment_by_name(EXPERIMENT)
    runs = client.search_runs([exp.experiment_id], filter_string="tags.`inmind.kind` = 'config'")
    run_ids = sorted(r.info.run_id for r in runs)
    parent = client.search_runs([exp.experiment_id], filter_string="tags.`inmind.kind` = 'sweep'")[0].info.run_id
    port = free_port()
    ui = start_ui(work, port)
    view = runs_view_url(f"http://127.0.0.1:{port}", exp.experiment_id)
    pages = {
        "mlflow_runs.png": view,
        "mlflow_charts.png": f"{view}&compareRunsMode=CHART",
        "mlflow_samples.png": f"{view}&compareRunsMode=ARTIFACT",
        # the sweep's parent run: its description is the verdict above the headline
        "mlflow_parent.png": f"http://127.0.0.1:{port}/#/experiments/{exp.experiment_id}/runs/{parent}",
        "mlflow_compare.png": (f"http://127.0.0.1:{port}/#/compare-runs?runs={json.dumps(run_ids)}"
                               f"&experiments={json.dumps([exp.experiment_id])}"),
    }
    try:
        with tempfile.TemporaryDirectory(prefix="inmind-chrome-") as profile:
            for name, url in {**local, **pages}.items():
                screenshot(chrome, url.replace(" ", ""), args.out / name, Path(profile), args.budget_ms, WINDOWS[name])
    finally:
        os.killpg(ui.pid, 15)
        ui.wait(30)
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
